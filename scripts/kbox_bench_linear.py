"""KernelBench level-2 candidates for scripts/kbox-bench: an nn.Linear followed
by elementwise steps, fused into one kernel of the candidate's own (a dot
product per output element plus the epilogue). The nn.Linear stays in ModelNew
only to hold the weights, created in the reference's order so both models draw
the same values; forward never calls it.

Variants differ in the code the compiler sees: loop order and blocking, the
number of partial sums of the dot product, float or double accumulation (C++),
the thread-block shape (CUDA).

Also the helpers both generators share (slug, kernelbench_dir, load_inline_block);
kbox_bench_candidates imports this module, so they live here.
"""
import itertools
import os
import re

# (file, Model.__init__ parameters, the lines of ModelNew.__init__ that create
# the reference's parameters in its order, weight, bias, scalar attributes the
# epilogue reads, the epilogue on y = x . w + bias as the reference computes it).
_LINEAR = [
    ("76_Gemm_Add_ReLU.py", ["in_features", "out_features", "bias_shape"],
     ["self.gemm = nn.Linear(in_features, out_features, bias=False)",
      "self.bias = nn.Parameter(torch.randn(bias_shape))"],
     "self.gemm.weight", "self.bias", [], "fmaxf(y, 0.0f)"),
    ("63_Gemm_ReLU_Divide.py", ["in_features", "out_features", "divisor"],
     ["self.linear = nn.Linear(in_features, out_features)", "self.divisor = divisor"],
     "self.linear.weight", "self.linear.bias", ["divisor"], "fmaxf(y, 0.0f) / divisor"),
    ("9_Matmul_Subtract_Multiply_ReLU.py", ["in_features", "out_features", "subtract_value", "multiply_value"],
     ["self.linear = nn.Linear(in_features, out_features)", "self.subtract_value = subtract_value",
      "self.multiply_value = multiply_value"],
     "self.linear.weight", "self.linear.bias", ["subtract_value", "multiply_value"],
     "fmaxf((y - subtract_value) * multiply_value, 0.0f)"),
    ("40_Matmul_Scaling_ResidualAdd.py", ["in_features", "out_features", "scaling_factor"],
     ["self.matmul = nn.Linear(in_features, out_features)", "self.scaling_factor = scaling_factor"],
     "self.matmul.weight", "self.matmul.bias", ["scaling_factor"], "y * scaling_factor + y"),
]
SIZE_CONSTANTS = ("batch_size", "in_features", "out_features")

_CPU_VARIANTS = list(itertools.product((("rows", 0), ("cols", 0), ("oblock", 8), ("oblock", 32)),
                                       (1, 2, 4, 8), ("float", "double")))
_CUDA_VARIANTS = list(itertools.product(((32, 4), (32, 8), (16, 16), (64, 4), (128, 2), (32, 16)),
                                        (1, 2, 4, 8)))


def slug(name):
    """A problem file's name as a C++ identifier part: 19_ReLU -> 19_relu."""
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def kernelbench_dir(shared, level=None):
    """<shared>/datasets/kernelbench, or its levelN directory."""
    base = os.path.join(shared, "datasets", "kernelbench")
    return base if level is None else os.path.join(base, "level%d" % level)


def load_inline_block(backend, code, ext_name, function, decl):
    """The candidate's module-level build of `code`: C++ for cpu (cpp_sources),
    CUDA for cuda (cuda_sources, with `decl` as the C++ declaration); -O3."""
    if backend == "cpu":
        return ('_source = r"""\n%s"""\n\n_ext = load_inline(\n    name="%s",\n    cpp_sources=_source,\n'
                '    functions=["%s"],\n    extra_cflags=["-O3"],\n)' % (code, ext_name, function))
    return ('_cuda_source = r"""\n%s"""\n\n_ext = load_inline(\n    name="%s",\n'
            '    cpp_sources="%s",\n    cuda_sources=_cuda_source,\n    functions=["%s"],\n'
            '    extra_cuda_cflags=["-O3"],\n)' % (code, ext_name, decl, function))


class LinearProblem(object):
    def __init__(self, path, init, init_lines, weight, bias, scalars, epilogue):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.slug = slug(self.name)
        self.init, self.init_lines = init, init_lines
        self.weight, self.bias, self.scalars, self.epilogue = weight, bias, scalars, epilogue


def problems(shared):
    base = kernelbench_dir(shared, 2)
    return [LinearProblem(os.path.join(base, spec[0]), *spec[1:]) for spec in _LINEAR]


def variants(backend):
    return _CPU_VARIANTS if backend == "cpu" else _CUDA_VARIANTS


def _dot(qualifier, acc, unroll):
    """dot(a, b, K): the sum of a[k] * b[k] in `unroll` partial sums of type acc."""
    sums = ["s%d" % u for u in range(unroll)]
    body = "".join("        %s += (%s)a[k + %d] * b[k + %d];\n" % (s, acc, u, u) for u, s in enumerate(sums))
    return ("%s float dot(const float* a, const float* b, int64_t K) {\n"
            "    %s %s;\n    int64_t k = 0;\n"
            "    for (; k + %d <= K; k += %d) {\n%s    }\n"
            "    for (; k < K; ++k) s0 += (%s)a[k] * b[k];\n"
            "    return (float)(%s);\n}\n" % (qualifier, acc, ", ".join(s + " = 0" for s in sums),
                                             unroll, unroll, body, acc, " + ".join(sums)))


def _epilogue(problem, qualifier):
    args = "".join(", float %s" % s for s in problem.scalars)
    return "%s float epilogue(float y%s) { return %s; }\n" % (qualifier, args, problem.epilogue)


def _header(problem, device_check):
    params = "".join(", double %s" % s for s in problem.scalars)
    return ("\ntorch::Tensor run_%s(torch::Tensor x, torch::Tensor w, torch::Tensor bias%s) {\n" % (
        problem.slug, params) +
        "    TORCH_CHECK(%s, \"unexpected device\");\n" % device_check +
        "    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && w.scalar_type() == torch::kFloat32 &&\n"
        "                bias.scalar_type() == torch::kFloat32, \"expected float32\");\n"
        "    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && bias.numel() == w.size(0),\n"
        "                \"shape mismatch\");\n"
        "    auto xc = x.contiguous();\n    auto wc = w.contiguous();\n    auto bc = bias.contiguous();\n"
        "    const int64_t B = xc.size(0), K = xc.size(1), O = wc.size(0);\n"
        "    auto out = torch::empty({B, O}, xc.options());\n" +
        "".join("    const float %s_f = (float)%s;\n" % (s, s) for s in problem.scalars))


def _out_expr(problem, b, o):
    extra = "".join(", %s_f" % s for s in problem.scalars)
    return "epilogue(dot(xp + %s * K, wp + %s * K, K) + bp[%s]%s)" % (b, o, o, extra)


def cpu_source(problem, variant):
    (form, block), unroll, acc = variant
    store = "            op[b * O + o] = %s;\n" % _out_expr(problem, "b", "o")
    if form == "rows":
        loops = ("    for (int64_t b = 0; b < B; ++b) {\n        for (int64_t o = 0; o < O; ++o) {\n%s"
                 "        }\n    }\n" % store)
    elif form == "cols":
        loops = ("    for (int64_t o = 0; o < O; ++o) {\n        for (int64_t b = 0; b < B; ++b) {\n%s"
                 "        }\n    }\n" % store)
    else:  # a block of output columns against every row, so its weights stay in cache
        loops = ("    for (int64_t o0 = 0; o0 < O; o0 += %d) {\n"
                 "        const int64_t o1 = std::min<int64_t>(o0 + %d, O);\n"
                 "        for (int64_t b = 0; b < B; ++b) {\n"
                 "        for (int64_t o = o0; o < o1; ++o) {\n%s        }\n        }\n    }\n"
                 % (block, block, store))
    return ("#include <torch/extension.h>\n#include <algorithm>\n#include <cmath>\n\n" +
            _dot("inline", acc, unroll) + _epilogue(problem, "inline") +
            _header(problem, "x.device().is_cpu() && w.device().is_cpu() && bias.device().is_cpu()") +
            "    const float* xp = xc.data_ptr<float>();\n    const float* wp = wc.data_ptr<float>();\n"
            "    const float* bp = bc.data_ptr<float>();\n    float* op = out.data_ptr<float>();\n" +
            loops + "    return out;\n}\n")


def cuda_source(problem, variant):
    (bx, by), unroll = variant
    kargs = "".join(", float %s_f" % s for s in problem.scalars)
    launch = "".join(", %s_f" % s for s in problem.scalars)
    return ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n\n" +
            _dot("__device__ __forceinline__", "float", unroll) +
            _epilogue(problem, "__device__ __forceinline__") +
            "\n// One thread per output element: row b of x against row o of w.\n"
            "__global__ void linear_%s_kernel(const float* __restrict__ xp, const float* __restrict__ wp,\n"
            "        const float* __restrict__ bp, float* __restrict__ op, int64_t B, int64_t K, int64_t O%s) {\n"
            "    const int64_t o = (int64_t)blockIdx.x * %d + threadIdx.x;\n"
            "    const int64_t b = (int64_t)blockIdx.y * %d + threadIdx.y;\n"
            "    if (b < B && o < O) op[b * O + o] = %s;\n}\n" % (problem.slug, kargs, bx, by,
                                                              _out_expr(problem, "b", "o")) +
            _header(problem, "x.is_cuda() && w.is_cuda() && bias.is_cuda()") +
            "    if (B == 0 || O == 0) return out;\n"
            "    const dim3 block(%d, %d);\n" % (bx, by) +
            "    const dim3 grid((unsigned int)((O + %d - 1) / %d), (unsigned int)((B + %d - 1) / %d));\n"
            % (bx, bx, by, by) +
            "    linear_%s_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(\n"
            "        xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(),\n"
            "        B, K, O%s);\n" % (problem.slug, launch) +
            "    C10_CUDA_KERNEL_LAUNCH_CHECK();\n    return out;\n}\n")


def candidate_source(problem, backend, index):
    """The index-th variant: (python source, C++/CUDA source, description)."""
    variant = variants(backend)[index]
    ext_name = "kbench_%s_%s_%d" % (backend, problem.slug, index)
    decl = "torch::Tensor run_%s(torch::Tensor x, torch::Tensor w, torch::Tensor bias%s);" % (
        problem.slug, "".join(", double %s" % s for s in problem.scalars))
    if backend == "cpu":
        code = cpu_source(problem, variant)
        what = "cpu %s block=%d unroll=%d acc=%s" % (variant[0] + variant[1:])
    else:
        code = cuda_source(problem, variant)
        what = "cuda block=%dx%d unroll=%d" % (variant[0] + variant[1:])
    load = load_inline_block(backend, code, ext_name, "run_" + problem.slug, decl)
    init = "".join(", " + p for p in problem.init)
    fwd = "".join(", float(self.%s)" % s for s in problem.scalars)
    source = ('"""Candidate for KernelBench level2/%s: the linear layer and its epilogue in one kernel."""\n'
              "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
              "%s\n\n\n"
              "class ModelNew(nn.Module):\n"
              "    def __init__(self%s):\n        super().__init__()\n"
              "        # The reference's parameters, created in its order; only their values are used.\n%s\n"
              "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
              "        return _ext.run_%s(x, %s, %s%s)\n"
              % (os.path.basename(problem.path), load, init,
                 "".join("        %s\n" % line for line in problem.init_lines), problem.slug,
                 problem.weight, problem.bias, fwd))
    return source, code, what
