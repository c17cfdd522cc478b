#include "policy/static_check/cpp_lexer.h"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

namespace kbox::static_check {
namespace {

// Characters are handled as ints so that end of input (kEof) is distinct
// from a NUL byte in the source.
constexpr int kEof = -1;

bool IsNewline(int c) { return c == '\n' || c == '\r'; }
bool IsBlank(int c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }
bool IsDigit(int c) { return c >= '0' && c <= '9'; }
// GCC takes '$' and every byte >= 0x80 (UTF-8) into identifiers; so must
// we, or `$R"(` or `\xC3\xA9R"(` would open a raw string the compiler never
// sees, hiding the code after it.
bool IsIdentStart(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         c == '$' || c >= 0x80;
}
bool IsIdentChar(int c) { return IsIdentStart(c) || IsDigit(c); }
bool In(int c, std::string_view set) {
  return c > 0 && set.find(static_cast<char>(c)) != std::string_view::npos;
}

// Every scanner works on "logical" characters: line splices are skipped the
// way translation phase 2 removes them, so `at::mat\<newline>mul` cannot
// hide a name from the rules. A position `p` is a raw offset just past what
// has been consumed; Ch(p) peeks the next logical character and Eat(p)
// consumes it. Token text runs from its first character to just past its
// last one, so a splice is inside a token's view only when it splits it.
class Lexer {
 public:
  explicit Lexer(std::string_view source) : s_(source), n_(source.size()) {}

  std::vector<CppToken> Run() {
    // Typical C++ averages well over four bytes a token; one reservation
    // keeps the common case to a single allocation.
    out_.reserve(n_ / 4 + 16);
    size_t p = 0;
    if (s_.substr(0, 3) == "\xEF\xBB\xBF") p = 3;  // GCC skips a UTF-8 BOM.
    bool line_start = true;  // No token yet on this physical line.
    while (true) {
      const size_t q = Skip(p);
      if (q >= n_) break;
      const int c = At(q);
      if (IsNewline(c) || IsBlank(c)) {
        line_start = line_start || IsNewline(c);
        p = q + 1;
        continue;
      }
      // A newline inside a comment starts no line for directives
      // ([cpp.pre]: the comment is one space); GCC agrees.
      if (const size_t after = SkipComment(q)) {
        p = after;
        continue;
      }
      CppTokenKind kind = CppTokenKind::kPreprocessor;  // `%:` means `#`.
      const size_t end =
          line_start && (c == '#' || (c == '%' && Ch(q + 1) == ':'))
              ? ScanDirective(q)
              : ScanToken(q, false, &kind);
      Emit(kind, q, end);
      line_start = false;
      p = end;
    }
    return std::move(out_);
  }

 private:
  int At(size_t p) const {
    return p < n_ ? static_cast<unsigned char>(s_[p]) : kEof;
  }

  // Length of the line splice at `p`, or 0. Like GCC and Clang, blanks may
  // sit between the backslash and the line terminator (\n, \r\n or \r).
  size_t SpliceAt(size_t p) const {
    if (At(p) != '\\') return 0;
    size_t q = p + 1;
    while (IsBlank(At(q))) ++q;
    if (!IsNewline(At(q))) return 0;
    if (At(q) == '\r' && At(q + 1) == '\n') ++q;
    return q + 1 - p;
  }
  size_t Skip(size_t p) const {
    while (const size_t k = SpliceAt(p)) p += k;
    return p;
  }
  int Ch(size_t p) const { return At(Skip(p)); }
  size_t Eat(size_t p) const {
    const size_t q = Skip(p);
    return q < n_ ? q + 1 : n_;
  }

  // Whether the identifier [begin, end) spells one of `words` once splices
  // are gone.
  bool IsOneOf(size_t begin, size_t end,
               std::initializer_list<std::string_view> words) const {
    for (const std::string_view word : words) {
      size_t p = begin;
      size_t i = 0;
      for (; i < word.size(); ++i, ++p) {
        p = Skip(p);
        if (p >= end || s_[p] != word[i]) break;
      }
      if (i == word.size() && p == end) return true;
    }
    return false;
  }

  // Any token but a directive, from its first character at `q`. Stray bytes
  // end up as one-byte punctuators.
  size_t ScanToken(size_t q, bool in_directive, CppTokenKind* kind) const {
    const int c = At(q);
    if (IsIdentStart(c)) {
      const size_t end = ScanIdent(q);
      const size_t quote = Skip(end);
      const int qc = At(quote);
      size_t literal_end = 0;
      if (qc == '"' && IsOneOf(q, end, {"R", "u8R", "uR", "UR", "LR"})) {
        literal_end = ScanRaw(quote + 1, in_directive);
      }
      if (literal_end == 0 && In(qc, "\"'") &&
          IsOneOf(q, end, {"u8", "u", "U", "L"})) {
        literal_end = ScanLine(quote + 1, qc, true);
      }
      *kind = literal_end == 0 ? CppTokenKind::kIdentifier
              : qc == '"'      ? CppTokenKind::kString
                               : CppTokenKind::kChar;
      return literal_end == 0 ? end : WithSuffix(literal_end);
    }
    if (IsDigit(c) || (c == '.' && IsDigit(Ch(q + 1)))) {
      *kind = CppTokenKind::kNumber;
      return ScanNumber(q + 1);
    }
    if (In(c, "\"'")) {
      *kind = c == '"' ? CppTokenKind::kString : CppTokenKind::kChar;
      return WithSuffix(ScanLine(q + 1, c, true));
    }
    *kind = CppTokenKind::kPunct;
    return ScanPunct(q);
  }

  // A ud-suffix (`"s"sv`, `'a'_c`) belongs to its literal, as it does for
  // the compiler: in `'a'R"(` the R is a suffix and opens no raw string.
  size_t WithSuffix(size_t end) const {
    const size_t q = Skip(end);
    return IsIdentStart(At(q)) ? ScanIdent(q) : end;
  }

  size_t ScanIdent(size_t q) const {
    size_t p = q + 1;
    while (IsIdentChar(Ch(p))) p = Eat(p);
    return p;
  }

  // pp-number ([lex.ppnumber]): digits, letters, '_', '.', a sign after
  // e/E/p/P, and a digit separator before a letter or digit.
  size_t ScanNumber(size_t p) const {
    while (true) {
      const int c = Ch(p);
      if (IsIdentChar(c) || c == '.') {
        p = Eat(p);
        const int sign = Ch(p);
        if ((c == 'e' || c == 'E' || c == 'p' || c == 'P') &&
            (sign == '+' || sign == '-')) {
          p = Eat(p);
        }
      } else if (c == '\'' && IsIdentChar(Ch(Eat(p)))) {
        p = Eat(Eat(p));
      } else {
        return p;
      }
    }
  }

  // Scans to just past `close`, or to (not including) the line terminator,
  // or to end of input; a splice continues the line. It serves "..." and
  // '...' bodies (with escapes), // comments (close = kEof) and header-names
  // (no escapes). An unterminated literal stops at the line's end as GCC's
  // does: an apostrophe in prose (`#if 0` text, `#error don't`) must not
  // hide the rest of the file.
  size_t ScanLine(size_t p, int close, bool escapes) const {
    while (true) {
      const size_t q = Skip(p);
      if (q >= n_) return n_;
      const int c = At(q);
      if (IsNewline(c)) return p;
      p = q + 1;
      if (c == close) return p;
      if (escapes && c == '\\') {
        const size_t r = Skip(p);
        if (r < n_ && !IsNewline(At(r))) p = r + 1;
      }
    }
  }

  // A raw string after R": the delimiter, then )delim". Phase 2 is
  // reverted inside raw strings, so both are matched on raw bytes. In a
  // directive GCC ends an unterminated raw string at the line's end, and so
  // do we; elsewhere it runs to the end of input. An invalid delimiter (the
  // compiler rejects it) returns 0: the prefix lexes as an identifier.
  size_t ScanRaw(size_t p, bool in_directive) const {
    constexpr size_t kMaxDelimiter = 16;
    size_t i = p;
    for (; i < n_ && s_[i] != '('; ++i) {
      const int c = At(i);
      if (i - p >= kMaxDelimiter || c <= ' ' || c > '~' || c == ')' ||
          c == '\\') {
        return 0;
      }
    }
    const std::string_view delimiter = s_.substr(p, i - p);
    const size_t len = delimiter.size();
    for (size_t j = i + 1; j < n_; ++j) {
      if (in_directive && IsNewline(At(j))) return j;
      if (s_[j] == ')' && s_.substr(j + 1, len) == delimiter &&
          At(j + 1 + len) == '"') {
        return j + len + 2;
      }
    }
    return n_;
  }

  // Just past the comment at `q`, or 0 if none starts there. A // comment
  // ends before its line terminator; a /* one after */ or at end of input.
  size_t SkipComment(size_t q) const {
    const int c1 = At(q) == '/' ? Ch(q + 1) : kEof;
    if (c1 == '/') return ScanLine(Eat(q + 1), kEof, false);
    if (c1 != '*') return 0;
    bool star = false;
    for (size_t p = Eat(q + 1);;) {
      const size_t r = Skip(p);
      if (r >= n_) return n_;
      const int c = At(r);
      p = r + 1;
      if (star && c == '/') return p;
      star = c == '*';
    }
  }

  // A directive from '#' (or "%:") to the end of its logical line, ending
  // after its last non-blank character. Its tokens are lexed as elsewhere,
  // so a block comment spanning lines extends the directive, and `/*` inside
  // a literal or a header-name (`<x/*y>` after #include or __has_include)
  // opens no comment; otherwise a candidate could make the lexer see a
  // comment, and so hide code, where the compiler sees none.
  size_t ScanDirective(size_t q) const {
    size_t p = Eat(q);
    if (At(q) == '%') p = Eat(p);
    size_t end = p;
    bool first_word = true;    // The next identifier names the directive.
    bool header_next = false;  // A header-name may come next.
    bool paren_next = false;   // After __has_include: '(' then a header-name.
    while (true) {
      const size_t r = Skip(p);
      if (r >= n_) break;
      const int c = At(r);
      if (IsNewline(c)) break;
      if (IsBlank(c)) {
        p = r + 1;
        continue;
      }
      if (const size_t after = SkipComment(r)) {
        p = end = after;
        continue;
      }
      CppTokenKind kind = CppTokenKind::kPunct;
      p = end = header_next && In(c, "<\"")
                    ? ScanLine(r + 1, c == '<' ? '>' : '"', false)
                    : ScanToken(r, true, &kind);
      const bool word = kind == CppTokenKind::kIdentifier;
      const bool includes =
          word && first_word &&
          IsOneOf(r, p, {"include", "include_next", "import", "embed"});
      header_next = includes || (paren_next && c == '(');
      paren_next =
          word &&
          IsOneOf(r, p, {"__has_include", "__has_embed", "__has_include_next"});
      first_word = false;
    }
    return end;
  }

  // Longest match: <<< >>> ... then the header's two-character list, else
  // one byte.
  size_t ScanPunct(size_t q) const {
    const int c0 = At(q);
    const int c1 = Ch(q + 1);
    const size_t p2 = Eat(q + 1);
    if (In(c0, "<>.") && c1 == c0 && Ch(p2) == c0) return Eat(p2);
    const bool two = (c1 == '=' && In(c0, "<>=!+-*/%&|^")) ||
                     (c1 == '>' && In(c0, "->")) ||
                     (c1 == c0 && In(c0, ":<&|+-#"));
    return two ? p2 : q + 1;
  }

  // Appends a token; line and column come from a cursor that only moves
  // forward, so counting them costs one pass over the input in all.
  void Emit(CppTokenKind kind, size_t begin, size_t end) {
    for (; line_pos_ < begin; ++line_pos_) {
      const char c = s_[line_pos_];
      if (c == '\n' || (c == '\r' && At(line_pos_ + 1) != '\n')) {
        ++line_;
        line_begin_ = line_pos_ + 1;
      }
    }
    out_.push_back(CppToken{kind, s_.substr(begin, end - begin),
                            static_cast<uint32_t>(line_),
                            static_cast<uint32_t>(begin - line_begin_ + 1)});
  }

  std::string_view s_;
  size_t n_;
  std::vector<CppToken> out_;
  size_t line_pos_ = 0;  // Newlines before here are counted in line_.
  size_t line_ = 1;
  size_t line_begin_ = 0;  // Offset of the first byte of line line_.
};

}  // namespace

std::vector<CppToken> LexCpp(std::string_view source) {
  return Lexer(source).Run();
}

}  // namespace kbox::static_check
