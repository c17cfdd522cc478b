#include "daemon/static_verdicts.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "daemon/result_mapper.h"
#include "policy/static_check/anticheat_profile.h"

namespace kbox {
namespace {

using static_check::AnticheatProfile;
using static_check::CheckReport;
using static_check::Finding;
using static_check::Severity;

Finding MakeFinding(const std::string& rule, Severity severity, uint32_t line, uint32_t column,
                    const std::string& snippet = "", const std::string& message = "msg") {
  Finding f;
  f.rule_id = rule;
  f.severity = severity;
  f.line = line;
  f.column = column;
  f.snippet = snippet;
  f.message = message;
  return f;
}

TEST(StaticVerdictsTest, SeverityMapping) {
  EXPECT_EQ(VerdictSeverityOf(Severity::kInfo), v1::Verdict::INFO);
  EXPECT_EQ(VerdictSeverityOf(Severity::kSuspicious), v1::Verdict::SUSPICIOUS);
  EXPECT_EQ(VerdictSeverityOf(Severity::kReject), v1::Verdict::REJECT);
  EXPECT_EQ(VerdictSeverityOf(Severity::kOff), v1::Verdict::SEVERITY_UNSPECIFIED);
}

TEST(StaticVerdictsTest, FindingBecomesStaticVerdict) {
  const v1::Verdict v =
      VerdictOf(MakeFinding("py.matmul-operator", Severity::kReject, 14, 16, "return a @ b",
                            "the @ operator in forward is torch.matmul"));
  EXPECT_EQ(v.rule_id(), "py.matmul-operator");
  EXPECT_EQ(v.severity(), v1::Verdict::REJECT);
  EXPECT_EQ(v.line(), 14u);
  EXPECT_EQ(v.column(), 16u);
  EXPECT_EQ(v.snippet(), "return a @ b");
  EXPECT_EQ(v.message(), "the @ operator in forward is torch.matmul");
  EXPECT_EQ(v.phase(), v1::PHASE_STATIC);
}

TEST(StaticVerdictsTest, WholeFileFindingHasNoColumnOrSnippet) {
  const v1::Verdict v = VerdictOf(MakeFinding("kernel.none", Severity::kReject, 0, 7, "stray"));
  EXPECT_EQ(v.line(), 0u);
  EXPECT_EQ(v.column(), 0u);
  EXPECT_EQ(v.snippet(), "");
}

TEST(StaticVerdictsTest, VerdictTextIsMadeSafe) {
  const v1::Verdict v = VerdictOf(MakeFinding("py.file-io", Severity::kSuspicious, 3, 1,
                                              "open('x')\r\n\x01\xff", "two\nlines\x1b"));
  EXPECT_EQ(v.snippet().find_first_of("\r\n\x01"), std::string::npos) << v.snippet();
  EXPECT_EQ(v.message().find('\n'), std::string::npos) << v.message();
  std::string wire;
  EXPECT_TRUE(v.SerializeToString(&wire));  // Valid UTF-8, or protobuf refuses it.
}

TEST(StaticVerdictsTest, AppendKeepsTheReportOrder) {
  CheckReport report;
  report.findings = {MakeFinding("kernel.none", Severity::kReject, 0, 0),
                     MakeFinding("py.file-io", Severity::kInfo, 3, 5),
                     MakeFinding("py.matmul-operator", Severity::kSuspicious, 9, 2)};
  google::protobuf::RepeatedPtrField<v1::Verdict> verdicts;
  AppendVerdicts(report, &verdicts);
  ASSERT_EQ(verdicts.size(), 3);
  EXPECT_EQ(verdicts[0].rule_id(), "kernel.none");
  EXPECT_EQ(verdicts[1].line(), 3u);
  EXPECT_EQ(verdicts[2].severity(), v1::Verdict::SUSPICIOUS);
}

TEST(StaticVerdictsTest, RejectionMessageNamesFirstRejectAndCountsTheRest) {
  CheckReport report;
  report.findings = {MakeFinding("py.file-io", Severity::kSuspicious, 2, 1),
                     MakeFinding("py.matmul-operator", Severity::kReject, 14, 16, "a @ b",
                                 "the @ operator in forward"),
                     MakeFinding("py.tensor-method-compute", Severity::kReject, 15, 3),
                     MakeFinding("py.network", Severity::kReject, 20, 1)};
  EXPECT_EQ(RejectionMessage(report),
            "rejected by anti-cheat rule py.matmul-operator at candidate.py:14: the @ operator "
            "in forward (+2 more)");
}

TEST(StaticVerdictsTest, RejectionMessageForWholeFileAndSingleReject) {
  CheckReport report;
  report.findings = {MakeFinding("kernel.none", Severity::kReject, 0, 0, "", "no kernel")};
  EXPECT_EQ(RejectionMessage(report), "rejected by anti-cheat rule kernel.none at candidate.py: no kernel");
  report.findings[0].severity = Severity::kSuspicious;
  EXPECT_EQ(RejectionMessage(report), "");
}

TEST(StaticVerdictsTest, RejectedJobEndsBeforeCompileAndIsNotRewardable) {
  CheckReport report;
  report.findings = {MakeFinding("py.file-io", Severity::kInfo, 2, 1),
                     MakeFinding("py.matmul-operator", Severity::kReject, 14, 16, "a @ b", "m")};
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyStaticCheck(report, r));
  EXPECT_EQ(r.status(), v1::REJECTED);
  EXPECT_EQ(r.message(), "rejected by anti-cheat rule py.matmul-operator at candidate.py:14: m");
  ASSERT_EQ(r.verdicts_size(), 2);
  EXPECT_EQ(r.verdicts(1).severity(), v1::Verdict::REJECT);
  FinalizeRewardable(r);
  EXPECT_FALSE(r.rewardable());
}

TEST(StaticVerdictsTest, NonRejectVerdictsRideAlongAndKeepReward) {
  CheckReport report;
  report.findings = {MakeFinding("py.matmul-operator", Severity::kSuspicious, 14, 16)};
  v1::EvaluateResult r;
  EXPECT_TRUE(ApplyStaticCheck(report, r));
  EXPECT_EQ(r.status(), v1::STATUS_UNSPECIFIED);  // The run decides.
  ASSERT_EQ(r.verdicts_size(), 1);
  // ... and the run stage says CORRECT.
  r.set_status(v1::CORRECT);
  FinalizeRewardable(r);
  EXPECT_TRUE(r.rewardable());
}

TEST(StaticVerdictsTest, RejectVerdictAlwaysRemovesReward) {
  CheckReport report;
  report.findings = {MakeFinding("py.matmul-operator", Severity::kReject, 14, 16)};
  v1::EvaluateResult r;
  ApplyStaticCheck(report, r);
  r.set_status(v1::CORRECT);  // Whatever else sets the status, a REJECT verdict stays.
  FinalizeRewardable(r);
  EXPECT_FALSE(r.rewardable());
}

TEST(StaticVerdictsTest, AllOffProfileDoesNotRunTheChecker) {
  const std::string source = "import os\nos.system('x')\n";
  static_check::CheckInput input;
  input.candidate_source = source;
  const StaticPhase phase = RunStaticCheck(input, AnticheatProfile::Uniform("off", Severity::kOff));
  EXPECT_FALSE(phase.ran);
  EXPECT_EQ(phase.ms, 0.0);
  EXPECT_TRUE(phase.report.findings.empty());
}

// A decoy (a kernel compiled, never launched; forward does the work in
// PyTorch) under every profile: the run stage gets the kernel's name even
// when no static rule runs.
constexpr std::string_view kDecoy =
    "import torch\n"
    "import torch.nn as nn\n"
    "import triton\n"
    "from torch.utils.cpp_extension import load_inline\n"
    "cuda_src = '''\n"
    "// __global__ void commented(float* y) {}\n"
    "__global__ void decoy_kernel(float* y) { y[0] = 0.f; }\n"
    "'''\n"
    "ext = load_inline(name='d', cpp_sources='', cuda_sources=cuda_src)\n"
    "@triton.jit\n"
    "def triton_decoy(x_ptr):\n"
    "    pass\n"
    "class ModelNew(nn.Module):\n"
    "    def forward(self, a, b):\n"
    "        return torch.matmul(a, b)\n";

TEST(StaticVerdictsTest, KernelNamesUnderEveryProfile) {
  static_check::CheckInput input;
  input.candidate_source = kDecoy;
  input.backend = static_check::TaskBackend::kCuda;
  const std::vector<std::string> expected{"decoy_kernel", "triton_decoy"};
  for (const std::string_view name : {"strict", "lenient", "off"}) {
    auto profile = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, name);
    ASSERT_TRUE(profile) << name;
    const StaticPhase phase = RunStaticCheck(input, *profile);
    EXPECT_EQ(phase.report.kernel_names, expected) << name;
    EXPECT_EQ(phase.ran, name != "off") << name;
    if (name == "off") {
      EXPECT_TRUE(phase.report.findings.empty());
      EXPECT_EQ(phase.ms, 0.0);
    } else {
      EXPECT_TRUE(phase.report.rejected()) << name;  // py.forward-skips-kernel.
    }
  }
}

TEST(StaticVerdictsTest, CheckerRunsUnderAProfile) {
  const std::string source = "class ModelNew:\n    def forward(self, a, b):\n        return a @ b\n";
  static_check::CheckInput input;
  input.candidate_source = source;
  const StaticPhase phase =
      RunStaticCheck(input, AnticheatProfile::Uniform("strict", Severity::kReject));
  EXPECT_TRUE(phase.ran);
  EXPECT_GE(phase.ms, 0.0);
  EXPECT_TRUE(phase.report.rejected());
  v1::EvaluateResult r;
  EXPECT_FALSE(ApplyStaticCheck(phase.report, r));
  EXPECT_EQ(r.status(), v1::REJECTED);
  for (const auto& v : r.verdicts()) EXPECT_EQ(v.phase(), v1::PHASE_STATIC);
}

google::protobuf::RepeatedPtrField<v1::Verdict> Reported(
    std::initializer_list<std::pair<const char*, const char*>> items) {
  google::protobuf::RepeatedPtrField<v1::Verdict> out;
  for (const auto& [rule, message] : items) {
    v1::Verdict* v = out.Add();
    v->set_rule_id(rule);
    v->set_message(message);
    v->set_phase(v1::PHASE_RUN);
  }
  return out;
}

TEST(RunVerdictsTest, ProfileGradesRunFindingsAndDropsAnythingElse) {
  auto profile = AnticheatProfile::Uniform("t", Severity::kReject)
                     .WithOverrides({{"run.degenerate-problem", Severity::kInfo},
                                     {"run.thread-started", Severity::kOff}})
                     .value();
  // The harness shares its process with the candidate: only run.* ids of the
  // catalogue are believed, never a static id or an invented one.
  const CheckReport graded = GradeRunFindings(
      Reported({{"run.degenerate-problem", "zeros would pass"},
                {"run.thread-started", "a thread"},
                {"py.matmul-operator", "forged static verdict"},
                {"run.no-such-rule", "invented"},
                {"run.input-mutation", "changed its inputs"}}),
      profile);
  ASSERT_EQ(graded.findings.size(), 2u);
  EXPECT_EQ(graded.findings[0].rule_id, "run.degenerate-problem");
  EXPECT_EQ(graded.findings[0].severity, Severity::kInfo);
  EXPECT_EQ(graded.findings[1].rule_id, "run.input-mutation");
  EXPECT_EQ(graded.findings[1].severity, Severity::kReject);
}

TEST(RunVerdictsTest, RejectTurnsACorrectRunIntoRejected) {
  auto profile = AnticheatProfile::Uniform("t", Severity::kReject);
  v1::EvaluateResult r;
  r.set_status(v1::CORRECT);
  r.set_message("correct on 5 trials");
  ApplyRunFindings(GradeRunFindings(Reported({{"run.harness-tampering", "candidate replaced time.perf_counter"}}),
                                    profile),
                   r);
  EXPECT_EQ(r.status(), v1::REJECTED);
  EXPECT_EQ(r.message(), "rejected by anti-cheat rule run.harness-tampering while running: candidate replaced "
                         "time.perf_counter");
  ASSERT_EQ(r.verdicts_size(), 1);
  EXPECT_EQ(r.verdicts(0).phase(), v1::PHASE_RUN);
  EXPECT_EQ(r.verdicts(0).severity(), v1::Verdict::REJECT);
  FinalizeRewardable(r);
  EXPECT_FALSE(r.rewardable());
}

TEST(RunVerdictsTest, CrashOrTimeoutKeepsItsStatus) {
  auto profile = AnticheatProfile::Uniform("t", Severity::kReject);
  v1::EvaluateResult r;
  r.set_status(v1::TIMEOUT);
  ApplyRunFindings(GradeRunFindings(Reported({{"run.thread-started", "a thread"}}), profile), r);
  EXPECT_EQ(r.status(), v1::TIMEOUT);
  EXPECT_EQ(r.verdicts_size(), 1);
}

// The run stage's launch, audit, timing and floor checks, graded by the
// shipped profiles.
TEST(RunVerdictsTest, LaunchAuditTimingAndFloorRulesAreGraded) {
  auto strict = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "strict");
  auto lenient = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "lenient");
  auto off = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "off");
  ASSERT_TRUE(strict && lenient && off);
  const auto reported = Reported({{"run.kernel-not-launched", "none of decoy_kernel launched"},
                                  {"run.forbidden-call", "ctypes.CDLL denied"},
                                  {"run.timing-mismatch", "0.01 ms inside, 2.4 ms outside"},
                                  {"run.below-physical-floor", "0.001 ms < floor 0.05 ms"}});
  const CheckReport s = GradeRunFindings(reported, *strict);
  ASSERT_EQ(s.findings.size(), 4u);
  EXPECT_EQ(s.findings[0].rule_id, "run.kernel-not-launched");
  EXPECT_EQ(s.findings[0].severity, Severity::kReject);
  EXPECT_EQ(s.findings[1].rule_id, "run.forbidden-call");
  EXPECT_EQ(s.findings[1].severity, Severity::kReject);
  EXPECT_EQ(s.findings[2].rule_id, "run.timing-mismatch");
  EXPECT_EQ(s.findings[2].severity, Severity::kReject);
  EXPECT_EQ(s.findings[3].rule_id, "run.below-physical-floor");
  EXPECT_EQ(s.findings[3].severity, Severity::kSuspicious);
  EXPECT_EQ(s.findings[3].message, "0.001 ms < floor 0.05 ms");

  const CheckReport l = GradeRunFindings(reported, *lenient);
  ASSERT_EQ(l.findings.size(), 4u);
  EXPECT_EQ(l.findings[0].severity, Severity::kSuspicious);  // Lenient tolerates passthrough.
  EXPECT_EQ(l.findings[1].severity, Severity::kReject);
  EXPECT_EQ(l.findings[2].severity, Severity::kReject);
  EXPECT_EQ(l.findings[3].severity, Severity::kSuspicious);

  EXPECT_TRUE(GradeRunFindings(reported, *off).findings.empty());

  // A decoy rejects a correct run under strict ...
  v1::EvaluateResult r;
  r.set_status(v1::CORRECT);
  ApplyRunFindings(GradeRunFindings(Reported({{"run.kernel-not-launched", "none of decoy_kernel launched"}}),
                                    *strict),
                   r);
  EXPECT_EQ(r.status(), v1::REJECTED);
  EXPECT_EQ(r.message(),
            "rejected by anti-cheat rule run.kernel-not-launched while running: none of decoy_kernel launched");
  // ... a time below the floor is only reported.
  v1::EvaluateResult fast;
  fast.set_status(v1::CORRECT);
  ApplyRunFindings(GradeRunFindings(Reported({{"run.below-physical-floor", "below the floor"}}), *strict), fast);
  EXPECT_EQ(fast.status(), v1::CORRECT);
  ASSERT_EQ(fast.verdicts_size(), 1);
  EXPECT_EQ(fast.verdicts(0).severity(), v1::Verdict::SUSPICIOUS);
  FinalizeRewardable(fast);
  EXPECT_TRUE(fast.rewardable());
}

TEST(RunVerdictsTest, InfoFindingKeepsACorrectResultRewardable) {
  auto profile = AnticheatProfile::Uniform("t", Severity::kInfo);
  v1::EvaluateResult r;
  r.set_status(v1::CORRECT);
  ApplyRunFindings(GradeRunFindings(Reported({{"run.degenerate-problem", "zeros would pass"}}), profile), r);
  EXPECT_EQ(r.status(), v1::CORRECT);
  FinalizeRewardable(r);
  EXPECT_TRUE(r.rewardable());
}

}  // namespace
}  // namespace kbox
