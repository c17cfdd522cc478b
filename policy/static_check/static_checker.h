#pragma once

// The static anti-cheat checker: reads a candidate's Python source (and the
// C++/CUDA sources it hands to load_inline) and reports findings of the rules
// in rule_catalog.h before anything is compiled (docs/anticheat.md).
//
// Contract: Check() never throws on any input, runs in time linear in the
// source size (nesting is bounded), and is safe to call from many threads at
// once. It sees text only; what it cannot see (stale memory, input mutation,
// degenerate outputs) is left to the run stage's dynamic checks.

#include <vector>

#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/check_types.h"

namespace kbox::static_check {

// Runs every rule the profile does not switch off, and always fills
// kernel_names (under a profile that switches every rule off, the analysis
// still runs but reports no findings).
CheckReport Check(const CheckInput& input, const AnticheatProfile& profile);

// The deferred half of a check (docs/anticheat.md, "Sources kbox reads after
// the compile"): runs the rules that read extension text (cpp.*, and
// cpp.include-path on flags) on the sources the compile stage reported for
// `input`'s candidate, under the same profile; then kernel.none and
// cpp.kernel-never-launched on everything the candidate built. A text the
// static pass read already (and checked with its line map) is not checked
// again. A finding in a reported text sits on candidate.py's line of that text
// when the text appears there verbatim, else on the load_inline call it came
// from (a reported call comes from the deferred call whose lines hold its
// `line`). Each deferred call (Check's report.deferred, found again here)
// that no reported call came from, and each reported call with something
// unread, is py.unresolved-extension-source: C++ that neither pass could
// read. kernel_names: the candidate's kernels, those of the reported sources
// included; `deferred` is left empty. Same contract as Check().
CheckReport CheckReportedExtensions(const CheckInput& input, const std::vector<ReportedExtension>& reported,
                                    const AnticheatProfile& profile);

}  // namespace kbox::static_check
