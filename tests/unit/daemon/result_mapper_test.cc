#include "daemon/result_mapper.h"
#include "tests/unit/daemon/stage_outcomes.h"

#include <signal.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <string_view>

namespace kbox {
namespace {

using End = ProcessOutcome::End;
using test_support::Ended;
using test_support::Reported;
constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD



// A run-stage OK report with `trials` passed trials, and a result expecting them.
StageOutcome CorrectRun(v1::EvaluateResult& r, int trials = 5) {
  StageOutcome s = Reported(v1::StageReport::OK, "correct on 5 trials");
  for (int i = 0; i < trials; ++i) s.report->add_trials()->set_passed(true);
  r.mutable_settings()->set_correctness_trials(5);
  return s;
}

// A timing whose lower quartile (the figure speedup comes from) is
// `quartile_ms`, its median 10 % above.
v1::Timing QuartileTiming(double quartile_ms) {
  v1::Timing t;
  t.set_lower_quartile_ms(quartile_ms);
  t.set_median_ms(quartile_ms * 1.1);
  t.set_count(20);
  return t;
}

// Strict UTF-8 check, independent of the code under test.
bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c >> 5) == 0x6) {
      len = 2;
      cp = c & 0x1f;
    } else if ((c >> 4) == 0xe) {
      len = 3;
      cp = c & 0x0f;
    } else if ((c >> 3) == 0x1e) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b >> 6) != 0x2) return false;
      cp = (cp << 6) | (b & 0x3f);
    }
    const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

bool HasControlChars(std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return true;
  }
  return false;
}

// ---- Compile stage ----

TEST(ResultMapperTest, CompileOkContinues) {
  v1::EvaluateResult r;
  EXPECT_TRUE(ApplyCompileStage(Reported(v1::StageReport::OK), r));
  EXPECT_EQ(r.status(), v1::STATUS_UNSPECIFIED);
}

TEST(ResultMapperTest, CompileFailedIsCompileErrorWithLog) {
  StageOutcome s = Reported(v1::StageReport::COMPILE_FAILED, "nvcc failed");
  s.report->mutable_compile_log()->set_text("candidate.py:3: error: expected ';'");
  s.report->mutable_compile_log()->set_first_error_line(3);
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyCompileStage(s, r));
  EXPECT_EQ(r.status(), v1::COMPILE_ERROR);
  EXPECT_EQ(r.message(), "nvcc failed");
  EXPECT_EQ(r.compile_log().text(), "candidate.py:3: error: expected ';'");
  EXPECT_EQ(r.compile_log().first_error_line(), 3u);
}

TEST(ResultMapperTest, CompileHarnessFailedIsInfraError) {
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyCompileStage(Reported(v1::StageReport::HARNESS_FAILED, "bug"), r));
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  EXPECT_NE(r.message().find("bug"), std::string::npos);
}

TEST(ResultMapperTest, CompileUnexpectedOutcomeIsInfraError) {
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyCompileStage(Reported(v1::StageReport::INCORRECT), r));
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  EXPECT_NE(r.message().find("INCORRECT"), std::string::npos) << r.message();
}

// Candidate code shares the compile stage's process and its result pipe: once
// it ran, an announced HARNESS (or REFERENCE), a HARNESS_FAILED report or an
// outcome the stage never reports is no evidence against kbox.
TEST(ResultMapperTest, CompileStageFailuresAfterCandidateCodeRanAreTheCandidates) {
  StageOutcome reported = Reported(v1::StageReport::HARNESS_FAILED, "hook broke");
  reported.candidate_ran = true;
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyCompileStage(reported, r));
  EXPECT_EQ(r.status(), v1::COMPILE_ERROR);
  EXPECT_NE(r.message().find("hook broke"), std::string::npos) << r.message();

  StageOutcome odd = Reported(v1::StageReport::INCORRECT);
  odd.candidate_ran = true;
  v1::EvaluateResult o;
  EXPECT_FALSE(ApplyCompileStage(odd, o));
  EXPECT_EQ(o.status(), v1::COMPILE_ERROR);

  for (const v1::Party announced : {v1::HARNESS, v1::REFERENCE, v1::PARTY_UNSPECIFIED}) {
    for (const End end : {End::kSignaled, End::kExited, End::kTimedOut, End::kOutputLimit}) {
      StageOutcome s = Ended(end, announced);
      s.candidate_ran = true;
      v1::EvaluateResult e;
      FailureCause cause;
      EXPECT_FALSE(ApplyCompileStage(s, e, &cause));
      EXPECT_NE(e.status(), v1::INFRA_ERROR) << e.message();
      EXPECT_NE(e.status(), v1::REFERENCE_ERROR) << e.message();
      EXPECT_EQ(cause.infra, InfraCause::kNone) << e.message();
    }
  }
  // A SIGKILL stays kbox's: candidate code cannot send one (the no-SIGKILL
  // filter), so it came from outside the job.
  StageOutcome killed = Ended(End::kSignaled, v1::HARNESS);
  killed.process.term_signal = SIGKILL;
  killed.candidate_ran = true;
  v1::EvaluateResult k;
  EXPECT_FALSE(ApplyCompileStage(killed, k));
  EXPECT_EQ(k.status(), v1::INFRA_ERROR);
}

// The run stage's candidate code runs in a process of its own without the
// judge's result pipe: the judge's announcements stand.
TEST(ResultMapperTest, RunStageHarnessFailuresStayKbox) {
  StageOutcome s = Ended(End::kSignaled, v1::HARNESS);
  s.candidate_ran = true;
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
}

TEST(ResultMapperTest, SpawnFailureIsInfraError) {
  for (const v1::Party party : {v1::PARTY_UNSPECIFIED, v1::CANDIDATE}) {
    v1::EvaluateResult compile, run;
    EXPECT_FALSE(ApplyCompileStage(Ended(End::kSpawnFailed, party), compile));
    ApplyRunStage(Ended(End::kSpawnFailed, party), run);
    EXPECT_EQ(compile.status(), v1::INFRA_ERROR);
    EXPECT_EQ(run.status(), v1::INFRA_ERROR);
    EXPECT_NE(run.message().find("No such file"), std::string::npos) << run.message();
  }
}

TEST(ResultMapperTest, SignalInCandidateDuringCompileIsCompileError) {
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyCompileStage(Ended(End::kSignaled, v1::CANDIDATE), r));
  EXPECT_EQ(r.status(), v1::COMPILE_ERROR);
  EXPECT_EQ(r.runtime_error().phase(), v1::PHASE_COMPILE);
  EXPECT_EQ(r.runtime_error().type(), "Crash");
  EXPECT_NE(r.message().find("SIGSEGV"), std::string::npos) << r.message();
}

// ---- Abnormal ends, attributed to the last party ----

TEST(ResultMapperTest, TimeoutAttributedToLastParty) {
  struct Case {
    v1::Party party;
    v1::Status status;
  };
  for (const Case c : {Case{v1::CANDIDATE, v1::TIMEOUT}, Case{v1::REFERENCE, v1::REFERENCE_ERROR},
                       Case{v1::HARNESS, v1::INFRA_ERROR},
                       Case{v1::PARTY_UNSPECIFIED, v1::INFRA_ERROR}}) {
    v1::EvaluateResult r;
    ApplyRunStage(Ended(End::kTimedOut, c.party), r);
    EXPECT_EQ(r.status(), c.status) << v1::Party_Name(c.party);
    EXPECT_NE(r.message().find("wall-clock limit (3 s)"), std::string::npos) << r.message();
    if (c.party == v1::CANDIDATE || c.party == v1::REFERENCE) {
      EXPECT_EQ(r.runtime_error().type(), "Timeout");
      EXPECT_EQ(r.runtime_error().phase(), v1::PHASE_RUN);
    } else {
      EXPECT_FALSE(r.has_runtime_error()) << v1::Party_Name(c.party);
    }
  }
}

// The message names the limit that expired, not the stage's whole time (a
// stage prepared ahead also waited for its turn and set up).
TEST(ResultMapperTest, TimeoutNamesTheLimitThatExpired) {
  StageOutcome s = Ended(End::kTimedOut, v1::CANDIDATE);
  s.process.wall_ms = 27'500;
  s.process.expired_limit = std::chrono::seconds(10);
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::TIMEOUT);
  EXPECT_NE(r.message().find("wall-clock limit (10 s)"), std::string::npos) << r.message();
}

// A set-up past its own limit ran no candidate code: kbox's failure (the
// device suspect), or the reference's while its import ran.
TEST(ResultMapperTest, SetUpPastItsLimitIsNeverTheCandidates) {
  struct Case {
    v1::Party party;
    v1::Status status;
  };
  for (const Case c : {Case{v1::CANDIDATE, v1::INFRA_ERROR}, Case{v1::HARNESS, v1::INFRA_ERROR},
                       Case{v1::REFERENCE, v1::REFERENCE_ERROR}}) {
    StageOutcome s = Ended(End::kTimedOut, c.party);
    s.process.timed_out_setting_up = true;
    s.process.expired_limit = std::chrono::seconds(180);
    v1::EvaluateResult r;
    FailureCause cause;
    ApplyRunStage(s, r, &cause);
    EXPECT_EQ(r.status(), c.status) << v1::Party_Name(c.party);
    EXPECT_NE(r.message().find("did not finish setting up within its set-up limit (180 s)"),
              std::string::npos)
        << r.message();
    EXPECT_EQ(cause.violation, ViolationKind::kNone) << v1::Party_Name(c.party);
    if (c.status == v1::INFRA_ERROR) {
      EXPECT_EQ(cause.infra, InfraCause::kHarnessTimeout);
      EXPECT_TRUE(cause.device_suspect);
    }
  }
}

TEST(ResultMapperTest, TimeoutInCompileStageAttributedToCandidate) {
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyCompileStage(Ended(End::kTimedOut, v1::CANDIDATE), r));
  EXPECT_EQ(r.status(), v1::TIMEOUT);
  EXPECT_EQ(r.runtime_error().phase(), v1::PHASE_COMPILE);
}

TEST(ResultMapperTest, CrashInCandidateDuringRunIsRuntimeError) {
  v1::EvaluateResult r;
  ApplyRunStage(Ended(End::kSignaled, v1::CANDIDATE), r);
  EXPECT_EQ(r.status(), v1::RUNTIME_ERROR);
  EXPECT_EQ(r.runtime_error().type(), "Crash");
  EXPECT_EQ(r.runtime_error().phase(), v1::PHASE_RUN);
  EXPECT_NE(r.message().find("killed by SIGSEGV"), std::string::npos) << r.message();
}

TEST(ResultMapperTest, CrashInHarnessIsInfraError) {
  for (const v1::Party party : {v1::HARNESS, v1::PARTY_UNSPECIFIED}) {
    v1::EvaluateResult run, compile;
    ApplyRunStage(Ended(End::kSignaled, party), run);
    EXPECT_FALSE(ApplyCompileStage(Ended(End::kSignaled, party), compile));
    EXPECT_EQ(run.status(), v1::INFRA_ERROR) << v1::Party_Name(party);
    EXPECT_EQ(compile.status(), v1::INFRA_ERROR) << v1::Party_Name(party);
  }
}

TEST(ResultMapperTest, CrashInReferenceIsReferenceError) {
  v1::EvaluateResult r;
  ApplyRunStage(Ended(End::kSignaled, v1::REFERENCE), r);
  EXPECT_EQ(r.status(), v1::REFERENCE_ERROR);
}

TEST(ResultMapperTest, ExitWithoutReportInCandidateIsRuntimeError) {
  v1::EvaluateResult r;
  ApplyRunStage(Ended(End::kExited, v1::CANDIDATE), r);
  EXPECT_EQ(r.status(), v1::RUNTIME_ERROR);
  EXPECT_EQ(r.runtime_error().type(), "ProcessExit");
  EXPECT_NE(r.message().find("without a report"), std::string::npos) << r.message();
}

TEST(ResultMapperTest, OutputLimitAttributedToLastParty) {
  v1::EvaluateResult candidate, reference, harness;
  ApplyRunStage(Ended(End::kOutputLimit, v1::CANDIDATE), candidate);
  ApplyRunStage(Ended(End::kOutputLimit, v1::REFERENCE), reference);
  ApplyRunStage(Ended(End::kOutputLimit, v1::HARNESS), harness);
  EXPECT_EQ(candidate.status(), v1::RUNTIME_ERROR);
  EXPECT_EQ(candidate.runtime_error().type(), "OutputLimitExceeded");
  EXPECT_EQ(reference.status(), v1::REFERENCE_ERROR);
  EXPECT_EQ(harness.status(), v1::INFRA_ERROR);
}

TEST(ResultMapperTest, ProtocolErrorAttributedToLastParty) {
  StageOutcome candidate = Ended(End::kExited, v1::CANDIDATE);
  candidate.process.exit_code = 0;
  candidate.protocol_error = "data after the final report";
  StageOutcome harness = candidate;
  harness.last_party = v1::HARNESS;

  v1::EvaluateResult from_candidate, from_harness;
  ApplyRunStage(candidate, from_candidate);
  ApplyRunStage(harness, from_harness);
  EXPECT_EQ(from_candidate.status(), v1::RUNTIME_ERROR);
  EXPECT_NE(from_candidate.message().find("data after the final report"), std::string::npos)
      << from_candidate.message();
  EXPECT_EQ(from_harness.status(), v1::INFRA_ERROR);
}

// ---- Run stage with a report ----

TEST(ResultMapperTest, RunOkIsCorrectWithSpeedup) {
  v1::EvaluateResult r;
  StageOutcome s = CorrectRun(r);
  *s.report->mutable_candidate_timing() = QuartileTiming(2.0);
  *s.report->mutable_reference_timing() = QuartileTiming(5.0);
  s.report->mutable_fingerprint()->set_torch_version("2.5.0");
  r.mutable_fingerprint()->set_hostname("node-1");
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::CORRECT);
  EXPECT_EQ(r.message(), "correct on 5 trials");
  EXPECT_EQ(r.trials_size(), 5);
  EXPECT_DOUBLE_EQ(r.speedup(), 2.5);
  EXPECT_DOUBLE_EQ(r.candidate_timing().lower_quartile_ms(), 2.0);
  EXPECT_DOUBLE_EQ(r.reference_timing().median_ms(), 5.5);
  EXPECT_EQ(r.fingerprint().torch_version(), "2.5.0");
  EXPECT_EQ(r.fingerprint().hostname(), "node-1");  // Host fields are kboxd's, kept.
}

// Each stage's own split of its time reaches the result's durations.
TEST(ResultMapperTest, StagePhasesReachTheDurations) {
  v1::EvaluateResult r;
  StageOutcome compiled = Reported(v1::StageReport::OK, "built");
  (*compiled.report->mutable_phase_ms())["import_candidate"] = 8123.5;
  EXPECT_TRUE(ApplyCompileStage(compiled, r));
  StageOutcome ran = CorrectRun(r);
  (*ran.report->mutable_phase_ms())["setup"] = 612.0;
  (*ran.report->mutable_phase_ms())["dynamic_probe"] = 5900.0;
  ApplyRunStage(ran, r);
  EXPECT_EQ(r.status(), v1::CORRECT);
  EXPECT_DOUBLE_EQ(r.durations().compile_phases_ms().at("import_candidate"), 8123.5);
  EXPECT_EQ(r.durations().run_phases_ms().size(), 2u);
  EXPECT_DOUBLE_EQ(r.durations().run_phases_ms().at("dynamic_probe"), 5900.0);
}

// The speedup and its interval come from the lower quartiles, not the
// medians (timing.SPEEDUP_QUANTILE in the harness).
TEST(ResultMapperTest, SpeedupIsFromTheLowerQuartiles) {
  v1::EvaluateResult r;
  StageOutcome s = CorrectRun(r);
  v1::Timing cand = QuartileTiming(2.0), ref = QuartileTiming(6.0);
  cand.set_median_ms(4.0);  // medians would give 1.5x
  cand.set_lower_quartile_ci_low_ms(1.9);
  cand.set_lower_quartile_ci_high_ms(2.2);
  ref.set_lower_quartile_ci_low_ms(5.7);
  ref.set_lower_quartile_ci_high_ms(6.6);
  *s.report->mutable_candidate_timing() = cand;
  *s.report->mutable_reference_timing() = ref;
  ApplyRunStage(s, r);
  EXPECT_DOUBLE_EQ(r.speedup(), 3.0);
  EXPECT_DOUBLE_EQ(r.speedup_ci_low(), 5.7 / 2.2);
  EXPECT_DOUBLE_EQ(r.speedup_ci_high(), 6.6 / 1.9);
}

// The reference figure says where it came from: "cache" only when the
// harness said so, "live" otherwise; the speedup uses it either way.
TEST(ResultMapperTest, ReferenceSourceIsCacheOnlyWhenTheHarnessSaysSo) {
  for (const std::string said : {"cache", "live", "", "bogus"}) {
    v1::EvaluateResult r;
    StageOutcome s = CorrectRun(r);
    v1::Timing ref = QuartileTiming(4.0);
    ref.set_source(said);
    *s.report->mutable_candidate_timing() = QuartileTiming(2.0);
    *s.report->mutable_reference_timing() = ref;
    ApplyRunStage(s, r);
    EXPECT_EQ(r.reference_timing().source(), said == "cache" ? "cache" : "live") << said;
    EXPECT_TRUE(r.candidate_timing().source().empty());
    EXPECT_DOUBLE_EQ(r.speedup(), 2.0);
  }
}

// A report without a lower quartile on one side (a harness that did not
// time that side) gets no speedup rather than one from another figure.
TEST(ResultMapperTest, NoSpeedupWithoutBothLowerQuartiles) {
  v1::EvaluateResult r;
  StageOutcome s = CorrectRun(r);
  v1::Timing ref;
  ref.set_median_ms(5.0);
  *s.report->mutable_candidate_timing() = QuartileTiming(2.0);
  *s.report->mutable_reference_timing() = ref;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::CORRECT);
  EXPECT_DOUBLE_EQ(r.speedup(), 0.0);
}

TEST(ResultMapperTest, RunOkWithoutTimingsHasNoSpeedup) {
  v1::EvaluateResult r;
  ApplyRunStage(CorrectRun(r), r);
  EXPECT_EQ(r.status(), v1::CORRECT);
  EXPECT_DOUBLE_EQ(r.speedup(), 0.0);
  EXPECT_FALSE(r.has_candidate_timing());
}

// A candidate can write a fake OK report to the result pipe; without the
// trials to back it, it is not believed.
TEST(ResultMapperTest, OkReportWithoutAllTrialsIsNotCorrect) {
  for (int trials : {0, 4}) {
    v1::EvaluateResult r;
    ApplyRunStage(CorrectRun(r, trials), r);
    EXPECT_EQ(r.status(), v1::RUNTIME_ERROR) << trials;
    EXPECT_EQ(r.runtime_error().type(), "ResultChannelTampering");
  }
  v1::EvaluateResult r;
  StageOutcome s = CorrectRun(r);
  s.report->mutable_trials(2)->set_passed(false);
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::RUNTIME_ERROR);
}

TEST(ResultMapperTest, RunOkCarriesPhysicalFloorAndTimingFields) {
  v1::EvaluateResult r;
  StageOutcome s = CorrectRun(r);
  *s.report->mutable_candidate_timing() = QuartileTiming(2.0);
  s.report->mutable_candidate_timing()->set_outside_median_ms(2.1);
  *s.report->mutable_reference_timing() = QuartileTiming(5.0);
  s.report->mutable_trials(0)->set_distribution("heavy-tailed");
  s.report->set_physical_floor_ms(0.25);
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::CORRECT);
  EXPECT_DOUBLE_EQ(r.physical_floor_ms(), 0.25);
  // Timing and TrialResult are copied as messages: their new fields come along.
  EXPECT_DOUBLE_EQ(r.candidate_timing().outside_median_ms(), 2.1);
  EXPECT_EQ(r.trials(0).distribution(), "heavy-tailed");
}

TEST(ResultMapperTest, PhysicalFloorOnlyBesideATimingAndOnlyWhenSane) {
  {  // No timing (performance not measured): no floor to compare with.
    v1::EvaluateResult r;
    StageOutcome s = CorrectRun(r);
    s.report->set_physical_floor_ms(0.25);
    ApplyRunStage(s, r);
    EXPECT_DOUBLE_EQ(r.physical_floor_ms(), 0.0);
  }
  {  // Not correct: no timing, no floor.
    StageOutcome s = Reported(v1::StageReport::INCORRECT, "trial 0 differs");
    s.report->add_trials()->set_passed(false);
    *s.report->mutable_candidate_timing() = QuartileTiming(1.0);
    *s.report->mutable_reference_timing() = QuartileTiming(1.0);
    s.report->set_physical_floor_ms(0.25);
    v1::EvaluateResult r;
    ApplyRunStage(s, r);
    EXPECT_DOUBLE_EQ(r.physical_floor_ms(), 0.0);
  }
  // A report shares a pipe with candidate code: a floor that is no time is dropped.
  for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    v1::EvaluateResult r;
    StageOutcome s = CorrectRun(r);
    *s.report->mutable_candidate_timing() = QuartileTiming(2.0);
    *s.report->mutable_reference_timing() = QuartileTiming(5.0);
    s.report->set_physical_floor_ms(bad);
    ApplyRunStage(s, r);
    EXPECT_EQ(r.status(), v1::CORRECT);
    EXPECT_DOUBLE_EQ(r.physical_floor_ms(), 0.0) << bad;
  }
}

TEST(ResultMapperTest, ZeroCandidateMedianGivesNoSpeedup) {
  v1::EvaluateResult r;
  StageOutcome s = CorrectRun(r);
  *s.report->mutable_candidate_timing() = QuartileTiming(0.0);
  *s.report->mutable_reference_timing() = QuartileTiming(5.0);
  ApplyRunStage(s, r);
  EXPECT_DOUBLE_EQ(r.speedup(), 0.0);
}

TEST(ResultMapperTest, IncorrectKeepsTrialsWithoutTiming) {
  StageOutcome s = Reported(v1::StageReport::INCORRECT, "trial 2 differs");
  s.report->add_trials()->set_passed(true);
  auto* failed = s.report->add_trials();
  failed->set_passed(false);
  failed->set_max_abs_diff(0.75);
  *s.report->mutable_candidate_timing() = QuartileTiming(1.0);
  *s.report->mutable_reference_timing() = QuartileTiming(1.0);
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::INCORRECT);
  ASSERT_EQ(r.trials_size(), 2);
  EXPECT_FALSE(r.trials(1).passed());
  EXPECT_DOUBLE_EQ(r.trials(1).max_abs_diff(), 0.75);
  EXPECT_FALSE(r.has_candidate_timing());
  EXPECT_DOUBLE_EQ(r.speedup(), 0.0);
}

TEST(ResultMapperTest, CandidateFailedCarriesError) {
  StageOutcome s = Reported(v1::StageReport::CANDIDATE_FAILED, "ValueError");
  s.report->mutable_error()->set_type("ValueError");
  s.report->mutable_error()->set_candidate_line(12);
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::RUNTIME_ERROR);
  EXPECT_EQ(r.runtime_error().type(), "ValueError");
  EXPECT_EQ(r.runtime_error().candidate_line(), 12u);
}

TEST(ResultMapperTest, ReferenceFailedIsReferenceError) {
  StageOutcome s = Reported(v1::StageReport::REFERENCE_FAILED, "reference raised");
  s.report->mutable_error()->set_type("RuntimeError");
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::REFERENCE_ERROR);
  EXPECT_EQ(r.runtime_error().type(), "RuntimeError");
}

TEST(ResultMapperTest, RunHarnessFailedIsInfraError) {
  v1::EvaluateResult r;
  StageOutcome s = Reported(v1::StageReport::HARNESS_FAILED,
                            "harness failed (judge, run_stage._init_cuda:530): RuntimeError: x");
  s.report->mutable_error()->set_type("RuntimeError");
  s.report->mutable_error()->set_traceback("RuntimeError: x\n");
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::INFRA_ERROR);
  // The result says which call failed and keeps the error for the client.
  EXPECT_NE(r.message().find("judge, run_stage._init_cuda"), std::string::npos) << r.message();
  EXPECT_EQ(r.runtime_error().type(), "RuntimeError");
  EXPECT_EQ(r.runtime_error().traceback(), "RuntimeError: x\n");
}

TEST(ResultMapperTest, RunCompileFailedIsCompileError) {
  StageOutcome s = Reported(v1::StageReport::COMPILE_FAILED);
  s.report->mutable_compile_log()->set_text("log");
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::COMPILE_ERROR);
  EXPECT_EQ(r.compile_log().text(), "log");
}

// ---- Rewardable ----

TEST(ResultMapperTest, RewardableOnlyWhenCorrect) {
  for (const v1::Status status : {v1::CORRECT, v1::INCORRECT, v1::RUNTIME_ERROR, v1::TIMEOUT,
                                  v1::INFRA_ERROR, v1::REFERENCE_ERROR, v1::REJECTED}) {
    v1::EvaluateResult r;
    r.set_status(status);
    r.set_rewardable(true);  // Stale value must be overwritten.
    FinalizeRewardable(r);
    EXPECT_EQ(r.rewardable(), status == v1::CORRECT) << v1::Status_Name(status);
  }
}

TEST(ResultMapperTest, RejectVerdictRemovesReward) {
  v1::EvaluateResult r;
  r.set_status(v1::CORRECT);
  r.add_verdicts()->set_severity(v1::Verdict::INFO);
  r.add_verdicts()->set_severity(v1::Verdict::REJECT);
  FinalizeRewardable(r);
  EXPECT_FALSE(r.rewardable());
}

TEST(ResultMapperTest, SuspiciousVerdictKeepsReward) {
  v1::EvaluateResult r;
  r.set_status(v1::CORRECT);
  r.add_verdicts()->set_severity(v1::Verdict::SUSPICIOUS);
  FinalizeRewardable(r);
  EXPECT_TRUE(r.rewardable());
}

// ---- Sanitising ----

TEST(ResultMapperTest, SanitizeKeepsValidTextNewlinesAndTabs) {
  const std::string text = "line 1\n\tcol\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe4\xb8\xad\n";
  EXPECT_EQ(SanitizeTail(text, 1000), text);
}

TEST(ResultMapperTest, SanitizeReplacesOverlongEncoding) {
  const std::string out = SanitizeTail("a\xc0\xaf" "b", 100);
  EXPECT_TRUE(IsValidUtf8(out));
  EXPECT_EQ(out.find('\xc0'), std::string::npos);
  EXPECT_EQ(out.front(), 'a');
  EXPECT_EQ(out.back(), 'b');
  EXPECT_NE(out.find(kReplacement), std::string::npos);
  EXPECT_EQ(out.find('/'), std::string::npos);  // Never decoded to the '/' it spells.
}

TEST(ResultMapperTest, SanitizeReplacesLoneSurrogate) {
  const std::string out = SanitizeTail("x\xed\xa0\x80y", 100);
  EXPECT_TRUE(IsValidUtf8(out)) << out;
  EXPECT_EQ(out.find("\xed\xa0"), std::string::npos);
  EXPECT_NE(out.find(kReplacement), std::string::npos);
  EXPECT_EQ(out.substr(0, 1), "x");
  EXPECT_EQ(out.back(), 'y');
}

TEST(ResultMapperTest, SanitizeReplacesTruncatedAndInvalidSequences) {
  for (const std::string& in : {std::string("ab\xe2\x82"), std::string("\xf0\x9f\x98"),
                               std::string("\x80\xbf"), std::string("\xf5\x80\x80\x80"),
                               std::string("\xf4\x90\x80\x80"), std::string("\xe2\x28\xa1"),
                               std::string("\xff\xfe")}) {
    const std::string out = SanitizeTail(in, 100);
    EXPECT_TRUE(IsValidUtf8(out)) << ::testing::PrintToString(in);
    EXPECT_NE(out.find(kReplacement), std::string::npos) << ::testing::PrintToString(in);
  }
}

TEST(ResultMapperTest, SanitizeReplacesControlCharacters) {
  const std::string out = SanitizeTail(std::string("a\x01" "b\x1b[31m\x7f" "c\0d", 12), 100);
  EXPECT_FALSE(HasControlChars(out)) << ::testing::PrintToString(out);
  EXPECT_EQ(out, "a?b?[31m?c?d");
}

TEST(ResultMapperTest, SanitizeTurnsCarriageReturnIntoNewline) {
  EXPECT_EQ(SanitizeTail("progress 10%\rprogress 20%\r\n", 100),
            "progress 10%\nprogress 20%\n\n");
}

TEST(ResultMapperTest, SanitizeKeepsTheEnd) {
  EXPECT_EQ(SanitizeTail("0123456789", 4), "6789");
  EXPECT_EQ(SanitizeTail("0123456789", 10), "0123456789");
  EXPECT_EQ(SanitizeTail("0123456789", 0), "");
}

TEST(ResultMapperTest, SanitizeCutInsideMultibyteStaysValid) {
  // The cut lands on the continuation bytes of a 3-byte character.
  const std::string out = SanitizeTail("\xe2\x82\xac" "abc", 5);
  EXPECT_TRUE(IsValidUtf8(out));
  EXPECT_TRUE(out.ends_with("abc"));
}

TEST(ResultMapperTest, SanitizeResultTextCleansEveryTextField) {
  v1::EvaluateResult r;
  r.set_message("bad\xff");
  r.mutable_compile_log()->set_text("log\x01");
  r.mutable_runtime_error()->set_type("T\xc0");
  r.mutable_runtime_error()->set_message("m\x1b");
  r.mutable_runtime_error()->set_traceback("tb\xed\xa0\x80");
  r.add_trials()->set_failure("f\x7f");
  r.set_output_tail(std::string(100, 'x') + "END");
  SanitizeResultText(r, 10);
  for (const std::string* text :
       {&r.message(), &r.compile_log().text(), &r.runtime_error().type(),
        &r.runtime_error().message(), &r.runtime_error().traceback(), &r.trials(0).failure(),
        &r.output_tail()}) {
    EXPECT_TRUE(IsValidUtf8(*text)) << ::testing::PrintToString(*text);
    EXPECT_FALSE(HasControlChars(*text)) << ::testing::PrintToString(*text);
  }
  EXPECT_EQ(r.output_tail(), "xxxxxxxEND");
  EXPECT_EQ(r.compile_log().text(), "log?");
  // The sanitised result now encodes (protobuf refuses invalid UTF-8 in strings).
  std::string wire;
  EXPECT_TRUE(r.SerializeToString(&wire));
}

TEST(ResultMapperTest, SanitizeResultTextDoesNotCreateAbsentMessages) {
  v1::EvaluateResult r;
  r.set_message("ok");
  SanitizeResultText(r, 100);
  EXPECT_FALSE(r.has_compile_log());
  EXPECT_FALSE(r.has_runtime_error());
}

// Replacement characters take three bytes; the bound still holds.
TEST(ResultMapperTest, SanitizeTailNeverExceedsTheBound) {
  for (size_t bound : {1u, 3u, 10u, 31u}) {
    EXPECT_LE(SanitizeTail(std::string(40, '\xff'), bound).size(), bound) << bound;
    // A cut through a multibyte character does not leave a fragment.
    const std::string out = SanitizeTail("\xc3\xa9\xc3\xa9\xc3\xa9", bound);
    EXPECT_LE(out.size(), bound);
    EXPECT_EQ(out.find(kReplacement), std::string::npos) << bound;
  }
}

// Jobs cut short by kboxd's shutdown are kbox's doing: retryable, never the
// candidate's fault, whatever party was running.
TEST(ResultMapperTest, CancelledStageIsInfraError) {
  for (v1::Party party : {v1::CANDIDATE, v1::REFERENCE, v1::HARNESS}) {
    v1::EvaluateResult compile, run;
    EXPECT_FALSE(ApplyCompileStage(Ended(End::kCancelled, party), compile));
    ApplyRunStage(Ended(End::kCancelled, party), run);
    EXPECT_EQ(compile.status(), v1::INFRA_ERROR);
    EXPECT_EQ(run.status(), v1::INFRA_ERROR);
    EXPECT_NE(run.message().find("shutting down"), std::string::npos) << run.message();
  }
}

// kbox-sandbox's seccomp listener names the call; the result carries it.
TEST(ResultMapperTest, SeccompKillOfCandidateIsSandboxViolationNamingTheCall) {
  StageOutcome s = Ended(End::kSignaled, v1::CANDIDATE);
  s.process.term_signal = SIGSYS;
  s.process.output_tail = "some output\nkbox-sandbox: killed: forbidden system call ptrace\n";
  v1::EvaluateResult r;
  ApplyRunStage(s, r);
  EXPECT_EQ(r.status(), v1::SANDBOX_VIOLATION);
  EXPECT_NE(r.message().find("forbids: ptrace"), std::string::npos) << r.message();
  // Without a name, the strict filter (process creation and exec only) killed it.
  StageOutcome strict = Ended(End::kSignaled, v1::CANDIDATE);
  strict.process.term_signal = SIGSYS;
  v1::EvaluateResult forked;
  ApplyRunStage(strict, forked);
  EXPECT_EQ(forked.status(), v1::SANDBOX_VIOLATION);
  EXPECT_NE(forked.message().find("create a process, run a program"), std::string::npos)
      << forked.message();
  // The same kill while kbox's harness ran is a policy gap, never the candidate's.
  s.last_party = v1::HARNESS;
  v1::EvaluateResult infra;
  ApplyRunStage(s, infra);
  EXPECT_EQ(infra.status(), v1::INFRA_ERROR);
}

}  // namespace
}  // namespace kbox
