#include "policy/static_check/python_module.h"

#include <array>

namespace kbox::static_check {
namespace {

constexpr std::array<std::string_view, 12> kCompoundKeywords{
    "def", "class", "if", "elif", "else", "try", "except", "finally", "for", "while", "with", "async"};

bool IsCompoundKeyword(std::string_view w) {
  for (auto k : kCompoundKeywords) {
    if (k == w) return true;
  }
  return false;
}

// One structural step: a significant token, or a line/indent marker.
enum class Mark { kToken, kNewline, kIndent, kDedent, kEnd };
struct Entry {
  Mark mark;
  uint32_t token;  // Index into the significant tokens (kToken only).
};

class Parser {
 public:
  Parser(const std::vector<PyToken>& tokens, std::vector<Entry> entries)
      : tokens_(tokens), entries_(std::move(entries)) {}

  std::vector<PyStmt> Run(std::optional<PyTokenizeError>* error) {
    std::vector<PyStmt> body;
    Suite(&body, /*top=*/true);
    *error = std::move(error_);
    return body;
  }

 private:
  const Entry& At() const { return entries_[pos_ < entries_.size() ? pos_ : entries_.size() - 1]; }

  // Fails at token `at` (or at the current entry when none is given).
  void Fail(std::string message, std::optional<uint32_t> at = std::nullopt) {
    if (error_) return;
    const PyToken* t = at ? &tokens_[*at] : At().mark == Mark::kToken ? &tokens_[At().token] : nullptr;
    error_ = PyTokenizeError{t ? t->line : (tokens_.empty() ? 1 : tokens_.back().line),
                             t ? t->column : 1, std::move(message)};
  }

  void Suite(std::vector<PyStmt>* out, bool top) {
    std::vector<PyStmt> decorators;
    while (pos_ < entries_.size() && !error_) {
      const Mark m = At().mark;
      if (m == Mark::kEnd) return;
      if (m == Mark::kDedent) {
        if (top) Fail("unexpected dedent");
        return;
      }
      if (m == Mark::kIndent) {
        Fail("unexpected indent");
        return;
      }
      if (m == Mark::kNewline) {
        ++pos_;
        continue;
      }
      Line(out, &decorators);
    }
  }

  // Reads one logical line starting at a token entry.
  void Line(std::vector<PyStmt>* out, std::vector<PyStmt>* decorators) {
    const uint32_t a = At().token;
    uint32_t b = a;
    while (pos_ < entries_.size() && At().mark == Mark::kToken) {
      b = At().token + 1;
      ++pos_;
    }
    if (At().mark == Mark::kNewline) ++pos_;
    std::string_view first = tokens_[a].text;
    const bool name_first = tokens_[a].kind == PyTokenKind::kName;
    uint32_t kw = a;
    if (name_first && first == "async" && a + 1 < b) {
      kw = a + 1;
      first = tokens_[kw].text;
    }
    const bool soft = name_first && (first == "match" || first == "case") && b - a > 1 &&
                      !tokens_[a + 1].IsOp("=") && !tokens_[a + 1].IsOp(".") && tokens_[b - 1].IsOp(":") &&
                      At().mark == Mark::kIndent;
    const bool hard = name_first && IsCompoundKeyword(first);
    if (hard || soft) {
      const uint32_t colon = HeaderColon(a, b);
      if (colon == 0) {
        Fail("expected ':' after '" + std::string(first) + "'", a);
        return;
      }
      PyStmt s;
      s.begin = a;
      s.end = colon;
      s.compound = true;
      s.keyword = first;
      if (first == "def" || first == "class") {
        s.decorators = std::move(*decorators);
        decorators->clear();
      }
      if (colon + 1 < b) {
        Simple(colon + 1, b, &s.body);
      } else if (At().mark == Mark::kIndent) {
        if (++depth_ > kMaxNesting) {
          Fail("blocks nested too deeply");
          return;
        }
        ++pos_;
        Suite(&s.body, false);
        if (At().mark == Mark::kDedent) ++pos_;
        --depth_;
      } else {
        Fail("expected an indented block after '" + std::string(first) + "'", a);
        return;
      }
      out->push_back(std::move(s));
      return;
    }
    if (tokens_[a].IsOp("@")) {
      PyStmt d;
      d.begin = a;
      d.end = b;
      decorators->push_back(d);
      return;
    }
    Simple(a, b, out);
  }

  // Splits a run of simple statements at top-level ';'.
  void Simple(uint32_t a, uint32_t b, std::vector<PyStmt>* out) {
    int depth = 0;
    uint32_t start = a;
    for (uint32_t i = a; i < b; ++i) {
      const PyToken& t = tokens_[i];
      if (t.kind == PyTokenKind::kOp) {
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
        if (depth == 0 && t.text == ";") {
          if (i > start) out->push_back(PyStmt{start, i, false, {}, {}, {}});
          start = i + 1;
        }
      }
    }
    if (b > start) out->push_back(PyStmt{start, b, false, {}, {}, {}});
  }

  // The ':' ending a compound header: the first at bracket depth 0 that does
  // not belong to a lambda. 0 when there is none.
  uint32_t HeaderColon(uint32_t a, uint32_t b) const {
    int depth = 0;
    int lambdas = 0;
    for (uint32_t i = a; i < b; ++i) {
      const PyToken& t = tokens_[i];
      if (t.kind == PyTokenKind::kName && t.text == "lambda" && depth == 0) ++lambdas;
      if (t.kind != PyTokenKind::kOp) continue;
      if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
      if (t.text == ")" || t.text == "]" || t.text == "}") --depth;
      if (depth == 0 && t.text == ":") {
        if (lambdas > 0) {
          --lambdas;
          continue;
        }
        return i;
      }
    }
    return 0;
  }

  const std::vector<PyToken>& tokens_;
  std::vector<Entry> entries_;
  size_t pos_ = 0;
  size_t depth_ = 0;
  std::optional<PyTokenizeError> error_;
};

}  // namespace

PyModule PyModule::Parse(std::string_view source) {
  PyModule m;
  m.source_ = source;
  PyTokenizeResult r = TokenizePython(source);
  m.error_ = std::move(r.error);
  std::vector<Entry> entries;
  entries.reserve(r.tokens.size() + 1);
  m.tokens_.reserve(r.tokens.size());
  for (const PyToken& t : r.tokens) {
    switch (t.kind) {
      case PyTokenKind::kComment:
      case PyTokenKind::kNl:
        break;
      case PyTokenKind::kNewline: entries.push_back({Mark::kNewline, 0}); break;
      case PyTokenKind::kIndent: entries.push_back({Mark::kIndent, 0}); break;
      case PyTokenKind::kDedent: entries.push_back({Mark::kDedent, 0}); break;
      case PyTokenKind::kEndMarker: break;
      default:
        entries.push_back({Mark::kToken, static_cast<uint32_t>(m.tokens_.size())});
        m.tokens_.push_back(t);
    }
  }
  // A cut-off stream (tokenizer error) still ends its last line.
  entries.push_back({Mark::kNewline, 0});
  entries.push_back({Mark::kEnd, 0});
  std::optional<PyTokenizeError> structure_error;
  m.body_ = Parser(m.tokens_, std::move(entries)).Run(&structure_error);
  if (!m.error_ && structure_error) m.error_ = std::move(structure_error);
  return m;
}

}  // namespace kbox::static_check
