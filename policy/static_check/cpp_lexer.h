#pragma once

// A lexer for the C++/CUDA sources a candidate passes to load_inline. It is
// comment- and string-aware so that the rules see code, never prose: a banned
// name inside a comment or a string literal is not a token of kind
// kIdentifier. It never fails, reads nothing outside `source`, runs in linear
// time, and throws only if allocation does. Where C++ and GCC's preprocessor
// disagree with a simpler reading, it follows GCC, since a difference that
// makes the lexer see a comment or string where the compiler sees code would
// let a candidate hide code from the rules:
//   - Comments make no tokens. A backslash-newline (blanks may sit between,
//     and a line ends at \n, \r\n or \r) is removed before lexing, as in
//     translation phase 2: between tokens it is whitespace, and it continues
//     a // comment, a string or a directive. A token that a splice splits
//     stays one token whose text includes the splice (`mat\<newline>mul` is
//     one identifier); a caller comparing text should strip splices first.
//   - An unterminated /* comment swallows the rest of the input, and an
//     unterminated raw string runs to the end of the input (in a directive,
//     to the end of its line, as in GCC). An unterminated
//     "..." or '...' literal ends before its line terminator (GCC's reading:
//     an apostrophe in `#if 0` prose must not hide the rest of the file); on
//     the last line that is the end of the input.
//   - As in GCC, '$' and every byte >= 0x80 (UTF-8) are identifier
//     characters: `$R"(` is an identifier and a string, not a raw string.
//     Other bytes that begin no token (`@`, a backtick, a lone backslash,
//     control characters) are one-byte kPunct tokens. A UTF-8 byte-order
//     mark at the start of the input is skipped.
//   - A literal's ud-suffix is part of its token (`"s"sv`, `'a'_c`), as for
//     the compiler; so in `'a'R"(` the R is a suffix, not a raw prefix.

#include <cstdint>
#include <string_view>
#include <vector>

namespace kbox::static_check {

enum class CppTokenKind {
  kIdentifier,    // [A-Za-z_$\x80-\xff][A-Za-z0-9_$\x80-\xff]* (keywords
                  // included: `static`, `const`)
  kNumber,        // pp-number: 0x1F, 1.5e-3f, 1'000, 42ull
  kString,        // "..." with prefixes u8 u U L, and raw strings R"d(...)d"
                  // (prefixes R u8R uR UR LR)
  kChar,          // '...' with prefixes (and, like kString, a ud-suffix)
  kPunct,         // see below
  kPreprocessor,  // a whole directive: see below
};

// A directive is a '#' (or its digraph `%:`) that is the first token on its
// line: the line's start, blanks or comments may precede it, but a newline
// inside a comment does not begin a line. The token's text is a view of the
// source from the '#' through the directive's last non-blank character; it
// includes continuation backslashes and comments (a trailing // comment too).
// A directive ends at the end of its logical line, or later where a block
// comment opened inside it spans lines, as it does for the compiler. A `/*`
// inside a literal or a header-name (`#include <x/*y>`, `__has_include(<..>)`)
// opens no comment.

// Punctuators are single characters except these, which are one token each:
//   :: -> ... <<< >>> << >> <= >= == != && || ++ -- += -= *= /= %= &= |= ^= ##
// (`<<<`/`>>>` are CUDA's launch brackets; `a<<<b` in plain C++ is rare enough.)
struct CppToken {
  CppTokenKind kind;
  std::string_view text;  // The exact source text (a view into the input).
  uint32_t line;          // 1-based physical line of the token's first byte.
  uint32_t column;        // 1-based column of that byte, in bytes.
};

std::vector<CppToken> LexCpp(std::string_view source);

}  // namespace kbox::static_check
