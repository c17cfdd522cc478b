#pragma once

// Turns what a stage process left behind into the job's public result. This
// is where "whose fault was it?" is decided: a failure while the harness was
// running candidate code is the candidate's outcome; one while it ran the
// reference is REFERENCE_ERROR; anything else is kbox's own INFRA_ERROR,
// which a trainer must never be penalised for.

#include "daemon/failure_cause.h"
#include "kbox/v1/evaluation.pb.h"
#include "worker/stage_runner.h"

namespace kbox {

// Applies the compile stage's outcome. Returns true when the job goes on to
// the run stage; otherwise `result` holds the final status and message.
// `cause` (when given) gets the infra cause or violation kind of a failure.
bool ApplyCompileStage(const StageOutcome& stage, v1::EvaluateResult& result,
                       FailureCause* cause = nullptr);

// The compile stage's report comes from the process candidate code ran in
// (the build runs inside the candidate's import), so its claim that a
// compiler was killed from outside (InfraCause::kCompilerKilled) is kbox's
// failure only while the job has an attempt left to run it again. On the
// last attempt it is the candidate's COMPILE_ERROR: an outside kill does not
// follow one job from attempt to attempt; a forged claim does. Returns
// whether it changed `result` (and cleared `cause.infra`).
bool CompilerKillOnLastAttemptIsTheCandidates(v1::EvaluateResult& result, FailureCause& cause);

// Applies the run stage's outcome: status, message, errors, trials, timings,
// speedup and the device fields of the fingerprint; `cause` as above.
void ApplyRunStage(const StageOutcome& stage, v1::EvaluateResult& result,
                   FailureCause* cause = nullptr);

// Sets `rewardable` from status and verdicts: CORRECT and no REJECT verdict.
void FinalizeRewardable(v1::EvaluateResult& result);

// Makes every free-text field of `result` valid, bounded UTF-8 (the harness
// runs next to candidate code, so nothing it reports is trusted as text).
void SanitizeResultText(v1::EvaluateResult& result, size_t max_bytes);

// Replaces invalid UTF-8 and control characters (but newline and tab) so
// output can be shown to clients and logs safely; keeps at most `max_bytes`
// from the end.
std::string SanitizeTail(const std::string& text, size_t max_bytes);

}  // namespace kbox
