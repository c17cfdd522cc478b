#pragma once

// A tokenizer for Python 3 source with the token kinds of CPython 3.12's
// `tokenize` module: names, numbers, strings of every form (prefixes r b u f
// and their combinations, single and triple quotes), f-strings split PEP 701
// style into FSTRING_START / MIDDLE / END with their replacement fields
// tokenized as code (nested quotes and nested f-strings included), comments,
// NEWLINE vs NL (inside brackets), INDENT / DEDENT, line continuations.
//
// It stops at the first error (unterminated string, bad dedent, stray
// character, nesting deeper than kMaxNesting) and reports it with the tokens
// read so far. Identifiers with non-ASCII characters are reported as errors:
// CPython folds them with NFKC ("ｔｏｒｃｈ" is `torch`), which a checker that
// compares names byte-wise would miss. Linear time; never throws.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kbox::static_check {

enum class PyTokenKind {
  kName,
  kNumber,
  kString,         // A whole non-f string literal, prefix and quotes included.
  kFStringStart,   // f-string prefix and opening quote(s): `f"`, `rf'''`.
  kFStringMiddle,  // Literal text of an f-string or of a format spec, undecoded.
  kFStringEnd,     // The closing quote(s).
  kOp,
  kComment,
  kNewline,  // End of a logical line.
  kNl,       // A newline that does not end a logical line (blank, in brackets).
  kIndent,
  kDedent,
  kEndMarker,
};

struct PyToken {
  PyTokenKind kind;
  std::string_view text;  // Exact source text; empty for DEDENT/ENDMARKER.
  uint32_t line;          // 1-based line of the first character.
  uint32_t column;        // 1-based column (bytes) of the first character.
  uint32_t end_line;      // Line of the last character.

  bool Is(PyTokenKind k, std::string_view t) const { return kind == k && text == t; }
  bool IsOp(std::string_view t) const { return kind == PyTokenKind::kOp && text == t; }
  bool IsName(std::string_view t) const { return kind == PyTokenKind::kName && text == t; }
};

struct PyTokenizeError {
  uint32_t line = 0;
  uint32_t column = 0;
  std::string message;
};

struct PyTokenizeResult {
  std::vector<PyToken> tokens;  // Ends with kEndMarker unless there is an error.
  std::optional<PyTokenizeError> error;
};

// Brackets, f-string fields and indentation levels nested deeper than this are
// an error (CPython's own limits are 200 brackets and 100 indents).
inline constexpr size_t kMaxNesting = 200;

PyTokenizeResult TokenizePython(std::string_view source);

// The value of a string literal, with where each of its lines came from, so a
// finding inside a C++ source string can name its line in candidate.py.
struct DecodedString {
  std::string value;
  bool is_bytes = false;
  // value_line_source[i] = line in the Python file where line i of `value`
  // starts (escape-produced newlines keep the same source line).
  std::vector<uint32_t> value_line_source;
  // Column in the Python file where `value` line 0 starts (1-based).
  uint32_t first_column = 1;
};

// Decodes a kString token. Returns nullopt for anything else.
std::optional<DecodedString> DecodeStringToken(const PyToken& token);
// Decodes the literal text of a kFStringMiddle token (`{{` becomes `{`);
// `raw` comes from the FSTRING_START prefix.
DecodedString DecodeFStringMiddle(const PyToken& token, bool raw);
// The prefix letters of a string or FSTRING_START token, lower-cased ("rb").
std::string StringPrefix(std::string_view token_text);

}  // namespace kbox::static_check
