#include "policy/static_check/cpp_rules.h"

#include <algorithm>
#include <array>
#include <deque>
#include <span>
#include <string>
#include <utility>

#include "policy/static_check/cpp_lexer.h"

namespace kbox::static_check {
namespace {

template <size_t N>
bool In(const std::array<std::string_view, N>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// at::/torch:: functions that allocate or describe tensors; every other call
// in those namespaces is ATen compute (cpp.aten-compute).
constexpr auto kAtenNonCompute = std::to_array<std::string_view>({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "from_blob", "tensor", "scalar_tensor", "arange", "TensorOptions", "dtype", "device",
    "Device", "Tensor", "Scalar", "IntArrayRef", "ScalarType", "Layout", "MemoryFormat", "elementSize",
    "typeMetaToScalarType", "toString", "OptionalDeviceGuard", "DeviceGuard", "NoGradGuard",
    "AutoDispatchBelowAutograd", "native_empty", "get_default_dtype", "kCUDA", "kCPU", "globalContext",
    "isFloatingType", "requires_grad", "TensorArg", "checkAllSameGPU", "CheckedFrom", "empty_cuda",
    "detail", "cuda", "indexing", "Generator", "zeros_symint", "empty_symint", "randn", "rand",
    "manual_seed", "sizes", "stack", "cat", "parallel_for", "parallel_reduce", "get_num_threads",
    "set_num_threads", "get_thread_num", "in_parallel_region", "ceil_div", "divup", "round_up",
    "get_num_interop_threads", "launch", "intraop_launch", "init_num_threads", "toScalarType", "kFloat",
    "kInt", "kLong", "kBool", "irange", "ArrayRef", "optional", "nullopt", "Stream", "DeviceType",
    "OptionalIntArrayRef", "MaybeOwned", "ExclusivelyOwned"});

constexpr auto kComputeMethods = std::to_array<std::string_view>({
    "matmul", "mm", "bmm", "addmm", "addmv", "baddbmm", "mv", "dot", "einsum", "conv1d", "conv2d",
    "conv3d", "softmax", "log_softmax", "relu", "relu_", "sigmoid", "sigmoid_", "tanh", "tanh_", "gelu",
    "silu", "exp", "exp_", "log", "log_", "sqrt", "rsqrt", "pow", "sum", "mean", "amax", "amin",
    "argmax", "argmin", "prod", "std", "var", "norm", "cumsum", "logsumexp", "clamp", "clamp_", "add",
    "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "addcmul", "addcdiv", "lerp", "sort", "topk",
    "layer_norm", "group_norm", "batch_norm", "linear", "hardtanh", "leaky_relu", "elu", "softplus",
    "square", "reciprocal", "abs", "neg", "maximum", "minimum", "triu", "tril"});

constexpr auto kVendorPrefixes = std::to_array<std::string_view>({
    "cublas", "cublasLt", "cudnn", "cufft", "cusparse", "cusolver", "cutensor", "nvjpeg", "mkl_", "cblas_",
    "dnnl_", "oneapi"});

constexpr auto kStreamCalls = std::to_array<std::string_view>({
    "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cuStreamCreate",
    "cuStreamCreateWithPriority", "getStreamFromPool", "getStreamFromExternal", "setCurrentCUDAStream",
    "CUDAStreamGuard", "OptionalCUDAStreamGuard", "CUDAMultiStreamGuard", "cudaStreamPerThread",
    "cublasSetStream", "cublasSetStream_v2", "cudnnSetStream", "cudaStreamLegacy"});

constexpr auto kThreadNames = std::to_array<std::string_view>({
    "thread", "jthread", "async", "pthread_create", "pthread_detach", "_beginthread", "CreateThread"});

constexpr auto kProcessOrIo = std::to_array<std::string_view>({
    "system", "popen", "fork", "vfork", "execv", "execve", "execvp", "execvpe", "execl", "execle",
    "execlp", "posix_spawn", "posix_spawnp", "fopen", "freopen", "fopen64", "open", "openat", "creat",
    "ifstream", "ofstream", "fstream", "filebuf", "socket", "connect", "bind", "kill", "ptrace",
    "syscall", "mmap", "unlink", "rename", "mkdir", "rmdir", "symlink", "chdir", "chmod", "getenv",
    "setenv", "putenv", "clone", "prctl", "process_vm_readv", "process_vm_writev", "directory_iterator",
    "recursive_directory_iterator", "opendir", "fdopendir", "readdir", "scandir", "readlink", "readlinkat",
    "realpath", "stat", "lstat", "fstatat", "access", "faccessat", "openat2", "name_to_handle_at",
    "open_by_handle_at", "dup2", "sendfile", "splice", "pipe", "socketpair", "accept", "listen",
    "gethostbyname", "getaddrinfo", "chown", "link", "truncate", "ftruncate", "fdopen", "tmpfile",
    "mkstemp", "mkfifo", "mknod", "umask", "chroot", "mount", "setuid", "setgid", "execveat", "fexecve"});

constexpr auto kDynamicLoading = std::to_array<std::string_view>({
    "dlopen", "dlsym", "dlmopen", "dlvsym", "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary", "cuLibraryLoadData", "cuLibraryLoadFromFile", "cudaLibraryLoadData",
    "cudaLibraryLoadFromFile", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvJitLinkCreate"});

constexpr auto kLowPrecision = std::to_array<std::string_view>({
    "half", "__half", "__half2", "half2", "__nv_bfloat16", "__nv_bfloat162", "nv_bfloat16",
    "nv_bfloat162", "Half", "BFloat16", "kHalf", "kBFloat16", "__float2half", "__float2half_rn",
    "__float2half_rz", "__float2half2_rn", "__floats2half2_rn", "__half2float", "__float2bfloat16",
    "__float2bfloat16_rn", "__bfloat162float", "__hadd", "__hmul", "__hfma", "__hsub", "__hdiv",
    "hexp", "h2exp", "__nv_fp8_e4m3", "__nv_fp8_e5m2", "__nv_fp8x2_e4m3", "tf32", "__float_to_tf32",
    "CUBLAS_TF32_TENSOR_OP_MATH", "CUBLAS_COMPUTE_32F_FAST_TF32", "CUBLAS_COMPUTE_32F_FAST_16F",
    "CUBLAS_COMPUTE_32F_FAST_16BF", "CUDA_R_16F", "CUDA_R_16BF", "float8_e4m3fn"});

constexpr auto kLaunchCalls = std::to_array<std::string_view>({
    "cudaLaunchKernel", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
    "cuLaunchKernelEx", "cudaLaunchCooperativeKernelMultiDevice"});

bool StartsWithAny(std::string_view s, std::span<const std::string_view> prefixes) {
  for (auto p : prefixes) {
    if (s.substr(0, p.size()) == p) return true;
  }
  return false;
}

class CppChecker {
 public:
  CppChecker(const ExtensionSource& src, const CheckInput& in, FindingSink& sink, CppFacts* facts,
             bool macro_body = false)
      : src_(src), in_(in), sink_(sink), facts_(facts), t_(LexCpp(src.text.value)), macro_body_(macro_body) {
    // The lexer keeps line splices inside tokens (`mat\<newline>mul` is one
    // identifier); the rules compare text, so they see it spliced.
    for (CppToken& t : t_) {
      if (t.text.find('\\') == std::string_view::npos) continue;
      std::string joined;
      for (size_t k = 0; k < t.text.size(); ++k) {
        if (t.text[k] == '\\') {
          size_t n = k + 1;
          while (n < t.text.size() && (t.text[n] == ' ' || t.text[n] == '\t')) ++n;
          if (n < t.text.size() && (t.text[n] == '\n' || t.text[n] == '\r')) {
            if (t.text[n] == '\r' && n + 1 < t.text.size() && t.text[n + 1] == '\n') ++n;
            k = n;
            continue;
          }
        }
        joined += t.text[k];
      }
      spliced_.push_back(std::move(joined));
      t.text = spliced_.back();
    }
  }

  void Run() {
    DeclarationsAndAliases();
    for (size_t i = 0; i < t_.size(); ++i) {
      const CppToken& t = t_[i];
      switch (t.kind) {
        case CppTokenKind::kPreprocessor:
          Directive(i);
          statement_start_ = i + 1;
          break;
        case CppTokenKind::kString: AsmString(i); break;
        case CppTokenKind::kIdentifier:
          if (t.text == "__global__" && !macro_body_) KernelName(i);
          Identifier(i);
          break;
        case CppTokenKind::kPunct:
          if (t.text == "<<<") facts_->launches_kernel = true;
          if (t.text == "{") scopes_.push_back(PendingScopeIsNamespace(i));
          if (t.text == "}" && !scopes_.empty()) scopes_.pop_back();
          if (t.text == ";") statement_start_ = i + 1;
          if (t.text == "{" || t.text == "}") statement_start_ = i + 1;
          break;
        default: break;
      }
    }
  }

 private:
  // What the rules need before the main pass: functions the source itself
  // declares (so `using namespace at;` + `softmax(x)` can be told from a
  // call of the candidate's own `softmax`), and namespace aliases of ATen
  // (`namespace F = torch::nn::functional;`).
  void DeclarationsAndAliases() {
    for (size_t i = 0; i + 1 < t_.size(); ++i) {
      if (!IsIdent(i)) continue;
      const std::string_view w = t_[i].text;
      if (w == "namespace" && IsIdent(i + 1) && IsPunct(i + 2, "=") && IsIdent(i + 3)) {
        if (IsAten(t_[i + 3].text)) aten_aliases_.push_back(t_[i + 1].text);
      }
      if (w == "using" && IsIdent(i + 1) && t_[i + 1].text == "namespace" && IsIdent(i + 2) && IsAten(t_[i + 2].text)) {
        using_aten_ = true;
      }
      // `float half = ...`: a variable that happens to be named like a type.
      if (In(kLowPrecision, w) && i > 0 && IsIdent(i - 1) && t_[i - 1].text != "return" &&
          t_[i - 1].text != "const" && t_[i - 1].text != "static" && t_[i - 1].text != "typename" &&
          t_[i - 1].text != "using" && t_[i - 1].text != "__shared__" && t_[i - 1].text != "volatile" &&
          (IsPunct(i + 1, "=") || IsPunct(i + 1, ";") || IsPunct(i + 1, ",") || IsPunct(i + 1, ")") ||
           IsPunct(i + 1, "["))) {
        variables_.push_back(w);
      }
      if (IsPunct(i + 1, "(") && i > 0) {
        const CppToken& prev = t_[i - 1];
        const bool type_before =
            (prev.kind == CppTokenKind::kIdentifier && prev.text != "return" && prev.text != "else" &&
             prev.text != "throw" && prev.text != "case" && prev.text != "new" && prev.text != "delete" &&
             prev.text != "sizeof" && prev.text != "co_return" && prev.text != "co_yield") ||
            IsPunct(i - 1, "*") || IsPunct(i - 1, "&") || IsPunct(i - 1, ">");
        if (type_before) declared_.push_back(w);
      }
    }
  }

  bool IsAten(std::string_view ns) const {
    return ns == "at" || ns == "torch" ||
           std::find(aten_aliases_.begin(), aten_aliases_.end(), ns) != aten_aliases_.end();
  }

  // The candidate.py line and column the C++ token `i` came from.
  std::pair<uint32_t, uint32_t> Place(size_t i) const {
    const CppToken& t = t_[i];
    const auto& map = src_.text.value_line_source;
    uint32_t line = map.empty() ? 0 : map.back();
    if (t.line >= 1 && t.line <= map.size()) line = map[t.line - 1];
    const uint32_t column = t.line == 1 ? src_.text.first_column + t.column - 1 : t.column;
    return {line, column};
  }

  // Places a finding on the candidate.py line the C++ line came from.
  void Add(std::string_view rule, size_t i, std::string message) {
    const auto [line, column] = Place(i);
    sink_.Add(rule, line, column, std::move(message));
  }

  // The name declared by the `__global__` at `g`: the identifier before the
  // first '(' that is not an attribute's (`__launch_bounds__(256)`,
  // `__attribute__((...))`, `alignas(...)`, `[[...]]`), skipping explicit
  // template arguments (`template __global__ void k<float>(float*)`). The
  // specifiers around it (`extern "C"`, `static`, `template <...>`, the
  // return type) need no reading. Gives up at ';', '{', '}', '=' or after
  // kMaxDeclaratorTokens, so a run of `__global__` tokens stays linear.
  void KernelName(size_t g) {
    static constexpr size_t kMaxDeclaratorTokens = 256;
    const size_t limit = std::min(t_.size(), g + kMaxDeclaratorTokens);
    for (size_t k = g + 1; k < limit; ++k) {
      const CppToken& t = t_[k];
      if (t.kind == CppTokenKind::kPreprocessor) return;
      if (IsPunct(k, ";") || IsPunct(k, "{") || IsPunct(k, "}") || IsPunct(k, "=")) return;
      if (IsPunct(k, "[") && IsPunct(k + 1, "[")) {  // [[attribute]]
        k = SkipBalanced(k, "[", "]", limit);
        continue;
      }
      if (!IsPunct(k, "(")) continue;
      size_t name = k;  // The identifier the '(' follows.
      if (k > g + 1 && (IsPunct(k - 1, ">") || IsPunct(k - 1, ">>"))) {
        // `k<float, 4>(`: back over the template argument list.
        size_t depth = 0;
        for (size_t b = k - 1; b > g; --b) {
          if (IsPunct(b, ">")) ++depth;
          if (IsPunct(b, ">>")) depth += 2;
          if (IsPunct(b, "<")) --depth;
          if (IsPunct(b, "<<")) depth = depth >= 2 ? depth - 2 : 0;
          if (depth == 0) {
            name = b - 1;
            break;
          }
        }
      } else {
        name = k - 1;
      }
      if (name <= g || !IsIdent(name)) return;
      const std::string_view w = t_[name].text;
      if (w == "__launch_bounds__" || w == "__attribute__" || w == "__declspec" || w == "alignas" ||
          w == "__align__" || w == "decltype" || w == "__cluster_dims__" || w == "__maxnreg__" ||
          w == "__grid_constant__" || w == "noexcept" || w == "throw") {
        k = SkipBalanced(k, "(", ")", limit);
        continue;
      }
      if (w == "operator" || w == "template" || w == "typename" || w == "void" || w == "auto" || w == "const" ||
          w == "static" || w == "inline" || w == "extern" || w == "__global__" || w == "__host__" ||
          w == "__device__" || w == "__forceinline__" || w == "__noinline__") {
        return;
      }
      const auto [line, column] = Place(name);
      facts_->kernels.push_back(KernelNameAt{std::string(w), line, column});
      return;
    }
  }

  // Index of the bracket that closes the one at `open`, or `limit` when
  // none does before it.
  size_t SkipBalanced(size_t open, std::string_view o, std::string_view c, size_t limit) const {
    size_t depth = 0;
    for (size_t k = open; k < limit; ++k) {
      if (IsPunct(k, o)) ++depth;
      if (IsPunct(k, c) && --depth == 0) return k;
    }
    return limit;
  }

  bool IsPunct(size_t i, std::string_view p) const {
    return i < t_.size() && t_[i].kind == CppTokenKind::kPunct && t_[i].text == p;
  }
  bool IsIdent(size_t i) const { return i < t_.size() && t_[i].kind == CppTokenKind::kIdentifier; }

  // The `{` just read opens a namespace (or extern "C") body when the
  // statement before it starts with `namespace`/`extern`.
  bool PendingScopeIsNamespace(size_t brace) const {
    for (size_t k = statement_start_; k < brace; ++k) {
      if (t_[k].kind == CppTokenKind::kIdentifier && (t_[k].text == "namespace" || t_[k].text == "extern")) return true;
    }
    return false;
  }
  bool AtNamespaceScope() const {
    return std::all_of(scopes_.begin(), scopes_.end(), [](bool ns) { return ns; });
  }

  void Directive(size_t i) {
    // `#` or its digraph `%:`.
    std::string_view d = t_[i].text.substr(t_[i].text.starts_with("%:") ? 2 : 1);
    while (!d.empty() && (d.front() == ' ' || d.front() == '\t')) d.remove_prefix(1);
    if (d.starts_with("define") && !macro_body_) {
      // A macro body is code wherever the macro is used: check it as such.
      std::string_view body = d.substr(6);
      ExtensionSource macro;
      macro.cuda = src_.cuda;
      macro.text.value = std::string(body);
      const auto& map = src_.text.value_line_source;
      const uint32_t line = t_[i].line >= 1 && t_[i].line <= map.size() ? map[t_[i].line - 1] : 0;
      macro.text.value_line_source.assign(1, line);
      for (char c : macro.text.value) {
        if (c == '\n') macro.text.value_line_source.push_back(line);
      }
      CppChecker(macro, in_, sink_, facts_, true).Run();
      return;
    }
    const bool include = d.starts_with("include") || d.starts_with("import") || d.starts_with("embed");
    if (!include && d.find("__has_include") == std::string_view::npos) return;
    const size_t open = d.find_first_of("<\"");
    if (open == std::string_view::npos) {
      Add("cpp.include-path", i, "#include of a macro: kbox cannot tell which file it reads");
      return;
    }
    const char close_char = d[open] == '<' ? '>' : '"';
    const size_t close = d.find(close_char, open + 1);
    const std::string_view path = d.substr(open + 1, close == std::string_view::npos ? std::string_view::npos
                                                                                       : close - open - 1);
    if (path.starts_with("/") || path.find("..") != std::string_view::npos || path.starts_with("~") ||
        d.starts_with("embed")) {
      Add("cpp.include-path", i, "#include \"" + std::string(path.substr(0, 60)) + "\" reads a host file at compile time");
    }
  }

  // Inline assembly can pull files in (.incbin) or compute in low precision.
  void AsmString(size_t i) {
    if (i > 0 && t_[i - 1].kind == CppTokenKind::kString) return;  // Judged with the literal before it.
    // Adjacent literals are one string to the compiler: ".inc" "bin".
    std::string joined;
    for (size_t k = i; k < t_.size() && t_[k].kind == CppTokenKind::kString; ++k) {
      std::string_view lit = t_[k].text;
      const size_t open = lit.find('"'), close = lit.rfind('"');
      joined += open != std::string_view::npos && close > open ? lit.substr(open + 1, close - open - 1) : lit;
    }
    const std::string_view s = joined;
    if (s.find(".incbin") != std::string_view::npos || s.find(".include") != std::string_view::npos) {
      Add("cpp.include-path", i, "assembler directive reads a host file at compile time");
    }
    if (in_.precision == TaskPrecision::kFp32 &&
        (s.find(".f16") != std::string_view::npos || s.find(".bf16") != std::string_view::npos ||
         s.find(".tf32") != std::string_view::npos || s.find(".e4m3") != std::string_view::npos)) {
      Add("cpp.precision-downgrade", i, "inline PTX computes in f16/bf16/tf32 in an fp32 task");
    }
  }

  // `a :: b :: c` ending at `i` (an identifier), outermost first.
  std::vector<std::string_view> QualifierOf(size_t i) const {
    std::vector<std::string_view> q;
    size_t k = i;
    while (k >= 2 && IsPunct(k - 1, "::") && IsIdent(k - 2)) {
      q.insert(q.begin(), t_[k - 2].text);
      k -= 2;
    }
    return q;
  }

  void Identifier(size_t i) {
    const std::string_view name = t_[i].text;
    // In a macro body a name may be called where the macro is used.
    const bool call = IsPunct(i + 1, "(") || macro_body_;
    const bool member = i > 0 && (IsPunct(i - 1, ".") || IsPunct(i - 1, "->"));
    const auto qual = QualifierOf(i);
    const bool qualified = !qual.empty();

    if (name == "__global__") {
      facts_->has_global_kernel = true;
      return;
    }
    if (name == "static" || name == "thread_local") {
      StaticDeclaration(i);
      return;
    }
    if (In(kLaunchCalls, name) && call) facts_->launches_kernel = true;

    // ATen compute: at::matmul(...), torch::softmax(...), at::native::...
    if (call && qualified && IsAten(qual[0]) && !(qual.size() >= 2 && (qual[1] == "cuda" || qual[1] == "detail"))) {
      const bool blas = qual.size() >= 2 && qual[1] == "native";
      if (!In(kAtenNonCompute, name) || blas) {
        Add("cpp.aten-compute", i, Join(qual) + "::" + std::string(name) + " is ATen compute, not the candidate's kernel");
      }
    }
    if (call && qualified && qual.size() >= 3 && qual[0] == "at" && qual[1] == "cuda" && qual[2] == "blas") {
      Add("cpp.vendor-library", i, "at::cuda::blas::" + std::string(name) + " is a cuBLAS call");
    }
    if (call && !qualified && !member && using_aten_ && In(kComputeMethods, name) &&
        std::find(declared_.begin(), declared_.end(), name) == declared_.end()) {
      Add("cpp.aten-compute", i, std::string(name) + "() under `using namespace` of ATen is ATen compute");
    }
    if (call && member && In(kComputeMethods, name)) {
      Add("cpp.aten-compute", i, "." + std::string(name) + "() on a tensor is ATen compute, not the candidate's kernel");
    }
    if (call && !member && StartsWithAny(name, kVendorPrefixes) && name != "cublasSetStream") {
      Add("cpp.vendor-library", i, std::string(name) + " does the work in a vendor library instead of a kernel");
    }
    if (call && qualified && (qual[0] == "thrust" || (qual[0] == "cub" && name.starts_with("Device")) ||
                              (qual[0] == "cub" && qual.size() >= 2 && qual[1].starts_with("Device")))) {
      if (name != "raw_pointer_cast" && name != "device_pointer_cast" && name != "make_tuple" &&
          name != "device_ptr" && name != "get") {
        Add("cpp.vendor-library", i, Join(qual) + "::" + std::string(name) + " runs a library's device-wide kernel");
      }
    }
    if (qualified && qual[0] == "cutlass" && qual.size() >= 3 && qual[2] == "device") {
      Add("cpp.vendor-library", i, "a CUTLASS device-level operator is a library kernel");
    }
    if (In(kStreamCalls, name)) {
      Add("cpp.side-stream", i, std::string(name) + ": work on a stream the evaluator does not time");
    }
    if (!member && In(kThreadNames, name) && !IsPunct(i + 1, "::") &&
        ((qualified && (qual.back() == "std" || qual.back() == "boost")) || (name.starts_with("pthread") && call) ||
         name == "_beginthread" || name == "CreateThread")) {
      Add("cpp.thread", i, std::string(name) + ": a thread can keep working after the timed call returns");
    }
    if (!member && call && In(kProcessOrIo, name) && (!qualified || qual.back() == "std" || qual.back() == "filesystem")) {
      Add("cpp.process-or-io", i, std::string(name) + "(): processes, files or sockets from the extension");
    }
    if (!member && (name == "ifstream" || name == "ofstream" || name == "fstream") && qualified) {
      Add("cpp.process-or-io", i, "std::" + std::string(name) + ": file I/O from the extension");
    }
    if (qualified && qual.back() == "filesystem") {
      Add("cpp.process-or-io", i, "std::filesystem: file access from the extension");
    }
    if (In(kDynamicLoading, name) && call) {
      Add("cpp.dynamic-loading", i, std::string(name) + " loads code kbox never saw");
    }
    if (name.starts_with("cudaGraph") || name.starts_with("cuGraph") || name == "cudaStreamBeginCapture" ||
        name == "cudaStreamEndCapture" || name == "CUDAGraph") {
      Add("cpp.graph-capture", i, std::string(name) + ": CUDA graph capture or replay");
    }
    if (in_.precision == TaskPrecision::kFp32 && In(kLowPrecision, name) && !member &&
        std::find(variables_.begin(), variables_.end(), name) == variables_.end()) {
      Add("cpp.precision-downgrade", i, std::string(name) + " in an fp32 task computes in lower precision");
    }
    if (in_.precision == TaskPrecision::kFp32 && member && call && (name == "half" || name == "bfloat16")) {
      Add("cpp.precision-downgrade", i, "." + std::string(name) + "() in an fp32 task");
    }
    // Mutable variables at namespace scope outlive every call, like statics.
    if (AtNamespaceScope() && i == statement_start_) NamespaceDeclaration(i);
  }

  static std::string Join(const std::vector<std::string_view>& q) {
    std::string s;
    for (auto p : q) {
      if (!s.empty()) s += "::";
      s += p;
    }
    return s;
  }

  // Tokens of the declaration starting at `i`, up to ';', '{' or '='.
  // Returns true when it declares a mutable variable (not a function, type,
  // constant or shared/constant memory).
  bool MutableVariable(size_t i, size_t* name_at) const {
    bool is_const = false;
    size_t last_ident = i;
    for (size_t k = i; k < t_.size(); ++k) {
      const CppToken& t = t_[k];
      if (t.kind == CppTokenKind::kPunct && (t.text == ";" || t.text == "=" || t.text == "{" || t.text == "[")) break;
      if (t.kind == CppTokenKind::kPunct && t.text == "(") return false;  // A function.
      if (t.kind == CppTokenKind::kPreprocessor) return false;
      if (t.kind != CppTokenKind::kIdentifier) continue;
      const std::string_view w = t.text;
      if (w == "const" || w == "constexpr" || w == "consteval" || w == "constinit") is_const = true;
      if (w == "__shared__" || w == "__constant__" || w == "using" || w == "typedef" || w == "namespace" ||
          w == "struct" || w == "class" || w == "enum" || w == "union" || w == "template" || w == "return" ||
          w == "extern" || w == "friend" || w == "static_assert" || w == "__global__" ||
          w == "__host__" || w == "operator" || w == "goto" || w == "case" || w == "public" || w == "private" ||
          w == "protected" || w == "if" || w == "for" || w == "while" || w == "switch" || w == "do" ||
          w == "else" || w == "throw" || w == "delete" || w == "new") {
        return false;
      }
      last_ident = k;
    }
    // `static const float* p` is a mutable pointer to const: const binds left.
    bool pointer = false;
    for (size_t k = i; k < t_.size() && !IsPunct(k, ";") && !IsPunct(k, "=") && !IsPunct(k, "{"); ++k) {
      if (IsPunct(k, "*") || IsPunct(k, "&")) pointer = true;
      if (pointer && t_[k].kind == CppTokenKind::kIdentifier && t_[k].text == "const") return false;
    }
    *name_at = last_ident;
    return !is_const || pointer;
  }

  void StaticDeclaration(size_t i) {
    size_t name_at = i;
    if (!MutableVariable(i + 1, &name_at) || name_at == i) return;
    Add("cpp.static-cache", i, std::string(t_[i].text) + " variable `" + std::string(t_[name_at].text) +
                                   "` keeps state between calls (a result or pointer cache)");
  }

  void NamespaceDeclaration(size_t i) {
    const std::string_view w = t_[i].text;
    if (w == "static" || w == "thread_local" || w == "__device__" || w == "__managed__") {
      if (w == "static" || w == "thread_local") return;  // Reported by StaticDeclaration.
    }
    // Needs at least a type and a name: `T name;`.
    if (!IsIdent(i + 1) && !IsPunct(i + 1, "::") && !IsPunct(i + 1, "*") && !IsPunct(i + 1, "<")) return;
    size_t name_at = i;
    if (!MutableVariable(i, &name_at) || name_at == i) return;
    Add("cpp.static-cache", i, "namespace-scope variable `" + std::string(t_[name_at].text) +
                                   "` keeps state between calls (a result or pointer cache)");
  }

  const ExtensionSource& src_;
  const CheckInput& in_;
  FindingSink& sink_;
  CppFacts* facts_;
  std::vector<CppToken> t_;
  std::deque<std::string> spliced_;             // Owns spliced token texts.
  bool macro_body_ = false;
  std::vector<std::string_view> variables_;     // Variables named like low-precision types.
  std::vector<std::string_view> aten_aliases_;
  std::vector<std::string_view> declared_;
  bool using_aten_ = false;
  std::vector<bool> scopes_;  // Open braces: true for namespace/extern bodies.
  size_t statement_start_ = 0;
};

}  // namespace

void CheckCppSource(const ExtensionSource& source, const CheckInput& input, FindingSink& sink, CppFacts* facts) {
  CppChecker(source, input, sink, facts).Run();
}

}  // namespace kbox::static_check
