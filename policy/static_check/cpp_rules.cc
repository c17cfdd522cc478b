#include "policy/static_check/cpp_rules.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <deque>
#include <map>
#include <set>
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
    "OptionalIntArrayRef", "MaybeOwned", "ExclusivelyOwned", "device_of"});

constexpr auto kComputeMethods = std::to_array<std::string_view>({
    "matmul", "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "addr", "mv", "dot", "vdot", "outer", "ger",
    "inner", "kron", "tensordot", "einsum", "conv1d", "conv2d", "conv3d", "softmax", "log_softmax", "relu",
    "relu_", "sigmoid", "sigmoid_", "tanh", "tanh_", "gelu", "silu", "exp", "exp_", "expm1", "log", "log_",
    "log1p", "sqrt", "rsqrt", "pow", "erf", "sum", "mean", "amax", "amin", "argmax", "argmin", "prod", "std",
    "var", "norm", "cumsum", "cumprod", "logsumexp", "clamp", "clamp_", "clamp_min", "clamp_max", "clip",
    "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "addcmul", "addcdiv", "lerp", "sort", "topk",
    "layer_norm", "group_norm", "batch_norm", "linear", "hardtanh", "leaky_relu", "elu", "softplus", "square",
    "reciprocal", "abs", "neg", "maximum", "minimum", "triu", "tril"});

// Tensor methods that return a tensor without computing (a view, a copy, a
// conversion): `auto a = A.contiguous();` keeps `a` a tensor.
constexpr auto kTensorReturningMethods = std::to_array<std::string_view>({
    "contiguous", "to", "view", "view_as", "reshape", "reshape_as", "clone", "t", "transpose", "permute",
    "expand", "expand_as", "narrow", "select", "slice", "squeeze", "unsqueeze", "flatten", "detach", "cpu",
    "cuda", "float", "double", "type", "as_strided", "index_select", "repeat", "unfold", "mT", "T"});

// at::/torch:: functions that make a tensor (not compute, but a tensor).
constexpr auto kTensorFactories = std::to_array<std::string_view>({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full", "full_like",
    "from_blob", "tensor", "scalar_tensor", "arange", "randn", "rand", "cat", "stack"});

// Unqualified calls that take tensors and are never ATen compute: language
// and standard-library helpers found through `using` or ADL.
constexpr auto kAdlHarmless = std::to_array<std::string_view>({
    "move", "forward", "swap", "ref", "cref", "get", "tie", "make_tuple", "make_pair", "begin", "end", "size",
    "data", "printf", "fprintf", "std", "void", "bool", "int", "float", "double", "char", "long", "short",
    "unsigned", "signed", "auto", "return", "if", "while", "for", "switch", "sizeof", "alignof", "alignas",
    "decltype", "typeid", "noexcept", "static_assert", "catch", "throw", "new", "delete", "case", "co_return",
    "co_await", "co_yield", "operator", "asm", "__asm__", "__asm", "__attribute__", "__launch_bounds__",
    "defined", "_Pragma", "__declspec", "requires", "explicit", "const", "volatile", "else", "do"});

// C and CUDA math functions named like ATen ops: `sqrt(v)` on a float is
// not ATen's unless an argument is a tensor.
constexpr auto kCMathNames = std::to_array<std::string_view>({
    "exp", "log", "sqrt", "rsqrt", "pow", "abs", "tanh", "sin", "cos", "erf", "log1p", "expm1", "norm", "div",
    "sort", "lerp", "clamp", "max", "min"});

constexpr auto kVendorPrefixes = std::to_array<std::string_view>({
    "cublas", "cublasLt", "cudnn", "cufft", "cusparse", "cusolver", "cutensor", "nvjpeg", "mkl_", "MKL_",
    "cblas_", "dnnl_", "mkldnn_", "oneapi", "openblas_", "bli_", "LAPACKE_", "lapacke_", "magma_", "nvpl_",
    "armpl_", "flexiblas_", "libxsmm_", "xnn_"});

// Namespaces of vendor math libraries: any call into them is the library's.
constexpr auto kVendorNamespaces = std::to_array<std::string_view>({
    "fbgemm", "dnnl", "mkldnn", "ideep", "xnnpack", "oneapi", "mkl", "cblas", "cudnn_frontend", "cublasLt",
    "cusparse", "cufft", "cusolver", "cudnn", "cutensor"});

// BLAS and LAPACK routines by their Fortran names, without the type letter
// (s, d, c, z): `sgemm_`, `dpotrf_`, `isamax_` (the leading i of amax/amin).
constexpr auto kBlasRoutines = std::to_array<std::string_view>({
    "gemm", "gemv", "gbmv", "symm", "hemm", "syrk", "herk", "syr2k", "her2k", "trsm", "trmm", "trmv", "trsv",
    "tbmv", "tbsv", "tpmv", "tpsv", "symv", "hemv", "sbmv", "hbmv", "spmv", "hpmv", "ger", "geru", "gerc",
    "syr", "syr2", "her", "her2", "spr", "spr2", "hpr", "hpr2", "axpy", "axpby", "dot", "dotu", "dotc", "sdot",
    "scal", "copy", "swap", "nrm2", "asum", "amax", "amin", "rot", "rotg", "rotm", "rotmg", "gemmt", "gemm3m",
    "getrf", "getrs", "getri", "getf2", "gesv", "gesvd", "gesdd", "gels", "gelsd", "gelss", "gelsy", "geqrf",
    "geqp3", "gelqf", "orgqr", "ormqr", "ungqr", "unmqr", "potrf", "potrs", "potri", "posv", "pstrf", "trtrs",
    "trtri", "sytrf", "sytrs", "sysv", "hetrf", "syev", "syevd", "syevr", "heev", "heevd", "heevr", "geev",
    "gees", "gehrd", "gebrd", "lange", "lacpy", "laswp", "larfg", "larft", "larfb"});

constexpr auto kStreamCalls = std::to_array<std::string_view>({
    "cudaStreamCreate", "cudaStreamCreateWithFlags", "cudaStreamCreateWithPriority", "cuStreamCreate",
    "cuStreamCreateWithPriority", "getStreamFromPool", "getStreamFromExternal", "setCurrentCUDAStream",
    "CUDAStreamGuard", "OptionalCUDAStreamGuard", "CUDAMultiStreamGuard", "cudaStreamPerThread",
    "cublasSetStream", "cublasSetStream_v2", "cudnnSetStream", "cudaStreamLegacy"});

constexpr auto kThreadNames = std::to_array<std::string_view>({
    "thread", "jthread", "async", "pthread_create", "pthread_detach", "_beginthread", "CreateThread"});

// ATen's and c10's asynchronous task pools: the task runs after the call
// that queued it has returned (at::parallel_for joins before it returns).
constexpr auto kAtenAsyncLaunch = std::to_array<std::string_view>({
    "launch", "intraop_launch", "intraop_launch_future", "launch_no_thread_state", "get_pool",
    "get_thread_pool"});

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
    "mkstemp", "mkfifo", "mknod", "umask", "chroot", "mount", "setuid", "setgid", "execveat", "fexecve",
    // Signals, timers, other processes, resource limits and scheduling,
    // execution contexts, memory protection: none computes, each can reach
    // the judge or turn a verdict into kbox's failure.
    "signal", "sigaction", "sigprocmask", "pthread_sigmask", "sigsuspend", "sigwait", "sigwaitinfo",
    "sigtimedwait", "sigqueue", "sigaltstack", "signalfd", "bsd_signal", "sysv_signal", "sigset", "sighold",
    "sigrelse", "sigignore", "siginterrupt", "raise", "killpg", "tgkill", "tkill", "pthread_kill",
    "pidfd_open", "pidfd_send_signal", "pidfd_getfd", "getppid", "getpgid", "setpgid", "setsid", "daemon",
    "waitpid", "waitid", "wait3", "wait4", "alarm", "ualarm", "setitimer", "timer_create", "timer_settime",
    "timerfd_create", "timerfd_settime", "setrlimit", "setrlimit64", "prlimit", "prlimit64", "setpriority",
    "sched_setaffinity", "sched_setscheduler", "sched_setparam", "ioprio_set", "getcontext", "setcontext",
    "makecontext", "swapcontext", "mprotect", "pkey_mprotect", "pkey_alloc", "pkey_set", "munmap", "mremap",
    "shm_open", "shmget", "shmat", "memfd_create", "ioctl", "unshare", "setns", "seccomp", "personality",
    "__syscall", "syscall_cp"});

// Types of the execution contexts a signal handler reads registers from.
constexpr auto kProcessTypes = std::to_array<std::string_view>({"ucontext_t", "mcontext_t", "sigjmp_buf"});

constexpr auto kDynamicLoading = std::to_array<std::string_view>({
    "dlopen", "dlsym", "dlmopen", "dlvsym", "dladdr", "dladdr1", "dlinfo", "dl_iterate_phdr",
    "__libc_dlopen_mode", "__libc_dlsym", "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx",
    "cuModuleLoadFatBinary", "cuLibraryLoadData", "cuLibraryLoadFromFile", "cudaLibraryLoadData",
    "cudaLibraryLoadFromFile", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvJitLinkCreate"});

// The dispatcher's own names: looking ops up by name, calling them below the
// probe's dispatch key, registering kernels, reading or changing the
// thread-local dispatch keys (where the run stage's TorchDispatchMode shows).
constexpr auto kDispatcherNames = std::to_array<std::string_view>({
    "Dispatcher", "OperatorHandle", "TypedOperatorHandle", "OperatorName", "findSchema", "findSchemaOrThrow",
    "findOp", "findOrRegisterSchema", "findOrRegisterName", "redispatch", "redispatchBoxed", "callBoxed",
    "callBoxedForDispatchKey", "RegisterOperators", "RegistrationHandleRAII", "registerImpl", "registerDef",
    "registerFallback", "registerLibrary", "BoxedKernel", "OperatorKernel", "DispatchKey", "DispatchKeySet",
    "LocalDispatchKeySet", "ExcludeDispatchKeyGuard", "IncludeDispatchKeyGuard", "ForceDispatchKeyGuard",
    "AutoDispatchBelowAutograd", "AutoDispatchBelowADInplaceOrView", "AutoDispatchSkipFunctionalize",
    "AutoDispatchBelowAutogradAndADInplaceOrView", "AutoNonVariableTypeMode", "PythonDispatcherTLS",
    "TorchDispatchModeTLS", "PythonTorchFunctionTLS", "DisablePythonDispatcher", "EnablePythonDispatcher",
    "key_set", "getDispatchTableForDispatchKey", "dispatchKeyExtractor", "callWithDispatchKey",
    "computeDispatchKeySet", "getDispatchKeySetUnboxed", "getDispatchKeySetBoxed", "hasKernelForDispatchKey",
    "DECLARE_DISPATCH", "DEFINE_DISPATCH", "REGISTER_DISPATCH", "REGISTER_ARCH_DISPATCH",
    "REGISTER_NO_CPU_DISPATCH", "REGISTER_CUDA_DISPATCH", "REGISTER_AVX2_DISPATCH", "REGISTER_AVX512_DISPATCH",
    "ALSO_REGISTER_AVX512_DISPATCH"});

// Names of torch::'s registration API (torch/library.h) and of the JIT.
constexpr auto kTorchRegistration = std::to_array<std::string_view>({
    "Library", "CppFunction", "dispatch", "schema", "RegisterOperators", "jit", "_RegisterOrVerify",
    "class_", "CustomClassHolder", "make_custom_class"});

// Lower-precision types, conversions and arithmetic; see IsLowPrecision.
constexpr auto kLowPrecision = std::to_array<std::string_view>({
    "half", "half2", "nv_bfloat16", "nv_bfloat162", "Half", "BFloat16", "ComplexHalf", "kHalf", "kBFloat16",
    "kFloat16", "kF16", "kComplexHalf", "hexp", "hexp2", "hexp10", "hlog", "hlog2", "hlog10", "hsqrt",
    "hrsqrt", "hrcp", "hsin", "hcos", "htanh", "htanh_approx", "hfloor", "hceil", "htrunc", "hrint", "h2exp",
    "h2exp2", "h2exp10", "h2log", "h2log2", "h2log10", "h2sqrt", "h2rsqrt", "h2rcp", "h2sin", "h2cos",
    "h2tanh", "h2floor", "h2ceil", "h2trunc", "h2rint", "tf32", "__float_to_tf32", "float8_e4m3fn",
    "half_t", "bfloat16_t", "tfloat32_t", "float_e4m3_t", "float_e5m2_t", "float_e2m1_t", "float_ue8m0_t",
    "CUBLAS_TF32_TENSOR_OP_MATH", "CUBLAS_COMPUTE_32F_FAST_TF32", "CUBLAS_COMPUTE_32F_FAST_16F",
    "CUBLAS_COMPUTE_32F_FAST_16BF", "CUDA_R_16F", "CUDA_R_16BF", "CUDA_R_8F_E4M3", "CUDA_R_8F_E5M2",
    "CUDNN_DATA_HALF", "CUDNN_DATA_BFLOAT16"});

// Prefixes of CUDA's fp16/bf16/fp8 types and conversions (cuda_fp16.h,
// cuda_bf16.h, cuda_fp8.h) and of ATen's 8- and 4-bit float types.
constexpr auto kLowPrecisionPrefixes = std::to_array<std::string_view>({
    "__half", "__nv_half", "__nv_bfloat16", "__nv_bfloat162", "__bfloat16", "__bfloat162", "__nv_fp8",
    "__nv_fp6", "__nv_fp4", "__float2half", "__float22half", "__floats2half", "__float2bfloat16",
    "__float22bfloat16", "__floats2bfloat16", "__double2half", "__double2bfloat16", "__int2half",
    "__uint2half", "__short2half", "__ushort2half", "__ll2half", "__ull2half", "__int2bfloat16",
    "__uint2bfloat16", "__short2bfloat16", "__ushort2bfloat16", "__ll2bfloat16", "__ull2bfloat16",
    "__ushort_as_half", "__short_as_half", "__ushort_as_bfloat16", "__short_as_bfloat16", "__halves2",
    "__low2half", "__high2half", "__lows2half", "__highs2half", "__lowhigh2highlow", "__low2bfloat16",
    "__high2bfloat16", "__lows2bfloat16", "__highs2bfloat16", "__internal_float2half", "Float8_", "kFloat8_",
    "Float4_", "kFloat4_", "__nv_cvt_"});

// The half-precision arithmetic intrinsics: __hadd, __hmul2, __hfma_relu,
// __h2div, __hmax_nan... (`__h` + one of these + optional 2 + optional suffix).
constexpr auto kHalfIntrinsicOps = std::to_array<std::string_view>({
    "add", "sub", "mul", "div", "fma", "neg", "abs", "max", "min", "eq", "ne", "lt", "gt", "le", "ge", "equ",
    "neu", "ltu", "gtu", "leu", "geu", "isnan", "isinf", "cmadd", "beq", "bne", "blt", "bgt", "ble", "bge",
    "bequ", "bneu", "bltu", "bgtu", "bleu", "bgeu"});

// Switches that let cuBLAS/cuDNN compute an fp32 product in TF32 or with
// reduced-precision sums (at::globalContext().setAllowTF32CuBLAS(true)).
constexpr auto kPrecisionSwitches = std::to_array<std::string_view>({
    "setAllowTF32CuBLAS", "setAllowTF32CuDNN", "setFloat32MatmulPrecision", "setAllowFP16ReductionCuBLAS",
    "setAllowBF16ReductionCuBLAS", "setAllowFP16ReductionCPU", "setAllowFP16AccumulationCuBLAS",
    "setFloat32Precision"});

constexpr auto kLaunchCalls = std::to_array<std::string_view>({
    "cudaLaunchKernel", "cudaLaunchKernelEx", "cudaLaunchCooperativeKernel", "cuLaunchKernel",
    "cuLaunchKernelEx", "cudaLaunchCooperativeKernelMultiDevice"});

bool StartsWithAny(std::string_view s, std::span<const std::string_view> prefixes) {
  for (auto p : prefixes) {
    if (s.substr(0, p.size()) == p) return true;
  }
  return false;
}

// `x.addmm_(a, b)`: an in-place variant counts as its base op.
bool IsComputeMethod(std::string_view name) {
  if (In(kComputeMethods, name)) return true;
  return name.size() > 2 && name.back() == '_' && name.front() != '_' &&
         In(kComputeMethods, name.substr(0, name.size() - 1));
}

// __hadd, __hmul2, __hfma_relu, __h2div, __hmax_nan, __hbeq2...
bool IsHalfIntrinsic(std::string_view name) {
  if (!name.starts_with("__h")) return false;
  std::string_view rest = name.substr(3);
  if (rest == "2div") return true;
  for (std::string_view op : kHalfIntrinsicOps) {
    if (!rest.starts_with(op)) continue;
    std::string_view tail = rest.substr(op.size());
    if (tail.starts_with("2")) tail.remove_prefix(1);
    if (tail.empty() || tail == "_sat" || tail == "_rn" || tail == "_relu" || tail == "_nan" || tail == "_rz" ||
        tail == "_rd" || tail == "_ru") {
      return true;
    }
  }
  return false;
}

// Half, bfloat16, fp8/fp6/fp4 and TF32: types, conversions, arithmetic.
bool IsLowPrecision(std::string_view name) {
  return In(kLowPrecision, name) || StartsWithAny(name, kLowPrecisionPrefixes) || IsHalfIntrinsic(name);
}

// A BLAS or LAPACK routine by its Fortran name: sgemm_, DGEMM, zgetrf_,
// isamax_, sgemm_64_ (ILP64 builds). `*underscored` tells whether it carries
// the trailing underscore that only the Fortran ABI gives.
bool IsBlasName(std::string_view name, bool* underscored) {
  std::string lower;
  for (char c : name) lower += (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  std::string_view n = lower;
  bool under = false;
  if (n.ends_with("_64_")) {
    n.remove_suffix(4);
    under = true;
  } else if (n.ends_with("_64")) {
    n.remove_suffix(3);
    under = true;
  }
  while (n.ends_with("_")) {
    n.remove_suffix(1);
    under = true;
  }
  if (n.size() < 3) return false;
  if (n.front() == 'i' && (n.ends_with("amax") || n.ends_with("amin"))) n.remove_prefix(1);
  if (n.front() != 's' && n.front() != 'd' && n.front() != 'c' && n.front() != 'z') return false;
  if (!In(kBlasRoutines, n.substr(1))) return false;
  *underscored = under;
  return true;
}

// ALL_CAPS names are macros by convention (TORCH_CHECK, CHECK_INPUT).
bool LooksLikeMacro(std::string_view name) {
  bool letter = false;
  for (char c : name) {
    if (c >= 'a' && c <= 'z') return false;
    if (c >= 'A' && c <= 'Z') letter = true;
  }
  return letter;
}

// How far the declaration and argument readers look ahead from one token, so
// nested hostile input stays linear; real declarators and calls are shorter.
constexpr size_t kMaxScanTokens = 512;

// What a declared name holds, for the argument-dependent-lookup rule.
enum class Holds { kNothing, kTensor, kTensors, kTensorPointer };

class CppChecker {
 public:
  // `parent` is the checker of the source a macro body comes from: the body
  // is read with that source's declarations.
  CppChecker(const ExtensionSource& src, const CheckInput& in, FindingSink& sink, CppFacts* facts,
             const CppChecker* parent = nullptr)
      : src_(src), in_(in), sink_(sink), facts_(facts), t_(LexCpp(src.text.value)), macro_body_(parent != nullptr),
        parent_(parent) {
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
    if (macro_body_) MacroParameters();
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
  // (`namespace F = torch::nn::functional;`). Also every name the source
  // declares (functions with whether they take tensors and have a body,
  // variables, types, macros, namespaces), so an unqualified call that only
  // argument-dependent lookup can resolve is told from the candidate's own.
  void DeclarationsAndAliases() {
    for (size_t i = 0; i < t_.size(); ++i) {
      if (t_[i].kind == CppTokenKind::kPreprocessor) {
        MacroName(t_[i].text);
        continue;
      }
      if (!IsIdent(i)) continue;
      const std::string_view w = t_[i].text;
      if (w == "namespace" && IsIdent(i + 1) && IsPunct(i + 2, "=") && IsIdent(i + 3)) {
        if (IsAten(t_[i + 3].text)) aten_aliases_.push_back(t_[i + 1].text);
      }
      if (w == "namespace" && IsIdent(i + 1) && (IsPunct(i + 2, "{") || IsPunct(i + 2, "::"))) {
        namespaces_.insert(t_[i + 1].text);
      }
      if (w == "using" && IsIdent(i + 1) && t_[i + 1].text == "namespace" && IsIdent(i + 2) && IsAten(t_[i + 2].text)) {
        using_aten_ = true;
      }
      if ((w == "struct" || w == "class" || w == "union" || w == "enum" || w == "typename") && IsIdent(i + 1)) {
        const size_t n = IsIdent(i + 2) && (t_[i + 1].text == "class" || t_[i + 1].text == "struct") ? i + 2 : i + 1;
        if (IsIdent(n)) types_.insert(t_[n].text);
      }
      if (w == "using" && IsIdent(i + 1) && IsPunct(i + 2, "=")) types_.insert(t_[i + 1].text);
      // `float half = ...`: a variable that happens to be named like a type.
      if (IsLowPrecision(w) && i > 0 && IsIdent(i - 1) && t_[i - 1].text != "return" &&
          t_[i - 1].text != "const" && t_[i - 1].text != "static" && t_[i - 1].text != "typename" &&
          t_[i - 1].text != "using" && t_[i - 1].text != "__shared__" && t_[i - 1].text != "volatile" &&
          (IsPunct(i + 1, "=") || IsPunct(i + 1, ";") || IsPunct(i + 1, ",") || IsPunct(i + 1, ")") ||
           IsPunct(i + 1, "["))) {
        variables_.push_back(w);
      }
      if (i == 0 || !TypeBefore(i)) continue;
      if (IsPunct(i + 1, "(")) {
        FunctionInfo& f = functions_[w];
        const size_t close = SkipBalanced(i + 1, "(", ")", std::min(t_.size(), i + kMaxScanTokens));
        for (size_t k = i + 2; k < close; ++k) {
          if (IsIdent(k) && (t_[k].text.find("Tensor") != std::string_view::npos || t_[k].text == "auto")) {
            f.tensor_params = true;
          }
        }
        if (PrecededByTemplate(i)) f.tensor_params = true;
        // A body after the declarator (qualifiers and a trailing return type between).
        for (size_t k = close + 1; k < std::min(t_.size(), close + 64); ++k) {
          if (IsPunct(k, "{")) f.defined = true;
          if (IsPunct(k, "{") || IsPunct(k, ";") || IsPunct(k, "=") || IsPunct(k, "}") ||
              t_[k].kind == CppTokenKind::kPreprocessor) {
            break;
          }
        }
      } else if (CallableObject(i)) {
        objects_.insert(w);
      }
    }
  }

  // A macro body starts with the macro's name and, for a function-like
  // macro, its parameters: names that stand for whatever the use passes.
  void MacroParameters() {
    if (!IsIdent(0)) return;
    macro_params_.insert(t_[0].text);
    if (!IsPunct(1, "(")) return;
    const size_t close = SkipBalanced(1, "(", ")", std::min(t_.size(), kMaxScanTokens));
    for (size_t k = 2; k < close; ++k) {
      if (IsIdent(k)) macro_params_.insert(t_[k].text);
    }
  }

  // The variable declared at `i` can be called: a lambda (`auto f = [&]...`),
  // a function pointer (`auto f = &g;`), a std::function, or an instance of
  // a type the source defines. Calling it is ordinary lookup, never ADL. A
  // plain variable (`int matmul = 0;`) does not hide an ADL call elsewhere.
  bool CallableObject(size_t i) const {
    if (IsPunct(i + 1, "=") && (IsPunct(i + 2, "[") || IsPunct(i + 2, "&"))) return true;
    if (!(IsPunct(i + 1, "=") || IsPunct(i + 1, ";") || IsPunct(i + 1, ",") || IsPunct(i + 1, ")") ||
          IsPunct(i + 1, "{") || IsPunct(i + 1, "(") || IsPunct(i + 1, ":"))) {
      return false;
    }
    size_t k = i - 1;
    while (k > 0 && (IsPunct(k, "&") || IsPunct(k, "&&") || IsPunct(k, "*") ||
                     (IsIdent(k) && (t_[k].text == "const" || t_[k].text == "volatile")))) {
      --k;
    }
    if (IsPunct(k, ">")) {  // std::function<...>
      for (size_t b = k; b-- > 0 && k - b < 64;) {
        if (IsPunct(b, "<")) return IsIdent(b - 1) && t_[b - 1].text == "function";
      }
      return false;
    }
    return IsIdent(k) && types_.contains(t_[k].text);
  }

  // `#define NAME...`: NAME is the candidate's macro.
  void MacroName(std::string_view directive) {
    std::string_view d = directive.substr(directive.starts_with("%:") ? 2 : 1);
    while (!d.empty() && (d.front() == ' ' || d.front() == '\t')) d.remove_prefix(1);
    if (!d.starts_with("define")) return;
    d.remove_prefix(6);
    while (!d.empty() && (d.front() == ' ' || d.front() == '\t')) d.remove_prefix(1);
    size_t n = 0;
    while (n < d.size() && (std::isalnum(static_cast<unsigned char>(d[n])) || d[n] == '_')) ++n;
    if (n > 0) macros_.insert(d.substr(0, n));
  }

  // The identifier at `i` follows a type: it is being declared.
  bool TypeBefore(size_t i) const {
    const CppToken& prev = t_[i - 1];
    if (prev.kind == CppTokenKind::kIdentifier) {
      const std::string_view p = prev.text;
      return p != "return" && p != "else" && p != "throw" && p != "case" && p != "new" && p != "delete" &&
             p != "sizeof" && p != "co_return" && p != "co_yield" && p != "goto" && p != "using" &&
             p != "namespace" && p != "do" && p != "typedef" && p != "operator" && p != "co_await" &&
             p != "alignof" && p != "decltype" && p != "typeid" && p != "noexcept" && p != "and" && p != "or" &&
             p != "not";
    }
    return IsPunct(i - 1, "*") || IsPunct(i - 1, "&") || IsPunct(i - 1, "&&") || IsPunct(i - 1, ">");
  }

  // A `template <...>` heads the declaration the token `i` is in.
  bool PrecededByTemplate(size_t i) const {
    for (size_t k = i; k-- > 0 && i - k < 128;) {
      if (IsPunct(k, ";") || IsPunct(k, "{") || IsPunct(k, "}") || t_[k].kind == CppTokenKind::kPreprocessor) {
        return false;
      }
      if (IsIdent(k) && t_[k].text == "template") return true;
    }
    return false;
  }

  // Anything the candidate's source (or, for a macro body, the source it is
  // in) declares under this name.
  bool DeclaresName(std::string_view n) const {
    if (functions_.contains(n) || objects_.contains(n) || types_.contains(n) || macros_.contains(n) ||
        macro_params_.contains(n)) {
      return true;
    }
    return parent_ && parent_->DeclaresName(n);
  }
  // A function of the candidate's taking tensors (or any type: a template),
  // an object or a type: an unqualified call of it is the candidate's own.
  bool OwnsCallable(std::string_view n) const {
    if (auto f = functions_.find(n); f != functions_.end() && f->second.tensor_params) return true;
    if (objects_.contains(n) || types_.contains(n) || macros_.contains(n) || macro_params_.contains(n)) return true;
    return parent_ && parent_->OwnsCallable(n);
  }
  // A function with a body, or a macro: the candidate's own code under the name.
  bool DefinesFunctionOrMacro(std::string_view n) const {
    if (auto f = functions_.find(n); f != functions_.end() && f->second.defined) return true;
    if (macros_.contains(n) || macro_params_.contains(n)) return true;
    return parent_ && parent_->DefinesFunctionOrMacro(n);
  }

  // Tracks what each declared name holds, in source order: a tensor
  // (`torch::Tensor x`, `const at::Tensor& A`, `auto a = A.contiguous();`,
  // `auto y = torch::empty(...)`) or something else. The last declaration
  // seen wins, which follows the parameters and locals of the function being
  // read closely enough for the argument-dependent-lookup rule.
  void NoteDeclaration(size_t i) {
    if (macro_body_ || i == 0 || !TypeBefore(i)) return;
    if (!(IsPunct(i + 1, "=") || IsPunct(i + 1, ";") || IsPunct(i + 1, ",") || IsPunct(i + 1, ")") ||
          IsPunct(i + 1, "{") || IsPunct(i + 1, ":"))) {
      return;
    }
    size_t k = i - 1;
    bool pointer = false;
    while (k > 0 && (IsPunct(k, "&") || IsPunct(k, "&&") || IsPunct(k, "*") ||
                     (IsIdent(k) && (t_[k].text == "const" || t_[k].text == "volatile" ||
                                     t_[k].text == "__restrict__" || t_[k].text == "__restrict")))) {
      if (IsPunct(k, "*")) pointer = true;
      --k;
    }
    Holds holds = Holds::kNothing;
    if (IsIdent(k) && t_[k].text == "Tensor") holds = pointer ? Holds::kTensorPointer : Holds::kTensor;
    if (IsIdent(k) && (t_[k].text == "TensorList" || t_[k].text == "ITensorListRef") && !pointer) {
      holds = Holds::kTensors;
    }
    // std::vector<torch::Tensor>, std::array<at::Tensor, 2>, c10::ArrayRef<Tensor>.
    if (IsPunct(k, ">") && !pointer) {
      for (size_t b = k; b-- > 0 && k - b < 32;) {
        if (IsIdent(b) && t_[b].text == "Tensor") holds = Holds::kTensors;
        if (IsPunct(b, "<")) break;
      }
    }
    bool tensor = holds == Holds::kTensor;
    if (IsIdent(k) && t_[k].text == "auto" && !pointer && IsPunct(i + 1, "=")) {
      size_t end = i + 2;
      int depth = 0;
      for (; end < std::min(t_.size(), i + kMaxScanTokens); ++end) {
        if (IsPunct(end, "(") || IsPunct(end, "{") || IsPunct(end, "[")) ++depth;
        if (IsPunct(end, ")") || IsPunct(end, "}") || IsPunct(end, "]")) --depth;
        if (depth < 0 || (depth == 0 && (IsPunct(end, ";") || IsPunct(end, ",")))) break;
      }
      tensor = IsTensorExpression(i + 2, end);
    }
    tensor_vars_[t_[i].text] = tensor ? Holds::kTensor : holds;
  }

  Holds HoldsOf(size_t i) const {
    if (!IsIdent(i)) return Holds::kNothing;
    auto it = tensor_vars_.find(t_[i].text);
    return it == tensor_vars_.end() ? Holds::kNothing : it->second;
  }
  bool IsTensorVar(size_t i) const { return HoldsOf(i) == Holds::kTensor; }

  // [a, b) is a tensor: a tensor variable, one with a view or conversion
  // applied (`A.contiguous()`), or a call that makes one (`torch::empty`,
  // `at::matmul`).
  bool IsTensorExpression(size_t a, size_t b) const {
    if (a >= b) return false;
    size_t k = a;
    if (IsTensorVar(a)) {
      k = a + 1;
    } else if (HoldsOf(a) == Holds::kTensors && IsPunct(a + 1, "[")) {
      k = SkipBalanced(a + 1, "[", "]", b) + 1;  // v[0] of a std::vector<torch::Tensor>
    } else if (IsPunct(a, "*") && HoldsOf(a + 1) == Holds::kTensorPointer) {
      k = a + 2;
    } else {
      while (k + 2 < b && IsIdent(k) && IsPunct(k + 1, "::")) k += 2;
      if (k == a || !IsIdent(k) || !IsPunct(k + 1, "(") || !IsAten(t_[a].text)) return false;
      const std::string_view n = t_[k].text;
      const bool makes_tensor =
          In(kTensorFactories, n) ||
          (!In(kAtenNonCompute, n) && !(k >= a + 2 && (t_[a + 2].text == "cuda" || t_[a + 2].text == "detail")));
      if (!makes_tensor) return false;
      k = SkipBalanced(k + 1, "(", ")", b) + 1;
    }
    // Views and conversions keep it a tensor: `.contiguous()`, `.to(...)`.
    while (k < b) {
      if (!IsPunct(k, ".") || !IsIdent(k + 1) || !IsPunct(k + 2, "(")) return false;
      if (!In(kTensorReturningMethods, t_[k + 1].text) && !IsComputeMethod(t_[k + 1].text)) return false;
      k = SkipBalanced(k + 2, "(", ")", b) + 1;
    }
    return k == b;
  }

  // Some argument of the call whose '(' is at `open` is a tensor.
  bool HasTensorArgument(size_t open) const {
    const size_t close = SkipBalanced(open, "(", ")", std::min(t_.size(), open + kMaxScanTokens));
    size_t start = open + 1;
    int depth = 0;
    for (size_t k = open + 1; k <= close && k < t_.size(); ++k) {
      if (IsPunct(k, "(") || IsPunct(k, "{") || IsPunct(k, "[")) ++depth;
      if ((IsPunct(k, ")") || IsPunct(k, "}") || IsPunct(k, "]")) && k != close) --depth;
      if (k == close || (depth == 0 && IsPunct(k, ","))) {
        if (IsTensorExpression(start, k)) return true;
        start = k + 1;
      }
    }
    return false;
  }

  bool IsAten(std::string_view ns) const {
    return ns == "at" || ns == "torch" ||
           std::find(aten_aliases_.begin(), aten_aliases_.end(), ns) != aten_aliases_.end();
  }

  // The candidate.py line and column the C++ token `i` came from.
  std::pair<uint32_t, uint32_t> Place(size_t i) const {
    if (src_.fixed_place) return {src_.fixed_line, src_.fixed_column};
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
      macro.fixed_place = src_.fixed_place;
      macro.fixed_line = src_.fixed_line;
      macro.fixed_column = src_.fixed_column;
      macro.text.value = std::string(body);
      const auto& map = src_.text.value_line_source;
      const uint32_t line = t_[i].line >= 1 && t_[i].line <= map.size() ? map[t_[i].line - 1] : 0;
      macro.text.value_line_source.assign(1, line);
      for (char c : macro.text.value) {
        if (c == '\n') macro.text.value_line_source.push_back(line);
      }
      CppChecker(macro, in_, sink_, facts_, this).Run();
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
    if (IsAsmOperand(i) && MakesSystemCall(s)) {
      Add("cpp.process-or-io", i, "inline assembly makes a raw system call (or emits raw instruction bytes)");
    }
  }

  // The string literal at `i` is the template of an `asm(...)` statement:
  // `asm volatile("...")`, `__asm__ __volatile__ goto ("...")`.
  bool IsAsmOperand(size_t i) const {
    if (i < 2 || !IsPunct(i - 1, "(")) return false;
    for (size_t k = i - 2;; --k) {
      if (!IsIdent(k)) return false;
      const std::string_view w = t_[k].text;
      if (w == "asm" || w == "__asm__" || w == "__asm") return true;
      if (w != "volatile" && w != "__volatile__" && w != "__volatile" && w != "goto" && w != "inline") return false;
      if (k == 0) return false;
    }
  }

  // x86 `syscall`, `sysenter`, `int $0x80`; arm64 `svc`; or data directives
  // that emit instruction bytes no mnemonic shows (`.byte 0x0f, 0x05`). PTX
  // has none of these.
  static bool MakesSystemCall(std::string_view s) {
    std::string flat;  // Lower case, whitespace runs as one space.
    for (char c : s) {
      const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\\';
      if (space) {
        if (!flat.empty() && flat.back() != ' ') flat += ' ';
      } else {
        flat += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
    }
    const auto word = [&](std::string_view w) {
      for (size_t at = flat.find(w); at != std::string::npos; at = flat.find(w, at + 1)) {
        const bool left = at == 0 || !(std::isalnum(static_cast<unsigned char>(flat[at - 1])) || flat[at - 1] == '_');
        const size_t end = at + w.size();
        const bool right =
            end >= flat.size() || !(std::isalnum(static_cast<unsigned char>(flat[end])) || flat[end] == '_');
        if (left && right) return true;
      }
      return false;
    };
    for (std::string_view w : {"syscall", "sysenter", "svc", "int $0x80", "int 0x80", "int $128", "int 128",
                               "int $0x2e", ".byte", ".2byte", ".4byte", ".8byte", ".word", ".hword", ".long",
                               ".quad", ".inst", ".short", ".int", ".value", ".ascii", ".asciz", ".string"}) {
      if (word(w)) return true;
    }
    return false;
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
    if (!qualified && !member) NoteDeclaration(i);

    // ATen compute: at::matmul(...), torch::softmax(...), at::native::...
    if (call && qualified && IsAten(qual[0]) && !(qual.size() >= 2 && (qual[1] == "cuda" || qual[1] == "detail"))) {
      const bool blas = qual.size() >= 2 && qual[1] == "native";
      if (!In(kAtenNonCompute, name) || blas) {
        Add("cpp.aten-compute", i, Join(qual) + "::" + std::string(name) + " is ATen compute, not the candidate's kernel");
      }
    }
    // `auto f = &at::matmul;`, `std::function<...> f = torch::softmax;`,
    // `&torch::Tensor::mm`: an ATen op taken as a value is called elsewhere.
    if (!call && qualified && IsAten(qual[0]) && IsComputeMethod(name) && !IsPunct(i + 1, "::") &&
        !IsPunct(i + 1, "<")) {
      Add("cpp.aten-compute", i, Join(qual) + "::" + std::string(name) + " is taken as a value: ATen compute called indirectly");
    }
    // torch::nn's C++ modules (torch::nn::Linear, torch::nn::Conv2d) compute in the library.
    if (qualified && qual.size() == 2 && IsAten(qual[0]) && qual[1] == "nn" && !name.empty() && name[0] >= 'A' &&
        name[0] <= 'Z' && !name.ends_with("Options") && name != "Module" && name != "ModuleHolder" &&
        name != "ModuleList" && name != "ModuleDict" && name != "ParameterList" && name != "ParameterDict" &&
        !IsPunct(i + 1, "::")) {
      Add("cpp.aten-compute", i, Join(qual) + "::" + std::string(name) + " is a torch::nn module: the library computes it");
    }
    if (call && qualified && qual.size() >= 3 && qual[0] == "at" && qual[1] == "cuda" && qual[2] == "blas") {
      Add("cpp.vendor-library", i, "at::cuda::blas::" + std::string(name) + " is a cuBLAS call");
    }
    // In a macro body any name may become a call where the macro is used.
    if (!qualified && !member && (IsPunct(i + 1, "(") || macro_body_)) UnqualifiedCall(i);
    if (call && member && IsComputeMethod(name)) {
      Add("cpp.aten-compute", i, "." + std::string(name) + "() on a tensor is ATen compute, not the candidate's kernel");
    }
    Dispatcher(i, qual, member);
    if (call && !member && StartsWithAny(name, kVendorPrefixes) && name != "cublasSetStream") {
      Add("cpp.vendor-library", i, std::string(name) + " does the work in a vendor library instead of a kernel");
    }
    if (call && qualified && In(kVendorNamespaces, qual[0]) && !namespaces_.contains(qual[0]) &&
        !(parent_ && parent_->namespaces_.contains(qual[0]))) {
      Add("cpp.vendor-library", i, Join(qual) + "::" + std::string(name) + " is a vendor math library's routine");
    }
    if (bool underscored = false; call && !member && IsBlasName(name, &underscored) &&
                                  (underscored || !DefinesFunctionOrMacro(name))) {
      Add("cpp.vendor-library", i, std::string(name) + " is a BLAS/LAPACK routine: the library does the work");
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
    if (!member && ThreadPoolName(name, qual)) {
      Add("cpp.thread", i, (qualified ? Join(qual) + "::" : std::string()) + std::string(name) +
                               ": an asynchronous task pool runs work after the timed call returns");
    }
    if (!member && call && In(kProcessOrIo, name) && (!qualified || qual.back() == "std" || qual.back() == "filesystem")) {
      Add("cpp.process-or-io", i, std::string(name) + "(): processes, files, sockets, signals or limits from the extension");
    }
    if (!member && In(kProcessTypes, name)) {
      Add("cpp.process-or-io", i, std::string(name) + ": a signal handler's execution context");
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
    if (in_.precision == TaskPrecision::kFp32 && IsLowPrecision(name) && !member &&
        std::find(variables_.begin(), variables_.end(), name) == variables_.end() &&
        !(parent_ && std::find(parent_->variables_.begin(), parent_->variables_.end(), name) !=
                         parent_->variables_.end())) {
      Add("cpp.precision-downgrade", i, std::string(name) + " in an fp32 task computes in lower precision");
    }
    if (in_.precision == TaskPrecision::kFp32 && member && call && (name == "half" || name == "bfloat16")) {
      Add("cpp.precision-downgrade", i, "." + std::string(name) + "() in an fp32 task");
    }
    if (in_.precision == TaskPrecision::kFp32 && In(kPrecisionSwitches, name)) {
      Add("cpp.precision-downgrade", i, std::string(name) + " lets the library compute an fp32 task in TF32 or half sums");
    }
    // Mutable variables at namespace scope outlive every call, like statics.
    if (AtNamespaceScope() && i == statement_start_) NamespaceDeclaration(i);
  }

  // `matmul(a, b)` with no qualifier: with `a` a tensor, argument-dependent
  // lookup finds at::matmul without any `using namespace`. Flagged when the
  // name is an ATen compute op the source declares nowhere (C/CUDA math
  // names excepted), or any name the source declares nowhere (or only for
  // non-tensor arguments) called with a tensor argument.
  void UnqualifiedCall(size_t i) {
    const std::string_view name = t_[i].text;
    if (LooksLikeMacro(name) || In(kAdlHarmless, name) || In(kAtenNonCompute, name)) return;
    const bool math_name = In(kCMathNames, name);
    if (IsComputeMethod(name) && (!math_name || using_aten_) && !DeclaresName(name)) {
      Add("cpp.aten-compute", i,
          std::string(name) + "() is ATen's: argument-dependent lookup (or `using namespace`) finds at::" +
              std::string(name));
      return;
    }
    if (macro_body_ || OwnsCallable(name) || !HasTensorArgument(i + 1)) return;
    Add("cpp.aten-compute", i,
        std::string(name) + "() on a tensor is declared nowhere in the source: argument-dependent lookup finds at::" +
            std::string(name));
  }

  // cpp.dispatcher: the op registry and the dispatch keys are the evaluator's
  // view of which ops ran; a candidate that looks ops up by name, calls below
  // a key, registers kernels or reads the keys (the probe's Python key) can
  // hide library work or behave differently when observed.
  void Dispatcher(size_t i, const std::vector<std::string_view>& qual, bool member) {
    const std::string_view name = t_[i].text;
    const bool torch_ns = !qual.empty() && (qual[0] == "c10" || IsAten(qual[0]) || qual[0] == "caffe2");
    std::string why;
    if (torch_ns && std::find(qual.begin(), qual.end(), "_ops") != qual.end()) {
      why = "calls an ATen op struct through the dispatcher";
    } else if (torch_ns && qual.size() >= 2 && qual[1] == "jit") {
      why = "reaches into the TorchScript runtime and its op registry";
    } else if (torch_ns && qual.size() == 1 && qual[0] == "torch" && In(kTorchRegistration, name) && !IsPunct(i + 1, "::")) {
      why = "registers kernels or ops with the dispatcher";
    } else if (torch_ns && qual.size() >= 2 && qual[1] == "impl" &&
               (name.starts_with("tls_") || name.starts_with("_force_tls") ||
                name.find("Dispatch") != std::string_view::npos || name.find("TLS") != std::string_view::npos ||
                name.find("Python") != std::string_view::npos || name.find("Mode") != std::string_view::npos)) {
      why = "reads or changes the dispatcher's thread-local dispatch keys";
    } else if (In(kDispatcherNames, name) || name.starts_with("TORCH_LIBRARY") ||
               (name.starts_with("tls_") && name.find("dispatch") != std::string_view::npos) ||
               name.starts_with("_force_tls_local_dispatch")) {
      // The candidate's own name (a method `redispatch` of its struct) is not
      // the dispatcher's; under a torch namespace it always is.
      const bool own = !torch_ns && (member ? functions_.contains(name) : (qual.empty() && DeclaresName(name)));
      if (!own && (torch_ns || qual.empty())) why = "looks ops up by name, redispatches them or handles dispatch keys";
    }
    if (why.empty()) return;
    Add("cpp.dispatcher", i,
        (qual.empty() ? std::string() : Join(qual) + "::") + std::string(name) + " " + why +
            ": library work the op trace and the probe cannot see");
  }

  // ATen's and c10's asynchronous pools: at::launch, at::intraop_launch,
  // c10::ThreadPool, at::PTThreadPool, c10::TaskThreadPoolBase...
  bool ThreadPoolName(std::string_view name, const std::vector<std::string_view>& qual) const {
    const bool torch_ns = !qual.empty() && (qual[0] == "c10" || IsAten(qual[0]) || qual[0] == "caffe2");
    const bool pool = name.find("ThreadPool") != std::string_view::npos ||
                      name.find("thread_pool") != std::string_view::npos;
    if (torch_ns) return In(kAtenAsyncLaunch, name) || pool;
    if (!qual.empty() || DeclaresName(name)) return false;
    if (using_aten_ && In(kAtenAsyncLaunch, name)) return true;
    return name == "launch_no_thread_state" || name == "intraop_launch" || name == "intraop_launch_future" ||
           name == "thrd_create" || pool;
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
  bool using_aten_ = false;
  std::vector<bool> scopes_;  // Open braces: true for namespace/extern bodies.
  size_t statement_start_ = 0;
  const CppChecker* parent_ = nullptr;  // For a macro body: the source it is in.
  struct FunctionInfo {
    bool tensor_params = false;  // Some parameter is a tensor, auto or a template type.
    bool defined = false;        // Some declaration has a body.
  };
  std::map<std::string_view, FunctionInfo, std::less<>> functions_;  // Functions the source declares.
  std::set<std::string_view, std::less<>> objects_;       // Variables and parameters it declares.
  std::set<std::string_view, std::less<>> types_;         // Structs, classes, enums, aliases.
  std::set<std::string_view, std::less<>> macros_;        // #define names.
  std::set<std::string_view, std::less<>> macro_params_;  // A macro body's name and parameters.
  std::set<std::string_view, std::less<>> namespaces_;    // Namespaces it opens.
  std::map<std::string_view, Holds, std::less<>> tensor_vars_;  // Declared name -> what it holds.
};

}  // namespace

void CheckCppSource(const ExtensionSource& source, const CheckInput& input, FindingSink& sink, CppFacts* facts) {
  CppChecker(source, input, sink, facts).Run();
}

}  // namespace kbox::static_check
