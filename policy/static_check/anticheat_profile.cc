#include "policy/static_check/anticheat_profile.h"

#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "policy/static_check/rule_catalog.h"

namespace kbox::static_check {
namespace {

constexpr size_t kMaxExtendsDepth = 8;

bool ValidProfileName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

boost::system::result<AnticheatProfile, FieldError> LoadDepth(const std::filesystem::path& dir,
                                                              std::string_view name, size_t depth);

boost::system::result<AnticheatProfile, FieldError> ParseDepth(std::string_view text, std::string name,
                                                               const std::filesystem::path& dir,
                                                               size_t depth) {
  const std::string file = name + ".profile";
  std::map<std::string, Severity, std::less<>> explicit_rules;
  std::optional<Severity> default_severity;
  std::optional<AnticheatProfile> base;
  size_t line_no = 0;
  std::istringstream in{std::string(text)};
  for (std::string raw; std::getline(in, raw);) {
    ++line_no;
    const std::string where = file + ":" + std::to_string(line_no);
    std::string_view line(raw);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    const size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos) {
      return FieldError{where, "expected `<rule|default|extends> <value>`, got `" + std::string(line) + "`"};
    }
    const std::string_view key = line.substr(0, space);
    const std::string_view value = Trim(line.substr(space));
    if (value.find_first_of(" \t") != std::string_view::npos) {
      return FieldError{where, "one value per line, got `" + std::string(value) + "`"};
    }
    if (key == "extends") {
      if (base || !explicit_rules.empty() || default_severity) {
        return FieldError{where, "`extends` must come first and only once"};
      }
      if (depth >= kMaxExtendsDepth) return FieldError{where, "`extends` chain too long (a cycle?)"};
      auto loaded = LoadDepth(dir, value, depth + 1);
      if (!loaded) return FieldError{where + " -> " + loaded.error().field, loaded.error().message};
      base = std::move(*loaded);
      continue;
    }
    Severity severity;
    if (!ParseSeverity(value, &severity)) {
      return FieldError{where, "unknown severity `" + std::string(value) +
                                   "` (reject, suspicious, info or off)"};
    }
    if (key == "default") {
      if (default_severity) return FieldError{where, "`default` given twice"};
      default_severity = severity;
      continue;
    }
    if (FindRule(key) == nullptr) return FieldError{where, "unknown rule `" + std::string(key) + "`"};
    if (!explicit_rules.emplace(std::string(key), severity).second) {
      return FieldError{where, "rule `" + std::string(key) + "` given twice"};
    }
  }
  if (!base && !default_severity && explicit_rules.size() != RuleCatalog().size()) {
    // A profile that neither extends nor sets a default must grade every rule,
    // so a rule added to the catalogue is never silently left at some default.
    for (const RuleInfo& r : RuleCatalog()) {
      if (!explicit_rules.contains(r.id)) {
        return FieldError{file, "rule `" + std::string(r.id) +
                                    "` is not graded (name it, or use `default` or `extends`)"};
      }
    }
  }
  AnticheatProfile p = base ? *base : AnticheatProfile::Uniform(name, default_severity.value_or(Severity::kOff));
  std::map<std::string, Severity> all;
  for (const RuleInfo& r : RuleCatalog()) {
    Severity s = p.severity(r.id);
    if (default_severity) s = *default_severity;
    if (auto it = explicit_rules.find(r.id); it != explicit_rules.end()) s = it->second;
    all.emplace(std::string(r.id), s);
  }
  auto result = AnticheatProfile::Uniform(std::move(name), Severity::kOff).WithOverrides(all);
  return result;
}

boost::system::result<AnticheatProfile, FieldError> LoadDepth(const std::filesystem::path& dir,
                                                              std::string_view name, size_t depth) {
  if (!ValidProfileName(name)) {
    return FieldError{"anticheat_profile", "profile names are [a-z0-9_-]+, got `" + std::string(name) + "`"};
  }
  const std::filesystem::path path = dir / (std::string(name) + ".profile");
  std::ifstream in(path);
  if (!in) return FieldError{"anticheat_profile", "no profile `" + std::string(name) + "` in " + dir.string()};
  std::ostringstream text;
  text << in.rdbuf();
  return ParseDepth(text.str(), std::string(name), dir, depth);
}

}  // namespace

std::string_view SeverityName(Severity s) {
  switch (s) {
    case Severity::kOff: return "off";
    case Severity::kInfo: return "info";
    case Severity::kSuspicious: return "suspicious";
    case Severity::kReject: return "reject";
  }
  return "off";
}

bool ParseSeverity(std::string_view name, Severity* out) {
  for (Severity s : {Severity::kOff, Severity::kInfo, Severity::kSuspicious, Severity::kReject}) {
    if (SeverityName(s) == name) {
      *out = s;
      return true;
    }
  }
  return false;
}

AnticheatProfile AnticheatProfile::Uniform(std::string name, Severity severity) {
  AnticheatProfile p;
  p.name_ = std::move(name);
  for (const RuleInfo& r : RuleCatalog()) p.severities_.emplace(std::string(r.id), severity);
  return p;
}

boost::system::result<AnticheatProfile, FieldError> AnticheatProfile::Load(
    const std::filesystem::path& dir, std::string_view name) {
  return LoadDepth(dir, name, 0);
}

boost::system::result<AnticheatProfile, FieldError> AnticheatProfile::Parse(
    std::string_view text, std::string name, const std::filesystem::path& dir) {
  return ParseDepth(text, std::move(name), dir, 0);
}

boost::system::result<AnticheatProfile, FieldError> AnticheatProfile::WithOverrides(
    const std::map<std::string, Severity>& overrides) const {
  AnticheatProfile p = *this;
  for (const auto& [id, severity] : overrides) {
    auto it = p.severities_.find(id);
    if (it == p.severities_.end()) {
      return FieldError{"anticheat_overrides[" + id + "]", "unknown rule `" + id + "`"};
    }
    it->second = severity;
  }
  return p;
}

Severity AnticheatProfile::severity(std::string_view rule_id) const {
  auto it = severities_.find(rule_id);
  return it == severities_.end() ? Severity::kOff : it->second;
}

bool AnticheatProfile::all_off() const {
  for (const auto& [id, s] : severities_) {
    if (s != Severity::kOff) return false;
  }
  return true;
}

}  // namespace kbox::static_check
