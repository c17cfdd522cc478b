#pragma once

// The static anti-cheat phase as the public API reports it: the checker's
// findings become Verdicts (phase PHASE_STATIC), and a finding of severity
// reject ends an evaluation as REJECTED before anything is compiled.

#include <string>
#include <vector>

#include <google/protobuf/repeated_ptr_field.h>

#include "kbox/v1/evaluation.pb.h"
#include "kbox/v1/harness.pb.h"
#include "policy/static_check/static_checker.h"

namespace kbox {

// One run of the static checker.
struct StaticPhase {
  // Findings, and report.kernel_names (the candidate's kernels, for the run
  // stage's StageSpec.candidate_kernels), filled under every profile.
  static_check::CheckReport report;
  double ms = 0;     // Wall-clock time of Check(); 0 when no rule ran.
  bool ran = false;  // False when the profile switches every rule off.
};

// Runs the checker on `input` under `profile`. When every rule is off no
// rule runs (no findings, ms 0, ran false), but report.kernel_names is
// still filled.
StaticPhase RunStaticCheck(const static_check::CheckInput& input,
                           const static_check::AnticheatProfile& profile);

// A severity of the checker as the API's (kOff, which a finding never has,
// maps to SEVERITY_UNSPECIFIED).
v1::Verdict::Severity VerdictSeverityOf(static_check::Severity severity);

// One finding as a verdict of `phase`, its text made valid, bounded, one-line UTF-8.
v1::Verdict VerdictOf(const static_check::Finding& finding, v1::Phase phase = v1::PHASE_STATIC);

// Appends every finding of `report` to `verdicts`, in the report's order.
void AppendVerdicts(const static_check::CheckReport& report,
                    google::protobuf::RepeatedPtrField<v1::Verdict>* verdicts);

// "rejected by anti-cheat rule R at candidate.py:LINE: MESSAGE (+N more)",
// from the first finding of severity reject; "" when none rejects.
std::string RejectionMessage(const static_check::CheckReport& report);

// Adds the report's verdicts to `result`. When the report rejects, sets
// status REJECTED and the rejection message and returns false: the job ends
// here (no compile, no run). Otherwise returns true and leaves the status.
bool ApplyStaticCheck(const static_check::CheckReport& report, v1::EvaluateResult& result);

// The bound on the extension text kboxd reads from one compile report (the
// harness sends at most this much; a report past it is not the harness's).
inline constexpr size_t kMaxReportedSourceBytes = size_t{1} << 20;
// And on the calls: past it, the rest are one call kbox did not read.
inline constexpr size_t kMaxReportedCalls = 256;

// A compile report's extension_sources as the checker reads them: each call's
// strings and flags; a call whose text the harness left out (truncated,
// unread files) or that takes the total past kMaxReportedSourceBytes has
// `unread` set. `report` may be null (no report: nothing reported).
std::vector<static_check::ReportedExtension> ReportedExtensionsOf(const v1::StageReport* report);

// The static checks the compile stage made possible (the static report had
// deferred calls, so the compile stage was asked for its sources): the rules
// that read extension text run on what `report` says the candidate's
// load_inline/load calls received, under `profile` (the request's, with its
// overrides). A deferred call with nothing reported is
// py.unresolved-extension-source.
static_check::CheckReport CheckCompiledSources(const static_check::CheckInput& input, const v1::StageReport* report,
                                               const static_check::AnticheatProfile& profile);

// Adds those findings to `result` as verdicts of phase PHASE_COMPILE. When one
// rejects, sets status REJECTED and the rejection message and returns false:
// the job ends here (nothing runs). Otherwise returns true.
bool ApplyCompiledSources(const static_check::CheckReport& report, v1::EvaluateResult& result);

// The run stage's dynamic findings (run.* rules) graded by the request's
// profile: unknown or non-run rule ids (the harness shares its process with
// the candidate, which could write them) and rules the profile switches off
// are dropped.
static_check::CheckReport GradeRunFindings(const google::protobuf::RepeatedPtrField<v1::Verdict>& reported,
                                           const static_check::AnticheatProfile& profile);

// Adds graded run findings to `result` (phase PHASE_RUN). A reject turns a
// CORRECT or INCORRECT outcome into REJECTED, naming the rule; a crash or a
// timeout stays what it was.
void ApplyRunFindings(const static_check::CheckReport& graded, v1::EvaluateResult& result);

}  // namespace kbox
