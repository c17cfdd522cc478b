// The string evaluator of the model: the literal text of a load_inline source
// or a compiler flag, as far as it can be known without running anything.
// Literals (implicit concatenation, f-strings), numbers, names bound to them,
// parentheses, '+', lists (joined with newlines, as load_inline joins them),
// '%', .format, .replace, .join, .strip and textwrap.dedent are evaluated
// when every value they substitute is itself known; anything else makes the
// text unknown, so the rules never judge C++ they have not fully seen.

#include "policy/static_check/python_analyzer.h"

namespace kbox::static_check::python_analysis {
namespace {

// Appends `piece` to `into`: its first line continues `into`'s last line.
void Append(DecodedString& into, const DecodedString& piece) {
  if (into.value_line_source.empty()) {
    into = piece;
    return;
  }
  into.value += piece.value;
  for (size_t k = 1; k < piece.value_line_source.size(); ++k) {
    into.value_line_source.push_back(piece.value_line_source[k]);
  }
}

DecodedString Text(std::string text, uint32_t line) {
  DecodedString d;
  d.value = std::move(text);
  d.value_line_source.assign(1, line);
  for (char c : d.value) {
    if (c == '\n') d.value_line_source.push_back(line);
  }
  return d;
}

// After a substitution the text may have gained lines: keep the map's known
// entries and give new lines the source line of the last one.
void RemapLines(DecodedString& d) {
  size_t lines = 1;
  for (char c : d.value) lines += c == '\n' ? 1 : 0;
  if (d.value_line_source.empty()) d.value_line_source.push_back(1);
  d.value_line_source.resize(lines, d.value_line_source.back());
}

void ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// printf-style `%s`/`%d`/... with positional values; nullopt on `%(name)s`
// or a count mismatch.
std::optional<std::string> Percent(const std::string& fmt, const std::vector<std::string>& values) {
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() && std::string_view("-+ #0123456789.").find(fmt[j]) != std::string_view::npos) ++j;
    if (j >= fmt.size() || std::string_view("sdirfgeEx").find(fmt[j]) == std::string_view::npos) return std::nullopt;
    if (next >= values.size()) return std::nullopt;
    out += values[next++];
    i = j;
  }
  if (next != values.size()) return std::nullopt;
  return out;
}

// str.format with `{}`, `{0}`, `{name}` (conversion and spec ignored).
std::optional<std::string> Format(const std::string& fmt, const std::vector<std::string>& positional,
                                  const std::map<std::string, std::string>& named) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if ((c == '{' || c == '}') && i + 1 < fmt.size() && fmt[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') return std::nullopt;
    if (c != '{') {
      out += c;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) return std::nullopt;
    std::string field = fmt.substr(i + 1, close - i - 1);
    field = field.substr(0, field.find_first_of("!:"));
    if (field.empty()) {
      if (auto_index >= positional.size()) return std::nullopt;
      out += positional[auto_index++];
    } else if (field.find_first_not_of("0123456789") == std::string::npos) {
      const size_t k = std::stoul(field.substr(0, 6));
      if (k >= positional.size()) return std::nullopt;
      out += positional[k];
    } else {
      auto it = named.find(field);
      if (it == named.end()) return std::nullopt;
      out += it->second;
    }
    i = close;
  }
  return out;
}

}  // namespace

std::optional<std::vector<DecodedString>> Analyzer::StringList(uint32_t a, uint32_t b, size_t depth) {
  std::vector<DecodedString> out;
  if ((IsOp(a, "[") || IsOp(a, "(")) && Close(a, b) == b - 1) {
    for (auto [x, y] : Split(a + 1, b - 1, ",")) {
      if (x >= y) continue;
      auto v = StringValue(x, y, depth + 1);
      if (!v) return std::nullopt;
      out.push_back(std::move(*v));
    }
    return out;
  }
  auto v = StringValue(a, b, depth + 1);
  if (!v) return std::nullopt;
  out.push_back(std::move(*v));
  return out;
}

std::optional<DecodedString> Analyzer::StringValue(uint32_t a, uint32_t b, size_t depth) {
  if (a >= b || depth > kMaxResolveDepth) return std::nullopt;
  if ((IsOp(a, "[") || IsOp(a, "(")) && Close(a, b) == b - 1) {
    auto parts = Split(a + 1, b - 1, ",");
    const bool tuple = parts.size() > 1;
    if (IsOp(a, "(") && !tuple) return StringValue(a + 1, b - 1, depth + 1);
    // A list of sources: load_inline joins them with newlines.
    DecodedString joined;
    for (auto [x, y] : parts) {
      if (x >= y) continue;
      auto v = StringValue(x, y, depth + 1);
      if (!v) return std::nullopt;
      if (!joined.value_line_source.empty()) Append(joined, Text("\n", v->value_line_source.front()));
      Append(joined, *v);
    }
    return joined.value_line_source.empty() ? std::optional<DecodedString>(Text("", t_[a].line)) : joined;
  }
  if (auto plus = Split(a, b, "+"); plus.size() > 1) {
    DecodedString out;
    for (auto [x, y] : plus) {
      auto v = StringValue(x, y, depth + 1);
      if (!v) return std::nullopt;
      Append(out, *v);
    }
    return out;
  }
  if (auto percent = Split(a, b, "%"); percent.size() == 2) {
    auto fmt = StringValue(percent[0].first, percent[0].second, depth + 1);
    auto values = StringList(percent[1].first, percent[1].second, depth + 1);
    if (!fmt || !values) return std::nullopt;
    std::vector<std::string> texts;
    for (const auto& v : *values) texts.push_back(v.value);
    auto done = Percent(fmt->value, texts);
    if (!done) return std::nullopt;
    fmt->value = *done;
    RemapLines(*fmt);
    return fmt;
  }
  // A primary, then string methods.
  std::optional<DecodedString> base;
  uint32_t i = a;
  if (IsString(i)) {
    DecodedString lit;
    while (i < b && IsString(i)) {
      std::optional<DecodedString> piece;
      if (t_[i].kind == PyTokenKind::kString) {
        piece = LiteralToken(i);
        ++i;
      } else {
        piece = FString(&i, b, depth);
      }
      if (!piece) return std::nullopt;
      Append(lit, *piece);
    }
    base = std::move(lit);
  } else if (t_[i].kind == PyTokenKind::kNumber) {
    base = Text(std::string(t_[i].text), t_[i].line);
    ++i;
  } else if (IsName(i)) {
    uint32_t end = 0;
    const auto parts = Chain(i, b, &end);
    const std::string q = Qualify(parts, nullptr);
    if ((q == "textwrap.dedent" || q == "inspect.cleandoc") && IsOp(end, "(")) {
      const uint32_t close = Close(end, b);
      const auto args = Args(end, close);
      if (args.size() != 1) return std::nullopt;
      base = StringValue(args[0].begin, args[0].end, depth + 1);
      i = close + 1;
    } else {
      const Binding* bnd = Lookup(parts[0], nullptr);
      if (!bnd || bnd->kind != Bind::kString) return std::nullopt;
      base = StringValue(bnd->value_begin, bnd->value_end, depth + 1);
      i += 1;  // The methods after the name are read below.
    }
  }
  if (!base) return std::nullopt;
  while (i < b) {
    if (!(IsOp(i, ".") && IsName(i + 1) && IsOp(i + 2, "("))) return std::nullopt;
    const std::string_view method = t_[i + 1].text;
    const uint32_t close = Close(i + 2, b);
    const auto args = Args(i + 2, close);
    std::vector<std::string> positional;
    std::map<std::string, std::string> named;
    if (method != "join") {
      for (const Arg& arg : args) {
        auto v = StringValue(arg.begin, arg.end, depth + 1);
        if (!v) return std::nullopt;
        if (arg.keyword.empty()) {
          positional.push_back(v->value);
        } else {
          named[std::string(arg.keyword)] = v->value;
        }
      }
    }
    if (method == "replace" && positional.size() >= 2) {
      ReplaceAll(base->value, positional[0], positional[1]);
    } else if (method == "format") {
      auto done = Format(base->value, positional, named);
      if (!done) return std::nullopt;
      base->value = *done;
    } else if (method == "join" && args.size() == 1) {
      auto items = StringList(args[0].begin, args[0].end, depth + 1);
      if (!items) return std::nullopt;
      const DecodedString sep = *base;
      DecodedString joined;
      for (size_t k = 0; k < items->size(); ++k) {
        if (k > 0) Append(joined, sep);
        Append(joined, (*items)[k]);
      }
      base = std::move(joined);
    } else if ((method == "strip" || method == "lstrip" || method == "rstrip") && positional.empty()) {
      // Whitespace at the ends does not change what the C++ says.
    } else {
      return std::nullopt;
    }
    RemapLines(*base);
    i = close + 1;
  }
  return base;
}

std::optional<DecodedString> Analyzer::LiteralToken(uint32_t i) const {
  auto d = DecodeStringToken(t_[i]);
  if (!d) return std::nullopt;
  return d;
}

// The f-string starting at *i (FSTRING_START); leaves *i after its END. Each
// replacement field must evaluate to known text.
std::optional<DecodedString> Analyzer::FString(uint32_t* i, uint32_t limit, size_t depth) {
  const bool raw = StringPrefix(t_[*i].text).find('r') != std::string::npos;
  DecodedString out = Text("", t_[*i].line);
  out.first_column = t_[*i].column + static_cast<uint32_t>(t_[*i].text.size());
  uint32_t k = *i + 1;
  while (k < limit && t_[k].kind != PyTokenKind::kFStringEnd) {
    if (t_[k].kind == PyTokenKind::kFStringMiddle) {
      Append(out, DecodeFStringMiddle(t_[k], raw));
      ++k;
      continue;
    }
    if (!IsOp(k, "{")) return std::nullopt;
    // The field: its expression ends at a top-level '!', ':' or '=', or at
    // the '}' that closes it.
    int nest = 0;
    uint32_t expr_end = 0, close = k + 1;
    for (; close < limit; ++close) {
      const PyToken& t = t_[close];
      if (t.kind == PyTokenKind::kFStringStart) ++nest;
      if (t.kind == PyTokenKind::kFStringEnd) --nest;
      if (t.kind != PyTokenKind::kOp || nest > 0) continue;
      if (t.text == "{" || t.text == "(" || t.text == "[") ++nest;
      if (t.text == ")" || t.text == "]") --nest;
      if (t.text == "}") {
        if (nest == 0) break;
        --nest;
      }
      if (nest == 0 && expr_end == 0 && (t.text == "!" || t.text == ":" || t.text == "=")) expr_end = close;
    }
    if (close >= limit) return std::nullopt;
    auto v = StringValue(k + 1, expr_end ? expr_end : close, depth + 1);
    if (!v) return std::nullopt;
    Append(out, Text(v->value, t_[k].line));
    k = close + 1;
  }
  if (k >= limit) return std::nullopt;
  *i = k + 1;
  return out;
}

}  // namespace kbox::static_check::python_analysis
