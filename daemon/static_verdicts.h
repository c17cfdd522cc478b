#pragma once

// The static anti-cheat phase as the public API reports it: the checker's
// findings become Verdicts (phase PHASE_STATIC), and a finding of severity
// reject ends an evaluation as REJECTED before anything is compiled.

#include <string>

#include <google/protobuf/repeated_ptr_field.h>

#include "kbox/v1/evaluation.pb.h"
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
