// libFuzzer target: TokenizePython on arbitrary bytes, then the invariants its
// header promises (scripts/fuzz runs it):
//  - every token's text is a view into the input, tokens in source order and
//    not overlapping; only DEDENT/ENDMARKER (and INDENT/NL/NEWLINE at end of
//    input) may be empty;
//  - lines are 1-based and non-decreasing, end_line >= line, and no line lies
//    past the input's last line;
//  - the stream ends with exactly one ENDMARKER, or there is an error and no
//    ENDMARKER at all;
//  - decoding a string or f-string-middle token maps every line of its value to
//    a line of the token.
// A violation is a __builtin_trap(), which libFuzzer reports as a crash.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "policy/static_check/python_tokenizer.h"

namespace {

using kbox::static_check::DecodedString;
using kbox::static_check::PyToken;
using kbox::static_check::PyTokenKind;

[[noreturn]] void Fail(const char* what, size_t token_index) {
  std::fprintf(stderr, "python_tokenizer_fuzzer: invariant violated: %s (token %zu)\n", what,
               token_index);
  __builtin_trap();
}

// Lines of `s` as the tokenizer and the C++ lexer count them: "\n", "\r\n"
// and a lone "\r" each end one.
uint32_t LineCount(std::string_view s) {
  uint32_t n = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || (s[i] == '\r' && (i + 1 == s.size() || s[i + 1] != '\n'))) ++n;
  }
  return n;
}

void CheckDecoded(const DecodedString& d, const PyToken& t, size_t i) {
  if (d.value_line_source.empty()) Fail("decoded string has no line source", i);
  if (d.value_line_source.size() != LineCount(d.value)) {
    Fail("value_line_source does not have one entry per line of the decoded value", i);
  }
  uint32_t prev = 0;
  for (uint32_t l : d.value_line_source) {
    if (l < t.line || l > t.end_line) Fail("decoded line outside the token's lines", i);
    if (l < prev) Fail("decoded line sources decrease", i);
    prev = l;
  }
  if (d.first_column < 1) Fail("decoded first_column is 0", i);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const kbox::static_check::PyTokenizeResult r = kbox::static_check::TokenizePython(input);

  const char* const begin = input.data();
  const char* const end = begin + input.size();
  const uint32_t max_line = LineCount(input) + 1;  // ENDMARKER may sit one past the last.
  uint32_t prev_line = 1;
  const char* prev_end = begin;
  size_t end_markers = 0;
  std::vector<bool> raw_fstrings;  // One per open FSTRING_START.

  for (size_t i = 0; i < r.tokens.size(); ++i) {
    const PyToken& t = r.tokens[i];
    const char* const tb = t.text.data();
    if (!t.text.empty() || tb != nullptr) {
      if (tb < begin || tb > end || static_cast<size_t>(end - tb) < t.text.size()) {
        Fail("token text is not inside the input", i);
      }
      if (tb < prev_end) Fail("token overlaps or precedes the previous one", i);
      prev_end = tb + t.text.size();
    }
    if (t.text.empty() && t.kind != PyTokenKind::kDedent && t.kind != PyTokenKind::kEndMarker &&
        t.kind != PyTokenKind::kNewline && t.kind != PyTokenKind::kIndent) {
      Fail("empty token text", i);
    }
    if (t.line < 1 || t.column < 1) Fail("line or column is 0", i);
    if (t.line < prev_line) Fail("lines decrease", i);
    if (t.end_line < t.line) Fail("end_line before line", i);
    if (t.end_line > max_line) Fail("line past the end of the input", i);
    prev_line = t.line;

    switch (t.kind) {
      case PyTokenKind::kEndMarker:
        ++end_markers;
        break;
      case PyTokenKind::kString: {
        const auto d = kbox::static_check::DecodeStringToken(t);
        if (d) CheckDecoded(*d, t, i);
        break;
      }
      case PyTokenKind::kFStringStart: {
        const std::string prefix = kbox::static_check::StringPrefix(t.text);
        raw_fstrings.push_back(prefix.find('r') != std::string::npos);
        break;
      }
      case PyTokenKind::kFStringMiddle: {
        if (raw_fstrings.empty()) Fail("FSTRING_MIDDLE outside an f-string", i);
        CheckDecoded(kbox::static_check::DecodeFStringMiddle(t, raw_fstrings.back()), t, i);
        break;
      }
      case PyTokenKind::kFStringEnd:
        if (raw_fstrings.empty()) Fail("FSTRING_END without FSTRING_START", i);
        raw_fstrings.pop_back();
        break;
      default:
        break;
    }
  }

  if (r.error) {
    if (end_markers != 0) Fail("error and ENDMARKER both present", r.tokens.size());
    if (r.error->message.empty()) Fail("error without a message", r.tokens.size());
  } else {
    if (r.tokens.empty() || r.tokens.back().kind != PyTokenKind::kEndMarker) {
      Fail("no error and the stream does not end with ENDMARKER", r.tokens.size());
    }
    if (end_markers != 1) Fail("more than one ENDMARKER", r.tokens.size());
    if (!raw_fstrings.empty()) Fail("f-string left open without an error", r.tokens.size());
  }
  return 0;
}
