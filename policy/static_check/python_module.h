#pragma once

// The statement structure of a Python module, built from its tokens: which
// tokens form each simple statement or compound-statement header, and the
// suites nested under them. It is not a full grammar: expressions stay token
// ranges, which the rules read with the helpers in python_analyzer.h.

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "policy/static_check/python_tokenizer.h"

namespace kbox::static_check {

struct PyStmt {
  uint32_t begin = 0;  // First token (index into PyModule::tokens()).
  uint32_t end = 0;    // One past the last token; excludes NEWLINE and, for a
                       // compound statement, the header's ':'.
  bool compound = false;
  std::string_view keyword;  // "def", "class", "try", "except", "if", ... for
                             // compound statements; empty for simple ones.
  std::vector<PyStmt> body;  // The suite of a compound statement.
  std::vector<PyStmt> decorators;  // `@...` lines before a def or class.
};

class PyModule {
 public:
  static PyModule Parse(std::string_view source);

  std::string_view source() const { return source_; }
  // Significant tokens only: no COMMENT, NL, NEWLINE, INDENT or DEDENT.
  const std::vector<PyToken>& tokens() const { return tokens_; }
  const std::vector<PyStmt>& body() const { return body_; }
  // A tokenizer or structure error; body() holds what was read before it.
  const std::optional<PyTokenizeError>& error() const { return error_; }

 private:
  std::string_view source_;
  std::vector<PyToken> tokens_;
  std::vector<PyStmt> body_;
  std::optional<PyTokenizeError> error_;
};

}  // namespace kbox::static_check
