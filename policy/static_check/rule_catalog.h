#pragma once

// Every static anti-cheat rule kbox knows: a stable id, the hack of the
// catalogue it answers (../shared/research, docs/anticheat.md), and a one-line
// summary. Profiles (policy/anticheat/*.profile) give each a severity; metric
// labels come from this closed set.

#include <span>
#include <string_view>

namespace kbox::static_check {

struct RuleInfo {
  std::string_view id;        // "py.library-compute-in-forward"
  std::string_view hack_ref;  // "H1", "H25", ...
  std::string_view summary;   // One line, for docs, `kbox-policy` and errors.
};

// In id order.
std::span<const RuleInfo> RuleCatalog();
// nullptr when no rule has that id.
const RuleInfo* FindRule(std::string_view id);

}  // namespace kbox::static_check
