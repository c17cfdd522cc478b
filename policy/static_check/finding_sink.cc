#include "policy/static_check/finding_sink.h"

#include <algorithm>

namespace kbox::static_check {
namespace {

constexpr size_t kMaxSnippetBytes = 160;
constexpr size_t kMaxMessageBytes = 300;

// Length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF), or 0.
size_t Utf8SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = b(0);
  const auto cont = [&](size_t k) { return (b(k) & 0xC0u) == 0x80u; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

// Cuts `s` to at most `n` bytes without splitting a UTF-8 sequence, and
// replaces control characters and invalid bytes so the result is one line of
// valid UTF-8.
std::string CleanLine(std::string_view s, size_t n) {
  std::string out;
  out.reserve(std::min(s.size(), n));
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = Utf8SequenceLength(s.substr(i));
    if (len == 0) {
      if (out.size() + 3 > n) break;
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    if (out.size() + len > n) break;
    if (len == 1 && (c < 0x20 || c == 0x7F)) {
      out += ' ';
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace

FindingSink::FindingSink(std::string_view source, const AnticheatProfile& profile) : profile_(profile) {
  // Lines end where the tokenizer ends them: \n, \r\n or a lone \r.
  size_t start = 0;
  for (size_t i = 0; i <= source.size(); ++i) {
    if (i == source.size() || source[i] == '\n' || source[i] == '\r') {
      lines_.push_back(source.substr(start, i - start));
      if (i < source.size() && source[i] == '\r' && i + 1 < source.size() && source[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
}

std::string FindingSink::Snippet(uint32_t line) const {
  if (line == 0 || line > lines_.size()) return {};
  std::string_view s = lines_[line - 1];
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return CleanLine(s, kMaxSnippetBytes);
}

void FindingSink::Add(std::string_view rule_id, uint32_t line, uint32_t column, std::string message) {
  const Severity severity = profile_.severity(rule_id);
  if (severity == Severity::kOff) return;
  if (line > lines_.size()) line = static_cast<uint32_t>(lines_.size());
  if (!seen_.emplace(std::string(rule_id), line, column).second) return;
  if (report_.findings.size() >= kMaxFindings) {
    report_.truncated = true;
    return;
  }
  report_.findings.push_back(
      Finding{std::string(rule_id), severity, line, column, Snippet(line), CleanLine(message, kMaxMessageBytes)});
}

CheckReport FindingSink::Finish() && {
  std::sort(report_.findings.begin(), report_.findings.end(), [](const Finding& a, const Finding& b) {
    return std::tie(a.line, a.column, a.rule_id) < std::tie(b.line, b.column, b.rule_id);
  });
  return std::move(report_);
}

}  // namespace kbox::static_check
