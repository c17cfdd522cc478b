// kbox-static-bench: the static anti-cheat checker's cost, on one thread: checks
// per second and per-check latency (p50/p99/max) for a realistic ~10 KB
// load_inline CUDA candidate under the strict profile, then for each file given
// on the command line, then over every candidate.py of the shared corpus when
// that folder exists. One line per figure.
//
//   kbox-static-bench [--iterations N] [--profile-dir DIR] [--profile NAME]
//                     [--corpus DIR] [FILE...]
//
// --profile-dir defaults to the source tree's policy/anticheat, --corpus to
// ../shared/corpus beside the source tree; --iterations (default 20000) is the
// number of timed checks per figure.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "policy/static_check/anticheat_profile.h"
#include "policy/static_check/static_checker.h"

#ifndef KBOX_ANTICHEAT_DIR
#define KBOX_ANTICHEAT_DIR "policy/anticheat"
#endif
#ifndef KBOX_SHARED_CORPUS_DIR
#define KBOX_SHARED_CORPUS_DIR "../shared/corpus"
#endif

namespace {

namespace fs = std::filesystem;
namespace sc = kbox::static_check;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// The synthetic candidate: row softmax plus a family of fused elementwise
// kernels, each with its host wrapper, compiled with load_inline; Python
// helpers; a ModelNew whose forward only calls the extension.
// ---------------------------------------------------------------------------------------------

constexpr std::string_view kPythonHead = R"py(# Row softmax followed by a fused scale-and-bias epilogue, as hand-written CUDA.
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#define CHECK_INPUT(x) \
  TORCH_CHECK((x).is_cuda() && (x).is_contiguous() && (x).scalar_type() == at::kFloat, \
              #x " must be a contiguous float32 CUDA tensor")

namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One block per row: a max pass, a sum-of-exponentials pass, a write pass.
// Partial results of each warp meet in shared memory.
__global__ void row_softmax_kernel(const float* __restrict__ x, float* __restrict__ y,
                                   int rows, int cols) {
  __shared__ float partial[kThreads / kWarp];
  const int row = blockIdx.x;
  if (row >= rows) return;
  const float* in = x + static_cast<int64_t>(row) * cols;
  float* out = y + static_cast<int64_t>(row) * cols;
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;

  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, in[c]);
  m = warp_max(m);
  if (lane == 0) partial[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < blockDim.x / kWarp ? partial[lane] : -INFINITY;
    m = warp_max(m);
    if (lane == 0) partial[0] = m;
  }
  __syncthreads();
  m = partial[0];
  __syncthreads();

  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(in[c] - m);
  s = warp_sum(s);
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  if (warp == 0) {
    s = lane < blockDim.x / kWarp ? partial[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) partial[0] = s;
  }
  __syncthreads();
  const float inv = 1.f / partial[0];

  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(in[c] - m) * inv;
}

int blocks_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace

torch::Tensor row_softmax(torch::Tensor x) {
  CHECK_INPUT(x);
  TORCH_CHECK(x.dim() == 2, "row_softmax expects a 2-D tensor");
  auto y = torch::empty_like(x);
  const int rows = static_cast<int>(x.size(0));
  const int cols = static_cast<int>(x.size(1));
  row_softmax_kernel<<<rows, kThreads>>>(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
)py";

struct Epilogue {
  const char* what;
  const char* expr;  // Of v (the input value), s and b.
};

constexpr Epilogue kEpilogues[] = {
    {"scale and bias", "v * s + b"},
    {"scale, bias, ReLU", "fmaxf(v * s + b, 0.f)"},
    {"scale, bias, SiLU", "(v * s + b) / (1.f + __expf(-(v * s + b)))"},
    {"scale, bias, tanh", "tanhf(v * s + b)"},
    {"clamp to [-b, b], then scale", "fminf(fmaxf(v, -b), b) * s"},
    {"scale, bias, leaky ReLU (0.01)", "(v * s + b) > 0.f ? (v * s + b) : 0.01f * (v * s + b)"},
    {"scale, bias, GELU (tanh form)",
     "0.5f * (v * s + b) * (1.f + tanhf(0.7978845608f * ((v * s + b) + 0.044715f * (v * s + b) * "
     "(v * s + b) * (v * s + b))))"},
    {"scale, bias, hard sigmoid", "fminf(fmaxf((v * s + b) / 6.f + 0.5f, 0.f), 1.f)"},
    {"square, scale, bias", "v * v * s + b"},
    {"scale, bias, softplus", "log1pf(__expf(v * s + b))"},
    {"scale, bias, ELU", "(v * s + b) > 0.f ? (v * s + b) : (__expf(v * s + b) - 1.f)"},
    {"absolute value, scale, bias", "fabsf(v) * s + b"},
};

std::string EpilogueCuda(size_t k) {
  const Epilogue& e = kEpilogues[k % std::size(kEpilogues)];
  const std::string name = "epilogue_" + std::to_string(k);
  std::ostringstream o;
  o << "\n// " << name << ": " << e.what << ", grid-stride.\n"
    << "__global__ void " << name << "_kernel(const float* __restrict__ x, float* __restrict__ y,\n"
    << "    float s, float b, int64_t n) {\n"
    << "  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;\n"
    << "  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;\n"
    << "  for (; i < n; i += stride) {\n"
    << "    const float v = x[i];\n"
    << "    y[i] = " << e.expr << ";\n"
    << "  }\n"
    << "}\n\n"
    << "torch::Tensor " << name << "(torch::Tensor x, double s, double b) {\n"
    << "  CHECK_INPUT(x);\n"
    << "  auto y = torch::empty_like(x);\n"
    << "  const int64_t n = x.numel();\n"
    << "  if (n == 0) return y;\n"
    << "  " << name << "_kernel<<<blocks_for(n), kThreads>>>(x.data_ptr<float>(), "
    << "y.data_ptr<float>(),\n"
    << "      static_cast<float>(s), static_cast<float>(b), n);\n"
    << "  C10_CUDA_KERNEL_LAUNCH_CHECK();\n"
    << "  return y;\n"
    << "}\n";
  return o.str();
}

constexpr std::string_view kPythonHelpers = R"py(

def _ceil_div(a, b):
    return (a + b - 1) // b


def _as_rows(x):
    """The input as (rows, cols) for the row kernels; a view, never a copy."""
    if x.dim() == 1:
        return x.unsqueeze(0)
    return x.reshape(-1, x.shape[-1])


def _check_input(x):
    if not x.is_cuda:
        raise ValueError("ModelNew expects CUDA tensors")
    if x.dtype != torch.float32:
        raise TypeError(f"expected float32, got {x.dtype}")
    return x.contiguous()


def _launch_config(n, threads=256):
    """Blocks and threads the grid-stride kernels use (for logging only)."""
    blocks = min(_ceil_div(n, threads), 65535)
    return {"blocks": blocks, "threads": threads, "waves": math.ceil(blocks / 132)}


)py";

constexpr std::string_view kPythonModel = R"py(

class ModelNew(nn.Module):
    """Softmax over the last dimension, then y * scale + bias, in two kernels."""

    def __init__(self, dim, scale=1.0, bias=0.0):
        super().__init__()
        self.dim = dim
        self.scale = float(scale)
        self.bias = float(bias)

    def forward(self, x):
        x = _check_input(x)
        shape = x.shape
        y = ext.row_softmax(_as_rows(x))
        y = ext.epilogue_0(y, self.scale, self.bias)
        return y.view(shape)
)py";

constexpr std::string_view kReference = R"py(import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim, scale=1.0, bias=0.0):
        super().__init__()
        self.dim = dim
        self.scale = scale
        self.bias = bias

    def forward(self, x):
        return torch.softmax(x, dim=-1) * self.scale + self.bias


batch_size = 128
dim = 4096


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
)py";

std::string BuildCandidate(size_t epilogues) {
  std::string s(kPythonHead);
  std::string decls = "torch::Tensor row_softmax(torch::Tensor x);\n";
  std::string functions = "\"row_softmax\"";
  for (size_t k = 0; k < epilogues; ++k) {
    s += EpilogueCuda(k);
    const std::string name = "epilogue_" + std::to_string(k);
    decls += "torch::Tensor " + name + "(torch::Tensor x, double s, double b);\n";
    functions += ",\n               \"" + name + "\"";
  }
  s += "\"\"\"\n\ncpp_source = \"\"\"\n" + decls + "\"\"\"\n";
  s += kPythonHelpers;
  s += "ext = load_inline(\n    name=\"softmax_epilogues\",\n    cpp_sources=cpp_source,\n"
       "    cuda_sources=cuda_source,\n    functions=[" +
       functions + "],\n    extra_cuda_cflags=[\"-O3\", \"--use_fast_math\"],\n    verbose=False,\n)\n";
  s += kPythonModel;
  return s;
}

// The smallest candidate of at least `target` bytes.
std::string BuildCandidateOfSize(size_t target) {
  std::string s;
  for (size_t k = 1; k < 1000; ++k) {
    s = BuildCandidate(k);
    if (s.size() >= target) break;
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

struct Job {
  std::string name;
  std::string candidate;
  std::string reference;
  sc::TaskBackend backend = sc::TaskBackend::kCuda;
};

struct Figures {
  size_t checks = 0;
  double seconds = 0;      // Wall (steady_clock).
  double cpu_seconds = 0;  // This thread's CPU time: the figure a busy machine disturbs least.
  double p50_ms = 0, p99_ms = 0, max_ms = 0;
  size_t bytes = 0;     // Candidate bytes checked in all.
  size_t findings = 0;  // Of one pass over the jobs.
};

double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Checks the jobs round-robin until `iterations` checks are done, timing each.
Figures Measure(const std::vector<Job>& jobs, const sc::AnticheatProfile& profile,
                size_t iterations) {
  Figures f;
  std::vector<sc::CheckInput> inputs;
  for (const Job& j : jobs) {
    sc::CheckInput in;
    in.candidate_source = j.candidate;
    in.reference_source = j.reference;
    in.backend = j.backend;
    in.precision = sc::TaskPrecision::kFp32;
    inputs.push_back(in);
    f.findings += sc::Check(in, profile).findings.size();  // Also warms the caches.
  }
  const size_t warmup = std::min<size_t>(iterations / 10 + 1, 1000);
  size_t sink = 0;
  for (size_t i = 0; i < warmup; ++i) sink += sc::Check(inputs[i % inputs.size()], profile).findings.size();

  std::vector<double> ms;
  ms.reserve(iterations);
  const double cpu_start = ThreadCpuSeconds();
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < iterations; ++i) {
    const sc::CheckInput& in = inputs[i % inputs.size()];
    const Clock::time_point t0 = Clock::now();
    const sc::CheckReport r = sc::Check(in, profile);
    const Clock::time_point t1 = Clock::now();
    sink += r.findings.size();
    f.bytes += in.candidate_source.size();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  f.cpu_seconds = ThreadCpuSeconds() - cpu_start;
  f.checks = iterations;
  std::sort(ms.begin(), ms.end());
  f.p50_ms = Percentile(ms, 0.50);
  f.p99_ms = Percentile(ms, 0.99);
  f.max_ms = ms.empty() ? 0 : ms.back();
  if (sink == SIZE_MAX) std::puts("");  // Keeps the checks from being optimised away.
  return f;
}

std::string Latency(const Figures& f) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "p50 %.3f ms, p99 %.3f ms, max %.3f ms", f.p50_ms, f.p99_ms,
                f.max_ms);
  return buf;
}

double PerSecond(const Figures& f) {
  return f.seconds > 0 ? static_cast<double>(f.checks) / f.seconds : 0;
}
double PerCpuSecond(const Figures& f) {
  return f.cpu_seconds > 0 ? static_cast<double>(f.checks) / f.cpu_seconds : 0;
}

size_t LineCount(std::string_view s) {
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n')) +
         (s.empty() || s.back() == '\n' ? 0 : 1);
}

bool ReadFile(const fs::path& p, std::string* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

// Backend from the corpus's naming (ids end in _cpu or _cuda), cuda otherwise.
sc::TaskBackend BackendFor(const fs::path& candidate) {
  const std::string dir = candidate.parent_path().filename().string();
  if (dir.ends_with("_cpu")) return sc::TaskBackend::kCpu;
  if (dir.find("triton") != std::string::npos) return sc::TaskBackend::kTriton;
  return sc::TaskBackend::kCuda;
}

Job JobFromFile(const fs::path& p, bool* ok) {
  Job j;
  j.name = p.string();
  j.backend = BackendFor(p);
  *ok = ReadFile(p, &j.candidate);
  // A reference.py beside it (the corpus's layout) is the job's reference.
  const fs::path ref = p.parent_path() / "reference.py";
  std::error_code ec;
  if (*ok && p.filename() != "reference.py" && fs::is_regular_file(ref, ec)) ReadFile(ref, &j.reference);
  return j;
}

int Usage() {
  std::fprintf(stderr,
               "usage: kbox-static-bench [--iterations N] [--profile-dir DIR] [--profile NAME] "
               "[--corpus DIR] [FILE...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  size_t iterations = 20000;
  fs::path profile_dir = KBOX_ANTICHEAT_DIR;
  std::string profile_name = "strict";
  fs::path corpus_dir = KBOX_SHARED_CORPUS_DIR;
  bool corpus_given = false;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--iterations" && has_value) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(argv[++i], &end, 10);
      if (end == nullptr || *end != '\0' || n == 0) return Usage();
      iterations = static_cast<size_t>(n);
    } else if (a == "--profile-dir" && has_value) {
      profile_dir = argv[++i];
    } else if (a == "--profile" && has_value) {
      profile_name = argv[++i];
    } else if (a == "--corpus" && has_value) {
      corpus_dir = argv[++i];
      corpus_given = true;
    } else if (a == "-h" || a == "--help" || a.starts_with("--")) {
      return Usage();
    } else {
      files.emplace_back(a);
    }
  }

  auto loaded = sc::AnticheatProfile::Load(profile_dir, profile_name);
  if (!loaded) {
    std::fprintf(stderr, "kbox-static-bench: profile %s in %s: %s: %s\n", profile_name.c_str(),
                 profile_dir.c_str(), loaded.error().field.c_str(), loaded.error().message.c_str());
    return 1;
  }
  const sc::AnticheatProfile& profile = *loaded;

  // 1. The synthetic ~10 KB candidate.
  {
    Job j;
    j.name = "10KB candidate";
    j.candidate = BuildCandidateOfSize(10 * 1024);
    j.reference = std::string(kReference);
    const Figures f = Measure({j}, profile, iterations);
    std::printf("static_check 10KB candidate: %.0f checks/s on one thread, %s "
                "(%.0f checks per CPU-second; %zu bytes, %zu lines, %zu findings under %s, "
                "%zu checks)\n",
                PerSecond(f), Latency(f).c_str(), PerCpuSecond(f), j.candidate.size(),
                LineCount(j.candidate), f.findings, profile.name().c_str(), f.checks);
  }

  // 2. Files named on the command line, one figure each.
  int status = 0;
  for (const fs::path& p : files) {
    bool ok = false;
    const Job j = JobFromFile(p, &ok);
    if (!ok) {
      std::fprintf(stderr, "kbox-static-bench: cannot read %s\n", p.c_str());
      status = 1;
      continue;
    }
    const Figures f = Measure({j}, profile, iterations);
    std::printf("static_check %s: %.0f checks/s on one thread, %s "
                "(%.0f checks per CPU-second; %zu bytes, %zu findings)\n",
                p.c_str(), PerSecond(f), Latency(f).c_str(), PerCpuSecond(f), j.candidate.size(),
                f.findings);
  }

  // 3. Every candidate.py of the corpus, round-robin.
  std::error_code ec;
  corpus_dir = corpus_dir.lexically_normal();
  if (fs::is_directory(corpus_dir, ec)) {
    std::vector<fs::path> paths;
    for (auto it = fs::recursive_directory_iterator(corpus_dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_regular_file(ec) && it->path().filename() == "candidate.py") paths.push_back(it->path());
    }
    std::sort(paths.begin(), paths.end());
    std::vector<Job> jobs;
    size_t total_bytes = 0;
    for (const fs::path& p : paths) {
      bool ok = false;
      Job j = JobFromFile(p, &ok);
      if (!ok) continue;
      total_bytes += j.candidate.size();
      jobs.push_back(std::move(j));
    }
    if (jobs.empty()) {
      std::printf("static_check corpus %s: no candidate.py found\n", corpus_dir.c_str());
    } else {
      const Figures f = Measure(jobs, profile, iterations);
      std::printf("static_check corpus %s (%zu candidate.py, %zu KB, %zu findings in all): "
                  "%.0f checks/s, %.1f MB/s on one thread, %s "
                  "(%.0f checks per CPU-second; %zu checks)\n",
                  corpus_dir.c_str(), jobs.size(), total_bytes / 1024, f.findings, PerSecond(f),
                  f.seconds > 0 ? static_cast<double>(f.bytes) / f.seconds / 1e6 : 0.0,
                  Latency(f).c_str(), PerCpuSecond(f), f.checks);
    }
  } else if (corpus_given) {
    std::fprintf(stderr, "kbox-static-bench: no corpus folder %s\n", corpus_dir.c_str());
    status = 1;
  }
  return status;
}
