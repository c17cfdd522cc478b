// libFuzzer target: LexCpp on arbitrary bytes, then the invariants its header
// promises (scripts/fuzz runs it):
//  - every token is a non-empty view into the input, tokens in source order
//    and not overlapping;
//  - line and column are exactly those of the token's first byte (lines end
//    at \n, \r\n or \r; 1-based, columns in bytes);
//  - each kind has the shape the header gives it, once backslash-newline
//    splices are removed: identifiers match [A-Za-z_$\x80-\xff][A-Za-z0-9_$\x80-\xff]*,
//    punctuators are one byte or one of the listed multi-byte ones,
//    directives start with '#' or '%:', numbers with a digit or '.', string
//    and character literals contain their quote.
// LexCpp has no end marker and no error: it never fails. A violation is a
// __builtin_trap(), which libFuzzer reports as a crash.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "policy/static_check/cpp_lexer.h"

namespace {

using kbox::static_check::CppToken;
using kbox::static_check::CppTokenKind;

[[noreturn]] void Fail(const char* what, size_t token_index) {
  std::fprintf(stderr, "cpp_lexer_fuzzer: invariant violated: %s (token %zu)\n", what,
               token_index);
  __builtin_trap();
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' ||
         static_cast<unsigned char>(c) >= 0x80;
}

bool IsIdentifier(std::string_view s) {
  if (s.empty() || !IsIdentStart(s[0])) return false;
  for (char c : s) {
    if (!IsIdentStart(c) && !IsDigit(c)) return false;
  }
  return true;
}

// `s` without its backslash-newline splices (a backslash, blanks, then \n,
// \r\n or \r), as translation phase 2 removes them.
std::string StripSplices(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\') {
      size_t j = i + 1;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t' || s[j] == '\f' || s[j] == '\v')) ++j;
      if (j < s.size() && (s[j] == '\n' || s[j] == '\r')) {
        if (s[j] == '\r' && j + 1 < s.size() && s[j + 1] == '\n') ++j;
        i = j;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

constexpr std::array<std::string_view, 24> kMultiPunct{
    "::", "->", "...", "<<<", ">>>", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
    "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "##"};

bool IsPunct(std::string_view s) {
  if (s.size() == 1) return true;
  for (std::string_view p : kMultiPunct) {
    if (s == p) return true;
  }
  return false;
}

// Physical line and column of byte offsets, asked in increasing order.
class Position {
 public:
  explicit Position(std::string_view s) : s_(s) {}
  void AdvanceTo(size_t offset) {
    for (; pos_ < offset; ++pos_) {
      const char c = s_[pos_];
      if (c == '\n' || (c == '\r' && (pos_ + 1 == s_.size() || s_[pos_ + 1] != '\n'))) {
        ++line_;
        line_begin_ = pos_ + 1;
      }
    }
  }
  uint32_t line() const { return line_; }
  size_t column() const { return pos_ - line_begin_ + 1; }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  size_t line_begin_ = 0;
  uint32_t line_ = 1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<CppToken> tokens = kbox::static_check::LexCpp(input);

  const char* const begin = input.data();
  const char* const end = begin + input.size();
  Position where(input);
  const char* prev_end = begin;

  for (size_t i = 0; i < tokens.size(); ++i) {
    const CppToken& t = tokens[i];
    const std::string_view s = t.text;
    if (s.empty()) Fail("empty token", i);
    if (s.data() < begin || s.data() > end || static_cast<size_t>(end - s.data()) < s.size()) {
      Fail("token text is not inside the input", i);
    }
    if (s.data() < prev_end) Fail("token overlaps or precedes the previous one", i);
    prev_end = s.data() + s.size();
    where.AdvanceTo(static_cast<size_t>(s.data() - begin));
    if (t.line != where.line()) Fail("line is not the physical line of the token's first byte", i);
    if (t.column != where.column()) Fail("column is not that of the token's first byte", i);

    switch (t.kind) {
      case CppTokenKind::kIdentifier:
        if (!IsIdentifier(StripSplices(s))) {
          Fail("identifier is not [A-Za-z_$\\x80-\\xff][A-Za-z0-9_$\\x80-\\xff]*", i);
        }
        break;
      case CppTokenKind::kNumber:
        if (!IsDigit(s[0]) && s[0] != '.') Fail("number does not start with a digit or '.'", i);
        break;
      case CppTokenKind::kPunct:
        if (!IsPunct(StripSplices(s))) Fail("punctuator is not one of the header's", i);
        break;
      case CppTokenKind::kPreprocessor:
        if (s[0] != '#' && !s.starts_with("%:")) Fail("directive does not start with '#' or '%:'", i);
        break;
      case CppTokenKind::kString:
        if (s.find('"') == std::string_view::npos) Fail("string token without a '\"'", i);
        break;
      case CppTokenKind::kChar:
        if (s.find('\'') == std::string_view::npos) Fail("char token without a quote", i);
        break;
    }
  }
  return 0;
}
