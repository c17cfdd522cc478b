// The closed sets of daemon/failure_cause.h, and that the result mapper names
// a cause for every INFRA_ERROR and a kind for every sandbox limit it maps.

#include "daemon/failure_cause.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "daemon/result_mapper.h"
#include "tests/unit/daemon/stage_outcomes.h"

namespace kbox {
namespace {

using End = ProcessOutcome::End;
using test_support::Ended;
using test_support::Reported;



FailureCause RunCause(const StageOutcome& s, v1::Status expected_status) {
  v1::EvaluateResult r;
  FailureCause cause;
  ApplyRunStage(s, r, &cause);
  EXPECT_EQ(r.status(), expected_status) << r.message();
  return cause;
}

TEST(FailureCauseTest, NamesAreDistinctSnakeCaseLabelValues) {
  std::set<std::string> infra, kinds;
  for (InfraCause c : kAllInfraCauses) infra.insert(std::string(InfraCauseName(c)));
  for (ViolationKind k : kAllViolationKinds) kinds.insert(std::string(ViolationKindName(k)));
  EXPECT_EQ(infra.size(), kAllInfraCauses.size());
  EXPECT_EQ(kinds.size(), kAllViolationKinds.size());
  for (const auto* set : {&infra, &kinds}) {
    EXPECT_FALSE(set->contains("none"));  // kNone is never counted.
    for (const std::string& name : *set) {
      EXPECT_FALSE(name.empty());
      for (char c : name) EXPECT_TRUE((c >= 'a' && c <= 'z') || c == '_') << name;
    }
  }
}

TEST(FailureCauseTest, EveryInfraErrorOfAStageNamesItsCause) {
  struct Case {
    StageOutcome stage;
    InfraCause cause;
    bool device_suspect;
  };
  StageOutcome spawn = Ended(End::kSpawnFailed, v1::PARTY_UNSPECIFIED);
  StageOutcome zygote = spawn;
  zygote.zygote_failed = true;
  StageOutcome setup = Ended(End::kExited, v1::PARTY_UNSPECIFIED);
  setup.sandbox_setup_failed = true;
  StageOutcome harness_sigsys = Ended(End::kSignaled, v1::HARNESS);
  harness_sigsys.process.term_signal = SIGSYS;
  StageOutcome protocol = Ended(End::kExited, v1::HARNESS);
  protocol.protocol_error = "malformed line";
  const Case cases[] = {
      {spawn, InfraCause::kStageSpawn, false},
      {zygote, InfraCause::kZygoteDied, false},
      {setup, InfraCause::kSandboxSetup, false},
      {harness_sigsys, InfraCause::kHarnessSandboxLimit, false},
      {Ended(End::kCancelled, v1::CANDIDATE), InfraCause::kCancelled, false},
      {Ended(End::kTimedOut, v1::HARNESS), InfraCause::kHarnessTimeout, true},
      {Ended(End::kOutputLimit, v1::HARNESS), InfraCause::kHarnessOutputLimit, false},
      {Ended(End::kSignaled, v1::HARNESS), InfraCause::kHarnessCrash, true},
      {protocol, InfraCause::kHarnessProtocol, false},
      {Reported(v1::StageReport::HARNESS_FAILED), InfraCause::kHarnessFailed, true},
      {Reported(v1::StageReport::OUTCOME_UNSPECIFIED), InfraCause::kHarnessProtocol, false},
  };
  for (const Case& c : cases) {
    const FailureCause cause = RunCause(c.stage, v1::INFRA_ERROR);
    EXPECT_EQ(cause.infra, c.cause) << InfraCauseName(c.cause);
    EXPECT_EQ(cause.device_suspect, c.device_suspect) << InfraCauseName(c.cause);
    EXPECT_EQ(cause.violation, ViolationKind::kNone);
    // The compile stage never points at a device: it has none.
    v1::EvaluateResult r;
    FailureCause compile;
    EXPECT_FALSE(ApplyCompileStage(c.stage, r, &compile));
    EXPECT_EQ(r.status(), v1::INFRA_ERROR);
    EXPECT_EQ(compile.infra, c.cause) << InfraCauseName(c.cause);
    EXPECT_FALSE(compile.device_suspect);
  }
}

TEST(FailureCauseTest, CandidateLimitsNameTheirKind) {
  StageOutcome named = Ended(End::kSignaled, v1::CANDIDATE);
  named.process.term_signal = SIGSYS;
  named.process.output_tail = "kbox-sandbox: killed: forbidden system call ptrace\n";
  EXPECT_EQ(RunCause(named, v1::SANDBOX_VIOLATION).violation, ViolationKind::kSeccomp);
  StageOutcome strict = Ended(End::kSignaled, v1::CANDIDATE);
  strict.process.term_signal = SIGSYS;
  EXPECT_EQ(RunCause(strict, v1::SANDBOX_VIOLATION).violation, ViolationKind::kSeccompStrict);
  StageOutcome memory = Ended(End::kSignaled, v1::CANDIDATE);
  memory.memory_limit_hit = true;
  EXPECT_EQ(RunCause(memory, v1::SANDBOX_VIOLATION).violation, ViolationKind::kMemoryLimit);
  StageOutcome fsize = Ended(End::kSignaled, v1::CANDIDATE);
  fsize.process.term_signal = SIGXFSZ;
  EXPECT_EQ(RunCause(fsize, v1::SANDBOX_VIOLATION).violation, ViolationKind::kFileSizeLimit);
  StageOutcome cpu = Ended(End::kSignaled, v1::CANDIDATE);
  cpu.process.term_signal = SIGXCPU;
  EXPECT_EQ(RunCause(cpu, v1::SANDBOX_VIOLATION).violation, ViolationKind::kCpuTimeLimit);
  EXPECT_EQ(RunCause(Ended(End::kTimedOut, v1::CANDIDATE), v1::TIMEOUT).violation,
            ViolationKind::kWallTimeLimit);
  EXPECT_EQ(RunCause(Ended(End::kOutputLimit, v1::CANDIDATE), v1::RUNTIME_ERROR).violation,
            ViolationKind::kOutputLimit);
  // The candidate raised after a failed fork: the process limit is the story.
  StageOutcome pids = Reported(v1::StageReport::CANDIDATE_FAILED, "BlockingIOError");
  pids.pids_limit_hit = true;
  EXPECT_EQ(RunCause(pids, v1::SANDBOX_VIOLATION).violation, ViolationKind::kPidsLimit);
  // What the harness reports: its strict filter's kill, or its audit hook's refusal.
  EXPECT_EQ(RunCause(Reported(v1::StageReport::CANDIDATE_VIOLATION,
                              "candidate tried to create a process or run a program, which the "
                              "sandbox forbids once candidate code runs (killed by the strict "
                              "seccomp filter)"),
                     v1::SANDBOX_VIOLATION)
                .violation,
            ViolationKind::kSeccompStrict);
  EXPECT_EQ(RunCause(Reported(v1::StageReport::CANDIDATE_VIOLATION,
                              "candidate tried socket.connect, which the sandbox forbids"),
                     v1::SANDBOX_VIOLATION)
                .violation,
            ViolationKind::kAuditDenied);
}

TEST(FailureCauseTest, TheReferencesAndCandidatesOwnFailuresNameNoCause) {
  StageOutcome ref_limit = Ended(End::kSignaled, v1::REFERENCE);
  ref_limit.memory_limit_hit = true;
  const FailureCause ref = RunCause(ref_limit, v1::REFERENCE_ERROR);
  EXPECT_EQ(ref.infra, InfraCause::kNone);
  EXPECT_EQ(ref.violation, ViolationKind::kNone);  // Not the candidate's violation.
  const FailureCause crash = RunCause(Ended(End::kSignaled, v1::CANDIDATE), v1::RUNTIME_ERROR);
  EXPECT_EQ(crash.infra, InfraCause::kNone);
  EXPECT_EQ(crash.violation, ViolationKind::kNone);
  EXPECT_FALSE(crash.device_suspect);
  const FailureCause incorrect = RunCause(Reported(v1::StageReport::INCORRECT), v1::INCORRECT);
  EXPECT_EQ(incorrect.infra, InfraCause::kNone);
}

}  // namespace
}  // namespace kbox
