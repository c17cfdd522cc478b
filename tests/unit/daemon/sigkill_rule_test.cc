// The SIGKILL rule of the result mapper (docs/reliability.md, "Whose SIGKILL"):
// a stage or candidate process that died by a SIGKILL kboxd did not send and
// the job's cgroup did not send (no OOM kill) was killed from outside the job,
// which is kbox's fault whoever was running; kboxd's own kills and the
// memory limit keep their verdicts.
#include <signal.h>

#include <gtest/gtest.h>

#include <string>

#include "daemon/failure_cause.h"
#include "daemon/result_mapper.h"
#include "tests/unit/daemon/stage_outcomes.h"

namespace kbox {
namespace {

using End = ProcessOutcome::End;
using test_support::Ended;
using test_support::Reported;

StageOutcome Sigkilled(v1::Party last_party) {
  StageOutcome s = Ended(End::kSignaled, last_party);
  s.process.term_signal = SIGKILL;
  return s;
}

TEST(SigkillRuleTest, RunStageKilledWhileCandidateRanIsInfraError) {
  for (v1::Party party : {v1::CANDIDATE, v1::REFERENCE, v1::HARNESS, v1::PARTY_UNSPECIFIED}) {
    v1::EvaluateResult r;
    FailureCause cause;
    ApplyRunStage(Sigkilled(party), r, &cause);
    EXPECT_EQ(r.status(), v1::INFRA_ERROR) << v1::Party_Name(party);
    EXPECT_EQ(cause.infra, InfraCause::kStageKilled) << v1::Party_Name(party);
    EXPECT_FALSE(cause.device_suspect);
    EXPECT_EQ(cause.violation, ViolationKind::kNone);
    EXPECT_FALSE(r.has_runtime_error());
    EXPECT_NE(r.message().find("SIGKILL from outside the job"), std::string::npos) << r.message();
  }
}

TEST(SigkillRuleTest, CompileStageKilledWhileCandidateRanIsInfraErrorNotCompileError) {
  v1::EvaluateResult r;
  FailureCause cause;
  EXPECT_FALSE(ApplyCompileStage(Sigkilled(v1::CANDIDATE), r, &cause));
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  EXPECT_EQ(cause.infra, InfraCause::kStageKilled);
  EXPECT_TRUE(RetryableInfraCause(cause.infra));
}

TEST(SigkillRuleTest, OutOfMemoryKillStaysTheCandidatesViolation) {
  StageOutcome s = Sigkilled(v1::CANDIDATE);
  s.memory_limit_hit = true;
  v1::EvaluateResult r;
  FailureCause cause;
  ApplyRunStage(s, r, &cause);
  EXPECT_EQ(r.status(), v1::SANDBOX_VIOLATION);
  EXPECT_EQ(cause.violation, ViolationKind::kMemoryLimit);
  EXPECT_EQ(cause.infra, InfraCause::kNone);
}

TEST(SigkillRuleTest, KboxdsOwnKillsKeepTheirVerdicts) {
  // kboxd's wall-clock kill is a SIGKILL too, but ends as kTimedOut.
  v1::EvaluateResult timed_out;
  ApplyRunStage(Ended(End::kTimedOut, v1::CANDIDATE), timed_out);
  EXPECT_EQ(timed_out.status(), v1::TIMEOUT);
  v1::EvaluateResult flooded;
  ApplyRunStage(Ended(End::kOutputLimit, v1::CANDIDATE), flooded);
  EXPECT_EQ(flooded.status(), v1::RUNTIME_ERROR);
  // Other signals stay with whoever ran: a candidate may crash itself.
  v1::EvaluateResult segv;
  ApplyRunStage(Ended(End::kSignaled, v1::CANDIDATE), segv);
  EXPECT_EQ(segv.status(), v1::RUNTIME_ERROR);
}

TEST(SigkillRuleTest, CandidateProcessKilledAsTheJudgeSawItIsInfraError) {
  StageOutcome s = Reported(v1::StageReport::CANDIDATE_FAILED,
                            "candidate's process died (signal SIGKILL)");
  s.report->set_candidate_killed(true);
  v1::EvaluateResult r;
  FailureCause cause;
  ApplyRunStage(s, r, &cause);
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  EXPECT_EQ(cause.infra, InfraCause::kStageKilled);

  // With an OOM kill in the cgroup, the memory limit did it.
  s.memory_limit_hit = true;
  v1::EvaluateResult oom;
  FailureCause oom_cause;
  ApplyRunStage(s, oom, &oom_cause);
  EXPECT_EQ(oom.status(), v1::SANDBOX_VIOLATION);
  EXPECT_EQ(oom_cause.violation, ViolationKind::kMemoryLimit);

  // Without the judge's flag the same words are only the candidate's failure.
  StageOutcome words = Reported(v1::StageReport::CANDIDATE_FAILED,
                                "candidate's process died (signal SIGKILL)");
  v1::EvaluateResult plain;
  ApplyRunStage(words, plain);
  EXPECT_EQ(plain.status(), v1::RUNTIME_ERROR);
}

TEST(SigkillRuleTest, CandidateProcessKilledBeforeCandidateCodeIsRetryableNotADeviceFault) {
  StageOutcome s = Reported(v1::StageReport::HARNESS_FAILED,
                            "harness failed: the candidate's process died (signal SIGKILL)");
  s.report->set_candidate_killed(true);
  v1::EvaluateResult r;
  FailureCause cause;
  ApplyRunStage(s, r, &cause);
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  EXPECT_EQ(cause.infra, InfraCause::kStageKilled);
  EXPECT_FALSE(cause.device_suspect);
  // Without the flag, the harness's own failure: it may point at the device.
  StageOutcome plain = Reported(v1::StageReport::HARNESS_FAILED, "harness failed: CUDA error");
  v1::EvaluateResult p;
  FailureCause plain_cause;
  ApplyRunStage(plain, p, &plain_cause);
  EXPECT_EQ(plain_cause.infra, InfraCause::kHarnessFailed);
  EXPECT_TRUE(plain_cause.device_suspect);
}

TEST(SigkillRuleTest, KilledCompilerOnTheLastAttemptIsTheCandidates) {
  StageOutcome s = Reported(v1::StageReport::COMPILE_FAILED, "extension build failed");
  s.report->set_compiler_killed(true);
  v1::EvaluateResult r;
  FailureCause cause;
  ApplyCompileStage(s, r, &cause);
  ASSERT_EQ(cause.infra, InfraCause::kCompilerKilled);
  EXPECT_TRUE(CompilerKillOnLastAttemptIsTheCandidates(r, cause));
  EXPECT_EQ(r.status(), v1::COMPILE_ERROR);
  EXPECT_EQ(cause.infra, InfraCause::kNone);
  EXPECT_NE(r.message().find("the failure is the candidate's"), std::string::npos) << r.message();
  // Any other INFRA_ERROR stays kbox's.
  v1::EvaluateResult killed;
  killed.set_status(v1::INFRA_ERROR);
  FailureCause stage_killed{.infra = InfraCause::kStageKilled};
  EXPECT_FALSE(CompilerKillOnLastAttemptIsTheCandidates(killed, stage_killed));
  EXPECT_EQ(killed.status(), v1::INFRA_ERROR);
}

TEST(SigkillRuleTest, KilledCompilerIsInfraErrorUnlessOutOfMemory) {
  StageOutcome s = Reported(v1::StageReport::COMPILE_FAILED, "extension build failed");
  s.report->set_compiler_killed(true);
  v1::EvaluateResult r;
  FailureCause cause;
  EXPECT_FALSE(ApplyCompileStage(s, r, &cause));
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  EXPECT_EQ(cause.infra, InfraCause::kCompilerKilled);
  EXPECT_TRUE(RetryableInfraCause(cause.infra));

  s.memory_limit_hit = true;
  v1::EvaluateResult oom;
  EXPECT_FALSE(ApplyCompileStage(s, oom));
  EXPECT_EQ(oom.status(), v1::COMPILE_ERROR);
}

TEST(SigkillRuleTest, OnlyKilledOrCrashedProcessesAreRetried) {
  EXPECT_TRUE(RetryableInfraCause(InfraCause::kZygoteDied));
  EXPECT_TRUE(RetryableInfraCause(InfraCause::kHarnessCrash));
  for (InfraCause c : {InfraCause::kHarnessTimeout, InfraCause::kHarnessFailed,
                       InfraCause::kCancelled, InfraCause::kInternal, InfraCause::kSandboxSetup,
                       InfraCause::kNone}) {
    EXPECT_FALSE(RetryableInfraCause(c)) << InfraCauseName(c);
  }
}

}  // namespace
}  // namespace kbox
