// Per-rule tests of the static anti-cheat checker: for every rule of the
// catalogue, candidates where it must fire (at the right line of
// candidate.py) and honest look-alikes where it must not. Candidates are built
// from small honest templates (a CUDA, a CPU and a Triton kernel) with one
// thing changed, so a case shows exactly which pattern a rule answers.
//
// A case that exposes a checker bug stays written as it should pass and
// skips with "checker bug: ..." until the checker is fixed.

#include "policy/static_check/static_checker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/rule_catalog.h"

namespace kbox::static_check {
namespace {

using B = TaskBackend;
using P = TaskPrecision;

// ---- helpers -----------------------------------------------------------------

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

CheckReport CheckSource(std::string_view source, B backend = B::kCuda, P precision = P::kFp32,
                        std::string_view reference = {}) {
  return Check(CheckInput{source, reference, backend, precision}, Strict());
}

// The rule ids the strict profile reports for `source`, in report order.
std::vector<std::string> Findings(std::string_view source, B backend = B::kCuda, P precision = P::kFp32) {
  std::vector<std::string> ids;
  for (const Finding& f : CheckSource(source, backend, precision).findings) ids.push_back(f.rule_id);
  return ids;
}

bool HasRule(const CheckReport& report, std::string_view id) {
  return std::any_of(report.findings.begin(), report.findings.end(), [&](const Finding& f) { return f.rule_id == id; });
}
bool HasRule(const std::vector<std::string>& ids, std::string_view id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::vector<uint32_t> LinesOf(const CheckReport& report, std::string_view id) {
  std::vector<uint32_t> lines;
  for (const Finding& f : report.findings) {
    if (f.rule_id == id) lines.push_back(f.line);
  }
  return lines;
}

const Finding* FindingOf(const CheckReport& report, std::string_view id) {
  for (const Finding& f : report.findings) {
    if (f.rule_id == id) return &f;
  }
  return nullptr;
}

// Every finding, one a line, for failure messages.
std::string Describe(const CheckReport& report) {
  std::string s;
  for (const Finding& f : report.findings) {
    s += "  " + f.rule_id + " at " + std::to_string(f.line) + ":" + std::to_string(f.column) + " [" +
         std::string(SeverityName(f.severity)) + "] `" + f.snippet + "`: " + f.message + "\n";
  }
  return s.empty() ? std::string("  (no findings)\n") : s;
}

// 1-based line of the first occurrence of `needle` in `source`.
uint32_t LineOf(std::string_view source, std::string_view needle) {
  const size_t at = source.find(needle);
  if (at == std::string_view::npos) {
    ADD_FAILURE() << "`" << needle << "` is not in the candidate";
    return 0;
  }
  return static_cast<uint32_t>(std::count(source.begin(), source.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1);
}

// 1-based byte column of the first occurrence of `needle` in its line.
uint32_t ColumnOf(std::string_view source, std::string_view needle) {
  const size_t at = source.find(needle);
  if (at == std::string_view::npos) return 0;
  const size_t line_start = source.rfind('\n', at);
  return static_cast<uint32_t>(line_start == std::string_view::npos ? at + 1 : at - line_start);
}

// Puts `n` spaces before every non-empty line; every line ends with '\n'.
std::string Indent(std::string_view text, size_t n) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (!line.empty()) out.append(n, ' ').append(line);
    out += '\n';
    start = end + 1;
  }
  return out;
}

// ---- candidate templates -------------------------------------------------------

constexpr std::string_view kReluKernel =
    "__global__ void relu_kernel(const float* x, float* y, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n"
    "}\n";
constexpr std::string_view kReluLaunch =
    "relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n";

// An honest CUDA candidate: a relu kernel built with load_inline and called
// from ModelNew.forward. Each field replaces or extends one part of it; Python
// bodies are written unindented and indented here.
struct Cuda {
  std::string imports{};  // Module lines right after the standard imports.
  std::string kernel{kReluKernel};
  std::string device{};  // CUDA at namespace scope, after the kernel.
  std::string host{};    // Statements at the top of the host function relu().
  std::string launch{kReluLaunch};
  std::string cpp_def{"cpp_src = \"torch::Tensor relu(torch::Tensor x);\"\n"};
  std::string cpp_arg{"cpp_src"};
  std::string cuda_arg{"cuda_src"};
  std::string load_args{};  // Appended inside load_inline(...): ", extra_cflags=[...]".
  std::string module{};     // Module-level Python after the extension is built.
  std::string base{"nn.Module"};
  std::string init{};               // __init__ body after super().__init__().
  std::string forward_decorator{};  // Decorator lines of forward.
  std::string forward{};            // forward body before `ret`.
  std::string ret{"return ext.relu(x)"};
  std::string methods{};  // More ModelNew members.

  std::string Build() const {
    std::string s =
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch.utils.cpp_extension import load_inline\n";
    s += Indent(imports, 0);
    s += "\ncuda_src = r\"\"\"\n#include <torch/extension.h>\n\n";
    s += kernel;
    s += Indent(device, 0);
    s += "\ntorch::Tensor relu(torch::Tensor x) {\n";
    s += Indent(host, 2);
    s += "  auto y = torch::empty_like(x);\n  int n = static_cast<int>(x.numel());\n";
    s += Indent(launch, 2);
    s += "  return y;\n}\n\"\"\"\n\n";
    s += Indent(cpp_def, 0);
    s += "\next = load_inline(name=\"relu_ext\", cpp_sources=" + cpp_arg + ", cuda_sources=" + cuda_arg +
         ", functions=[\"relu\"]" + load_args + ")\n";
    s += Indent(module, 0);
    s += "\n\nclass ModelNew(" + base + "):\n    def __init__(self):\n        super().__init__()\n";
    s += Indent(init, 8);
    s += "\n" + Indent(forward_decorator, 4) + "    def forward(self, x):\n";
    s += Indent(forward, 8);
    s += Indent(ret, 8);
    if (!methods.empty()) s += "\n" + Indent(methods, 4);
    return s;
  }
};

// An honest CPU candidate: a C++ loop built with load_inline (cpp_sources only).
struct Cpu {
  std::string imports{};
  std::string cpp_top{};  // C++ at namespace scope, before relu().
  std::string loop{"for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;\n"};
  std::string load_args{};
  std::string forward{};
  std::string ret{"return ext.relu(x)"};

  std::string Build() const {
    std::string s =
        "import torch\n"
        "import torch.nn as nn\n"
        "from torch.utils.cpp_extension import load_inline\n";
    s += Indent(imports, 0);
    s += "\ncpp_src = r\"\"\"\n#include <torch/extension.h>\n";
    s += Indent(cpp_top, 0);
    s += "\ntorch::Tensor relu(torch::Tensor x) {\n"
         "  auto y = torch::empty_like(x);\n"
         "  const float* in = x.data_ptr<float>();\n"
         "  float* out = y.data_ptr<float>();\n"
         "  const int64_t n = x.numel();\n";
    s += Indent(loop, 2);
    s += "  return y;\n}\n\"\"\"\n\n";
    s += "ext = load_inline(name=\"relu_cpu\", cpp_sources=cpp_src, functions=[\"relu\"]" + load_args + ")\n";
    s += "\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n";
    s += "\n    def forward(self, x):\n";
    s += Indent(forward, 8);
    s += Indent(ret, 8);
    return s;
  }
};

// An honest Triton candidate: a @triton.jit kernel launched with
// kernel[grid](...) from a wrapper function that forward calls.
struct Triton {
  std::string imports{};
  std::string forward{};
  std::string ret{"return relu(x)"};

  std::string Build() const {
    std::string s =
        "import torch\n"
        "import torch.nn as nn\n"
        "import triton\n"
        "import triton.language as tl\n";
    s += Indent(imports, 0);
    s += "\n\n@triton.jit\n"
         "def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
         "    pid = tl.program_id(0)\n"
         "    offs = pid * BLOCK + tl.arange(0, BLOCK)\n"
         "    mask = offs < n\n"
         "    x = tl.load(x_ptr + offs, mask=mask)\n"
         "    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)\n"
         "\n\n"
         "def relu(x):\n"
         "    y = torch.empty_like(x)\n"
         "    n = x.numel()\n"
         "    grid = (triton.cdiv(n, 1024),)\n"
         "    relu_kernel[grid](x, y, n, BLOCK=1024)\n"
         "    return y\n"
         "\n\n"
         "class ModelNew(nn.Module):\n"
         "    def __init__(self):\n"
         "        super().__init__()\n"
         "\n"
         "    def forward(self, x):\n";
    s += Indent(forward, 8);
    s += Indent(ret, 8);
    return s;
  }
};

// A candidate with no kernel of any kind.
constexpr std::string_view kPythonOnly =
    "import torch\n"
    "import torch.nn as nn\n"
    "\n\n"
    "class ModelNew(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return x.clone()\n";

// A KernelBench reference: class Model and problem sizes.
constexpr std::string_view kReference =
    "import torch\n"
    "import torch.nn as nn\n"
    "\n"
    "N = 1024\n"
    "\n\n"
    "class Model(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return torch.relu(x)\n"
    "\n\n"
    "def get_inputs():\n"
    "    return [torch.randn(N)]\n"
    "\n\n"
    "def get_init_inputs():\n"
    "    return []\n";

// Indents with tabs instead of each 4 leading spaces (Python lines only: the
// templates indent C++ by 2).
std::string WithTabs(std::string_view source) {
  std::string out;
  size_t start = 0;
  while (start < source.size()) {
    size_t end = source.find('\n', start);
    if (end == std::string_view::npos) end = source.size();
    std::string_view line = source.substr(start, end - start);
    while (line.starts_with("    ")) {
      out += '\t';
      line.remove_prefix(4);
    }
    out.append(line);
    if (end < source.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

std::string Replace(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
  return s;
}

// ---- the base templates are clean ------------------------------------------------

TEST(StaticCheckTemplatesTest, HonestCudaCandidateHasNoFindings) {
  const std::string src = Cuda{}.Build();
  for (P p : {P::kFp32, P::kFp16, P::kBf16}) {
    const CheckReport r = CheckSource(src, B::kCuda, p);
    EXPECT_TRUE(r.findings.empty()) << src << Describe(r);
  }
}

TEST(StaticCheckTemplatesTest, HonestCpuCandidateHasNoFindings) {
  const std::string src = Cpu{}.Build();
  const CheckReport r = CheckSource(src, B::kCpu);
  EXPECT_TRUE(r.findings.empty()) << src << Describe(r);
}

TEST(StaticCheckTemplatesTest, HonestTritonCandidateIsNotRejectedOnTriton) {
  const std::string src = Triton{}.Build();
  for (P p : {P::kFp32, P::kFp16, P::kBf16}) {
    const CheckReport r = CheckSource(src, B::kTriton, p);
    EXPECT_FALSE(r.rejected()) << src << Describe(r);
    EXPECT_TRUE(r.findings.empty()) << src << Describe(r);
  }
}

TEST(StaticCheckTemplatesTest, HonestCandidatesPassWithAReference) {
  const CheckReport r = CheckSource(Cuda{}.Build(), B::kCuda, P::kFp32, kReference);
  EXPECT_TRUE(r.findings.empty()) << Describe(r);
}

// A CPU candidate whose load_inline arguments come from a dict.
constexpr std::string_view kLoadInlineKwargs = R"py(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) { return at::relu(x); }
"""
OPTS = dict(name="relu_ext", cpp_sources=cpp_src, functions=["relu"])
ext = load_inline(**OPTS)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
)py";

// A CPU candidate that builds its extension in a helper function; `BODY` is
// the C++ function's body.
std::string HelperBuiltCpu(std::string_view body) {
  return R"py(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_src = r"""
#include <torch/extension.h>
torch::Tensor relu(torch::Tensor x) {
)py" + std::string(body) +
         R"py(
}
"""


def build():
    return load_inline(name="relu_ext", cpp_sources=cpp_src, functions=["relu"])


ext = build()


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
)py";
}

constexpr std::string_view kHonestCpuBody =
    "  auto y = torch::empty_like(x);\n"
    "  const float* in = x.data_ptr<float>();\n"
    "  float* out = y.data_ptr<float>();\n"
    "  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;\n"
    "  return y;";

// An honest CUDA candidate that compiles its extension on first use.
constexpr std::string_view kLazyExtension = R"py(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int n = static_cast<int>(x.numel());
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
cpp_src = "torch::Tensor relu(torch::Tensor x);"
_ext = None


def get_ext():
    global _ext
    if _ext is None:
        _ext = load_inline(name="relu_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"])
    return _ext


class ModelNew(nn.Module):
    def forward(self, x):
        return get_ext().relu(x)
)py";

// KernelBench's own example candidate (elementwise add), as models write it.
constexpr std::string_view kKernelBenchExample = R"py(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Define the custom CUDA kernel for element-wise addition
elementwise_add_source = """
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void elementwise_add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b) {
    auto size = a.numel();
    auto out = torch::zeros_like(a);

    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;

    elementwise_add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), size);

    return out;
}
"""

elementwise_add_cpp_source = (
    "torch::Tensor elementwise_add_cuda(torch::Tensor a, torch::Tensor b);"
)

# Compile the inline CUDA code for element-wise addition
elementwise_add = load_inline(
    name="elementwise_add",
    cpp_sources=elementwise_add_cpp_source,
    cuda_sources=elementwise_add_source,
    functions=["elementwise_add_cuda"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.elementwise_add = elementwise_add

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.elementwise_add.elementwise_add_cuda(a, b)
)py";

// An honest autotuned Triton matmul.
constexpr std::string_view kTritonMatmul = R"py(import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=8),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * stride_am + (k + rk)[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k + rk)[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    c = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    assert a.shape[1] == b.shape[0], f"shape mismatch: {a.shape=} {b.shape=}"
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"]))
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1))
    return c


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return matmul(A.contiguous(), B.contiguous())
)py";

// An honest CUDA candidate whose source is a str.format template.
constexpr std::string_view kFormatTemplate = R"py(import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

TEMPLATE = r"""
#include <torch/extension.h>
__global__ void relu_kernel(const float* x, float* y, int n) {{
  int i = blockIdx.x * {block} + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}}
torch::Tensor relu(torch::Tensor x) {{
  auto y = torch::empty_like(x);
  int n = static_cast<int>(x.numel());
  relu_kernel<<<(n + {block} - 1) / {block}, {block}>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}}
"""
cuda_src = TEMPLATE.format(block=256)
cpp_src = "torch::Tensor relu(torch::Tensor x);"
ext = load_inline(name="relu_ext", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=["relu"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu(x)
)py";

// ---- firing cases ------------------------------------------------------------

struct FireCase {
  std::string rule{};
  std::string tag{};
  std::string source{};
  std::string at{};  // The finding's line is the line of this text; empty: line 0.
  B backend = B::kCuda;
  P precision = P::kFp32;
  std::string reference{};
  // Set: the rule fires after the compile, on what the compile stage
  // reported for the calls the static pass deferred (CheckReportedExtensions).
  std::optional<std::vector<ReportedExtension>> reported{};
};

// A compile stage that reported no sources at all.
const std::optional<std::vector<ReportedExtension>> kNothingReported = std::vector<ReportedExtension>{};

void PrintTo(const FireCase& c, std::ostream* os) { *os << c.rule << " / " << c.tag; }

std::vector<FireCase> FireCases() {
  std::vector<FireCase> c;
  // cpp.aten-compute
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AtMatmul",
               .source = Cuda{.host = "auto z = at::matmul(x, x);"}.Build(),
               .at = "at::matmul(x, x)"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "TensorMemberMatmul",
               .source = Cuda{.host = "auto z = x.matmul(x);"}.Build(),
               .at = "x.matmul(x)"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AtNativeEvenForAllocation",
               .source = Cuda{.host = "auto z = at::native::empty_like(x);"}.Build(),
               .at = "at::native::"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "TorchSoftmax",
               .source = Cuda{.host = "auto z = torch::softmax(x, 1);"}.Build(),
               .at = "torch::softmax"});
  // cpp.dynamic-loading
  c.push_back({.rule = "cpp.dynamic-loading",
               .tag = "Dlopen",
               .source = Cuda{.host = "void* lib = dlopen(\"libcublas.so\", 2);"}.Build(),
               .at = "dlopen("});
  c.push_back({.rule = "cpp.dynamic-loading",
               .tag = "CuModuleLoadData",
               .source = Cuda{.host = "cuModuleLoadData(&module, image);"}.Build(),
               .at = "cuModuleLoadData"});
  // cpp.graph-capture
  c.push_back({.rule = "cpp.graph-capture",
               .tag = "BeginCapture",
               .source = Cuda{.host = "cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);"}.Build(),
               .at = "cudaStreamBeginCapture"});
  c.push_back({.rule = "cpp.graph-capture",
               .tag = "GraphLaunch",
               .source = Cuda{.host = "cudaGraphLaunch(exec, 0);"}.Build(),
               .at = "cudaGraphLaunch"});
  // cpp.include-path
  c.push_back({.rule = "cpp.include-path",
               .tag = "AbsoluteInclude",
               .source = Cuda{.device = "#include \"/etc/passwd\""}.Build(),
               .at = "#include \"/etc/passwd\""});
  c.push_back({.rule = "cpp.include-path",
               .tag = "ParentInclude",
               .source = Cuda{.device = "#include \"../x\""}.Build(),
               .at = "#include \"../x\""});
  c.push_back({.rule = "cpp.include-path",
               .tag = "IncludeFlag",
               .source = Cuda{.load_args = ", extra_cflags=[\"-include\", \"/etc/shadow\"]"}.Build(),
               .at = "extra_cflags"});
  c.push_back({.rule = "cpp.include-path",
               .tag = "IncludePathsKeyword",
               .source = Cuda{.load_args = ", extra_include_paths=[\"/etc\"]"}.Build(),
               .at = "extra_include_paths"});
  c.push_back({.rule = "cpp.include-path",
               .tag = "AsmIncbin",
               .source = Cuda{.device = "asm(\".incbin \\\"/etc/passwd\\\"\");"}.Build(),
               .at = ".incbin"});
  // cpp.kernel-never-launched
  c.push_back({.rule = "cpp.kernel-never-launched",
               .tag = "GlobalNeverLaunched",
               .source = Cuda{.launch = ""}.Build(),
               .at = ""});
  // cpp.precision-downgrade
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "HalfType",
               .source = Cuda{.device = "__device__ __half to_half(float v) { return __float2half(v); }"}.Build(),
               .at = "__device__ __half"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "TensorHalfMethod",
               .source = Cuda{.host = "auto h = x.half();"}.Build(),
               .at = "x.half()"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "InlinePtxF16",
               .source = Cuda{.device = "__device__ void cvt() { asm(\"cvt.rn.f16.f32 %0, %1;\"); }"}.Build(),
               .at = "cvt.rn.f16"});
  // cpp.process-or-io
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "System",
               .source = Cuda{.host = "system(\"ls\");"}.Build(),
               .at = "system(\"ls\")"});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Fopen",
               .source = Cuda{.host = "FILE* f = fopen(\"/tmp/out\", \"w\");"}.Build(),
               .at = "fopen("});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Ifstream",
               .source = Cuda{.host = "std::ifstream in(\"/etc/passwd\");"}.Build(),
               .at = "std::ifstream"});
  // cpp.side-stream
  c.push_back({.rule = "cpp.side-stream",
               .tag = "StreamCreate",
               .source = Cuda{.host = "cudaStream_t s;\ncudaStreamCreate(&s);"}.Build(),
               .at = "cudaStreamCreate("});
  c.push_back({.rule = "cpp.side-stream",
               .tag = "StreamFromPool",
               .source = Cuda{.host = "auto s = at::cuda::getStreamFromPool();"}.Build(),
               .at = "getStreamFromPool"});
  // cpp.static-cache
  c.push_back({.rule = "cpp.static-cache",
               .tag = "StaticPointer",
               .source = Cuda{.host = "static float* g_cache = nullptr;"}.Build(),
               .at = "static float* g_cache"});
  c.push_back({.rule = "cpp.static-cache",
               .tag = "NamespaceScopeTensor",
               .source = Cuda{.device = "torch::Tensor g_out;"}.Build(),
               .at = "torch::Tensor g_out;"});
  c.push_back({.rule = "cpp.static-cache",
               .tag = "StaticTensor",
               .source = Cuda{.host = "static torch::Tensor cached;"}.Build(),
               .at = "static torch::Tensor cached"});
  c.push_back({.rule = "cpp.static-cache",
               .tag = "StaticMap",
               .source = Cuda{.device = "static std::unordered_map<int64_t, torch::Tensor> g_results;"}.Build(),
               .at = "g_results"});
  // cpp.thread
  c.push_back({.rule = "cpp.thread",
               .tag = "ThreadDetach",
               .source = Cuda{.host = "std::thread([] {}).detach();"}.Build(),
               .at = "std::thread"});
  c.push_back({.rule = "cpp.thread",
               .tag = "StdAsync",
               .source = Cuda{.host = "auto done = std::async(std::launch::async, [] {});"}.Build(),
               .at = "std::async"});
  c.push_back({.rule = "cpp.thread",
               .tag = "PthreadCreate",
               .source = Cuda{.host = "pthread_t t;\npthread_create(&t, nullptr, nullptr, nullptr);"}.Build(),
               .at = "pthread_create("});
  // cpp.vendor-library
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "CublasSgemm",
               .source = Cuda{.host = "cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a, n, b, n, "
                                      "&zero, c, n);"}
                             .Build(),
               .at = "cublasSgemm"});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "AtCudaBlas",
               .source = Cuda{.host = "at::cuda::blas::gemm('n', 'n', n, n, n, 1.f, a, n, b, n, 0.f, c, n);"}.Build(),
               .at = "at::cuda::blas::gemm"});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "ThrustSort",
               .source = Cuda{.host = "thrust::sort(thrust::device, p, p + n);"}.Build(),
               .at = "thrust::sort"});
  // kernel.none
  c.push_back({.rule = "kernel.none",
               .tag = "CudaWithoutGlobal",
               .source = Cuda{.kernel = "", .launch = ""}.Build(),
               .at = ""});
  c.push_back({.rule = "kernel.none",
               .tag = "CpuWithoutExtension",
               .source = std::string(kPythonOnly),
               .at = "",
               .backend = B::kCpu});
  c.push_back({.rule = "kernel.none",
               .tag = "TritonWithoutJit",
               .source = std::string(kPythonOnly),
               .at = "",
               .backend = B::kTriton});
  c.push_back({.rule = "kernel.none", .tag = "CudaWithoutExtension", .source = std::string(kPythonOnly), .at = ""});
  // py.call-counter
  c.push_back({.rule = "py.call-counter",
               .tag = "SelfCounter",
               .source = Cuda{.init = "self.calls = 0", .forward = "self.calls += 1"}.Build(),
               .at = "self.calls += 1"});
  c.push_back({.rule = "py.call-counter",
               .tag = "GlobalCounter",
               .source = Cuda{.module = "CALLS = 0", .forward = "global CALLS\nCALLS += 1"}.Build(),
               .at = "CALLS += 1"});
  // py.concurrency
  c.push_back({.rule = "py.concurrency",
               .tag = "ImportThreading",
               .source = Cuda{.imports = "import threading"}.Build(),
               .at = "import threading"});
  c.push_back({.rule = "py.concurrency",
               .tag = "FromConcurrentFutures",
               .source = Cuda{.imports = "from concurrent.futures import ThreadPoolExecutor"}.Build(),
               .at = "from concurrent.futures"});
  c.push_back({.rule = "py.concurrency",
               .tag = "OsFork",
               .source = Cuda{.imports = "import os", .module = "pid = os.fork()"}.Build(),
               .at = "os.fork()"});
  c.push_back({.rule = "py.concurrency",
               .tag = "ImportMultiprocessing",
               .source = Cuda{.imports = "import multiprocessing as mp"}.Build(),
               .at = "import multiprocessing"});
  // py.cross-call-cache
  c.push_back({.rule = "py.cross-call-cache",
               .tag = "SelfDictStore",
               .source = Cuda{.init = "self.cache = {}",
                              .forward = "key = tuple(x.shape)\nif key in self.cache:\n    return self.cache[key]\n"
                                         "y = ext.relu(x)\nself.cache[key] = y",
                              .ret = "return y"}
                             .Build(),
               .at = "self.cache[key] = y"});
  c.push_back(
      {.rule = "py.cross-call-cache",
       .tag = "ModuleDictStore",
       .source =
           Cuda{.module = "_RESULTS = {}", .forward = "y = ext.relu(x)\n_RESULTS[0] = y", .ret = "return y"}.Build(),
       .at = "_RESULTS[0] = y"});
  c.push_back(
      {.rule = "py.cross-call-cache",
       .tag = "AppendToSelfList",
       .source =
           Cuda{.init = "self.outputs = []", .forward = "y = ext.relu(x)\nself.outputs.append(y)", .ret = "return y"}
               .Build(),
       .at = "self.outputs.append(y)"});
  // py.defines-get-inputs
  c.push_back({.rule = "py.defines-get-inputs",
               .tag = "GetInputs",
               .source = Cuda{.module = "def get_inputs():\n    return [torch.randn(16)]"}.Build(),
               .at = "def get_inputs"});
  c.push_back({.rule = "py.defines-get-inputs",
               .tag = "GetInitInputs",
               .source = Cuda{.module = "def get_init_inputs():\n    return []"}.Build(),
               .at = "def get_init_inputs"});
  c.push_back({.rule = "py.defines-get-inputs",
               .tag = "RedefinesReferenceSize",
               .source = Cuda{.module = "N = 16"}.Build(),
               .at = "N = 16",
               .reference = std::string(kReference)});
  // py.dynamic-code
  c.push_back({.rule = "py.dynamic-code",
               .tag = "GetattrComputedName",
               .source = Cuda{.forward = "mm = getattr(torch, \"mat\" + \"mul\")\nx = mm(x, x)"}.Build(),
               .at = "getattr(torch"});
  c.push_back({.rule = "py.dynamic-code",
               .tag = "Eval",
               .source = Cuda{.module = "SCALE = eval(\"1 + 1\")"}.Build(),
               .at = "eval("});
  c.push_back({.rule = "py.dynamic-code",
               .tag = "Exec",
               .source = Cuda{.module = "exec(\"import torch\")"}.Build(),
               .at = "exec("});
  c.push_back({.rule = "py.dynamic-code",
               .tag = "ImportImportlib",
               .source = Cuda{.imports = "import importlib"}.Build(),
               .at = "import importlib"});
  c.push_back({.rule = "py.dynamic-code",
               .tag = "DunderImport",
               .source = Cuda{.module = "th = __import__(\"torch\")"}.Build(),
               .at = "__import__"});
  // py.empty-forward
  c.push_back({.rule = "py.empty-forward",
               .tag = "NoModelNew",
               .source = "import torch\n\n\ndef forward(x):\n    return x\n",
               .at = ""});
  c.push_back({.rule = "py.empty-forward",
               .tag = "ForwardOnlyPass",
               .source = Cuda{.ret = "pass"}.Build(),
               .at = "def forward"});
  c.push_back({.rule = "py.empty-forward",
               .tag = "ForwardOnlyDocstring",
               .source = Cuda{.ret = "\"\"\"Computes relu.\"\"\""}.Build(),
               .at = "def forward"});
  c.push_back({.rule = "py.empty-forward",
               .tag = "NoForward",
               .source = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                         "    def __init__(self):\n        super().__init__()\n",
               .at = "class ModelNew",
               .backend = B::kCpu});
  c.push_back({.rule = "py.empty-forward", .tag = "EmptyFile", .source = "", .at = ""});
  // py.evaluator-access
  c.push_back({.rule = "py.evaluator-access",
               .tag = "ImportInspect",
               .source = Cuda{.imports = "import inspect"}.Build(),
               .at = "import inspect"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "SysGetframe",
               .source = Cuda{.imports = "import sys", .forward = "frame = sys._getframe(1)"}.Build(),
               .at = "sys._getframe"});
  c.push_back(
      {.rule = "py.evaluator-access",
       .tag = "FrameGlobals",
       .source = Cuda{.imports = "import sys", .forward = "frame = sys._getframe(1)\nnames = frame.f_globals"}.Build(),
       .at = "frame.f_globals"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "GlobalsBuiltin",
               .source = Cuda{.forward = "g = globals()"}.Build(),
               .at = "globals()"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "SysModules",
               .source = Cuda{.imports = "import sys", .module = "harness = sys.modules[\"__main__\"]"}.Build(),
               .at = "sys.modules"});
  // py.file-io
  c.push_back({.rule = "py.file-io",
               .tag = "OpenBuiltin",
               .source = Cuda{.forward = "w = open(\"weights.bin\", \"rb\").read()"}.Build(),
               .at = "open("});
  c.push_back({.rule = "py.file-io",
               .tag = "TorchLoad",
               .source = Cuda{.module = "W = torch.load(\"w.pt\")"}.Build(),
               .at = "torch.load"});
  c.push_back({.rule = "py.file-io",
               .tag = "ImportTempfile",
               .source = Cuda{.imports = "import tempfile"}.Build(),
               .at = "import tempfile"});
  c.push_back({.rule = "py.file-io",
               .tag = "OsRemove",
               .source = Cuda{.imports = "import os", .module = "os.remove(\"/tmp/x\")"}.Build(),
               .at = "os.remove"});
  // py.forward-skips-kernel
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "Decoy",
               .source = Cuda{.ret = "return x.clone()"}.Build(),
               .at = "def forward"});
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "TritonDecoy",
               .source = Triton{.ret = "return x.clone()"}.Build(),
               .at = "def forward",
               .backend = B::kTriton});
  // py.forward-stores-state
  c.push_back(
      {.rule = "py.forward-stores-state",
       .tag = "LazyWorkspace",
       .source = Cuda{.init = "self.buf = None", .forward = "if self.buf is None:\n    self.buf = torch.empty_like(x)"}
                     .Build(),
       .at = "self.buf = torch.empty_like(x)"});
  // py.graph-capture
  c.push_back({.rule = "py.graph-capture",
               .tag = "TorchCompile",
               .source = Cuda{.init = "self.fn = torch.compile(ext.relu)"}.Build(),
               .at = "torch.compile"});
  c.push_back({.rule = "py.graph-capture",
               .tag = "CudaGraph",
               .source = Cuda{.module = "GRAPH = torch.cuda.CUDAGraph()"}.Build(),
               .at = "torch.cuda.CUDAGraph"});
  c.push_back({.rule = "py.graph-capture",
               .tag = "ImportDynamo",
               .source = Cuda{.imports = "import torch._dynamo"}.Build(),
               .at = "import torch._dynamo"});
  // py.identity-key
  c.push_back({.rule = "py.identity-key",
               .tag = "DataPtrKey",
               .source = Cuda{.forward = "key = x.data_ptr()"}.Build(),
               .at = "x.data_ptr()"});
  c.push_back(
      {.rule = "py.identity-key", .tag = "IdBuiltin", .source = Cuda{.forward = "key = id(x)"}.Build(), .at = "id(x)"});
  c.push_back({.rule = "py.identity-key",
               .tag = "VersionCounter",
               .source = Cuda{.forward = "v = x._version"}.Build(),
               .at = "x._version"});
  // py.library-compute-in-forward
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "TorchRelu",
               .source = Cuda{.ret = "return torch.relu(x)"}.Build(),
               .at = "torch.relu(x)"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "HelperReachedFromForward",
               .source = Cuda{.module = "def act(t):\n    return torch.relu(t)", .forward = "x = act(x)"}.Build(),
               .at = "torch.relu(t)"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "FromImportAlias",
               .source = Cuda{.imports = "from torch import matmul as mm", .forward = "x = mm(x, x)"}.Build(),
               .at = "mm(x, x)"});
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "FunctionalAlias",
       .source = Cuda{.imports = "import torch.nn.functional as Fn", .forward = "x = Fn.softmax(x, dim=-1)"}.Build(),
       .at = "Fn.softmax"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "GetattrComputedName",
               .source = Cuda{.forward = "x = getattr(torch, \"mat\" + \"mul\")(x, x)"}.Build(),
               .at = "getattr(torch"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "LambdaHelper",
               .source = Cuda{.module = "act = lambda t: torch.sigmoid(t)", .forward = "x = act(x)"}.Build(),
               .at = "torch.sigmoid"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "StarImport",
               .source = Cuda{.imports = "from torch import *", .forward = "x = relu(x)"}.Build(),
               .at = "x = relu(x)"});
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "HelperModuleMethod",
       .source = Cuda{.module = "class Block(nn.Module):\n    def forward(self, t):\n        return torch.tanh(t)",
                      .init = "self.block = Block()",
                      .forward = "x = self.block(x)"}
                     .Build(),
       .at = "torch.tanh(t)"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "Numpy",
               .source = Cuda{.imports = "import numpy as np", .forward = "y = np.maximum(x.cpu().numpy(), 0)"}.Build(),
               .at = "np.maximum"});
  // py.library-module-in-forward
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "SelfLinear",
               .source = Cuda{.init = "self.block = nn.Linear(16, 16)", .forward = "x = self.block(x)"}.Build(),
               .at = "self.block(x)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "InlineLayer",
               .source = Cuda{.forward = "x = nn.ReLU()(x)"}.Build(),
               .at = "nn.ReLU()"});
  // py.matmul-operator
  c.push_back({.rule = "py.matmul-operator",
               .tag = "AtOperator",
               .source = Cuda{.forward = "x = x @ x"}.Build(),
               .at = "x @ x"});
  c.push_back(
      {.rule = "py.matmul-operator", .tag = "AtAssign", .source = Cuda{.forward = "x @= x"}.Build(), .at = "x @= x"});
  // py.network
  c.push_back({.rule = "py.network",
               .tag = "ImportSocket",
               .source = Cuda{.imports = "import socket"}.Build(),
               .at = "import socket"});
  c.push_back({.rule = "py.network",
               .tag = "ImportUrllibRequest",
               .source = Cuda{.imports = "import urllib.request"}.Build(),
               .at = "import urllib.request"});
  c.push_back({.rule = "py.network",
               .tag = "FromRequests",
               .source = Cuda{.imports = "from requests import get"}.Build(),
               .at = "from requests"});
  // py.patch-library
  c.push_back({.rule = "py.patch-library",
               .tag = "AssignTorchAllclose",
               .source = Cuda{.module = "torch.allclose = lambda *args, **kwargs: True"}.Build(),
               .at = "torch.allclose ="});
  c.push_back({.rule = "py.patch-library",
               .tag = "SetattrTorch",
               .source = Cuda{.module = "def always(*args, **kwargs):\n    return True\n"
                                        "setattr(torch, \"allclose\", always)"}
                             .Build(),
               .at = "setattr(torch"});
  c.push_back({.rule = "py.patch-library",
               .tag = "EventElapsedTime",
               .source = Cuda{.module = "torch.cuda.Event.elapsed_time = lambda self, end: 0.001"}.Build(),
               .at = "torch.cuda.Event.elapsed_time"});
  c.push_back({.rule = "py.patch-library",
               .tag = "TimeAlias",
               .source = Cuda{.imports = "import time as t", .module = "t.perf_counter = lambda: 0.0"}.Build(),
               .at = "t.perf_counter ="});
  c.push_back({.rule = "py.patch-library",
               .tag = "InForward",
               .source = Cuda{.forward = "torch.testing.assert_close = print"}.Build(),
               .at = "torch.testing.assert_close"});
  // py.precision-downgrade
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "HalfMethod",
               .source = Cuda{.forward = "x = x.half()"}.Build(),
               .at = "x.half()"});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "Float16Dtype",
               .source = Cuda{.forward = "w = torch.empty(16, dtype=torch.float16, device=x.device)"}.Build(),
               .at = "torch.float16"});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "AllowTf32",
               .source = Cuda{.module = "torch.backends.cuda.matmul.allow_tf32 = True"}.Build(),
               .at = "allow_tf32"});
  c.push_back(
      {.rule = "py.precision-downgrade",
       .tag = "Autocast",
       .source = Cuda{.forward = "with torch.autocast(\"cuda\"):\n    y = ext.relu(x)", .ret = "return y"}.Build(),
       .at = "torch.autocast"});
  // py.process
  c.push_back({.rule = "py.process",
               .tag = "ImportSubprocess",
               .source = Cuda{.imports = "import subprocess"}.Build(),
               .at = "import subprocess"});
  c.push_back({.rule = "py.process",
               .tag = "OsSystem",
               .source = Cuda{.imports = "import os", .module = "os.system(\"nvidia-smi\")"}.Build(),
               .at = "os.system"});
  c.push_back({.rule = "py.process",
               .tag = "ImportCtypes",
               .source = Cuda{.imports = "import ctypes"}.Build(),
               .at = "import ctypes"});
  // py.reference-reuse
  c.push_back({.rule = "py.reference-reuse",
               .tag = "SubclassesModel",
               .source = Cuda{.base = "Model"}.Build(),
               .at = "class ModelNew(Model)",
               .reference = std::string(kReference)});
  c.push_back({.rule = "py.reference-reuse",
               .tag = "SubclassesModelWithoutReference",
               .source = Cuda{.base = "Model"}.Build(),
               .at = "class ModelNew(Model)"});
  c.push_back({.rule = "py.reference-reuse",
               .tag = "ImportsReference",
               .source = Cuda{.imports = "from reference import Model"}.Build(),
               .at = "from reference"});
  c.push_back({.rule = "py.reference-reuse",
               .tag = "CallsModel",
               .source = Cuda{.forward = "ref = Model()"}.Build(),
               .at = "Model()",
               .reference = std::string(kReference)});
  // py.side-stream
  c.push_back({.rule = "py.side-stream",
               .tag = "CudaStream",
               .source = Cuda{.init = "self.stream = torch.cuda.Stream()"}.Build(),
               .at = "torch.cuda.Stream()"});
  c.push_back({.rule = "py.side-stream",
               .tag = "StreamContext",
               .source = Cuda{.init = "self.stream = torch.cuda.Stream()",
                              .forward = "with torch.cuda.stream(self.stream):\n    y = ext.relu(x)",
                              .ret = "return y"}
                             .Build(),
               .at = "with torch.cuda.stream"});
  // py.tensor-method-compute
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "Softmax",
               .source = Cuda{.forward = "x = x.softmax(dim=-1)"}.Build(),
               .at = "x.softmax"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "ExpressionReceiver",
               .source = Cuda{.forward = "s = (x * 2).sum()"}.Build(),
               .at = "(x * 2).sum()"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "AfterLayoutMethod",
               .source = Cuda{.forward = "x = x.contiguous().exp()"}.Build(),
               .at = "x.contiguous().exp()"});
  // py.tensor-subclass
  c.push_back({.rule = "py.tensor-subclass",
               .tag = "SubclassesTensor",
               .source = Cuda{.module = "class Lazy(torch.Tensor):\n    pass"}.Build(),
               .at = "class Lazy"});
  c.push_back({.rule = "py.tensor-subclass",
               .tag = "TorchFunction",
               .source = Cuda{.module = "class Spy:\n    @classmethod\n"
                                        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
                                        "        return func(*args, **(kwargs or {}))"}
                             .Build(),
               .at = "def __torch_function__"});
  c.push_back({.rule = "py.tensor-subclass",
               .tag = "AsSubclass",
               .source = Cuda{.forward = "x = x.as_subclass(torch.Tensor)"}.Build(),
               .at = "x.as_subclass"});
  // py.try-fallback
  c.push_back({.rule = "py.try-fallback",
               .tag = "ExceptFallsBack",
               .source = Cuda{.forward = "try:\n    y = ext.relu(x)\nexcept RuntimeError:\n    y = x.clamp(min=0)",
                              .ret = "return y"}
                             .Build(),
               .at = "except RuntimeError"});
  c.push_back(
      {.rule = "py.try-fallback",
       .tag = "ExceptReturnsInput",
       .source = Cuda{.forward = "try:\n    return ext.relu(x)\nexcept Exception:\n    return x", .ret = ""}.Build(),
       .at = "except Exception"});
  c.push_back({.rule = "py.try-fallback",
               .tag = "ContextlibSuppress",
               .source = Cuda{.imports = "import contextlib",
                              .forward = "with contextlib.suppress(Exception):\n    x = ext.relu(x)",
                              .ret = "return x"}
                             .Build(),
               .at = "contextlib.suppress"});
  // py.unparseable
  c.push_back({.rule = "py.unparseable",
               .tag = "UnterminatedTripleQuote",
               .source = Cuda{.module = "NOTE = \"\"\"never closed"}.Build(),
               .at = "NOTE ="});
  c.push_back({.rule = "py.unparseable",
               .tag = "UnterminatedString",
               .source = Cuda{.module = "NOTE = 'never closed"}.Build(),
               .at = "NOTE ="});
  c.push_back(
      {.rule = "py.unparseable",
       .tag = "FullwidthIdentifier",
       .source = Cuda{.forward = "x = \xef\xbd\x94\xef\xbd\x8f\xef\xbd\x92\xef\xbd\x83\xef\xbd\x88.relu(x)"}.Build(),
       .at = "x = \xef\xbd\x94"});
  c.push_back(
      {.rule = "py.unparseable", .tag = "StrayDollar", .source = Cuda{.module = "$x = 1"}.Build(), .at = "$x = 1"});
  c.push_back({.rule = "py.unparseable",
               .tag = "BadDedent",
               .source = Cuda{.module = "if True:\n        a = 1\n    b = 2"}.Build(),
               .at = "    b = 2"});
  c.push_back({.rule = "py.unparseable",
               .tag = "MissingColon",
               .source = Cuda{.module = "if True\n    a = 1"}.Build(),
               .at = "if True"});
  // py.unresolved-extension-source
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "OpenRead",
               .source = Cuda{.cuda_arg = "open(\"kernel.cu\").read()"}.Build(),
               .at = "open(\"kernel.cu\")",
               .reported = kNothingReported});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "FunctionResult",
               .source = Cuda{.imports = "def make_source():\n    return \"\"", .cuda_arg = "make_source()"}.Build(),
               .at = "cuda_sources=make_source()",
               .reported = kNothingReported});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "LoadSourcesFiles",
               .source = Cuda{.imports = "from torch.utils.cpp_extension import load",
                              .module = "ext2 = load(name=\"k\", sources=[\"k.cu\"])"}
                             .Build(),
               .at = "sources=[\"k.cu\"]",
               .reported = kNothingReported});
  // Substitutions whose value kbox cannot read put unseen text into the C++.
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "PercentWithComputedValue",
               .source = Cuda{.imports = "OP = chr(97) + \"t::matmul\"",
                              .cpp_def = "cpp_src = \"torch::Tensor relu(torch::Tensor x); "
                                         "torch::Tensor mm2(torch::Tensor a) { return %s(a, a); }\" % OP"}
                             .Build(),
               .at = "ext = load_inline",
               .reported = kNothingReported});
  c.push_back(
      {.rule = "py.unresolved-extension-source",
       .tag = "ReplaceWithComputedValue",
       .source = Cuda{.imports = "OP = chr(97) + \"t::matmul\"",
                      .cpp_def = "cpp_src = \"torch::Tensor relu(torch::Tensor x); "
                                 "torch::Tensor mm2(torch::Tensor a) { return OP(a, a); }\".replace(\"OP\", OP)"}
                     .Build(),
       .at = "ext = load_inline",
               .reported = kNothingReported});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "UnresolvedFlags",
               .source = Cuda{.load_args = ", extra_cflags=FLAGS"}.Build(),
               .at = "extra_cflags=FLAGS",
               .reported = kNothingReported});
  // Evasions: the same hacks, spelled another way.
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "SuperForward",
       .source = Cuda{.module = "class Base(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)",
                      .base = "Base",
                      .forward = "y = ext.relu(x)",
                      .ret = "return super().forward(y)"}
                     .Build(),
       .at = "torch.relu(x)"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "LambdaAttribute",
               .source = Cuda{.init = "self.act = lambda t: torch.relu(t)", .forward = "x = self.act(x)"}.Build(),
               .at = "torch.relu(t)"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "OperatorMatmul",
               .source = Cuda{.imports = "import operator", .forward = "x = operator.matmul(x, x)"}.Build(),
               .at = "operator.matmul"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "DunderMatmul",
               .source = Cuda{.forward = "x = x.__matmul__(x)"}.Build(),
               .at = "x.__matmul__"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "BoundMethodTakenAsValue",
               .source = Cuda{.forward = "mm = x.matmul\nx = mm(x)"}.Build(),
               .at = "mm = x.matmul"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "UsingNamespaceAt",
               .source = Cuda{.host = "using namespace at;\nauto z = matmul(x, x);"}.Build(),
               .at = "auto z = matmul"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "NamespaceAlias",
               .source = Cuda{.device = "namespace A = at;", .host = "auto z = A::matmul(x, x);"}.Build(),
               .at = "A::matmul"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "HiddenInAMacro",
               .source = Cuda{.device = "#define MATMUL at::matmul", .host = "auto z = MATMUL(x, x);"}.Build(),
               .at = "#define MATMUL"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "LoadInlineInsideHelper",
               .source = HelperBuiltCpu("  return at::relu(x);"),
               .at = "at::relu",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.include-path",
               .tag = "DigraphInclude",
               .source = Cuda{.device = "%:include \"/etc/passwd\""}.Build(),
               .at = "%:include"});
  c.push_back({.rule = "cpp.include-path",
               .tag = "SplicedDirective",
               .source = Cuda{.device = "#inc\\\nlude \"/etc/passwd\""}.Build(),
               .at = "#inc\\"});
  c.push_back({.rule = "cpp.include-path",
               .tag = "AsmIncbinSplitLiteral",
               .source = Cuda{.device = "asm(\".inc\" \"bin \\\"/etc/passwd\\\"\");"}.Build(),
               .at = "asm(\".inc\""});
  c.push_back({.rule = "cpp.include-path",
               .tag = "IncludeDirFlagAndPathApart",
               .source = Cuda{.device = "#include <etc/passwd>", .load_args = ", extra_cflags=[\"-I\", \"/\"]"}.Build(),
               .at = "extra_cflags"});
  c.push_back({.rule = "cpp.include-path",
               .tag = "IdirafterFlag",
               .source = Cuda{.load_args = ", extra_cflags=[\"-idirafter\", \"/etc\"]"}.Build(),
               .at = "extra_cflags"});
  c.push_back({.rule = "cpp.include-path",
               .tag = "PreprocessorPassThroughFlag",
               .source = Cuda{.load_args = ", extra_cflags=[\"-Wp,-include,/etc/shadow\"]"}.Build(),
               .at = "extra_cflags"});
  c.push_back({.rule = "py.call-counter",
               .tag = "IncrementWithoutAugmentedAssignment",
               .source = Cuda{.init = "self.n = 0", .forward = "self.n = self.n + 1"}.Build(),
               .at = "self.n = self.n + 1"});
  c.push_back({.rule = "py.cross-call-cache",
               .tag = "ReturnsStoredResult",
               .source = Cuda{.init = "self.out = None",
                              .forward = "if self.out is not None:\n    return self.out\nself.out = ext.relu(x)",
                              .ret = "return self.out"}
                             .Build(),
               .at = "return self.out"});
  c.push_back({.rule = "py.identity-key",
               .tag = "HashOfTensor",
               .source = Cuda{.forward = "key = hash(x)"}.Build(),
               .at = "hash(x)"});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "HalfTensorType",
               .source = Cuda{.forward = "x = x.type(torch.cuda.HalfTensor)"}.Build(),
               .at = "torch.cuda.HalfTensor"});
  c.push_back(
      {.rule = "py.precision-downgrade",
       .tag = "AmpAutocast",
       .source = Cuda{.forward = "with torch.amp.autocast(\"cuda\"):\n    y = ext.relu(x)", .ret = "return y"}.Build(),
       .at = "torch.amp.autocast"});
  c.push_back({.rule = "py.dynamic-code",
               .tag = "TorchOpsLoadLibrary",
               .source = Cuda{.module = "torch.ops.load_library(\"/tmp/libfast.so\")"}.Build(),
               .at = "torch.ops.load_library"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "BuiltinsSubscript",
               .source = Cuda{.forward = "run = __builtins__[\"exec\"]"}.Build(),
               .at = "__builtins__"});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "KeywordArgumentsDict",
               .source = std::string(kLoadInlineKwargs),
               .at = "load_inline(**OPTS)",
               .backend = B::kCpu,
               .reported = kNothingReported});
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "DecoratorReplacesForward",
       .source = Cuda{.module = "def swap(f):\n    return lambda self, x: torch.relu(x)", .forward_decorator = "@swap"}
                     .Build(),
       .at = "torch.relu(x)"});
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "InheritedHelperMethod",
       .source = Cuda{.module = "class Base(nn.Module):\n    def helper(self, t):\n        return torch.relu(t)",
                      .base = "Base",
                      .ret = "return self.helper(ext.relu(x))"}
                     .Build(),
       .at = "torch.relu(t)"});
  c.push_back({.rule = "cpp.static-cache",
               .tag = "InlineVariable",
               .source = Cuda{.device = "inline torch::Tensor g_cache;"}.Build(),
               .at = "inline torch::Tensor g_cache"});
  c.push_back(
      {.rule = "cpp.static-cache",
       .tag = "StaticInlineVariable",
       .source = Cuda{.device = "static inline torch::Tensor g_cache;"}.Build(),
       .at = "static inline torch::Tensor g_cache"});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Opendir",
               .source = Cuda{.host = "auto* dir = opendir(\"/\");"}.Build(),
               .at = "opendir("});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Readlink",
               .source = Cuda{.host = "char buf[64];\nreadlink(\"/proc/self/exe\", buf, 64);"}.Build(),
               .at = "readlink("});
  // A torch.nn layer's forward reached by name, not by calling the layer.
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayerForwardByName",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = self.fc.forward(x).clamp_min_(0.0)"}
                             .Build(),
               .at = "self.fc.forward(x)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayerBoundToALocal",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "layer = self.fc\nx = layer.forward(x)"}
                             .Build(),
               .at = "layer.forward(x)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ModuleLevelLayerCalled",
               .source = Cuda{.module = "LAYER = nn.Linear(16, 16)", .forward = "x = LAYER(x)"}.Build(),
               .at = "x = LAYER(x)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ClassForwardOnTheLayer",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = nn.Linear.forward(self.fc, x)"}
                             .Build(),
               .at = "nn.Linear.forward"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "QualifiedClassForward",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)",
                              .forward = "x = torch.nn.Linear.forward(self.fc, x)"}
                             .Build(),
               .at = "torch.nn.Linear.forward"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "TypeOfTheLayer",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = type(self.fc).forward(self.fc, x)"}
                             .Build(),
               .at = "type(self.fc)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "DunderCall",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = self.fc.__call__(x)"}.Build(),
               .at = "self.fc.__call__"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "CallImpl",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = self.fc._call_impl(x)"}.Build(),
               .at = "self.fc._call_impl"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ModuleCallOnTheLayer",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = nn.Module.__call__(self.fc, x)"}
                             .Build(),
               .at = "nn.Module.__call__"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "BoundForwardTakenAsValue",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "run = self.fc.forward\nx = run(x)"}
                             .Build(),
               .at = "run = self.fc.forward"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "SubclassWithoutForward",
               .source = Cuda{.module = "class Dense(nn.Linear):\n    pass",
                              .init = "self.fc = Dense(16, 16)",
                              .forward = "x = self.fc(x)"}
                             .Build(),
               .at = "x = self.fc(x)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "SuperForwardOfALayer",
               .source = Cuda{.module = "class Dense(nn.Linear):\n    def forward(self, t):\n"
                                        "        return super().forward(t)",
                              .init = "self.fc = Dense(16, 16)",
                              .forward = "x = self.fc(x)"}
                             .Build(),
               .at = "super().forward(t)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ForwardFoundByGetattr",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = getattr(self.fc, \"forward\")(x)"}
                             .Build(),
               .at = "getattr(self.fc"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayerHandedToOtherCode",
               .source = Cuda{.imports = "import functools",
                              .init = "self.fc = nn.Linear(16, 16)",
                              .forward = "run = functools.partial(self.fc)\nx = run(x)"}
                             .Build(),
               .at = "functools.partial(self.fc)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayersInAList",
               .source = Cuda{.init = "self.fc1 = nn.Linear(16, 16)\nself.fc2 = nn.Linear(16, 16)",
                              .forward = "for layer in [self.fc1, self.fc2]:\n    x = layer(x)"}
                             .Build(),
               .at = "for layer in [self.fc1"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ModuleRegistry",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = self._modules[\"fc\"](x)"}.Build(),
               .at = "self._modules"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ForwardThroughItsDunderCall",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)", .forward = "x = self.fc.forward.__call__(x)"}.Build(),
               .at = "self.fc.forward.__call__"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ModuleListElementCalled",
               .source = Cuda{.init = "self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])",
                              .forward = "x = self.layers[0](x)"}
                             .Build(),
               .at = "self.layers[0](x)"});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ModuleListLoopVariableCalled",
               .source = Cuda{.init = "self.layers = nn.ModuleList()\nself.layers.append(nn.Linear(16, 16))",
                              .forward = "for layer in self.layers:\n    x = layer(x)"}
                             .Build(),
               .at = "x = layer(x)"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AdlOnAVectorElement",
               .source = Cuda{.host = "std::vector<torch::Tensor> parts{x, x};\nauto z = addmm_out(parts[0], parts[0], parts[1], parts[1]);"}
                             .Build(),
               .at = "addmm_out(parts[0]"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AtenOpTakenAsAValue",
               .source = Cuda{.host = "auto mm = &at::matmul;\nauto z = mm(x, x);"}.Build(),
               .at = "&at::matmul"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "TensorMemberPointer",
               .source = Cuda{.host = "auto mm = &torch::Tensor::mm;\nauto z = (x.*mm)(x);"}.Build(),
               .at = "&torch::Tensor::mm"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "TorchNnModule",
               .source = Cuda{.host = "torch::nn::Linear fc(16, 16);\nauto z = fc->forward(x);"}.Build(),
               .at = "torch::nn::Linear fc"});
  // In-place and out= variants are their base op.
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "InPlaceAddmm",
               .source = Cuda{.forward = "y = torch.zeros_like(x)\ny.addmm_(x, x)", .ret = "return ext.relu(y)"}.Build(),
               .at = "y.addmm_(x, x)"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "InPlaceBaddbmm",
               .source = Cuda{.forward = "x.baddbmm_(x, x)"}.Build(),
               .at = "x.baddbmm_"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "InPlaceAddr",
               .source = Cuda{.forward = "x.addr_(x, x)"}.Build(),
               .at = "x.addr_"});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "ClampMinInPlace",
               .source = Cuda{.forward = "x = x.clamp_min_(0.0)"}.Build(),
               .at = "x.clamp_min_"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "OutVariant",
               .source = Cuda{.forward = "y = torch.empty_like(x)\ntorch.addmm(x, x, x, out=y)"}.Build(),
               .at = "torch.addmm(x, x, x, out=y)"});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "TensorClassInPlaceMethod",
               .source = Cuda{.forward = "torch.Tensor.addmm_(x, x, x)"}.Build(),
               .at = "torch.Tensor.addmm_"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "InPlaceMemberAddmm",
               .source = Cuda{.host = "x.addmm_(x, x);"}.Build(),
               .at = "x.addmm_"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "OutVariantQualified",
               .source = Cuda{.host = "at::addmm_out(x, x, x, x);"}.Build(),
               .at = "at::addmm_out"});
  // Argument-dependent lookup: no qualifier, no `using namespace`.
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AdlMatmul",
               .source = Cuda{.host = "auto a = x.contiguous();\nauto z = matmul(a, a);"}.Build(),
               .at = "matmul(a, a)"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AdlUndeclaredFunctionOnATensor",
               .source = Cuda{.host = "auto z = special_erfcx(x);"}.Build(),
               .at = "special_erfcx(x)"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AdlMathNameOnATensor",
               .source = Cuda{.host = "auto z = sqrt(x.view(-1));"}.Build(),
               .at = "sqrt(x.view(-1))"});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AdlPastANonTensorOverload",
               .source = Cuda{.device = "float softmax(const float* row, int n) { return row[n - 1]; }",
                              .host = "auto z = softmax(x, 1);"}
                             .Build(),
               .at = "softmax(x, 1)"});
  // cpp.dispatcher
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "FindSchemaAndRedispatch",
               .source = Cuda{.device = "#include <ATen/core/dispatch/Dispatcher.h>",
                              .host = "auto op = c10::Dispatcher::singleton()\n"
                                      "    .findSchemaOrThrow(\"aten::mm\", \"\")\n"
                                      "    .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();\n"
                                      "auto z = op.redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), x, x);"}
                             .Build(),
               .at = "c10::Dispatcher::singleton()"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "ReadsTheProbesDispatchKey",
               .source = Cuda{.host = "bool watched = c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python);\n"
                                      "(void)watched;"}
                             .Build(),
               .at = "tls_is_dispatch_key_included"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "UnqualifiedTlsAfterUsing",
               .source = Cuda{.host = "using namespace c10::impl;\nbool watched = tls_local_dispatch_key_set().included_.empty();\n"
                                      "(void)watched;"}
                             .Build(),
               .at = "bool watched = tls_local"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "ExcludeDispatchKeyGuard",
               .source = Cuda{.host = "c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKey::Python);"}.Build(),
               .at = "ExcludeDispatchKeyGuard"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "BelowInplaceOrViewGuard",
               .source = Cuda{.host = "at::AutoDispatchBelowADInplaceOrView guard;"}.Build(),
               .at = "AutoDispatchBelowADInplaceOrView"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "TorchLibraryRegistration",
               .source = Cuda{.device = "TORCH_LIBRARY_IMPL(aten, CUDA, m) { m.impl(\"relu\", &relu_impl); }"}.Build(),
               .at = "TORCH_LIBRARY_IMPL"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "OpStructCall",
               .source = Cuda{.host = "auto z = at::_ops::mm::call(x, x);"}.Build(),
               .at = "at::_ops::mm::call"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "TorchJit",
               .source = Cuda{.host = "auto ops = torch::jit::getAllOperators();"}.Build(),
               .at = "torch::jit::getAllOperators"});
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "RegisterOperators",
               .source = Cuda{.device = "static auto registry = c10::RegisterOperators().op(\"my::relu\", &relu);"}
                             .Build(),
               .at = "c10::RegisterOperators"});
  // cpp.vendor-library: BLAS and LAPACK declared by hand.
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "FortranSgemmDeclared",
               .source = Cpu{.cpp_top = "extern \"C\" void sgemm_(const char*, const char*, const int*, const int*, "
                                        "const int*, const float*, const float*, const int*, const float*, "
                                        "const int*, const float*, float*, const int*);"}
                             .Build(),
               .at = "extern \"C\" void sgemm_",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "FortranLapackCall",
               .source = Cpu{.loop = "int info = 0, m = 1;\nint ipiv[1];\ndgetrf_(&m, &m, nullptr, &m, ipiv, &info);"}
                             .Build(),
               .at = "dgetrf_(",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "CblasCall",
               .source = Cpu{.loop = "cblas_saxpy(static_cast<int>(n), 1.f, in, 1, out, 1);"}.Build(),
               .at = "cblas_saxpy",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "UpperCaseBlas",
               .source = Cpu{.loop = "SGEMV(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, "
                                     "nullptr, nullptr, nullptr);"}
                             .Build(),
               .at = "SGEMV(",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "OneDnnAndBlis",
               .source = Cpu{.loop = "dnnl_sgemm('N', 'N', 1, 1, 1, 1.f, in, 1, in, 1, 0.f, out, 1);\n"
                                     "bli_saxpyv(BLIS_NO_CONJUGATE, n, nullptr, nullptr, 1, nullptr, 1);"}
                             .Build(),
               .at = "dnnl_sgemm",
               .backend = B::kCpu});
  // cpp.thread: ATen's and c10's asynchronous pools.
  c.push_back({.rule = "cpp.thread",
               .tag = "AtLaunch",
               .source = Cpu{.loop = "at::launch([out, n] { out[n - 1] = 0.f; });"}.Build(),
               .at = "at::launch",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.thread",
               .tag = "LaunchNoThreadState",
               .source = Cpu{.loop = "at::internal::launch_no_thread_state([] {});"}.Build(),
               .at = "launch_no_thread_state",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.thread",
               .tag = "C10ThreadPool",
               .source = Cpu{.cpp_top = "#include <c10/core/thread_pool.h>",
                             .loop = "c10::ThreadPool pool(2);\npool.run([] {});"}
                             .Build(),
               .at = "c10::ThreadPool",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.thread",
               .tag = "IntraopLaunch",
               .source = Cpu{.loop = "at::intraop_launch([] {});"}.Build(),
               .at = "at::intraop_launch",
               .backend = B::kCpu});
  // cpp.process-or-io: signals, timers, limits, contexts, raw syscalls.
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Sigaction",
               .source = Cpu{.cpp_top = "#include <csignal>", .loop = "struct sigaction sa{};\nsigaction(SIGALRM, &sa, nullptr);"}
                             .Build(),
               .at = "sigaction(SIGALRM",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "SignalAndRaise",
               .source = Cpu{.loop = "std::signal(SIGTERM, SIG_IGN);\nraise(SIGTERM);"}.Build(),
               .at = "std::signal",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Setitimer",
               .source = Cpu{.loop = "struct itimerval it{};\nsetitimer(ITIMER_REAL, &it, nullptr);"}.Build(),
               .at = "setitimer(",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "AlarmAndTimerCreate",
               .source = Cpu{.loop = "alarm(1);\ntimer_t t;\ntimer_create(CLOCK_MONOTONIC, nullptr, &t);"}.Build(),
               .at = "alarm(1)",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "TgkillParent",
               .source = Cpu{.loop = "const pid_t judge = getppid();\ntgkill(judge, judge, 15);"}.Build(),
               .at = "getppid()",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Setrlimit",
               .source = Cpu{.loop = "struct rlimit lim{1, 1};\nsetrlimit(RLIMIT_CPU, &lim);"}.Build(),
               .at = "setrlimit(",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "PrlimitAndPriority",
               .source = Cpu{.loop = "prlimit(0, RLIMIT_CPU, nullptr, nullptr);\nsetpriority(PRIO_PROCESS, 0, 19);"}.Build(),
               .at = "prlimit(",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "UcontextRegisters",
               .source = Cpu{.cpp_top = "void on_tick(int, siginfo_t*, void* ctx) {\n"
                                        "  auto* uc = static_cast<ucontext_t*>(ctx);\n  (void)uc;\n}"}
                             .Build(),
               .at = "auto* uc = static_cast<ucontext_t*>",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "Mprotect",
               .source = Cpu{.loop = "mprotect(out, 4096, 0);"}.Build(),
               .at = "mprotect(",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "AsmSyscall",
               .source = Cpu{.loop = "long ret;\nasm volatile(\"syscall\" : \"=a\"(ret) : \"a\"(39L) : \"rcx\", \"r11\");"}
                             .Build(),
               .at = "asm volatile(\"syscall\"",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "AsmInt80",
               .source = Cpu{.loop = "__asm__ __volatile__(\"int $0x80\" ::: \"memory\");"}.Build(),
               .at = "__asm__ __volatile__",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "AsmRawInstructionBytes",
               .source = Cpu{.loop = "__asm__(\".byte 0x0f, 0x05\");"}.Build(),
               .at = "__asm__(\".byte",
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.dynamic-loading",
               .tag = "DlIteratePhdr",
               .source = Cpu{.loop = "dl_iterate_phdr(nullptr, nullptr);"}.Build(),
               .at = "dl_iterate_phdr(",
               .backend = B::kCpu});
  // cpp.precision-downgrade: every spelling of half, bfloat16 and fp8.
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "NvHalfAliases",
               .source = Cuda{.device = "__device__ __nv_half2 pack(float2 v) { return __float22half2_rn(v); }"}.Build(),
               .at = "__device__ __nv_half2"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "HalfIntrinsic",
               .source = Cuda{.device = "__device__ float twice(float v) { return __low2float(__hmul2(__float2half2_rn(v), "
                                        "__float2half2_rn(2.f))); }"}
                             .Build(),
               .at = "__device__ float twice"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "RoundingConversion",
               .source = Cuda{.device = "__device__ unsigned short bits(float v) { return __half_as_ushort(__float2half_rz(v)); }"}
                             .Build(),
               .at = "__device__ unsigned short bits"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "Bfloat16PairConversion",
               .source = Cuda{.device = "__device__ nv_bfloat162 pack(float2 v) { return __float22bfloat162_rn(v); }"}.Build(),
               .at = "__device__ nv_bfloat162"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "TorchKFloat16",
               .source = Cuda{.host = "auto h = x.to(torch::kFloat16);"}.Build(),
               .at = "torch::kFloat16"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "ShortDtypeSpelling",
               .source = Cuda{.host = "auto h = x.to(torch::kF16);"}.Build(),
               .at = "torch::kF16"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "ScalarTypeBFloat16",
               .source = Cuda{.host = "auto h = x.to(at::ScalarType::BFloat16);"}.Build(),
               .at = "at::ScalarType::BFloat16"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "Fp8ScalarType",
               .source = Cuda{.host = "auto h = x.to(c10::kFloat8_e4m3fn);"}.Build(),
               .at = "c10::kFloat8_e4m3fn"});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "Tf32Switch",
               .source = Cuda{.host = "at::globalContext().setAllowTF32CuBLAS(true);"}.Build(),
               .at = "setAllowTF32CuBLAS"});
  // py.precision-downgrade in Triton kernels.
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonDotDefaultsToTf32",
               .source = std::string(kTritonMatmul),
               .at = "acc += tl.dot(a, b)",
               .backend = B::kTriton});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonDotTf32x3",
               .source = Replace(std::string(kTritonMatmul), "tl.dot(a, b)", "tl.dot(a, b, input_precision=\"tf32x3\")"),
               .at = "acc += tl.dot(a, b",
               .backend = B::kTriton});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonFloat16Cast",
               .source = Replace(Triton{}.Build(), "tl.maximum(x, 0.0)", "tl.maximum(x.to(tl.float16), 0.0)"),
               .at = "tl.float16",
               .backend = B::kTriton});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonFloat8Cast",
               .source = Replace(Triton{}.Build(), "tl.maximum(x, 0.0)", "tl.maximum(x.to(tl.float8e4b15), 0.0)"),
               .at = "tl.float8e4b15",
               .backend = B::kTriton});
  // py.evaluator-access: the dispatcher's and the profiler's state from Python.
  c.push_back({.rule = "py.evaluator-access",
               .tag = "DispatchKeyTls",
               .source = Cuda{.forward = "watched = torch._C._dispatch_tls_is_dispatch_key_included(\n"
                                         "    torch._C.DispatchKey.Python)"}
                             .Build(),
               .at = "watched = torch._C._dispatch_tls_is_dispatch_key_included"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "DispatchModeQuery",
               .source = Cuda{.module = "from torch._C import _get_dispatch_mode"}.Build(),
               .at = "from torch._C import _get_dispatch_mode"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "TorchFunctionModeQuery",
               .source = Cuda{.forward = "watched = torch._C._is_torch_function_mode_enabled()"}.Build(),
               .at = "torch._C._is_torch_function_mode_enabled"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "ProfilerQuery",
               .source = Cuda{.module = "PROFILED = torch.autograd.profiler._is_profiler_enabled"}.Build(),
               .at = "torch.autograd.profiler._is_profiler_enabled"});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "SysGettrace",
               .source = Cuda{.imports = "import sys", .forward = "traced = sys.gettrace() is not None"}.Build(),
               .at = "sys.gettrace"});
  // py.patch-library through names that may hold a module.
  c.push_back({.rule = "py.patch-library",
               .tag = "ThroughAParameter",
               .source = Cuda{.module = "def route(mod, hook):\n    original = mod.mul\n    mod.mul = hook\n    return original\n\n\n"
                                        "ORIGINAL = route(torch, print)"}
                             .Build(),
               .at = "    mod.mul = hook"});
  c.push_back({.rule = "py.patch-library",
               .tag = "ParameterNamedSelf",
               .source = Cuda{.module = "def route(self, hook):\n    self.mul = hook\n\n\nroute(torch, print)"}.Build(),
               .at = "self.mul = hook"});
  c.push_back({.rule = "py.patch-library",
               .tag = "SetattrOnAParameter",
               .source = Cuda{.module = "def put(obj, value):\n    setattr(obj, \"allclose\", value)\n\n\nput(torch, print)"}
                             .Build(),
               .at = "setattr(obj"});
  c.push_back({.rule = "py.patch-library",
               .tag = "LoopOverModules",
               .source = Cuda{.module = "for m in (torch, torch.nn.functional):\n    m.relu = print"}.Build(),
               .at = "m.relu = print"});
  c.push_back({.rule = "py.patch-library",
               .tag = "TypeOfATensor",
               .source = Cuda{.module = "type(torch.ones(1)).__eq__ = lambda a, b: True"}.Build(),
               .at = "type(torch.ones(1))"});
  c.push_back({.rule = "py.patch-library",
               .tag = "ContainerElement",
               .source = Cuda{.module = "MODS = [torch]\nMODS[0].mul = print"}.Build(),
               .at = "MODS[0].mul"});
  c.push_back({.rule = "py.patch-library",
               .tag = "ModuleHeldOnSelf",
               .source = Cuda{.init = "self.lib = torch\nself.lib.allclose = print"}.Build(),
               .at = "self.lib.allclose"});
  c.push_back({.rule = "py.patch-library",
               .tag = "ObjectSetattr",
               .source = Cuda{.module = "def put(o, v):\n    object.__setattr__(o, \"mul\", v)\n\n\nput(torch, print)"}
                             .Build(),
               .at = "object.__setattr__"});
  c.push_back({.rule = "py.patch-library",
               .tag = "ModuleKeptOnAnotherObject",
               .source = Cuda{.module = "class Holder:\n    def __init__(self, lib):\n        self.lib = lib\n\n"
                                        "    def patch(self):\n        self.lib.mul = print\n\n\nHolder(torch).patch()"}
                             .Build(),
               .at = "self.lib.mul = print"});
  c.push_back({.rule = "py.patch-library",
               .tag = "ModuleSetOnSelfBySetattr",
               .source = Cuda{.init = "setattr(self, \"lib\", torch)\nself.lib.allclose = print"}.Build(),
               .at = "self.lib.allclose = print"});
  c.push_back({.rule = "py.patch-library",
               .tag = "DeleteThroughAParameter",
               .source = Cuda{.module = "def drop(mod):\n    del mod.allclose"}.Build(),
               .at = "del mod.allclose"});
  return c;
}

std::string CaseName(std::string_view rule, std::string_view tag) {
  std::string name;
  bool upper = true;
  for (char ch : rule) {
    if (ch == '.' || ch == '-') {
      upper = true;
      continue;
    }
    name += upper && ch >= 'a' && ch <= 'z' ? static_cast<char>(ch - 'a' + 'A') : ch;
    upper = false;
  }
  return name + "_" + std::string(tag);
}

class RuleFiresTest : public ::testing::TestWithParam<FireCase> {};

TEST_P(RuleFiresTest, FiresAtItsLine) {
  const FireCase& c = GetParam();
  ASSERT_NE(FindRule(c.rule), nullptr) << "no rule " << c.rule;
  const CheckReport r =
      c.reported ? CheckReportedExtensions(CheckInput{c.source, c.reference, c.backend, c.precision}, *c.reported,
                                           Strict())
                 : CheckSource(c.source, c.backend, c.precision, c.reference);
  ASSERT_TRUE(HasRule(r, c.rule)) << c.rule << " did not fire on\n" << c.source << "findings:\n" << Describe(r);
  const uint32_t line = c.at.empty() ? 0 : LineOf(c.source, c.at);
  const auto lines = LinesOf(r, c.rule);
  EXPECT_TRUE(std::find(lines.begin(), lines.end(), line) != lines.end())
      << c.rule << " expected at line " << line << " (`" << c.at << "`) in\n"
      << c.source << "findings:\n"
      << Describe(r);
  // The profile grades it: strict rejects all of these but a stored workspace.
  const Finding* f = FindingOf(r, c.rule);
  EXPECT_EQ(f->severity, Strict().severity(c.rule));
}

INSTANTIATE_TEST_SUITE_P(Rules, RuleFiresTest, ::testing::ValuesIn(FireCases()),
                         [](const ::testing::TestParamInfo<FireCase>& param_info) {
                           return CaseName(param_info.param.rule, param_info.param.tag);
                         });

// ---- honest look-alikes ------------------------------------------------------------

struct QuietCase {
  std::string rule{};  // The rule the look-alike is about; it must not fire.
  std::string tag{};
  std::string source{};
  B backend = B::kCuda;
  P precision = P::kFp32;
  std::string reference{};
  // Other rules this look-alike may still trigger; any other finding fails.
  std::vector<std::string> allowed{};
};

void PrintTo(const QuietCase& c, std::ostream* os) { *os << c.rule << " / " << c.tag; }

std::vector<QuietCase> QuietCases() {
  std::vector<QuietCase> c;
  // cpp.aten-compute
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "TensorTypesAndAllocation",
               .source = Cuda{.host = "int64_t rows = x.size(0);\n"
                                      "auto w = torch::zeros({rows}, x.options());\n"
                                      "torch::Tensor e = torch::empty({rows, 4}, x.options());\n"
                                      "at::Tensor o = at::empty_like(x);"}
                             .Build()});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "CommentAndStringMention",
               .source = Cuda{.host = "// at::matmul would be a passthrough; x.matmul(x) too\n"
                                      "TORCH_CHECK(x.is_cuda(), \"at::matmul is not used here\");"}
                             .Build()});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AtParallelForOnCpu",
               .source = Cpu{.loop = "at::parallel_for(0, n, 2048, [&](int64_t b, int64_t e) {\n"
                                     "  for (int64_t i = b; i < e; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;\n"
                                     "});"}
                             .Build(),
               .backend = B::kCpu});
  // cpp.dynamic-loading
  c.push_back({.rule = "cpp.dynamic-loading",
               .tag = "CommentAndStringMention",
               .source = Cuda{.host = "// no dlopen or dlsym here\nTORCH_CHECK(x.numel() >= 0, \"dlopen\");"}.Build()});
  // cpp.graph-capture
  c.push_back({.rule = "cpp.graph-capture",
               .tag = "CommentAndLocalName",
               .source = Cuda{.host = "// no cudaGraphLaunch here\nint graph_nodes = 0;\n(void)graph_nodes;"}.Build()});
  // cpp.include-path
  c.push_back({.rule = "cpp.include-path",
               .tag = "TorchExtensionAndFp16HeaderAlone",
               .source = Cuda{.device = "#include <cuda_fp16.h>\n#include <ATen/cuda/CUDAContext.h>\n"
                                        "#include \"relu_utils.h\""}
                             .Build()});
  c.push_back(
      {.rule = "cpp.include-path",
       .tag = "OptimisationFlags",
       .source =
           Cuda{.load_args = ", extra_cflags=[\"-O3\"], extra_cuda_cflags=[\"-O3\", \"--use_fast_math\"]"}.Build()});
  // cpp.kernel-never-launched
  c.push_back({.rule = "cpp.kernel-never-launched",
               .tag = "CudaLaunchKernel",
               .source = Cuda{.device = "#include <ATen/cuda/CUDAContext.h>",
                              .launch = "const float* xp = x.data_ptr<float>();\n"
                                        "float* yp = y.data_ptr<float>();\n"
                                        "void* args[] = {&xp, &yp, &n};\n"
                                        "cudaLaunchKernel(reinterpret_cast<const void*>(&relu_kernel), "
                                        "dim3((n + 255) / 256), dim3(256), args, 0, at::cuda::getCurrentCUDAStream());"}
                             .Build()});
  c.push_back({.rule = "cpp.kernel-never-launched",
               .tag = "TemplateKernelLaunch",
               .source = Cuda{.kernel = "template <typename T>\n"
                                        "__global__ void relu_kernel(const T* x, T* y, int n) {\n"
                                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                        "  if (i < n) y[i] = x[i] > T(0) ? x[i] : T(0);\n"
                                        "}\n",
                              .launch = "relu_kernel<float><<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), "
                                        "y.data_ptr<float>(), n);"}
                             .Build()});
  // cpp.precision-downgrade
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "Fp16HeaderAloneInFp32",
               .source = Cuda{.device = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>"}.Build()});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "HalfInFp16Task",
               .source = Cuda{.device = "#include <cuda_fp16.h>\n"
                                        "__device__ __half to_half(float v) { return __float2half(v); }"}
                             .Build(),
               .precision = P::kFp16});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "Bf16InBf16Task",
               .source = Cuda{.device = "#include <cuda_bf16.h>\n"
                                        "__device__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }"}
                             .Build(),
               .precision = P::kBf16});
  // cpp.process-or-io
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "CommentAndStringMention",
               .source = Cuda{.host = "// never system() or fopen()\n"
                                      "TORCH_CHECK(x.is_contiguous(), \"fopen/system are not used\");"}
                             .Build()});
  // cpp.side-stream
  c.push_back({.rule = "cpp.side-stream",
               .tag = "CurrentStream",
               .source = Cuda{.device = "#include <ATen/cuda/CUDAContext.h>",
                              .host = "auto stream = at::cuda::getCurrentCUDAStream();",
                              .launch = "relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), "
                                        "y.data_ptr<float>(), n);"}
                             .Build()});
  // cpp.static-cache
  c.push_back({.rule = "cpp.static-cache",
               .tag = "ConstantsAndFunctions",
               .source = Cuda{.device = "static const int kBlock = 256;\n"
                                        "static constexpr float kEps = 1e-6f;\n"
                                        "constexpr int kWarp = 32;\n"
                                        "__constant__ float kScale[4];\n"
                                        "static __device__ float f(float v) { return v * v; }\n"
                                        "static inline int div_up(int a, int b) { return (a + b - 1) / b; }\n"
                                        "template <typename T>\n"
                                        "__device__ T clamp_zero(T v) { return v > T(0) ? v : T(0); }"}
                             .Build()});
  c.push_back({.rule = "cpp.static-cache",
               .tag = "LocalsAndStructs",
               .source = Cuda{.device = "namespace {\nconstexpr int kTile = 16;\n"
                                        "struct Params {\n  int n;\n  float* out;\n};\n}  // namespace",
                              .host = "int64_t count = 0;\nfloat* scratch = nullptr;\n(void)count;\n(void)scratch;"}
                             .Build()});
  // cpp.thread
  c.push_back({.rule = "cpp.thread",
               .tag = "OpenMpPragma",
               .source = Cpu{.loop = "#pragma omp parallel for\n"
                                     "for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;",
                             .load_args = ", extra_cflags=[\"-O3\", \"-fopenmp\"], extra_ldflags=[\"-fopenmp\"]"}
                             .Build(),
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.thread",
               .tag = "ThreadIndexNames",
               .source = Cuda{.host = "int thread = 0;\n(void)thread;  // threadIdx is not std::thread"}.Build()});
  // cpp.vendor-library
  c.push_back(
      {.rule = "cpp.vendor-library",
       .tag = "HandleTypeAndComment",
       .source =
           Cuda{.host = "// cublasSgemm would do the work\ncublasHandle_t handle = nullptr;\n(void)handle;"}.Build()});
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "ThrustPointerCast",
               .source = Cuda{.host = "auto p = thrust::device_pointer_cast(x.data_ptr<float>());\n(void)p;"}.Build()});
  // kernel.none
  c.push_back({.rule = "kernel.none", .tag = "CudaKernel", .source = Cuda{}.Build()});
  c.push_back({.rule = "kernel.none", .tag = "CpuExtension", .source = Cpu{}.Build(), .backend = B::kCpu});
  c.push_back({.rule = "kernel.none", .tag = "TritonKernel", .source = Triton{}.Build(), .backend = B::kTriton});
  c.push_back({.rule = "kernel.none", .tag = "TritonKernelOnCudaBackend", .source = Triton{}.Build()});
  // py.call-counter
  c.push_back({.rule = "py.call-counter",
               .tag = "LocalCounter",
               .source = Cuda{.forward = "steps = 0\nfor _ in range(2):\n    steps += 1"}.Build()});
  c.push_back({.rule = "py.call-counter",
               .tag = "CounterInInit",
               .source = Cuda{.init = "self.calls = 0\nself.calls += 1"}.Build()});
  // py.concurrency
  c.push_back({.rule = "py.concurrency",
               .tag = "Mentions",
               .source = Cuda{.module = "# threading and multiprocessing are not used\nNOTE = \"import threading\"",
                              .forward = "\"\"\"No threading here.\"\"\""}
                             .Build()});
  // py.cross-call-cache
  c.push_back({.rule = "py.cross-call-cache",
               .tag = "LocalContainers",
               .source = Cuda{.forward = "parts = []\nparts.append(x)\nlookup = {}\nlookup[0] = x\n"
                                         "y = ext.relu(x)\ny[0] = 0",
                              .ret = "return y"}
                             .Build()});
  c.push_back(
      {.rule = "py.cross-call-cache",
       .tag = "CacheFilledInInit",
       .source =
           Cuda{.init = "self.cache = {}\nself.cache[0] = None\nself.names = []\nself.names.append(\"a\")"}.Build()});
  // py.defines-get-inputs
  c.push_back({.rule = "py.defines-get-inputs",
               .tag = "SameSizeAsReference",
               .source = Cuda{.module = "N = 1024"}.Build(),
               .reference = std::string(kReference)});
  c.push_back({.rule = "py.defines-get-inputs",
               .tag = "SimilarHelperName",
               .source = Cuda{.module = "def get_input_shape(t):\n    return t.shape"}.Build()});
  // py.dynamic-code
  c.push_back({.rule = "py.dynamic-code",
               .tag = "GetattrLiteral",
               .source = Cuda{.init = "self.scale = 1.0", .forward = "scale = getattr(self, \"scale\", 1.0)"}.Build()});
  c.push_back({.rule = "py.dynamic-code",
               .tag = "EvalMethodAndMentions",
               .source = Cuda{.module = "HELP = \"eval(x) and exec(y) are banned\"", .init = "self.eval()"}.Build()});
  // py.empty-forward
  c.push_back({.rule = "py.empty-forward",
               .tag = "DocstringAndReturn",
               .source = Cuda{.forward = "\"\"\"Applies the relu kernel.\"\"\""}.Build()});
  // py.evaluator-access
  c.push_back({.rule = "py.evaluator-access",
               .tag = "SysVersionCheck",
               .source = Cuda{.imports = "import sys",
                              .module = "if sys.version_info < (3, 8):\n    raise RuntimeError(\"old python\")"}
                             .Build()});
  c.push_back({.rule = "py.evaluator-access",
               .tag = "Mentions",
               .source = Cuda{.module = "# inspect and gc are not used\nNOTE = \"globals()\""}.Build()});
  // py.file-io
  c.push_back({.rule = "py.file-io",
               .tag = "OsQueries",
               .source = Cuda{.imports = "import os",
                              .module = "WORKERS = os.cpu_count()\nNAME = os.path.join(\"a\", \"b\")\n"
                                        "# open() is not used\nNOTE = \"open\""}
                             .Build()});
  // py.forward-skips-kernel
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "ViaHelper",
               .source = Cuda{.module = "def run(t):\n    return ext.relu(t)", .ret = "return run(x)"}.Build()});
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "ViaAttribute",
               .source = Cuda{.init = "self.op = ext.relu", .ret = "return self.op(x)"}.Build()});
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "ViaStoredModule",
               .source = Cuda{.init = "self.ext = ext", .ret = "return self.ext.relu(x)"}.Build()});
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "ViaLambda",
               .source = Cuda{.module = "relu = lambda t: ext.relu(t)", .ret = "return relu(x)"}.Build()});
  c.push_back(
      {.rule = "py.forward-skips-kernel",
       .tag = "ViaMethod",
       .source =
           Cuda{.ret = "return self.apply(x)", .methods = "def apply(self, t):\n    return ext.relu(t)"}.Build()});
  c.push_back(
      {.rule = "py.forward-skips-kernel", .tag = "TritonWrapper", .source = Triton{}.Build(), .backend = B::kTriton});
  // py.forward-stores-state
  c.push_back({.rule = "py.forward-stores-state",
               .tag = "StateSetInInit",
               .source = Cuda{.init = "self.buf = None\nself.scale = 2.0"}.Build()});
  // py.graph-capture
  c.push_back({.rule = "py.graph-capture",
               .tag = "SynchronizeAndMentions",
               .source = Cuda{.forward = "torch.cuda.synchronize()  # no torch.compile or CUDA graphs"}.Build()});
  // py.identity-key
  c.push_back({.rule = "py.identity-key",
               .tag = "AlignmentCheck",
               .source = Cuda{.forward = "assert x.data_ptr() % 16 == 0\nif x.data_ptr() % 16 != 0:\n"
                                         "    x = x.contiguous()"}
                             .Build()});
  c.push_back({.rule = "py.identity-key",
               .tag = "Mentions",
               .source = Cuda{.forward = "# id(x) or x.data_ptr() would be a replay key"}.Build()});
  // py.library-compute-in-forward
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "CommentsDocstringsStrings",
               .source = Cuda{.forward = "\"\"\"uses torch.mm\"\"\"\n# torch.matmul\nnote = \"a @ b\"\n"
                                         "other = 'torch.relu(x)'"}
                             .Build()});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "UnusedFunctionalImport",
               .source = Cuda{.imports = "import torch.nn.functional as F"}.Build()});
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "LocalVariableNamedF",
       .source = Cuda{.forward = "F = x.contiguous()\nflat = F.view(-1)", .ret = "return ext.relu(flat)"}.Build()});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "LocalFShadowsImportedF",
               .source = Cuda{.imports = "import torch.nn.functional as F",
                              .forward = "F = x.contiguous()\nflat = F.view(-1)",
                              .ret = "return ext.relu(flat)"}
                             .Build()});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "AllocationInForward",
               .source = Cuda{.forward = "y = torch.empty_like(x)\nz = torch.zeros(4, device=x.device)\n"
                                         "w = torch.cat([y, z.view(-1)]).reshape(-1)"}
                             .Build()});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "HelperNotReached",
               .source = Cuda{.module = "def reference_relu(t):\n    return torch.relu(t)"}.Build()});
  c.push_back(
      {.rule = "py.library-compute-in-forward",
       .tag = "PadIsLayout",
       .source = Cuda{.imports = "import torch.nn.functional as F", .forward = "x = F.pad(x, (0, 1))"}.Build()});
  // py.library-module-in-forward
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ParametersAndContainers",
               .source = Cuda{.init = "self.weight = nn.Parameter(torch.ones(16))\nself.blocks = nn.ModuleList()",
                              .forward = "x = x * self.weight"}
                             .Build()});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayerOnlyHoldsWeights",
               .source = Cuda{.init = "self.ref = nn.Linear(4, 4)", .forward = "w = self.ref.weight"}.Build()});
  // py.matmul-operator
  c.push_back(
      {.rule = "py.matmul-operator",
       .tag = "DecoratorsAndStrings",
       .source = Cuda{.forward = "note = \"a @ b\"  # a @ b", .methods = "@staticmethod\ndef helper(t):\n    return t"}
                     .Build()});
  // py.network
  c.push_back({.rule = "py.network",
               .tag = "Mentions",
               .source = Cuda{.module = "URL = \"http://example.com/socket\"  # no requests"}.Build()});
  // py.patch-library
  c.push_back({.rule = "py.patch-library",
               .tag = "OwnObjects",
               .source = Cuda{.module = "class Config:\n    block = 256\n\n\ncfg = Config()\ncfg.block = 128",
                              .init = "self.scale = 2.0"}
                             .Build()});
  c.push_back(
      {.rule = "py.patch-library",
       .tag = "ReadsLibraryAttributes",
       .source = Cuda{.module = "EPS = torch.finfo(torch.float32).eps\nCAP = torch.cuda.is_available()"}.Build()});
  // py.precision-downgrade
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "DtypeComparison",
               .source = Cuda{.forward = "if x.dtype == torch.float16:\n    raise TypeError(\"expected fp32\")\n"
                                         "assert x.dtype != torch.bfloat16\nassert x.dtype is not torch.half"}
                             .Build()});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "DtypeInTuple",
               .source = Cuda{.forward = "if x.dtype in (torch.float16, torch.bfloat16):\n"
                                         "    raise TypeError(\"expected fp32\")"}
                             .Build()});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "HalfInFp16Task",
               .source = Cuda{.forward = "x = x.half()\nw = torch.empty(4, dtype=torch.float16)"}.Build(),
               .precision = P::kFp16});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "Bf16InBf16Task",
               .source = Cuda{.forward = "x = x.bfloat16()\nw = torch.empty(4, dtype=torch.bfloat16)"}.Build(),
               .precision = P::kBf16});
  // py.process
  c.push_back(
      {.rule = "py.process",
       .tag = "OsEnviron",
       .source = Cuda{.imports = "import os", .module = "DEBUG = os.environ.get(\"KBOX_DEBUG\", \"0\")"}.Build()});
  // py.reference-reuse
  c.push_back({.rule = "py.reference-reuse",
               .tag = "OwnClassesWithReference",
               .source = Cuda{.module = "# unlike Model, this uses a kernel\n"
                                        "class ReluBlock(nn.Module):\n    \"\"\"Model-free.\"\"\"\n    pass"}
                             .Build(),
               .reference = std::string(kReference)});
  c.push_back({.rule = "py.reference-reuse",
               .tag = "BaseDefinedInCandidate",
               .source = Cuda{.module = "class Base(nn.Module):\n    pass", .base = "Base"}.Build(),
               .reference = std::string(kReference)});
  // py.side-stream
  c.push_back({.rule = "py.side-stream",
               .tag = "CurrentStream",
               .source = Cuda{.forward = "torch.cuda.current_stream().synchronize()"}.Build()});
  // py.tensor-method-compute
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "LayoutMethods",
               .source = Cuda{.forward = "flat = x.contiguous().view(-1)\nrows = x.size(0)\nshape = x.shape\n"
                                         "x = x.reshape(rows, -1).to(x.device)"}
                             .Build()});
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "ComputeOutsideForward",
               .source = Cuda{.module = "def check(t):\n    return t.sum()"}.Build()});
  // py.tensor-subclass
  c.push_back(
      {.rule = "py.tensor-subclass",
       .tag = "IsinstanceCheck",
       .source =
           Cuda{.forward = "if not isinstance(x, torch.Tensor):\n    raise TypeError(\"expected a tensor\")"}.Build()});
  // py.try-fallback
  c.push_back({.rule = "py.try-fallback",
               .tag = "ModuleLevelImportError",
               .source = Cuda{.imports = "try:\n    import triton\nexcept ImportError:\n    triton = None"}.Build()});
  c.push_back({.rule = "py.try-fallback",
               .tag = "ExceptOnlyReraises",
               .source = Cuda{.forward = "try:\n    y = ext.relu(x)\nexcept RuntimeError as e:\n"
                                         "    raise RuntimeError(\"relu kernel failed\") from e\n"
                                         "except Exception:\n    raise",
                              .ret = "return y"}
                             .Build()});
  // py.unparseable
  c.push_back({.rule = "py.unparseable",
               .tag = "FStringsPep701",
               .source = Cuda{.module = "def describe(t, w=12):\n"
                                        "    name = \"relu\"\n"
                                        "    return (f\"{name!r:>{w}}\" + f\"{'a' + \"b\"}\" + f\"{f'{t.shape[0]}'}\"\n"
                                        "            + f\"{{literal}} {t.dtype=} {w:{'>'}{w}}\" + f'''{name\n}''')",
                              .forward = "label = describe(x)"}
                             .Build()});
  c.push_back({.rule = "py.unparseable",
               .tag = "LineContinuations",
               .source = Cuda{.module = "SIZE = 1 + \\\n    2",
                              .forward = "rows = x.shape[0] \\\n    + 0\nflag = (rows >\n        0)"}
                             .Build()});
  c.push_back({.rule = "py.unparseable", .tag = "TabIndentation", .source = WithTabs(Cuda{}.Build())});
  c.push_back({.rule = "py.unparseable", .tag = "CrLfLineEnds", .source = Replace(Cuda{}.Build(), "\n", "\r\n")});
  c.push_back(
      {.rule = "py.unparseable",
       .tag = "NonAsciiInStringsAndComments",
       .source =
           Cuda{.module = "# \xef\xbd\x94\xef\xbd\x8f\xef\xbd\x92\xef\xbd\x83\xef\xbd\x88 in a comment\n"
                          "GREETING = \"h\xc3\xa9llo \xef\xbd\x94\xef\xbd\x8f\xef\xbd\x92\xef\xbd\x83\xef\xbd\x88\""}
               .Build()});
  c.push_back({.rule = "py.unparseable",
               .tag = "ModernSyntax",
               .source = Cuda{.module = "def pick(v):\n"
                                        "    match v:\n"
                                        "        case [a, *rest]:\n"
                                        "            return a\n"
                                        "        case _:\n"
                                        "            return None\n"
                                        "\n"
                                        "async def nothing():\n"
                                        "    return None\n"
                                        "\n"
                                        "if (n := 3) > 2:\n"
                                        "    pass",
                              .forward = "scale = (lambda v: v)(1.0)"}
                             .Build()});
  // py.unresolved-extension-source
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "ParenthesisedStringAndList",
               .source = Cuda{.cpp_def = "cpp_src = (\n    \"torch::Tensor relu(\"\n    \"torch::Tensor x);\"\n)",
                              .cuda_arg = "[cuda_src]"}
                             .Build()});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "DedentAndJoin",
               .source = Cuda{.imports = "import textwrap",
                              .cpp_arg = "\"\".join([cpp_src])",
                              .cuda_arg = "textwrap.dedent(cuda_src)"}
                             .Build()});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "ConcatenationAndPercent",
               .source = Cuda{.cpp_arg = "cpp_src + \"\\n\"", .cuda_arg = "\"// relu %d\\n\" % 1 + cuda_src"}.Build()});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "MethodOnNamedLiteral",
               .source = Cuda{.cuda_arg = "cuda_src.replace(\"BLOCK\", \"256\")"}.Build()});
  c.push_back(
      {.rule = "py.unresolved-extension-source",
       .tag = "FString",
       .source = Cuda{.cpp_def = "RET = \"torch::Tensor\"\ncpp_src = f\"{RET} relu(torch::Tensor x);\""}.Build()});
  // More honest patterns.
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AtCeilDiv",
               .source = Cuda{.host = "const int blocks = static_cast<int>(at::ceil_div(x.numel(), int64_t{256}));\n"
                                      "(void)blocks;"}
                             .Build()});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "AtGetNumThreadsOnCpu",
               .source = Cpu{.loop = "const int threads = at::get_num_threads();\n(void)threads;\n"
                                     "for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;"}
                             .Build(),
               .backend = B::kCpu});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "VariableNamedHalf",
               .source = Cuda{.device = "__device__ float pair_sum(const float* v, int n) {\n"
                                        "  int half = n / 2;\n"
                                        "  return v[0] + v[half];\n"
                                        "}"}
                             .Build()});
  c.push_back({.rule = "cpp.thread",
               .tag = "HardwareConcurrencyOnCpu",
               .source = Cpu{.cpp_top = "#include <thread>",
                             .loop = "const unsigned workers = std::thread::hardware_concurrency();\n(void)workers;\n"
                                     "for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;"}
                             .Build(),
               .backend = B::kCpu});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "TorchVersionString",
               .source = Cuda{.module = "CUDA_VERSION = torch.version.cuda"}.Build()});
  c.push_back({.rule = "kernel.none",
               .tag = "LoadInlineInsideHelper",
               .source = HelperBuiltCpu(kHonestCpuBody),
               .backend = B::kCpu});
  c.push_back({.rule = "py.forward-skips-kernel",
               .tag = "LazyExtensionLoad",
               .source = std::string(kLazyExtension),
               .allowed = {"py.forward-stores-state"}});
  c.push_back({.rule = "kernel.none", .tag = "KernelBenchExample", .source = std::string(kKernelBenchExample)});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "AutotunedTritonMatmul",
               .source = Replace(std::string(kTritonMatmul), "tl.dot(a, b)", "tl.dot(a, b, input_precision=\"ieee\")"),
               .backend = B::kTriton});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "TemplateKernelWithFloatDispatch",
               .source = Cuda{.kernel = "template <typename scalar_t>\n"
                                        "__global__ void relu_kernel(const scalar_t* x, scalar_t* y, int n) {\n"
                                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                        "  if (i < n) y[i] = x[i] > scalar_t(0) ? x[i] : scalar_t(0);\n"
                                        "}\n",
                              .launch = "AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"relu\", ([&] {\n"
                                        "  relu_kernel<scalar_t><<<(n + 255) / 256, 256>>>(\n"
                                        "      x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);\n"
                                        "}));\n"
                                        "C10_CUDA_KERNEL_LAUNCH_CHECK();"}
                             .Build()});
  c.push_back({.rule = "py.unresolved-extension-source",
               .tag = "FormatTemplateAssignedToName",
               .source = std::string(kFormatTemplate)});
  c.push_back({.rule = "py.library-compute-in-forward",
               .tag = "NoGradDecoratorAndBuffers",
               .source = Cuda{.init = "self.register_buffer(\"scale\", torch.ones(1))",
                              .forward = "with torch.cuda.device(x.device):\n    y = ext.relu(x * self.scale)",
                              .ret = "return y",
                              .methods = "@torch.no_grad()\ndef reset(self):\n    self.scale.fill_(1.0)"}
                             .Build()});
  // py.library-module-in-forward: layers kept for their weights, own modules.
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "WeightsAndBiasPassedToTheKernel",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)",
                              .forward = "w, b = self.fc.weight, self.fc.bias\nshape = (self.fc.out_features, w.shape[1])"}
                             .Build()});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "OwnModuleForwardByName",
               .source = Cuda{.module = "class Block(nn.Module):\n    def forward(self, t):\n        return ext.relu(t)",
                              .init = "self.block = Block()",
                              .forward = "x = self.block.forward(x)\nx = self.block(x)"}
                             .Build()});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayerSubclassWithItsOwnForward",
               .source = Cuda{.module = "class Dense(nn.Linear):\n    def forward(self, t):\n        return ext.relu(t)",
                              .init = "self.fc = Dense(16, 16)",
                              .forward = "x = self.fc(x)"}
                             .Build()});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "ModuleListOfWeightHolders",
               .source = Cuda{.init = "self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(2)])",
                              .forward = "for layer in self.layers:\n    w, b = layer.weight, layer.bias\n"
                                         "for i, layer in enumerate(self.layers):\n    b = self.layers[i].bias\n"
                                         "depth = len(self.layers)"}
                             .Build()});
  c.push_back({.rule = "py.library-module-in-forward",
               .tag = "LayerQueries",
               .source = Cuda{.init = "self.fc = nn.Linear(16, 16)",
                              .forward = "if not isinstance(self.fc, nn.Linear) or not hasattr(self.fc, \"weight\"):\n"
                                         "    raise TypeError(\"expected a linear layer\")\n"
                                         "w = getattr(self.fc, \"weight\")"}
                             .Build()});
  // py.tensor-method-compute: in-place methods that only move data.
  c.push_back({.rule = "py.tensor-method-compute",
               .tag = "InPlaceCopiesAndFills",
               .source = Cuda{.forward = "y = torch.empty_like(x)\ny.zero_()\ny.copy_(x)\ny.fill_(1.0)\n"
                                         "y.requires_grad_(False)",
                              .ret = "return ext.relu(y)"}
                             .Build()});
  // cpp.aten-compute: unqualified calls that are the candidate's own.
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "OwnFunctionNamedMatmul",
               .source = Cuda{.device = "torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {\n"
                                        "  return torch::empty({a.size(0), b.size(1)}, a.options());\n}",
                              .host = "auto z = matmul(x, x.t());\n(void)z;"}
                             .Build()});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "MathOnFloatsNamedLikeTensors",
               .source = Cuda{.kernel = "__global__ void relu_kernel(const float* in, float* y, int n) {\n"
                                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                        "  if (i >= n) return;\n"
                                        "  float x = in[i];\n"
                                        "  float e = exp(x) + sqrt(fabsf(x)) + tanh(x) + pow(x, 2.f) + max(x, 0.f);\n"
                                        "  y[i] = x > 0.f ? x : 0.f * e;\n"
                                        "}\n"}
                             .Build()});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "HelpersMacrosLambdasAndGuards",
               .source = Cuda{.device = "#include <c10/cuda/CUDAGuard.h>\n"
                                        "#define CHECK_INPUT(t) TORCH_CHECK(t.is_cuda(), #t \" must be CUDA\")\n"
                                        "#define check_rows(t) TORCH_CHECK(t.dim() >= 1, \"rows\")\n"
                                        "void check(const torch::Tensor& t) { TORCH_CHECK(t.numel() >= 0, \"empty\"); }\n"
                                        "template <typename T> T same(T v) { return v; }",
                              .host = "CHECK_INPUT(x);\ncheck_rows(x);\ncheck(x);\n"
                                      "const at::cuda::OptionalCUDAGuard device_guard(device_of(x));\n"
                                      "auto run = [&](torch::Tensor t) { return t; };\n"
                                      "auto z = same(run(x));\n"
                                      "std::vector<torch::Tensor> outs{z};\n"
                                      "(void)outs;"}
                             .Build()});
  c.push_back({.rule = "cpp.aten-compute",
               .tag = "TorchNnModuleBaseAndOptions",
               .source = Cpu{.cpp_top = "struct Scale : torch::nn::Module {\n  float s = 2.f;\n};\n"
                                        "using Opts = torch::nn::LinearOptions;",
                             .loop = "for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;"}
                             .Build(),
               .backend = B::kCpu});
  // cpp.dispatcher
  c.push_back({.rule = "cpp.dispatcher",
               .tag = "OwnNamesAndDispatchMacros",
               .source = Cuda{.kernel = "template <typename scalar_t>\n"
                                        "__global__ void relu_kernel(const scalar_t* x, scalar_t* y, int n) {\n"
                                        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                        "  if (i < n) y[i] = x[i] > scalar_t(0) ? x[i] : scalar_t(0);\n"
                                        "}\n",
                              .device = "// no c10::Dispatcher, no redispatch, no TORCH_LIBRARY here\n"
                                        "struct Router {\n  int redispatch(int v) const { return v; }\n};",
                              .host = "Router router;\nint dispatch_key = router.redispatch(1);\n(void)dispatch_key;",
                              .launch = "AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"relu\", ([&] {\n"
                                        "  relu_kernel<scalar_t><<<(n + 255) / 256, 256>>>(\n"
                                        "      x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);\n"
                                        "}));"}
                             .Build()});
  // cpp.vendor-library
  c.push_back({.rule = "cpp.vendor-library",
               .tag = "OwnDotProductNamedLikeBlas",
               .source = Cpu{.cpp_top = "#define CSWAP(a, b) { float t_ = a; a = b; b = t_; }\n"
                                        "float sdot(const float* a, const float* b, int64_t n) {\n"
                                        "  float s = 0.f;\n  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];\n  return s;\n}",
                             .loop = "float lo = 1.f, hi = 0.f;\nCSWAP(lo, hi);\n(void)lo;\n"
                                     "const float self_dot = sdot(in, in, n);\n"
                                     "for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f * self_dot;"}
                             .Build(),
               .backend = B::kCpu});
  // cpp.thread
  c.push_back({.rule = "cpp.thread",
               .tag = "ParallelForJoinsBeforeReturning",
               .source = Cpu{.loop = "at::parallel_for(0, n, 2048, [&](int64_t b, int64_t e) {\n"
                                     "  for (int64_t i = b; i < e; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;\n"
                                     "});\n"
                                     "const int pool_size = at::get_num_interop_threads();\n(void)pool_size;"}
                             .Build(),
               .backend = B::kCpu});
  // cpp.process-or-io
  c.push_back({.rule = "cpp.process-or-io",
               .tag = "InlinePtxAndNamesLikeSignals",
               .source = Cuda{.device = "__device__ unsigned lane_id() {\n  unsigned lane;\n"
                                        "  asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane));\n  return lane;\n}",
                              .host = "TORCH_CHECK(x.numel() >= 0, \"no syscall, signal() or alarm() here\");\n"
                                      "float signal = 1.f, alarm_level = 0.f;\n(void)signal;\n(void)alarm_level;"}
                             .Build()});
  // cpp.precision-downgrade
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "HostDeviceQualifiersAndFloatNames",
               .source = Cuda{.device = "__host__ __device__ float hadd_like(float a, float b) { return a + b; }\n"
                                        "__device__ float half_sum(const float* v, int n) { int half_n = n / 2; "
                                        "return hadd_like(v[0], v[half_n]); }",
                              .host = "TORCH_CHECK(x.scalar_type() == torch::kFloat32, \"fp32 only\");"}
                             .Build()});
  c.push_back({.rule = "cpp.precision-downgrade",
               .tag = "HalfAliasesInFp16Task",
               .source = Cuda{.device = "#include <cuda_fp16.h>\n"
                                        "__device__ __nv_half2 pack(float2 v) { return __float22half2_rn(v); }",
                              .host = "auto h = x.to(torch::kFloat16);\n(void)h;"}
                             .Build(),
               .precision = P::kFp16});
  // py.precision-downgrade in Triton
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonDotIeee",
               .source = Replace(std::string(kTritonMatmul), "tl.dot(a, b)", "tl.dot(a, b, input_precision=\"ieee\")"),
               .backend = B::kTriton});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonDotWithoutTf32",
               .source = Replace(std::string(kTritonMatmul), "tl.dot(a, b)", "tl.dot(a, b, allow_tf32=False)"),
               .backend = B::kTriton});
  c.push_back({.rule = "py.precision-downgrade",
               .tag = "TritonDotInFp16Task",
               .source = std::string(kTritonMatmul),
               .backend = B::kTriton,
               .precision = P::kFp16});
  // py.evaluator-access
  c.push_back({.rule = "py.evaluator-access",
               .tag = "ProfilerAnnotation",
               .source = Cuda{.imports = "from torch.profiler import record_function",
                              .forward = "with torch.profiler.record_function(\"relu\"):\n    y = ext.relu(x)\n"
                                         "with record_function(\"again\"):\n    y = ext.relu(y)",
                              .ret = "return y"}
                             .Build()});
  // py.patch-library
  c.push_back({.rule = "py.patch-library",
               .tag = "OwnInstancesContextsAndParameters",
               .source = Cuda{.module = "class Config:\n    block = 256\n\n\n"
                                        "cfg = Config()\nsetattr(cfg, \"block\", 128)\n"
                                        "layer = nn.Linear(4, 4)\nlayer.bias = None\n\n\n"
                                        "def helper(t):\n    return t\n\n\nhelper.calls = 0\n\n\n"
                                        "class Scale(torch.autograd.Function):\n"
                                        "    @staticmethod\n"
                                        "    def forward(ctx, t, s):\n"
                                        "        ctx.s = s\n"
                                        "        return ext.relu(t)",
                              .init = "self.cfg = Config()\nself.cfg.block = 64\nsetattr(self, \"scale\", 2.0)\n"
                                      "self.register_buffer(\"bias\", torch.zeros(4))\nself.bias.requires_grad = False\n"
                                      "for p in self.parameters():\n    p.requires_grad = False"}
                             .Build()});
  return c;
}

class RuleQuietTest : public ::testing::TestWithParam<QuietCase> {};

TEST_P(RuleQuietTest, DoesNotFireOnHonestLookAlike) {
  const QuietCase& c = GetParam();
  ASSERT_NE(FindRule(c.rule), nullptr) << "no rule " << c.rule;
  const CheckReport r = CheckSource(c.source, c.backend, c.precision, c.reference);
  EXPECT_FALSE(HasRule(r, c.rule)) << c.rule << " fired on an honest candidate\n" << c.source << Describe(r);
  for (const Finding& f : r.findings) {
    EXPECT_TRUE(std::find(c.allowed.begin(), c.allowed.end(), f.rule_id) != c.allowed.end())
        << "unexpected " << f.rule_id << " at line " << f.line << " (`" << f.snippet << "`) in\n"
        << c.source << Describe(r);
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, RuleQuietTest, ::testing::ValuesIn(QuietCases()),
                         [](const ::testing::TestParamInfo<QuietCase>& param_info) {
                           return CaseName(param_info.param.rule, param_info.param.tag);
                         });

// ---- the tables cover the catalogue -------------------------------------------------

TEST(StaticCheckRulesCoverageTest, EveryRuleHasAFiringAndAQuietCase) {
  std::set<std::string, std::less<>> fires, quiet;
  for (const FireCase& c : FireCases()) {
    EXPECT_NE(FindRule(c.rule), nullptr) << "fire case names unknown rule " << c.rule;
    fires.insert(c.rule);
  }
  for (const QuietCase& c : QuietCases()) {
    EXPECT_NE(FindRule(c.rule), nullptr) << "quiet case names unknown rule " << c.rule;
    quiet.insert(c.rule);
  }
  size_t static_rules = 0;
  for (const RuleInfo& rule : RuleCatalog()) {
    if (rule.id.starts_with("run.")) continue;  // The run stage's; tests/harness covers them.
    ++static_rules;
    EXPECT_TRUE(fires.contains(rule.id)) << rule.id << " has no case where it fires";
    EXPECT_TRUE(quiet.contains(rule.id)) << rule.id << " has no honest look-alike";
  }
  EXPECT_EQ(static_rules, 39u);
}

// ---- what a finding says ----------------------------------------------------------

TEST(StaticCheckRulesTest, LazyWorkspaceIsSuspiciousNeverRejected) {
  const std::string src = Cuda{.init = "self.buf = None",
                               .forward =
                                   "if self.buf is None or self.buf.shape != x.shape:\n"
                                   "    self.buf = torch.empty(x.shape, device=x.device, dtype=x.dtype)"}
                              .Build();
  const CheckReport r = CheckSource(src);
  const Finding* f = FindingOf(r, "py.forward-stores-state");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->severity, Severity::kSuspicious);
  EXPECT_EQ(f->line, LineOf(src, "self.buf = torch.empty"));
  EXPECT_FALSE(r.rejected()) << Describe(r);
  EXPECT_EQ(r.findings.size(), 1u) << Describe(r);
}

TEST(StaticCheckRulesTest, TritonWrapperCandidateGetsNoRejectOnTriton) {
  // The kernel is reached through a module function and kernel[grid](...);
  // the wrapper's allocation and numel() are not compute.
  const std::string src = Triton{.forward = "x = x.contiguous()"}.Build();
  const CheckReport r = CheckSource(src, B::kTriton);
  EXPECT_FALSE(r.rejected()) << src << Describe(r);
  EXPECT_TRUE(r.findings.empty()) << Describe(r);
}

TEST(StaticCheckRulesTest, SnippetIsTheTrimmedSourceLine) {
  const std::string src = Cuda{.forward = "x = x @ x   "}.Build();
  const CheckReport r = CheckSource(src);
  const Finding* f = FindingOf(r, "py.matmul-operator");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->snippet, "x = x @ x");
  EXPECT_EQ(f->column, ColumnOf(src, "@ x"));
  EXPECT_FALSE(f->message.empty());
  EXPECT_EQ(f->severity, Severity::kReject);
}

TEST(StaticCheckRulesTest, CppFindingOnASingleLineStringKeepsItsPythonColumn) {
  // Line 1 of a C++ string starts where the string's text does in candidate.py.
  const std::string src = Cuda{.host = "auto z = x;",
                               .cpp_def =
                                   "cpp_src = \"torch::Tensor relu(torch::Tensor x); "
                                   "torch::Tensor mm2(torch::Tensor a) { return at::matmul(a, a); }\""}
                              .Build();
  const CheckReport r = CheckSource(src);
  const Finding* f = FindingOf(r, "cpp.aten-compute");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->line, LineOf(src, "at::matmul(a, a)"));
  EXPECT_EQ(f->column, ColumnOf(src, "matmul(a, a)"));
}

TEST(StaticCheckRulesTest, CppFindingAfterEscapedNewlinesStaysOnTheStringLine) {
  // "\n" escapes make C++ lines that all come from one candidate.py line.
  const std::string src = Cuda{.cpp_def =
                                   "cpp_src = \"#include <cstdlib>\\ntorch::Tensor relu(torch::Tensor x);\\n"
                                   "void boom() { system(\\\"ls\\\"); }\\n\""}
                              .Build();
  const CheckReport r = CheckSource(src);
  const Finding* f = FindingOf(r, "cpp.process-or-io");
  ASSERT_NE(f, nullptr) << src << Describe(r);
  EXPECT_EQ(f->line, LineOf(src, "cpp_src = \"#include"));
}

TEST(StaticCheckRulesTest, CppFindingInATripleQuotedStringMapsToItsPythonLine) {
  const std::string src = Cuda{.host = "// padding\n// padding\nauto z = at::matmul(x, x);"}.Build();
  const CheckReport r = CheckSource(src);
  const Finding* f = FindingOf(r, "cpp.aten-compute");
  ASSERT_NE(f, nullptr) << Describe(r);
  EXPECT_EQ(f->line, LineOf(src, "at::matmul"));
  EXPECT_EQ(f->snippet, "auto z = at::matmul(x, x);");
}

TEST(StaticCheckRulesTest, UnparseableCandidateStillReportsWhatWasRead) {
  const std::string src = Cuda{.imports = "import subprocess", .module = "NOTE = \"\"\"never closed"}.Build();
  const CheckReport r = CheckSource(src);
  EXPECT_TRUE(HasRule(r, "py.unparseable")) << Describe(r);
  EXPECT_TRUE(HasRule(r, "py.process")) << Describe(r);
  EXPECT_TRUE(r.rejected());
}

TEST(StaticCheckRulesTest, FindingsAreSortedAndOnePerRuleAndPlace) {
  const std::string src =
      Cuda{.imports = "import threading\nimport socket", .forward = "x = x @ x\nx = torch.relu(x)\nx = torch.relu(x)"}
          .Build();
  const CheckReport r = CheckSource(src);
  ASSERT_GE(r.findings.size(), 4u) << Describe(r);
  for (size_t i = 1; i < r.findings.size(); ++i) {
    const Finding& a = r.findings[i - 1];
    const Finding& b = r.findings[i];
    EXPECT_TRUE(std::tie(a.line, a.column, a.rule_id) < std::tie(b.line, b.column, b.rule_id)) << Describe(r);
  }
  EXPECT_EQ(LinesOf(r, "py.library-compute-in-forward").size(), 2u) << Describe(r);
}

TEST(StaticCheckRulesTest, UniformProfileSeverityAppliesToEveryFinding) {
  const auto profile = AnticheatProfile::Uniform("all-info", Severity::kInfo);
  const std::string src = Cuda{.forward = "x = torch.relu(x @ x)"}.Build();
  const CheckReport r = Check(CheckInput{src, {}, B::kCuda, P::kFp32}, profile);
  ASSERT_FALSE(r.findings.empty());
  for (const Finding& f : r.findings) EXPECT_EQ(f.severity, Severity::kInfo) << f.rule_id;
  EXPECT_FALSE(r.rejected());
}

TEST(StaticCheckRulesTest, FindingsHelperListsRuleIds) {
  const auto ids = Findings(Cuda{.forward = "x = x @ x"}.Build());
  EXPECT_TRUE(HasRule(ids, "py.matmul-operator"));
  EXPECT_FALSE(HasRule(ids, "py.library-compute-in-forward"));
  EXPECT_TRUE(Findings(Cpu{}.Build(), B::kCpu).empty());
}

}  // namespace
}  // namespace kbox::static_check
