"""Distinct honest KernelBench candidates for scripts/kbox_bench.py (stdlib only).

Each candidate is a real KernelBench level-1 (activations, here) or level-2
(linear + epilogue, kbox_bench_linear.py) problem file (read by path from
<shared>/datasets/kernelbench, never copied) and a `class ModelNew` that builds its
own kernel with `load_inline`: C++ loops for the `cpu` backend, a `__global__`
kernel for `cuda`. Candidates differ in code that the compiler sees (unroll
factor, loop form, chunk size, block size, elements per thread, grid shape,
staged loads), not in comments, so each one hashes differently and is a
real miss of kboxd's build cache.
"""
import itertools
import os
import re
import sys

import kbox_bench_linear
from kbox_bench_linear import kernelbench_dir, load_inline_block, slug  # noqa: F401 (shared helpers)

# (file, C++ body of act(v, ...) as a float expression, init parameters
# (name, default) as Model.__init__ takes them, size constants of the file).
# The expressions follow PyTorch's definitions (softplus threshold 20, SELU's
# constants, hardsigmoid = relu6(x + 3) / 6).
_ACTIVATIONS = [
    ("19_ReLU.py", "v > 0.0f ? v : 0.0f", []),
    ("20_LeakyReLU.py", "v > 0.0f ? v : v * negative_slope", [("negative_slope", "0.01")]),
    ("21_Sigmoid.py", "1.0f / (1.0f + expf(-v))", []),
    ("22_Tanh.py", "tanhf(v)", []),
    ("25_Swish.py", "v / (1.0f + expf(-v))", []),
    ("26_GELU_.py", "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))", []),
    ("27_SELU_.py", "1.0507009873554805f * (v > 0.0f ? v : 1.6732632423543772f * expm1f(v))", []),
    ("28_HardSigmoid.py", "fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f", []),
    ("29_Softplus.py", "v > 20.0f ? v : log1pf(expf(v))", []),
    ("30_Softsign.py", "v / (1.0f + fabsf(v))", []),
    ("31_ELU.py", "v > 0.0f ? v : alpha * expm1f(v)", [("alpha", "1.0")]),
    ("32_HardTanh.py", "fminf(fmaxf(v, -1.0f), 1.0f)", []),
    ("88_MinGPTNewGelu.py",
     "0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)))", []),
]
SIZE_CONSTANTS = ("batch_size", "dim") + kbox_bench_linear.SIZE_CONSTANTS[1:]

_CPU_VARIANTS = ([("index", u, 0) for u in (1, 2, 4, 8, 16)] +
                 [("pointer", u, 0) for u in (1, 2, 4, 8, 16)] +
                 [("chunked", 1, c) for c in (256, 1024, 4096, 16384)])
_CUDA_VARIANTS = list(itertools.product(("oneshot", "gridstride"), (128, 256, 512, 1024),
                                        (1, 2, 4, 8)))


class Problem(object):
    def __init__(self, path, expr, params):
        self.path = path
        self.name = os.path.splitext(os.path.basename(path))[0]
        self.slug = slug(self.name)
        self.expr = expr
        self.params = params


def problems(shared):
    """The level-1 problems the generator writes kernels for, in a fixed order."""
    base = kernelbench_dir(shared, 1)
    return [Problem(os.path.join(base, f), expr, params) for f, expr, params in _ACTIVATIONS]


def reference_source(problem, scale=1):
    """The problem file's text; with scale > 1 every size constant at module
    level (batch_size, dim, in_features, out_features) is divided by it. Returns (source, {name: (old, new)})."""
    with open(problem.path) as f:
        text = f.read()
    changes = {}
    if scale > 1:
        def shrink(m):
            old = int(m.group(2))
            new = max(1, old // scale)
            changes[m.group(1)] = (old, new)
            return "%s = %d" % (m.group(1), new)
        pattern = r"^(%s)\s*=\s*(\d+)[ \t]*$" % "|".join(SIZE_CONSTANTS)
        text = re.sub(pattern, shrink, text, flags=re.M)
    return text, changes


def _act_function(problem, qualifier):
    args = "".join(", float %s" % name for name, _ in problem.params)
    return "%s float act(float v%s) { return %s; }\n" % (qualifier, args, problem.expr)


def _cpu_loop(form, unroll, chunk, staged, call):
    """The C++ loop over n elements of src into dst; `call(s)` is act on s.
    staged: each group's loads are written out first, then its stores."""
    def group(load, store, count):
        if not staged:
            return "".join("        %s = %s;\n" % (store(k), call(load(k))) for k in range(count))
        return ("".join("        const float a%d = %s;\n" % (k, load(k)) for k in range(count)) +
                "".join("        %s = %s;\n" % (store(k), call("a%d" % k)) for k in range(count)))
    if form == "index":
        body = group(lambda k: "src[i + %d]" % k, lambda k: "dst[i + %d]" % k, unroll)
        return ("    int64_t i = 0;\n"
                "    for (; i + %d <= n; i += %d) {\n%s    }\n"
                "    for (; i < n; ++i) dst[i] = %s;\n" % (unroll, unroll, body, call("src[i]")))
    if form == "pointer":
        body = group(lambda k: "s[%d]" % k, lambda k: "d[%d]" % k, unroll)
        return ("    const float* s = src;\n    float* d = dst;\n    const float* end = src + n;\n"
                "    while (end - s >= %d) {\n%s        s += %d;\n        d += %d;\n    }\n"
                "    while (s < end) *d++ = %s;\n" % (unroll, body, unroll, unroll, call("*s++")))
    body = group(lambda k: "src[i]", lambda k: "dst[i]", 1).replace("        ", "            ")
    return ("    for (int64_t base = 0; base < n; base += %d) {\n"
            "        const int64_t stop = std::min<int64_t>(base + %d, n);\n"
            "        for (int64_t i = base; i < stop; ++i) {\n%s        }\n    }\n"
            % (chunk, chunk, body))


def _cpp_params(problem):
    return "".join(", double %s" % name for name, _ in problem.params)


def _float_params(problem):
    return "".join("    const float %s_f = (float)%s;\n" % (n, n) for n, _ in problem.params)


def _call(problem):
    extra = "".join(", %s_f" % n for n, _ in problem.params)
    return lambda arg: "act(%s%s)" % (arg, extra)


def cpu_source(problem, variant):
    form, unroll, chunk, staged = variant
    return ("#include <torch/extension.h>\n#include <algorithm>\n#include <cmath>\n\n" +
            _act_function(problem, "inline") +
            "\ntorch::Tensor run_%s(torch::Tensor x%s) {\n" % (problem.slug, _cpp_params(problem)) +
            "    TORCH_CHECK(x.device().is_cpu(), \"expected a CPU tensor\");\n"
            "    TORCH_CHECK(x.scalar_type() == torch::kFloat32, \"expected float32\");\n"
            "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n"
            "    const float* src = xc.data_ptr<float>();\n    float* dst = out.data_ptr<float>();\n"
            "    const int64_t n = xc.numel();\n" + _float_params(problem) +
            _cpu_loop(form, unroll, chunk, staged, _call(problem)) + "    return out;\n}\n")


def cuda_source(problem, variant):
    form, block, ept = variant
    kargs = "".join(", float %s_f" % n for n, _ in problem.params)
    call = _call(problem)
    if form == "oneshot":
        # Each block covers block*ept consecutive elements; thread t takes t, t+block, ...
        body = ("    const int64_t base = (int64_t)blockIdx.x * %d + threadIdx.x;\n"
                "#pragma unroll\n    for (int k = 0; k < %d; ++k) {\n"
                "        const int64_t i = base + (int64_t)k * %d;\n"
                "        if (i < n) dst[i] = %s;\n    }\n" % (block * ept, ept, block, call("src[i]")))
        grid = "blocks"
    else:
        # A bounded grid walks the array; each step handles ept strided elements per thread.
        body = ("    const int64_t stride = (int64_t)gridDim.x * %d;\n"
                "    for (int64_t base = (int64_t)blockIdx.x * %d + threadIdx.x; base < n; base += stride) {\n"
                "#pragma unroll\n        for (int k = 0; k < %d; ++k) {\n"
                "            const int64_t i = base + (int64_t)k * %d;\n"
                "            if (i < n) dst[i] = %s;\n        }\n    }\n"
                % (block * ept, block * ept, ept, block, call("src[i]")))
        grid = "std::min<int64_t>(blocks, 8192)"
    launch_args = "".join(", %s_f" % n for n, _ in problem.params)
    return ("#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <algorithm>\n\n" +
            _act_function(problem, "__device__ __forceinline__") +
            "\n__global__ void act_%s_kernel(const float* __restrict__ src, float* __restrict__ dst, "
            "int64_t n%s) {\n" % (problem.slug, kargs) + body + "}\n"
            "\ntorch::Tensor run_%s(torch::Tensor x%s) {\n" % (problem.slug, _cpp_params(problem)) +
            "    TORCH_CHECK(x.is_cuda(), \"expected a CUDA tensor\");\n"
            "    TORCH_CHECK(x.scalar_type() == torch::kFloat32, \"expected float32\");\n"
            "    auto xc = x.contiguous();\n    auto out = torch::empty_like(xc);\n"
            "    const int64_t n = xc.numel();\n    if (n == 0) return out;\n" + _float_params(problem) +
            "    const int64_t blocks = (n + %d - 1) / %d;\n" % (block * ept, block * ept) +
            "    act_%s_kernel<<<(unsigned int)(%s), %d, 0, at::cuda::getCurrentCUDAStream()>>>(\n"
            "        xc.data_ptr<float>(), out.data_ptr<float>(), n%s);\n" % (problem.slug, grid, block,
                                                                         launch_args) +
            "    C10_CUDA_KERNEL_LAUNCH_CHECK();\n    return out;\n}\n")


def _model_new(problem, load_call):
    init_args = "".join(", %s=%s" % (n, d) for n, d in problem.params)
    keep = "".join("        self.%s = %s\n" % (n, n) for n, _ in problem.params)
    fwd_args = "".join(", float(self.%s)" % n for n, _ in problem.params)
    return ('"""Candidate for KernelBench level1/%s: own elementwise kernel."""\n'
            "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n\n"
            "%s\n\n\n"
            "class ModelNew(nn.Module):\n"
            "    def __init__(self%s):\n        super().__init__()\n%s\n"
            "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            "        return _ext.run_%s(x%s)\n"
            % (os.path.basename(problem.path), load_call, init_args, keep, problem.slug, fwd_args))


def variants(backend):
    if backend == "cpu":
        return [v + (staged,) for staged in (False, True) for v in _CPU_VARIANTS]
    return list(_CUDA_VARIANTS)


def candidate_source(problem, backend, index):
    """The index-th variant of problem for backend: (python source, C++/CUDA source, description)."""
    variant = variants(backend)[index]
    ext_name = "kbench_%s_%s_%d" % (backend, problem.slug, index)
    if backend == "cpu":
        code = cpu_source(problem, variant)
        decl = None
        what = "cpu %s unroll=%d chunk=%d staged=%s" % variant
    else:
        code = cuda_source(problem, variant)
        decl = "torch::Tensor run_%s(torch::Tensor x%s);" % (problem.slug, _cpp_params(problem))
        what = "cuda %s block=%d ept=%d" % variant
    load = load_inline_block(backend, code, ext_name, "run_" + problem.slug, decl)
    return _model_new(problem, load), code, what


# The variant a KernelBench-style run uses (write_run): a grid-stride loop,
# 256 threads, 4 elements per thread.
RUN_VARIANT = _CUDA_VARIANTS.index(("gridstride", 256, 4))


def write_run(directory, backend, shared):
    """Lays out a KernelBench-style run for `kbox eval-dir`: the candidate of
    each level-1 problem the generator covers as <directory>/<problem file>,
    for the problem at KernelBench's own sizes (evaluate it against
    <shared>/datasets/kernelbench/level1 in place). Returns the file names."""
    os.makedirs(directory, exist_ok=True)
    names = []
    index = RUN_VARIANT if backend == "cuda" else 0
    for problem in problems(shared):
        source, _, _ = candidate_source(problem, backend, index)
        name = os.path.basename(problem.path)
        with open(os.path.join(directory, name), "w") as f:
            f.write(source)
        names.append(name)
    return names


def problem_set(shared, levels=(1,)):
    """[(problem, module that writes its candidates)] for the KernelBench levels asked."""
    out = []
    if 1 in levels:
        out += [(p, sys.modules[__name__]) for p in problems(shared)]
    if 2 in levels:
        out += [(p, kbox_bench_linear) for p in kbox_bench_linear.problems(shared)]
    return out


def max_candidates(backend, shared, levels=(1,)):
    pairs = problem_set(shared, levels)
    return len(pairs) * min(len(module.variants(backend)) for _, module in pairs)


def generate(n, backend, shared, scale=1, levels=(1,)):
    """n distinct candidates, cycling over the problems so consecutive jobs
    hit different problems. Each is a dict: id, problem, reference_path,
    reference_source, candidate_source, kernel_source, variant, scaled."""
    pairs = problem_set(shared, levels)
    if n > max_candidates(backend, shared, levels):
        raise ValueError("at most %d distinct %s candidates" % (max_candidates(backend, shared, levels),
                                                               backend))
    out = []
    for i in range(n):
        problem, module = pairs[i % len(pairs)]
        index = i // len(pairs)
        ref, changes = reference_source(problem, scale)
        cand, code, what = module.candidate_source(problem, backend, index)
        level = os.path.basename(os.path.dirname(problem.path))
        out.append({"id": "%s-%s-%s-%d" % (backend, level, problem.slug, index),
                    "problem": "%s/%s" % (level, problem.name),
                    "reference_path": problem.path, "reference_source": ref,
                    "candidate_source": cand, "kernel_source": code, "variant": what,
                    "scaled": changes})
    return out
