#pragma once

// Collects the findings of one check: applies the profile's severity (rules
// it switches off cost nothing), drops duplicates, caps the count, and cuts
// the snippet from the candidate's own line.

#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "policy/static_check/check_types.h"

namespace kbox::static_check {

class FindingSink {
 public:
  FindingSink(std::string_view candidate_source, const AnticheatProfile& profile);

  bool enabled(std::string_view rule_id) const { return profile_.severity(rule_id) != Severity::kOff; }
  void Add(std::string_view rule_id, uint32_t line, uint32_t column, std::string message);

  CheckReport Finish() &&;

 private:
  std::string Snippet(uint32_t line) const;

  std::vector<std::string_view> lines_;
  const AnticheatProfile& profile_;
  std::set<std::tuple<std::string, uint32_t, uint32_t>> seen_;
  CheckReport report_;
};

}  // namespace kbox::static_check
