#include "policy/static_check/python_tokenizer.h"

#include <array>
#include <cstring>

namespace kbox::static_check {
namespace {

bool IsIdentStart(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}
bool IsIdentChar(unsigned char c) { return IsIdentStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(unsigned char c) { return c >= '0' && c <= '9'; }

// Longest first, so "**=" wins over "**" and "*".
constexpr std::array<std::string_view, 24> kMultiOps{
    "**=", "//=", ">>=", "<<=", "...", "->", ":=", "**", "//", "<<", ">>", "<=", ">=",
    "==",  "!=",  "+=",  "-=",  "*=",  "/=",  "%=", "&=", "|=", "^=", "@="};
constexpr std::string_view kSingleOps = "+-*/%@&|^~<>()[]{},:;.=!";

bool IsStringPrefix(std::string_view p, bool* fstring) {
  if (p.size() > 2) return false;
  bool r = false, b = false, u = false, f = false;
  for (char c : p) {
    switch (c | 0x20) {
      case 'r': if (r) return false; r = true; break;
      case 'b': if (b) return false; b = true; break;
      case 'u': if (u) return false; u = true; break;
      case 'f': if (f) return false; f = true; break;
      default: return false;
    }
  }
  if (u && p.size() > 1) return false;  // `u` combines with nothing.
  if (b && f) return false;
  *fstring = f;
  return true;
}

// One level of the f-string state: inside a string's literal text, or inside
// one of its replacement fields (as code, or in the field's format spec).
struct Frame {
  bool is_field = false;
  // String frames:
  char quote = '"';
  bool triple = false;
  bool raw = false;
  // Field frames: bracket depth just outside the field's `{`.
  size_t depth = 0;
  bool in_spec = false;
};

class Tokenizer {
 public:
  explicit Tokenizer(std::string_view src) : s_(src) { out_.tokens.reserve(src.size() / 4 + 16); }

  PyTokenizeResult Run() {
    indents_.push_back(0);
    while (!out_.error) {
      if (frames_.empty() || (frames_.back().is_field && !frames_.back().in_spec)) {
        if (at_line_start_ && depth_ == 0 && frames_.empty()) {
          if (!LineStart()) break;
          if (pos_ >= s_.size()) break;
          continue;
        }
        if (!CodeToken()) break;
      } else {
        StringBody();
      }
    }
    if (out_.error) return std::move(out_);
    if (!frames_.empty()) return Fail(line_, col(), "unterminated f-string");
    if (depth_ > 0) return Fail(line_, col(), "unclosed bracket at end of file");
    if (pending_line_) Emit(PyTokenKind::kNewline, pos_, pos_);
    while (indents_.size() > 1) {
      indents_.pop_back();
      Emit(PyTokenKind::kDedent, pos_, pos_);
    }
    Emit(PyTokenKind::kEndMarker, pos_, pos_);
    return std::move(out_);
  }

 private:
  uint32_t col() const { return static_cast<uint32_t>(pos_ - line_begin_ + 1); }
  // A line break at `p`: \n, or a \r not followed by \n (CPython reads
  // source with universal newlines).
  bool BreakAt(size_t p) const {
    return p < s_.size() && (s_[p] == '\n' || (s_[p] == '\r' && (p + 1 >= s_.size() || s_[p + 1] != '\n')));
  }
  char peek(size_t k = 0) const { return pos_ + k < s_.size() ? s_[pos_ + k] : '\0'; }

  PyTokenizeResult Fail(uint32_t line, uint32_t column, std::string message) {
    out_.error = PyTokenizeError{line, column, std::move(message)};
    return std::move(out_);
  }
  bool Error(std::string message) {
    out_.error = PyTokenizeError{line_, col(), std::move(message)};
    return false;
  }

  void Emit(PyTokenKind kind, size_t begin, size_t end, uint32_t line, uint32_t column) {
    out_.tokens.push_back(PyToken{kind, s_.substr(begin, end - begin), line, column, line_});
  }
  void Emit(PyTokenKind kind, size_t begin, size_t end) {
    Emit(kind, begin, end, line_, static_cast<uint32_t>(begin - line_begin_ + 1));
  }

  void NewLineAt(size_t newline_pos) {
    ++line_;
    line_begin_ = newline_pos + 1;
  }

  // At the start of a logical line: measure indentation, skip blank and
  // comment-only lines (emitting COMMENT/NL), then emit INDENT/DEDENTs.
  bool LineStart() {
    while (pos_ < s_.size()) {
      size_t width = 0;
      const size_t begin = pos_;
      while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\f')) {
        width = s_[pos_] == '\t' ? (width / 8 + 1) * 8 : s_[pos_] == '\f' ? 0 : width + 1;
        ++pos_;
      }
      if (pos_ >= s_.size()) return true;
      const char c = s_[pos_];
      if (c == '#') {
        const size_t start = pos_;
        while (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
        Emit(PyTokenKind::kComment, start, pos_);
        continue;  // The newline after it is handled below as blank.
      }
      if (c == '\n' || c == '\r') {
        const size_t start = pos_;
        if (c == '\r' && peek(1) == '\n') ++pos_;
        Emit(PyTokenKind::kNl, start, pos_ + 1);
        NewLineAt(pos_);
        ++pos_;
        continue;
      }
      at_line_start_ = false;
      if (width > indents_.back()) {
        if (indents_.size() >= kMaxNesting) return Error("too many indentation levels");
        indents_.push_back(width);
        Emit(PyTokenKind::kIndent, begin, pos_);
      } else {
        while (width < indents_.back()) {
          indents_.pop_back();
          Emit(PyTokenKind::kDedent, pos_, pos_);
        }
        if (width != indents_.back()) return Error("unindent does not match any outer indentation level");
      }
      return true;
    }
    return true;
  }

  bool CodeToken() {
    // Whitespace and continuations.
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\f') {
        ++pos_;
      } else if (c == '\\') {
        size_t n = pos_ + 1;
        if (n + 1 < s_.size() && s_[n] == '\r' && s_[n + 1] == '\n') ++n;
        if (BreakAt(n)) {
          NewLineAt(n);
          pos_ = n + 1;
        } else if (n >= s_.size()) {
          return Error("unexpected end of file after line continuation");
        } else {
          return Error("unexpected character after line continuation character");
        }
      } else {
        break;
      }
    }
    if (pos_ >= s_.size()) return false;
    const size_t start = pos_;
    const char c = s_[pos_];
    const auto uc = static_cast<unsigned char>(c);

    if (c == '#') {
      while (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r') ++pos_;
      Emit(PyTokenKind::kComment, start, pos_);
      return true;
    }
    if (c == '\n' || c == '\r') {
      if (c == '\r' && peek(1) == '\n') ++pos_;
      const bool logical_end = depth_ == 0 && frames_.empty();
      Emit(logical_end && pending_line_ ? PyTokenKind::kNewline : PyTokenKind::kNl, start, pos_ + 1);
      if (logical_end) pending_line_ = false;
      NewLineAt(pos_);
      ++pos_;
      if (logical_end) at_line_start_ = true;
      return true;
    }
    if (IsIdentStart(uc)) {
      bool non_ascii = false;
      while (pos_ < s_.size() && IsIdentChar(static_cast<unsigned char>(s_[pos_]))) {
        non_ascii |= static_cast<unsigned char>(s_[pos_]) >= 0x80;
        ++pos_;
      }
      const std::string_view word = s_.substr(start, pos_ - start);
      bool fstring = false;
      if ((peek() == '"' || peek() == '\'') && IsStringPrefix(word, &fstring)) {
        return StringStart(start, fstring, word.find_first_of("rR") != std::string_view::npos);
      }
      if (non_ascii) {
        pos_ = start;
        return Error("non-ASCII identifier: Python folds it (NFKC) into another name");
      }
      Emit(PyTokenKind::kName, start, pos_);
      pending_line_ = true;
      return true;
    }
    if (IsDigit(uc) || (c == '.' && IsDigit(static_cast<unsigned char>(peek(1))))) {
      const bool hex = c == '0' && (peek(1) == 'x' || peek(1) == 'X');
      ++pos_;
      while (pos_ < s_.size()) {
        const auto d = static_cast<unsigned char>(s_[pos_]);
        if (IsIdentChar(d) || d == '.') {
          ++pos_;
        } else if ((d == '+' || d == '-') && !hex && (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E')) {
          ++pos_;
        } else {
          break;
        }
      }
      Emit(PyTokenKind::kNumber, start, pos_);
      pending_line_ = true;
      return true;
    }
    if (c == '"' || c == '\'') return StringStart(start, false, false);

    // Operators.
    std::string_view op;
    for (std::string_view m : kMultiOps) {
      if (s_.substr(pos_, m.size()) == m) {
        op = m;
        break;
      }
    }
    if (op.empty()) {
      if (kSingleOps.find(c) == std::string_view::npos || c == '\0') {
        return Error(std::string("invalid character '") +
                     (uc >= 0x20 && uc < 0x7f ? std::string(1, c) : "\\x" + Hex(uc)) + "'");
      }
      op = s_.substr(pos_, 1);
    }
    // Inside an f-string field, `}` at the field's depth closes it and `:` at
    // that depth starts its format spec.
    if (!frames_.empty() && frames_.back().is_field) {
      Frame& f = frames_.back();
      if (op == "}" && depth_ == f.depth + 1) {
        pos_ += 1;
        Emit(PyTokenKind::kOp, start, pos_);
        --depth_;
        frames_.pop_back();
        return true;
      }
      if (op == ":" && depth_ == f.depth + 1) {
        pos_ += 1;
        Emit(PyTokenKind::kOp, start, pos_);
        f.in_spec = true;
        return true;
      }
    }
    if (op == "(" || op == "[" || op == "{") {
      if (++depth_ > kMaxNesting) return Error("brackets nested too deeply");
    } else if (op == ")" || op == "]" || op == "}") {
      const size_t floor = frames_.empty() ? 0 : frames_.back().depth + 1;
      if (depth_ <= floor) return Error(std::string("unmatched '") + std::string(op) + "'");
      --depth_;
    }
    pos_ += op.size();
    Emit(PyTokenKind::kOp, start, pos_);
    pending_line_ = true;
    return true;
  }

  static std::string Hex(unsigned char c) {
    const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }

  // At the opening quote of a string whose prefix starts at `start`.
  bool StringStart(size_t start, bool fstring, bool raw) {
    const char q = s_[pos_];
    const bool triple = peek(1) == q && peek(2) == q;
    pos_ += triple ? 3 : 1;
    pending_line_ = true;
    if (fstring) {
      if (frames_.size() >= kMaxNesting) return Error("f-strings nested too deeply");
      Emit(PyTokenKind::kFStringStart, start, pos_);
      Frame f;
      f.quote = q;
      f.triple = triple;
      f.raw = raw;
      f.depth = depth_;
      frames_.push_back(f);
      return true;
    }
    const uint32_t line = line_;
    const auto column = static_cast<uint32_t>(start - line_begin_ + 1);
    while (true) {
      if (pos_ >= s_.size()) {
        out_.error = PyTokenizeError{line, column, triple ? "unterminated triple-quoted string literal"
                                                          : "unterminated string literal"};
        return false;
      }
      const char c = s_[pos_];
      if (c == '\\') {
        if (pos_ + 2 < s_.size() && s_[pos_ + 1] == '\r' && s_[pos_ + 2] == '\n') ++pos_;
        if (BreakAt(pos_ + 1)) NewLineAt(pos_ + 1);
        pos_ += 2;
        continue;
      }
      if (BreakAt(pos_)) {
        if (!triple) {
          out_.error = PyTokenizeError{line, column, "unterminated string literal"};
          return false;
        }
        NewLineAt(pos_);
      }
      if (c == q && (!triple || (peek(1) == q && peek(2) == q))) {
        pos_ += triple ? 3 : 1;
        break;
      }
      ++pos_;
    }
    out_.tokens.push_back(PyToken{PyTokenKind::kString, s_.substr(start, pos_ - start), line, column, line_});
    return true;
  }

  // Literal text of the innermost f-string (or of a field's format spec).
  void StringBody() {
    Frame& top = frames_.back();
    // The string whose quote ends this text: the frame itself, or (for a
    // format spec) the string frame just below the field.
    size_t str_index = frames_.size() - 1;
    while (str_index > 0 && frames_[str_index].is_field) --str_index;
    const Frame& str = frames_[str_index];
    const bool spec = top.is_field;
    const size_t start = pos_;
    const uint32_t line = line_;
    const uint32_t column = col();
    auto flush = [&] {
      if (pos_ > start) {
        out_.tokens.push_back(
            PyToken{PyTokenKind::kFStringMiddle, s_.substr(start, pos_ - start), line, column, line_});
      }
    };
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '\\' && !str.raw) {
        if (peek(1) == 'N' && peek(2) == '{') {  // \N{NAME} is one escape.
          pos_ += 3;
          while (pos_ < s_.size() && s_[pos_] != '}' && s_[pos_] != '\n') ++pos_;
          if (pos_ < s_.size()) ++pos_;
          continue;
        }
        if (pos_ + 2 < s_.size() && s_[pos_ + 1] == '\r' && s_[pos_ + 2] == '\n') ++pos_;
        if (BreakAt(pos_ + 1)) NewLineAt(pos_ + 1);
        if (peek(1) != '{' && peek(1) != '}') {
          pos_ += 2;
          continue;
        }
        ++pos_;
        continue;
      }
      if (BreakAt(pos_)) {
        if (!str.triple && !spec) {
          Error("unterminated f-string literal");
          return;
        }
        NewLineAt(pos_);
        ++pos_;
        continue;
      }
      if (!spec && c == str.quote && (!str.triple || (peek(1) == str.quote && peek(2) == str.quote))) {
        flush();
        const size_t q = pos_;
        pos_ += str.triple ? 3 : 1;
        Emit(PyTokenKind::kFStringEnd, q, pos_);
        frames_.pop_back();
        return;
      }
      if (spec && c == str.quote) {
        Error("f-string: expecting '}'");
        return;
      }
      if (c == '{' || c == '}') {
        if (!spec && peek(1) == c) {  // `{{` / `}}`: literal braces.
          pos_ += 2;
          continue;
        }
        flush();
        const size_t b = pos_;
        ++pos_;
        Emit(PyTokenKind::kOp, b, pos_);
        if (c == '}') {
          if (!spec) {
            Error("f-string: single '}' is not allowed");
            return;
          }
          --depth_;  // Closes the field whose spec this was.
          frames_.pop_back();
          return;
        }
        if (frames_.size() >= kMaxNesting || depth_ >= kMaxNesting) {
          Error("f-string fields nested too deeply");
          return;
        }
        Frame field;
        field.is_field = true;
        field.depth = depth_;
        ++depth_;
        frames_.push_back(field);
        return;
      }
      ++pos_;
    }
    Error("unterminated f-string");
  }

  std::string_view s_;
  size_t pos_ = 0;
  uint32_t line_ = 1;
  size_t line_begin_ = 0;
  bool at_line_start_ = true;
  bool pending_line_ = false;  // A logical line has tokens and no NEWLINE yet.
  size_t depth_ = 0;
  std::vector<size_t> indents_;
  std::vector<Frame> frames_;
  PyTokenizeResult out_;
};

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp > 0x10FFFF) cp = 0xFFFD;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes `body` (the text between the quotes) that starts at (line, column).
DecodedString DecodeBody(std::string_view body, bool raw, bool bytes, bool fstring, uint32_t line,
                         uint32_t column) {
  DecodedString d;
  d.is_bytes = bytes;
  d.first_column = column;
  d.value.reserve(body.size());
  // The source line of every byte of the value; the line map is built from it
  // at the end, so a newline however written (\n, \x0a, \012, \u000a, \r)
  // starts a value line exactly where the C++ lexer will.
  std::vector<uint32_t> byte_line;
  byte_line.reserve(body.size());
  uint32_t src_line = line;
  auto tag = [&] {
    while (byte_line.size() < d.value.size()) byte_line.push_back(src_line);
  };
  for (size_t i = 0; i < body.size(); ++i, tag()) {
    const char c = body[i];
    if (c == '\n' || (c == '\r' && (i + 1 >= body.size() || body[i + 1] != '\n'))) {
      d.value += c;
      tag();
      ++src_line;
      continue;
    }
    if (fstring && (c == '{' || c == '}') && i + 1 < body.size() && body[i + 1] == c) {
      d.value += c;
      ++i;
      continue;
    }
    if (c != '\\' || raw || i + 1 >= body.size()) {
      d.value += c;
      continue;
    }
    const char e = body[++i];
    switch (e) {
      case '\n': ++src_line; break;  // Continuation: no character.
      case '\r':                       // A continuation ending in \r\n or \r.
        if (i + 1 < body.size() && body[i + 1] == '\n') ++i;
        ++src_line;
        break;
      case 'n': d.value += '\n'; break;
      case 't': d.value += '\t'; break;
      case 'r': d.value += '\r'; break;
      case '\\': d.value += '\\'; break;
      case '\'': d.value += '\''; break;
      case '"': d.value += '"'; break;
      case 'a': d.value += '\a'; break;
      case 'b': d.value += '\b'; break;
      case 'f': d.value += '\f'; break;
      case 'v': d.value += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if ((e != 'x' && bytes) || i + n >= body.size()) {
          d.value += '\\';
          d.value += e;
          break;
        }
        uint32_t cp = 0;
        bool ok = true;
        for (size_t k = 1; k <= n; ++k) {
          const int h = i + k < body.size() ? HexValue(body[i + k]) : -1;
          if (h < 0) {
            ok = false;
            break;
          }
          cp = cp * 16 + static_cast<uint32_t>(h);
        }
        if (!ok) {
          d.value += '\\';
          d.value += e;
          break;
        }
        i += n;
        if (e == 'x' && bytes) {
          d.value += static_cast<char>(cp);
        } else {
          AppendUtf8(d.value, cp);
        }
        break;
      }
      case 'N': {
        // \N{NAME}: the character itself does not matter to the checker.
        size_t j = i + 1;
        if (j < body.size() && body[j] == '{') {
          while (j < body.size() && body[j] != '}') ++j;
          i = j;
        }
        d.value += '?';
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t v = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + static_cast<uint32_t>(body[++i] - '0');
          }
          if (bytes) {
            d.value += static_cast<char>(v & 0xFF);
          } else {
            AppendUtf8(d.value, v);
          }
        } else {
          d.value += '\\';
          d.value += e;
        }
    }
  }
  tag();
  d.value_line_source.push_back(line);
  for (size_t k = 0; k < d.value.size(); ++k) {
    const char c = d.value[k];
    const bool ends_line = c == '\n' || (c == '\r' && (k + 1 >= d.value.size() || d.value[k + 1] != '\n'));
    if (ends_line) d.value_line_source.push_back(k + 1 < byte_line.size() ? byte_line[k + 1] : byte_line[k]);
  }
  return d;
}

}  // namespace

PyTokenizeResult TokenizePython(std::string_view source) { return Tokenizer(source).Run(); }

std::string StringPrefix(std::string_view text) {
  std::string p;
  for (char c : text) {
    if (c == '"' || c == '\'') break;
    p += static_cast<char>(c | 0x20);
  }
  return p;
}

std::optional<DecodedString> DecodeStringToken(const PyToken& token) {
  if (token.kind != PyTokenKind::kString) return std::nullopt;
  const std::string prefix = StringPrefix(token.text);
  std::string_view rest = token.text.substr(prefix.size());
  if (rest.empty()) return std::nullopt;
  const char q = rest[0];
  const size_t quote_len = rest.size() >= 6 && rest[1] == q && rest[2] == q ? 3 : 1;
  if (rest.size() < 2 * quote_len) return std::nullopt;
  const std::string_view body = rest.substr(quote_len, rest.size() - 2 * quote_len);
  const bool raw = prefix.find('r') != std::string::npos;
  const bool bytes = prefix.find('b') != std::string::npos;
  return DecodeBody(body, raw, bytes, false, token.line,
                    token.column + static_cast<uint32_t>(prefix.size() + quote_len));
}

DecodedString DecodeFStringMiddle(const PyToken& token, bool raw) {
  return DecodeBody(token.text, raw, false, true, token.line, token.column);
}

}  // namespace kbox::static_check
