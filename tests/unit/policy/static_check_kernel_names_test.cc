// CheckReport::kernel_names: the candidate's own CUDA __global__ functions and
// Triton kernels, which kboxd hands to the run stage (StageSpec.
// candidate_kernels) so it can tell whether one of them launched. The names
// come from the C++ lexer's tokens and the Python model, never from raw text,
// and are extracted under every profile, "off" included.

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/static_checker.h"

namespace kbox::static_check {
namespace {

using Names = std::vector<std::string>;

const AnticheatProfile& Profile(std::string_view name) {
  static const AnticheatProfile strict = *AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "strict");
  static const AnticheatProfile off = *AnticheatProfile::Load(KBOX_ANTICHEAT_PROFILE_DIR, "off");
  return name == "off" ? off : strict;
}

CheckReport CheckWith(std::string_view source, std::string_view profile = "strict",
                      TaskBackend backend = TaskBackend::kCuda) {
  const CheckInput input{.candidate_source = source,
                         .reference_source = {},
                         .backend = backend,
                         .precision = TaskPrecision::kFp32};
  return Check(input, Profile(profile));
}

// A load_inline candidate whose cuda_sources is `cuda` (raw string).
std::string CudaCandidate(std::string_view cuda) {
  std::string s =
      "import torch\n"
      "import torch.nn as nn\n"
      "from torch.utils.cpp_extension import load_inline\n"
      "\n"
      "cuda_src = r\"\"\"\n"
      "#include <torch/extension.h>\n";
  s += cuda;
  s +=
      "\"\"\"\n"
      "cpp_src = \"torch::Tensor run(torch::Tensor x);\"\n"
      "ext = load_inline(name=\"ext\", cpp_sources=cpp_src, cuda_sources=cuda_src, functions=[\"run\"])\n"
      "\n"
      "class ModelNew(nn.Module):\n"
      "    def forward(self, x):\n"
      "        return ext.run(x)\n";
  return s;
}

constexpr std::string_view kHost =
    "torch::Tensor run(torch::Tensor x) {\n"
    "  auto y = torch::empty_like(x);\n"
    "  int n = static_cast<int>(x.numel());\n"
    "  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);\n"
    "  return y;\n"
    "}\n";

TEST(KernelNamesTest, PlainKernel) {
  const std::string src = CudaCandidate(
      "__global__ void relu_kernel(const float* x, float* y, int n) {\n"
      "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;\n"
      "}\n" +
      std::string(kHost));
  const CheckReport r = CheckWith(src);
  EXPECT_FALSE(r.rejected());
  EXPECT_EQ(r.kernel_names, Names{"relu_kernel"});
}

TEST(KernelNamesTest, TemplatedKernelAndExplicitInstantiation) {
  const std::string src = CudaCandidate(
      "template <typename T, int BLOCK = 256>\n"
      "__global__ void scale_kernel(const T* __restrict__ x, T* y, int n) { y[0] = x[0]; }\n"
      "template __global__ void scale_kernel<float, 256>(const float*, float*, int);\n"
      "template __global__ void nested<Vec<float>>(Vec<float>*);  // `>>` is one token\n"
      "template <typename T> __global__ void\n"
      "other_kernel(T* y) { y[0] = T(); }\n" +
      std::string(kHost));
  EXPECT_EQ(CheckWith(src).kernel_names, (Names{"scale_kernel", "nested", "other_kernel"}));
}

TEST(KernelNamesTest, LaunchBoundsAndOtherAttributes) {
  const std::string src = CudaCandidate(
      "__global__ __launch_bounds__(256) void bounded(float* y) { y[0] = 1.f; }\n"
      "__global__ void __launch_bounds__(128, 2) bounded_after(float* y) { y[0] = 1.f; }\n"
      "__global__ void __attribute__((noinline)) attributed(float* y) { y[0] = 1.f; }\n"
      "[[maybe_unused]] __global__ void [[nodiscard]] bracketed(float* y) { y[0] = 1.f; }\n" +
      std::string(kHost));
  EXPECT_EQ(CheckWith(src).kernel_names, (Names{"bounded", "bounded_after", "attributed", "bracketed"}));
}

TEST(KernelNamesTest, ExternCStaticAndDeclarations) {
  const std::string src = CudaCandidate(
      "extern \"C\" __global__ void c_kernel(float* y);\n"
      "extern \"C\" {\n"
      "__global__ void in_block(float* y) { y[0] = 0.f; }\n"
      "}\n"
      "static __global__ void file_local(float* y) { y[0] = 0.f; }\n"
      "namespace k { __global__ void ns_kernel(float* y) { y[0] = 0.f; } }\n"
      "extern \"C\" __global__ void c_kernel(float* y) { y[0] = 0.f; }\n" +
      std::string(kHost));
  // Declared, then defined again: once, where it first appears.
  EXPECT_EQ(CheckWith(src).kernel_names, (Names{"c_kernel", "in_block", "file_local", "ns_kernel"}));
}

TEST(KernelNamesTest, NamesInCommentsStringsAndMacrosAreNotKernels) {
  const std::string src =
      "import torch\n"
      "import torch.nn as nn\n"
      "from torch.utils.cpp_extension import load_inline\n"
      "\n"
      "# __global__ void python_comment(float* y)\n"
      "NOTE = \"__global__ void python_string(float* y)\"\n"
      "cuda_src = r\"\"\"\n"
      "// __global__ void line_comment(float* y) {}\n"
      "/* __global__ void block_comment(float* y) {} */\n"
      "const char* s = \"__global__ void in_string(float* y) {}\";\n"
      "#define DECLARE(name) __global__ void name(float* y)\n"
      "__global__ void relu_kernel(const float* x, float* y, int n) { if (n) y[0] = x[0]; }\n" +
      std::string(kHost) +
      "\"\"\"\n"
      "ext = load_inline(name=\"ext\", cpp_sources=\"torch::Tensor run(torch::Tensor x);\", cuda_sources=cuda_src,"
      " functions=[\"run\"])\n"
      "\n"
      "class ModelNew(nn.Module):\n"
      "    def forward(self, x):\n"
      "        return ext.run(x)\n";
  EXPECT_EQ(CheckWith(src).kernel_names, Names{"relu_kernel"});
}

TEST(KernelNamesTest, OnlyMentionedKernelIsNoKernel) {
  const std::string src =
      "import torch\n"
      "import torch.nn as nn\n"
      "# @triton.jit\n"
      "# def fake(x): pass\n"
      "doc = '''\n"
      "__global__ void ghost(float* y) {}\n"
      "'''\n"
      "class ModelNew(nn.Module):\n"
      "    def forward(self, x):\n"
      "        return x\n";
  EXPECT_TRUE(CheckWith(src).kernel_names.empty());
}

constexpr std::string_view kTritonCandidate = R"py(import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"BLOCK": 256}, num_warps=4), triton.Config({"BLOCK": 1024}, num_warps=8)],
    key=["n"],
)
@triton.jit
def tuned_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.heuristics({"EVEN": lambda args: args["n"] % 1024 == 0})
@triton.jit
def plain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def helper(x):  # not a kernel
    return x


def relu(x):
    y = torch.empty_like(x)
    n = x.numel()
    tuned_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    plain_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
)py";

TEST(KernelNamesTest, TritonJitAutotuneAndHeuristics) {
  const CheckReport r = CheckWith(kTritonCandidate, "strict", TaskBackend::kTriton);
  EXPECT_EQ(r.kernel_names, (Names{"tuned_kernel", "plain_kernel"}));
}

TEST(KernelNamesTest, TritonThroughImportAliases) {
  const std::string src =
      "import torch\n"
      "import torch.nn as nn\n"
      "import triton as tl2\n"
      "from triton import jit\n"
      "from triton import jit as kernel\n"
      "import triton.language as tl\n"
      "\n"
      "@tl2.jit\n"
      "def aliased(x_ptr, n):\n"
      "    tl.store(x_ptr + tl.arange(0, 16), 0.0)\n"
      "\n"
      "@jit\n"
      "def from_import(x_ptr, n):\n"
      "    tl.store(x_ptr + tl.arange(0, 16), 0.0)\n"
      "\n"
      "@kernel\n"
      "def renamed(x_ptr, n):\n"
      "    tl.store(x_ptr + tl.arange(0, 16), 0.0)\n"
      "\n"
      "def later(x_ptr, n):\n"
      "    tl.store(x_ptr + tl.arange(0, 16), 0.0)\n"
      "\n"
      "later_jit = tl2.jit(later)\n"
      "\n"
      "@tl.jit\n"  // triton.language.jit is not a decorator Triton has.
      "def not_a_kernel(x):\n"
      "    return x\n"
      "\n"
      "class ModelNew(nn.Module):\n"
      "    def forward(self, x):\n"
      "        aliased[(1,)](x, 16)\n"
      "        from_import[(1,)](x, 16)\n"
      "        renamed[(1,)](x, 16)\n"
      "        later_jit[(1,)](x, 16)\n"
      "        return x\n";
  EXPECT_EQ(CheckWith(src, "strict", TaskBackend::kTriton).kernel_names,
            (Names{"aliased", "from_import", "renamed", "later"}));
}

TEST(KernelNamesTest, CudaAndTritonInOrderOfAppearance) {
  const std::string src =
      "import torch\n"
      "import torch.nn as nn\n"
      "import triton\n"
      "from torch.utils.cpp_extension import load_inline\n"
      "\n"
      "@triton.jit\n"
      "def first(x_ptr):\n"
      "    pass\n"
      "\n"
      "cuda_src = r\"\"\"\n"
      "__global__ void second(float* y) { y[0] = 0.f; }\n"
      "void run(float* y) { second<<<1, 1>>>(y); }\n"
      "\"\"\"\n"
      "\n"
      "@triton.jit\n"
      "def third(x_ptr):\n"
      "    pass\n"
      "\n"
      "ext = load_inline(name=\"ext\", cpp_sources=\"\", cuda_sources=cuda_src)\n"
      "\n"
      "class ModelNew(nn.Module):\n"
      "    def forward(self, x):\n"
      "        return ext.run(x)\n";
  EXPECT_EQ(CheckWith(src).kernel_names, (Names{"first", "second", "third"}));
}

// The "off" profile switches every rule off, yet the run stage still needs
// to know the candidate's kernels.
TEST(KernelNamesTest, ExtractedUnderTheOffProfile) {
  const std::string src = CudaCandidate(
      "__global__ void decoy(float* y) { y[0] = 0.f; }\n"
      "torch::Tensor run(torch::Tensor x) { return x.mm(x); }\n");
  const CheckReport strict = CheckWith(src, "strict");
  EXPECT_TRUE(strict.rejected());  // cpp.aten-compute, cpp.kernel-never-launched.
  EXPECT_EQ(strict.kernel_names, Names{"decoy"});
  const CheckReport off = CheckWith(src, "off");
  EXPECT_TRUE(off.findings.empty());
  EXPECT_EQ(off.kernel_names, Names{"decoy"});
  const CheckReport triton = CheckWith(kTritonCandidate, "off", TaskBackend::kTriton);
  EXPECT_TRUE(triton.findings.empty());
  EXPECT_EQ(triton.kernel_names, (Names{"tuned_kernel", "plain_kernel"}));
}

TEST(KernelNamesTest, MalformedDeclarationsGiveNoNameAndDoNotCrash) {
  for (std::string_view cuda : {"__global__", "__global__ void", "__global__ void (", "__global__ __global__ (",
                                "__global__ void k<", "__global__ void k<float>>(", "__global__ ; void x(",
                                "__global__ void operator()(", "__global__ [[ void k("}) {
    const CheckReport r = CheckWith(CudaCandidate(std::string(cuda) + "\n"), "off");
    EXPECT_TRUE(r.kernel_names.empty()) << cuda;
  }
}

}  // namespace
}  // namespace kbox::static_check
