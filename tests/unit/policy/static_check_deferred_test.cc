// C++ the static pass cannot read as text (a source through a helper's
// parameter, built in a loop, read from a dict, returned by a call, files
// named to load(), arguments unpacked from a container) is deferred, not
// rejected: the compile stage reports the strings the call really received,
// and CheckReportedExtensions runs the C++ rules on them. What neither pass
// can read stays py.unresolved-extension-source.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/static_checker.h"

namespace kbox::static_check {
namespace {

const AnticheatProfile& Strict() {
  static const AnticheatProfile profile = [] {
    auto loaded = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "strict");
    if (!loaded) {
      ADD_FAILURE() << "strict profile: " << loaded.error().field << ": " << loaded.error().message;
      return AnticheatProfile::Uniform("all", Severity::kReject);
    }
    return *loaded;
  }();
  return profile;
}

// 1-based line of the first line of `source` holding `text`; 0 when none does.
uint32_t LineOf(std::string_view source, std::string_view text) {
  const size_t at = source.find(text);
  if (at == std::string_view::npos) return 0;
  return static_cast<uint32_t>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1);
}

std::string Describe(const CheckReport& r) {
  std::string out;
  for (const Finding& f : r.findings) {
    out += "  " + f.rule_id + " [" + std::string(SeverityName(f.severity)) + "] line " + std::to_string(f.line) +
           ": " + f.message + "\n";
  }
  return out;
}

const Finding* FindingOf(const CheckReport& r, std::string_view rule) {
  for (const Finding& f : r.findings) {
    if (f.rule_id == rule) return &f;
  }
  return nullptr;
}

bool Rejects(const CheckReport& r) { return r.rejected(); }

CheckReport Static(const std::string& source, TaskBackend backend = TaskBackend::kCpu) {
  return Check(CheckInput{source, {}, backend, TaskPrecision::kFp32}, Strict());
}

CheckReport AfterCompile(const std::string& source, const std::vector<ReportedExtension>& reported,
                         TaskBackend backend = TaskBackend::kCpu,
                         const AnticheatProfile& profile = Strict()) {
  return CheckReportedExtensions(CheckInput{source, {}, backend, TaskPrecision::kFp32}, reported, profile);
}

// The C++ of an honest CPU relu; `body` is its loop.
std::string CpuSource(std::string_view body = "for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;") {
  return "#include <torch/extension.h>\n"
         "torch::Tensor relu(torch::Tensor x) {\n"
         "  auto y = torch::empty_like(x);\n"
         "  const float* in = x.data_ptr<float>();\n"
         "  float* out = y.data_ptr<float>();\n"
         "  const int64_t n = x.numel();\n"
         "  " +
         std::string(body) +
         "\n"
         "  return y;\n"
         "}\n";
}

// A CPU candidate whose source reaches load_inline through a helper's
// parameter; `source` is the module-level literal CPP_SRC.
std::string HelperParameterCpu(const std::string& source = CpuSource(),
                               const std::string& args = "name=name, cpp_sources=source, functions=[\"relu\"]") {
  return "import torch\n"
         "import torch.nn as nn\n"
         "from torch.utils.cpp_extension import load_inline\n"
         "\n"
         "CPP_SRC = r\"\"\"" +
         source +
         "\"\"\"\n"
         "\n"
         "\n"
         "def build(name, source):\n"
         "    return load_inline(" + args + ")\n"
         "\n"
         "\n"
         "ext = build(\"relu_cpu\", CPP_SRC)\n"
         "\n"
         "\n"
         "class ModelNew(nn.Module):\n"
         "    def forward(self, x):\n"
         "        return ext.relu(x)\n";
}

constexpr std::string_view kCall = "return load_inline(";

ReportedExtension Reported(const std::string& source, std::vector<std::string> cpp,
                           std::vector<std::string> cuda = {}) {
  ReportedExtension r;
  r.name = "relu_cpu";
  r.line = LineOf(source, kCall);
  r.cpp_sources = std::move(cpp);
  r.cuda_sources = std::move(cuda);
  return r;
}

// ---- the static pass -----------------------------------------------------------

TEST(DeferredSourceTest, SourceThroughAHelpersParameterIsDeferredNotRejected) {
  const std::string src = HelperParameterCpu();
  const CheckReport r = Static(src);
  EXPECT_FALSE(Rejects(r)) << Describe(r);
  EXPECT_EQ(FindingOf(r, "py.unresolved-extension-source"), nullptr) << Describe(r);
  ASSERT_EQ(r.deferred.size(), 1u);
  const DeferredCall& d = r.deferred[0];
  EXPECT_EQ(d.line, LineOf(src, kCall));
  EXPECT_EQ(d.last_line, d.line);
  EXPECT_EQ(d.column, 12u);  // `load_inline` after "    return ".
  EXPECT_NE(d.reason.find("cpp_sources"), std::string::npos) << d.reason;
}

TEST(DeferredSourceTest, EveryUnreadableShapeIsDeferred) {
  const std::string pre =
      "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline, load\n";
  const std::string post = "\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)\n";
  const std::vector<std::pair<std::string, std::string>> shapes = {
      {"Loop", "PARTS = [\"torch::Tensor relu(\", \"torch::Tensor x);\"]\nsrc = \"\"\nfor p in PARTS:\n"
               "    src += p\next = load_inline(name=\"e\", cpp_sources=src, functions=[\"relu\"])"},
      {"Rebound", "src = \"torch::Tensor relu(torch::Tensor x);\"\n"
                  "ext = load_inline(name=\"e\", cpp_sources=src, functions=[\"relu\"])\n"
                  "src = \"int other;\""},
      {"Dict", "SOURCES = {\"cpp\": \"torch::Tensor relu(torch::Tensor x);\"}\n"
               "ext = load_inline(name=\"e\", cpp_sources=SOURCES[\"cpp\"], functions=[\"relu\"])"},
      {"Call", "def make():\n    return \"torch::Tensor relu(torch::Tensor x);\"\n"
               "ext = load_inline(name=\"e\", cpp_sources=make(), functions=[\"relu\"])"},
      {"LoadFiles", "ext = load(name=\"e\", sources=[\"relu.cpp\"])"},
      {"Unpacked", "OPTS = dict(name=\"e\", cpp_sources=\"torch::Tensor relu(torch::Tensor x);\")\n"
                   "ext = load_inline(**OPTS)"},
      {"Flags", "def build(flags):\n"
                "    return load_inline(name=\"e\", cpp_sources=\"int relu();\", extra_cflags=flags)\n"
                "ext = build([\"-O3\"])"},
  };
  for (const auto& [name, body] : shapes) {
    const std::string src = pre + body + post;
    const CheckReport r = Static(src);
    EXPECT_EQ(r.deferred.size(), 1u) << name << "\n" << src;
    EXPECT_EQ(FindingOf(r, "py.unresolved-extension-source"), nullptr) << name << "\n" << Describe(r);
  }
}

TEST(DeferredSourceTest, FullyResolvableSourcesAreNotDeferred) {
  // A literal through a name, a helper building a module-level literal, a
  // .format template: the static pass reads them all.
  const std::string helper_literal =
      "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
      "CPP_SRC = r\"\"\"" +
      CpuSource() +
      "\"\"\"\n"
      "def build():\n    return load_inline(name=\"relu_cpu\", cpp_sources=CPP_SRC, functions=[\"relu\"])\n"
      "ext = build()\n"
      "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)\n";
  const CheckReport r = Static(helper_literal);
  EXPECT_TRUE(r.deferred.empty()) << r.deferred.front().reason;
  EXPECT_FALSE(Rejects(r)) << Describe(r);

  const std::string format =
      "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
      "T = \"torch::Tensor relu(torch::Tensor x) {{ return x.clone(); }} // {n}\"\n"
      "ext = load_inline(name=\"e\", cpp_sources=T.format(n=1), functions=[\"relu\"], extra_cflags=[\"-O3\"])\n"
      "class ModelNew(nn.Module):\n    def forward(self, x):\n        return ext.relu(x)\n";
  EXPECT_TRUE(Static(format).deferred.empty());
}

TEST(DeferredSourceTest, KernelNoneWaitsForTheReportedSources) {
  // On cuda every kernel is in the deferred source: no kernel.none before the compile.
  const std::string src = HelperParameterCpu();
  const CheckReport r = Static(src, TaskBackend::kCuda);
  EXPECT_EQ(FindingOf(r, "kernel.none"), nullptr) << Describe(r);
  ASSERT_EQ(r.deferred.size(), 1u);

  const std::string cuda =
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
  const CheckReport launched = AfterCompile(src, {Reported(src, {"torch::Tensor relu(torch::Tensor x);"}, {cuda})},
                                            TaskBackend::kCuda);
  EXPECT_TRUE(launched.findings.empty()) << Describe(launched);
  EXPECT_EQ(launched.kernel_names, std::vector<std::string>{"relu_kernel"});

  // The reported sources hold no kernel: kernel.none after all.
  const CheckReport none = AfterCompile(src, {Reported(src, {CpuSource()})}, TaskBackend::kCuda);
  ASSERT_NE(FindingOf(none, "kernel.none"), nullptr) << Describe(none);
  EXPECT_TRUE(Rejects(none));
}

// ---- after the compile --------------------------------------------------------------

TEST(DeferredSourceTest, HonestReportedTextGivesNoFinding) {
  const std::string src = HelperParameterCpu();
  const CheckReport r = AfterCompile(src, {Reported(src, {CpuSource()})});
  EXPECT_TRUE(r.findings.empty()) << Describe(r);
  EXPECT_TRUE(r.deferred.empty());
}

TEST(DeferredSourceTest, FindingInVerbatimTextSitsOnItsCandidateLine) {
  const std::string cpp = CpuSource("auto z = at::matmul(x, x); (void)z;");
  const std::string src = HelperParameterCpu(cpp);
  const CheckReport r = AfterCompile(src, {Reported(src, {cpp})});
  const Finding* f = FindingOf(r, "cpp.aten-compute");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->severity, Severity::kReject);
  EXPECT_EQ(f->line, LineOf(src, "at::matmul"));
  EXPECT_NE(f->snippet.find("at::matmul"), std::string::npos) << f->snippet;
}

TEST(DeferredSourceTest, FindingInTextWithoutALineMapSitsOnTheCall) {
  const std::string src = HelperParameterCpu();
  // Not in candidate.py as such (built at run time).
  const std::string cpp = CpuSource("auto z = at::" + std::string("matmul(x, x); (void)z;"));
  const std::string real = cpp + "// built at import time\n";
  const CheckReport r = AfterCompile(src, {Reported(src, {real})});
  const Finding* f = FindingOf(r, "cpp.aten-compute");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->line, LineOf(src, kCall));
  EXPECT_EQ(f->column, 12u);
  EXPECT_TRUE(Rejects(r));
}

TEST(DeferredSourceTest, DeferredCallWithNothingReportedIsUnresolved) {
  const std::string src = HelperParameterCpu();
  const CheckReport r = AfterCompile(src, {});
  const Finding* f = FindingOf(r, "py.unresolved-extension-source");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->severity, Severity::kReject);
  EXPECT_EQ(f->line, LineOf(src, kCall));
  EXPECT_NE(f->message.find("reported no sources"), std::string::npos) << f->message;

  // A call reported from elsewhere (another line) does not answer for it.
  ReportedExtension elsewhere = Reported(src, {CpuSource()});
  elsewhere.line = LineOf(src, "class ModelNew");
  EXPECT_NE(FindingOf(AfterCompile(src, {elsewhere}), "py.unresolved-extension-source"), nullptr);
}

TEST(DeferredSourceTest, SomethingUnreadIsUnresolved) {
  const std::string src = HelperParameterCpu();
  ReportedExtension r = Reported(src, {CpuSource()});
  r.unread = "load() named files kbox did not read: k.cu (outside the job's directories)";
  const CheckReport report = AfterCompile(src, {r});
  const Finding* f = FindingOf(report, "py.unresolved-extension-source");
  ASSERT_NE(f, nullptr) << Describe(report);
  EXPECT_NE(f->message.find("k.cu"), std::string::npos) << f->message;
}

TEST(DeferredSourceTest, ReportedFlagsThatReadHostFilesAreIncludePath) {
  const std::string src = HelperParameterCpu();
  ReportedExtension r = Reported(src, {CpuSource()});
  r.flags = {{"extra_cflags", "-O3"}, {"extra_cflags", "-include/etc/passwd"}};
  const CheckReport report = AfterCompile(src, {r});
  const Finding* f = FindingOf(report, "cpp.include-path");
  ASSERT_NE(f, nullptr) << Describe(report);
  EXPECT_EQ(f->line, LineOf(src, kCall));
  r.flags = {{"extra_cflags", "-O3"}};
  EXPECT_TRUE(AfterCompile(src, {r}).findings.empty());
}

TEST(DeferredSourceTest, TextTheStaticPassReadIsNotCheckedAgain) {
  // cpp_sources is literal (read, and its at::matmul found, before the
  // compile); cuda_sources comes through the parameter.
  const std::string cpp = CpuSource("auto z = at::matmul(x, x); (void)z;");
  const std::string src =
      HelperParameterCpu(cpp, "name=name, cpp_sources=CPP_SRC, cuda_sources=source, functions=[\"relu\"]");
  ASSERT_EQ(Static(src).deferred.size(), 1u);
  ASSERT_NE(FindingOf(Static(src), "cpp.aten-compute"), nullptr);
  const CheckReport r = AfterCompile(src, {Reported(src, {cpp}, {"// the cuda part\n"})});
  EXPECT_EQ(FindingOf(r, "cpp.aten-compute"), nullptr) << Describe(r);
}

TEST(DeferredSourceTest, TheRequestsProfileGradesTheFindings) {
  const std::string src = HelperParameterCpu();
  const std::string cpp = CpuSource("cblas_sgemm(0, 0, 0, 1, 1, 1, 1.f, in, 1, in, 1, 0.f, out, 1);");
  auto lenient = AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "lenient");
  ASSERT_TRUE(lenient);
  const CheckReport strict = AfterCompile(src, {Reported(src, {cpp})});
  ASSERT_NE(FindingOf(strict, "cpp.vendor-library"), nullptr) << Describe(strict);
  EXPECT_TRUE(Rejects(strict));
  const CheckReport graded = AfterCompile(src, {Reported(src, {cpp})}, TaskBackend::kCpu, *lenient);
  ASSERT_NE(FindingOf(graded, "cpp.vendor-library"), nullptr) << Describe(graded);
  EXPECT_EQ(FindingOf(graded, "cpp.vendor-library")->severity, Severity::kSuspicious);
  EXPECT_FALSE(Rejects(graded));
  auto off = lenient->WithOverrides({{"cpp.vendor-library", Severity::kOff}});
  ASSERT_TRUE(off);
  EXPECT_TRUE(AfterCompile(src, {Reported(src, {cpp})}, TaskBackend::kCpu, *off).findings.empty());
}

}  // namespace
}  // namespace kbox::static_check
