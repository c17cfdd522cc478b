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

// ---- sources the static pass deferred, checked on the compile report ----------------

// A CUDA candidate whose sources reach load_inline through a helper's
// parameters: the static pass reads neither, so it asks the compile stage.
constexpr std::string_view kHelperCuda =
    "import torch\n"
    "import torch.nn as nn\n"
    "from torch.utils.cpp_extension import load_inline\n"
    "\n"
    "\n"
    "def build(name, cpp, cuda):\n"
    "    return load_inline(name=name, cpp_sources=cpp, cuda_sources=cuda, functions=[\"relu\"])\n"
    "\n"
    "\n"
    "ext = build(\"relu_ext\", open_cpp(), open_cuda())\n"
    "\n"
    "\n"
    "class ModelNew(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return ext.relu(x)\n";
constexpr uint32_t kHelperCallLine = 7;  // `return load_inline(`.

constexpr std::string_view kReluCuda =
    "#include <torch/extension.h>\n"
    "__global__ void relu_kernel(const float* x, float* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n"
    "}\n"
    "torch::Tensor relu(torch::Tensor x) {\n"
    "  auto y = torch::empty_like(x);\n"
    "  int n = static_cast<int>(x.numel());\n"
    "  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
    "  return y;\n"
    "}\n";

// The same extension with the work done by cuBLAS.
constexpr std::string_view kCublasCuda =
    "#include <torch/extension.h>\n"
    "#include <cublas_v2.h>\n"
    "__global__ void relu_kernel(const float* x, float* y, int n) {}\n"
    "torch::Tensor relu(torch::Tensor x) {\n"
    "  auto y = torch::empty_like(x);\n"
    "  cublasHandle_t h;\n"
    "  cublasCreate(&h);\n"
    "  float one = 1.f, zero = 0.f;\n"
    "  cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, x.data_ptr<float>(), 1,\n"
    "              x.data_ptr<float>(), 1, &zero, y.data_ptr<float>(), 1);\n"
    "  relu_kernel<<<1, 1>>>(x.data_ptr<float>(), y.data_ptr<float>(), 0);\n"
    "  return y;\n"
    "}\n";

static_check::CheckInput HelperCudaInput() {
  static_check::CheckInput input;
  input.candidate_source = kHelperCuda;
  input.backend = static_check::TaskBackend::kCuda;
  return input;
}

const AnticheatProfile& StrictProfile() {
  static const AnticheatProfile strict = [] {
    auto loaded = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "strict");
    EXPECT_TRUE(loaded);
    return loaded ? *loaded : AnticheatProfile::Uniform("strict", Severity::kReject);
  }();
  return strict;
}

// A compile report with one load_inline call of kHelperCuda's helper.
v1::StageReport CompileReport(std::string_view cuda) {
  v1::StageReport report;
  report.set_outcome(v1::StageReport::OK);
  v1::ExtensionSources* call = report.add_extension_sources();
  call->set_kind("load_inline");
  call->set_name("relu_ext");
  call->set_line(kHelperCallLine);
  call->add_cpp_sources("torch::Tensor relu(torch::Tensor x);");
  call->add_cuda_sources(std::string(cuda));
  return report;
}

TEST(CompiledSourcesTest, TheStaticPassDefersTheHelpersSources) {
  const StaticPhase phase = RunStaticCheck(HelperCudaInput(), StrictProfile());
  EXPECT_FALSE(phase.report.rejected());
  ASSERT_EQ(phase.report.deferred.size(), 1u);
  EXPECT_EQ(phase.report.deferred[0].line, kHelperCallLine);
  // Under "off" no rule would read the sources: nothing to ask for.
  const StaticPhase off = RunStaticCheck(HelperCudaInput(), AnticheatProfile::Uniform("off", Severity::kOff));
  EXPECT_TRUE(off.report.deferred.empty());
}

TEST(CompiledSourcesTest, ReportedCublasIsRejectedUnderStrict) {
  const v1::StageReport report = CompileReport(kCublasCuda);
  const CheckReport read = CheckCompiledSources(HelperCudaInput(), &report, StrictProfile());
  ASSERT_TRUE(read.rejected());
  v1::EvaluateResult r;
  r.set_status(v1::STATUS_UNSPECIFIED);
  EXPECT_FALSE(ApplyCompiledSources(read, r));
  EXPECT_EQ(r.status(), v1::REJECTED);
  bool vendor = false;
  for (const v1::Verdict& v : r.verdicts()) {
    EXPECT_EQ(v.phase(), v1::PHASE_COMPILE);
    if (v.rule_id() != "cpp.vendor-library") continue;
    vendor = true;
    EXPECT_EQ(v.severity(), v1::Verdict::REJECT);
    EXPECT_EQ(v.line(), kHelperCallLine);  // The text has no line map: the call.
    EXPECT_NE(v.snippet().find("load_inline"), std::string::npos) << v.snippet();
  }
  EXPECT_TRUE(vendor) << r.DebugString();
  EXPECT_EQ(r.message().rfind("rejected by anti-cheat rule cpp.", 0), 0u) << r.message();
  EXPECT_NE(r.message().find("candidate.py:7"), std::string::npos) << r.message();
  FinalizeRewardable(r);
  EXPECT_FALSE(r.rewardable());
}

TEST(CompiledSourcesTest, HonestReportedTextGivesNoVerdict) {
  const v1::StageReport report = CompileReport(kReluCuda);
  const CheckReport read = CheckCompiledSources(HelperCudaInput(), &report, StrictProfile());
  EXPECT_TRUE(read.findings.empty());
  EXPECT_EQ(read.kernel_names, std::vector<std::string>{"relu_kernel"});
  v1::EvaluateResult r;
  r.set_status(v1::STATUS_UNSPECIFIED);
  EXPECT_TRUE(ApplyCompiledSources(read, r));
  EXPECT_EQ(r.verdicts_size(), 0);
  EXPECT_EQ(r.status(), v1::STATUS_UNSPECIFIED);
}

TEST(CompiledSourcesTest, DeferredCallWithNoReportedSourcesIsUnresolved) {
  v1::StageReport empty;
  empty.set_outcome(v1::StageReport::OK);
  const std::vector<const v1::StageReport*> reports{&empty, nullptr};
  for (const v1::StageReport* report : reports) {
    const CheckReport read = CheckCompiledSources(HelperCudaInput(), report, StrictProfile());
    v1::EvaluateResult r;
    EXPECT_FALSE(ApplyCompiledSources(read, r));
    EXPECT_EQ(r.status(), v1::REJECTED);
    ASSERT_GE(r.verdicts_size(), 1);
    EXPECT_EQ(r.verdicts(0).rule_id(), "py.unresolved-extension-source") << r.DebugString();
    EXPECT_EQ(r.verdicts(0).line(), kHelperCallLine);
    EXPECT_EQ(r.verdicts(0).phase(), v1::PHASE_COMPILE);
    EXPECT_EQ(r.message().rfind("rejected by anti-cheat rule py.unresolved-extension-source at candidate.py:7: ", 0),
              0u)
        << r.message();
  }
}

TEST(CompiledSourcesTest, TextTheHarnessLeftOutIsUnresolved) {
  v1::StageReport truncated = CompileReport(kReluCuda);
  truncated.mutable_extension_sources(0)->set_truncated(true);
  EXPECT_TRUE(CheckCompiledSources(HelperCudaInput(), &truncated, StrictProfile()).rejected());

  v1::StageReport unread = CompileReport(kReluCuda);
  unread.mutable_extension_sources(0)->add_unread_files("k.cu (outside the job's directories)");
  const auto reported = ReportedExtensionsOf(&unread);
  ASSERT_EQ(reported.size(), 1u);
  EXPECT_NE(reported[0].unread.find("k.cu"), std::string::npos);
  EXPECT_TRUE(CheckCompiledSources(HelperCudaInput(), &unread, StrictProfile()).rejected());

  // More text than the harness ever sends: not read, and so not vouched for.
  v1::StageReport huge = CompileReport(kReluCuda);
  huge.mutable_extension_sources(0)->add_cuda_sources(std::string(kMaxReportedSourceBytes, ' '));
  EXPECT_FALSE(ReportedExtensionsOf(&huge)[0].unread.empty());
  EXPECT_TRUE(CheckCompiledSources(HelperCudaInput(), &huge, StrictProfile()).rejected());

  // More calls than any compile stage makes: the rest are not read either.
  v1::StageReport many = CompileReport(kReluCuda);
  for (size_t k = 0; k < kMaxReportedCalls; ++k) *many.add_extension_sources() = many.extension_sources(0);
  const auto calls = ReportedExtensionsOf(&many);
  ASSERT_EQ(calls.size(), kMaxReportedCalls + 1);
  EXPECT_FALSE(calls.back().unread.empty());
  EXPECT_TRUE(CheckCompiledSources(HelperCudaInput(), &many, StrictProfile()).rejected());
}

TEST(CompiledSourcesTest, ReportedFlagsAreSplitAtTheirArgument) {
  v1::StageReport report = CompileReport(kReluCuda);
  report.mutable_extension_sources(0)->add_flags("extra_cflags=-O3");
  report.mutable_extension_sources(0)->add_flags("extra_cuda_cflags=--sysroot=/");
  const auto reported = ReportedExtensionsOf(&report);
  ASSERT_EQ(reported[0].flags.size(), 2u);
  EXPECT_EQ(reported[0].flags[1].first, "extra_cuda_cflags");
  EXPECT_EQ(reported[0].flags[1].second, "--sysroot=/");
  const CheckReport read = CheckCompiledSources(HelperCudaInput(), &report, StrictProfile());
  ASSERT_EQ(read.findings.size(), 1u);
  EXPECT_EQ(read.findings[0].rule_id, "cpp.include-path");
}

TEST(CompiledSourcesTest, TheRequestsOverridesGradeTheVerdicts) {
  auto lenient = StrictProfile().WithOverrides({{"cpp.vendor-library", Severity::kSuspicious}});
  ASSERT_TRUE(lenient);
  const v1::StageReport report = CompileReport(kCublasCuda);
  const CheckReport read = CheckCompiledSources(HelperCudaInput(), &report, *lenient);
  v1::EvaluateResult r;
  r.set_status(v1::STATUS_UNSPECIFIED);
  EXPECT_TRUE(ApplyCompiledSources(read, r)) << r.DebugString();
  ASSERT_GE(r.verdicts_size(), 1);
  for (const v1::Verdict& v : r.verdicts()) EXPECT_NE(v.severity(), v1::Verdict::REJECT) << v.DebugString();
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
