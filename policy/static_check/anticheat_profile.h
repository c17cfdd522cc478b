#pragma once

// An anti-cheat profile: the severity of every static rule, loaded from a text
// file in policy/anticheat/ (strict.profile, lenient.profile, off.profile).
// The grammar, one statement a line, '#' starts a comment (every line says why):
//
//   extends strict                  # start from another profile in the same folder
//   default off                     # severity of every rule not named below
//   py.matmul-operator reject       # rule id, then reject | suspicious | info | off
//
// A profile that names an unknown rule, repeats a rule, or extends itself in a
// cycle is refused when loaded, naming file and line.

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include <boost/system/result.hpp>

#include "policy/field_error.h"

namespace kbox::static_check {

enum class Severity { kOff, kInfo, kSuspicious, kReject };

std::string_view SeverityName(Severity s);             // "reject", ...
bool ParseSeverity(std::string_view name, Severity* out);

class AnticheatProfile {
 public:
  // Every rule at `severity`.
  static AnticheatProfile Uniform(std::string name, Severity severity);
  // Loads `<dir>/<name>.profile`; `name` must be [a-z0-9_-]+.
  static boost::system::result<AnticheatProfile, FieldError> Load(
      const std::filesystem::path& dir, std::string_view name);
  // Parses profile text; `extends` is resolved against `dir`.
  static boost::system::result<AnticheatProfile, FieldError> Parse(
      std::string_view text, std::string name, const std::filesystem::path& dir);

  // The same profile with some rules' severities replaced; an unknown rule id
  // is an error naming it.
  boost::system::result<AnticheatProfile, FieldError> WithOverrides(
      const std::map<std::string, Severity>& overrides) const;

  Severity severity(std::string_view rule_id) const;
  const std::string& name() const { return name_; }
  // True when every rule is off: the checker need not run at all.
  bool all_off() const;

 private:
  std::string name_;
  std::map<std::string, Severity, std::less<>> severities_;  // Every rule.
};

}  // namespace kbox::static_check
