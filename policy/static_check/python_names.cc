#include "policy/static_check/python_names.h"

#include <algorithm>
#include <array>
#include <string>

namespace kbox::static_check {
namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// `s` is `p` or starts with `p.`.
bool Under(std::string_view s, std::string_view p) {
  return s == p || (StartsWith(s, p) && s.size() > p.size() && s[p.size()] == '.');
}

template <size_t N>
bool In(const std::array<std::string_view, N>& list, std::string_view s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

template <size_t N>
bool UnderAny(const std::array<std::string_view, N>& list, std::string_view s) {
  for (auto p : list) {
    if (Under(s, p)) return true;
  }
  return false;
}

std::string_view LastPart(std::string_view q) {
  const size_t dot = q.rfind('.');
  return dot == std::string_view::npos ? q : q.substr(dot + 1);
}

// torch.<name> functions that allocate, move data or query state, and do no
// arithmetic: allowed in forward. Everything else under torch is compute.
constexpr auto kTorchNonCompute = std::to_array<std::string_view>({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "tensor", "as_tensor", "as_strided", "from_numpy", "arange", "randn", "rand",
    "randint", "randn_like", "rand_like", "randperm", "manual_seed", "Size", "device", "dtype",
    "is_tensor", "is_floating_point", "numel", "get_default_dtype", "no_grad", "inference_mode",
    "enable_grad", "set_grad_enabled", "is_grad_enabled", "Tensor", "Generator", "finfo", "iinfo",
    "broadcast_shapes", "promote_types", "result_type", "can_cast", "cat", "concat", "stack",
    "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "transpose", "permute", "narrow",
    "split", "chunk", "unbind", "t", "movedim", "swapaxes", "tensor_split", "select", "is_contiguous",
    "get_device", "empty_cache",
    // dtypes, layouts and constants are values, not functions:
    "float32", "float", "float64", "double", "int8", "int16", "int32", "int64", "long", "int", "uint8",
    "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "cfloat", "cdouble", "strided",
    "contiguous_format", "channels_last", "channels_last_3d", "preserve_format", "sparse_coo", "inf",
    "nan", "pi", "e", "layout", "memory_format", "__version__", "float16", "half", "bfloat16",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "HalfTensor", "BFloat16Tensor",
    "FloatTensor", "DoubleTensor", "LongTensor", "IntTensor", "BoolTensor", "ByteTensor", "autocast",
    "compile", "jit", "fx", "multiprocessing", "distributed", "overrides", "onnx", "package", "compiler",
    "__config__", "storage", "serialization", "utils", "nn", "autograd", "Stream", "Event", "set_float32_matmul_precision",
    "get_float32_matmul_precision", "load", "save", "from_file", "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled", "set_printoptions", "is_inference_mode_enabled",
    // submodules (their functions are judged by their own names):
    "linalg", "fft", "special", "sparse", "ops", "library", "version", "distributions", "random",
    "types", "hub", "amp", "profiler", "func", "masked", "nested", "quantization", "ao", "export",
    "mps", "xpu", "cpu", "backends", "testing"});

// torch.<sub>.* that never compute: configuration, versions, tooling. Other
// rules judge the dangerous ones (jit, compile, multiprocessing, ...).
constexpr auto kTorchNonComputeSubmodules = std::to_array<std::string_view>({
    "version", "backends", "cuda", "utils", "testing", "hub", "profiler", "amp", "types", "cpu", "mps",
    "xpu", "export", "library", "overrides", "multiprocessing", "distributed", "jit", "compiler",
    "_dynamo", "fx", "_inductor", "onnx", "package", "serialization", "storage", "__config__",
    "_utils", "_jit_internal", "nn", "autograd", "Tensor", "random", "classes", "ops"});

constexpr auto kForeignComputeModules = std::to_array<std::string_view>({
    "numpy", "scipy", "cupy", "cupyx", "jax", "jaxlib", "tensorflow", "sklearn", "numba", "mxnet"});

constexpr auto kConcurrencyModules = std::to_array<std::string_view>({
    "threading", "_thread", "multiprocessing", "concurrent", "asyncio", "torch.multiprocessing",
    "sched", "_asyncio", "billiard"});
constexpr auto kProcessModules = std::to_array<std::string_view>({
    "subprocess", "pty", "ctypes", "cffi", "signal", "resource", "_posixsubprocess", "pexpect"});
constexpr auto kNetworkModules = std::to_array<std::string_view>({
    "socket", "ssl", "urllib", "urllib2", "urllib3", "http", "httplib", "requests", "httpx",
    "aiohttp", "ftplib", "smtplib", "telnetlib", "xmlrpc", "socketserver", "websocket", "websockets",
    "paramiko", "grpc", "torch.distributed"});
constexpr auto kEvaluatorModules = std::to_array<std::string_view>({
    "inspect", "gc", "__main__", "builtins", "__builtin__", "kbox_harness", "kbox_stage", "kbox_probe",
    "sitecustomize"});
constexpr auto kDynamicCodeModules = std::to_array<std::string_view>({
    "importlib", "imp", "marshal", "pickle", "_pickle", "dill", "cloudpickle", "runpy", "code",
    "codeop", "zipimport"});
constexpr auto kFileModules = std::to_array<std::string_view>({
    "pathlib", "shutil", "tempfile", "glob", "fileinput", "mmap", "fcntl", "zipfile", "tarfile",
    "sqlite3", "shelve", "dbm"});

constexpr auto kOsFileCalls = std::to_array<std::string_view>({
    "os.open", "os.remove", "os.unlink", "os.rename", "os.replace", "os.mkdir", "os.makedirs",
    "os.rmdir", "os.removedirs", "os.listdir", "os.scandir", "os.walk", "os.chmod", "os.chown",
    "os.symlink", "os.link", "os.readlink", "os.chdir", "os.truncate", "os.mkfifo", "os.mknod",
    "os.fdopen", "os.read", "os.write"});
constexpr auto kOsProcessCalls = std::to_array<std::string_view>({
    "os.system", "os.popen", "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.posix_spawn",
    "os.posix_spawnp", "os.execv", "os.execve", "os.execl", "os.execle", "os.execlp", "os.execlpe",
    "os.execvp", "os.execvpe", "os.spawnv", "os.spawnl", "os._exit", "os.register_at_fork",
    "os.setsid", "os.abort"});

constexpr auto kSysIntrospection = std::to_array<std::string_view>({
    "sys._getframe", "sys._current_frames", "sys.modules", "sys.settrace", "sys.setprofile",
    "sys.meta_path", "sys.path_hooks", "sys.addaudithook", "sys.gettrace", "sys.getprofile", "sys.monitoring",
    "sys._current_exceptions", "threading.gettrace", "threading.getprofile"});

// Profiler state the run stage's probes set: whether forward is being
// watched. Annotations (record_function) say nothing about it.
constexpr auto kProfilerModules = std::to_array<std::string_view>({
    "torch.profiler", "torch.autograd.profiler", "torch.autograd.profiler_util", "torch.autograd.profiler_legacy",
    "torch._C._profiler", "torch._C._autograd", "torch._C._kineto", "torch.cuda.profiler"});

constexpr auto kLowPrecision = std::to_array<std::string_view>({
    "torch.float16", "torch.half", "torch.bfloat16", "torch.float8_e4m3fn", "torch.float8_e5m2",
    "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz", "triton.language.float16",
    "triton.language.bfloat16", "triton.language.float8e4nv", "triton.language.float8e5",
    "torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32",
    "torch.set_float32_matmul_precision", "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction", "torch.autocast",
    "torch.cuda.amp", "torch.amp", "torch.HalfTensor", "torch.BFloat16Tensor", "torch.cuda.HalfTensor",
    "torch.cuda.BFloat16Tensor", "torch.Tensor.half", "torch.Tensor.bfloat16"});

constexpr auto kLayerExceptions = std::to_array<std::string_view>({
    "Parameter", "ParameterList", "ParameterDict", "Module", "ModuleList", "ModuleDict", "Identity",
    "Buffer", "init", "functional", "utils", "parameter"});

constexpr auto kComputeMethods = std::to_array<std::string_view>({
    "matmul", "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "mv", "dot", "vdot", "outer", "ger",
    "inner", "kron", "tensordot", "einsum", "conv1d", "conv2d", "conv3d", "softmax", "log_softmax",
    "relu", "relu_", "relu6", "sigmoid", "sigmoid_", "tanh", "tanh_", "gelu", "silu", "mish",
    "hardtanh", "hardtanh_", "leaky_relu", "elu", "selu", "softplus", "exp", "exp_", "exp2", "expm1",
    "log", "log_", "log2", "log10", "log1p", "sqrt", "sqrt_", "rsqrt", "pow", "pow_", "abs", "abs_",
    "neg", "sin", "cos", "tan", "erf", "erfc", "sum", "nansum", "mean", "nanmean", "amax", "amin",
    "argmax", "argmin", "prod", "std", "var", "norm", "renorm", "cumsum", "cumprod", "cummax",
    "cummin", "logsumexp", "logcumsumexp", "clamp", "clamp_", "clip", "clip_", "add", "add_", "sub",
    "sub_", "mul", "mul_", "div", "div_", "true_divide", "addcmul", "addcdiv", "lerp", "square",
    "reciprocal", "remainder", "fmod", "sort", "topk", "kthvalue", "median", "mode", "round",
    "floor", "ceil", "trunc", "sign", "triu", "tril", "max", "min", "maximum", "minimum",
    "layer_norm", "group_norm", "batch_norm", "dropout", "linear", "__matmul__", "__rmatmul__",
    "__imatmul__", "addr", "clamp_min", "clamp_max", "cross", "inverse", "pinverse", "matrix_power",
    "matrix_exp", "cholesky", "logdet", "slogdet", "logaddexp", "hypot", "atan2", "asin", "acos", "atan",
    "sinh", "cosh", "erfinv", "lgamma", "digamma", "xlogy", "histc", "bincount", "cdist"});

constexpr auto kIntrospectionAttributes = std::to_array<std::string_view>({
    "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "tb_frame", "tb_next", "gi_frame",
    "cr_frame", "ag_frame", "__globals__", "__subclasses__", "__builtins__", "__dict__",
    "__getattribute__", "__code__", "__closure__", "__mro__", "__bases__", "__base__", "__self__"});

// Lower-case copy, for substring tests on names of mixed case.
std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The dispatcher's thread-local state and the probes' own state, read from
// Python: torch._C._dispatch_tls_is_dispatch_key_included(DispatchKey.Python),
// torch._C._get_dispatch_mode, torch._C._is_torch_function_mode_enabled,
// torch.autograd.profiler._is_profiler_enabled... A candidate that reads them
// can tell the run stage's TorchDispatchMode or profiler from a timed call.
bool IsProbeState(std::string_view q) {
  if (Under(q, "torch.autograd._profiler_enabled")) return true;
  for (std::string_view m : kProfilerModules) {
    // The module itself (`from torch.profiler import record_function`) reads nothing.
    if (Under(q, m)) return q != m && !q.ends_with(".record_function");
  }
  if (!Under(q, "torch._C") || q == "torch._C") return false;
  const std::string rest = Lower(q.substr(std::string_view("torch._C.").size()));
  for (std::string_view w : {"dispatch", "torch_function", "torchfunction", "function_mode", "function_stack",
                             "mode", "profiler", "tls", "python_key", "pythonkey"}) {
    if (rest.find(w) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

std::string_view RuleForImport(std::string_view m) {
  if (UnderAny(kConcurrencyModules, m)) return "py.concurrency";
  if (UnderAny(kProcessModules, m)) return "py.process";
  if (UnderAny(kNetworkModules, m)) return "py.network";
  if (UnderAny(kEvaluatorModules, m)) return "py.evaluator-access";
  if (UnderAny(kDynamicCodeModules, m)) return "py.dynamic-code";
  if (UnderAny(kFileModules, m)) return "py.file-io";
  if (Under(m, "torch.utils._python_dispatch") || Under(m, "torch.overrides")) return "py.tensor-subclass";
  if (Under(m, "torch._dynamo") || Under(m, "torch._inductor")) return "py.graph-capture";
  return {};
}

std::string_view RuleForQualifiedName(std::string_view q) {
  if (std::string_view r = RuleForImport(q); !r.empty()) return r;
  if (In(kOsFileCalls, q) || Under(q, "io.open") || Under(q, "io.FileIO") || q == "torch.load" ||
      q == "torch.save" || q == "numpy.load" || q == "numpy.save" || q == "numpy.fromfile" ||
      q == "numpy.memmap" || q == "numpy.loadtxt" || q == "numpy.savetxt") {
    return "py.file-io";
  }
  if (In(kOsProcessCalls, q)) return q == "os.fork" || q == "os.forkpty" ? "py.concurrency" : "py.process";
  if (In(kSysIntrospection, q) || q == "traceback.walk_stack" || q == "traceback.extract_stack") {
    return "py.evaluator-access";
  }
  if (Under(q, "torch.ops.load_library") || Under(q, "torch.classes.load_library") ||
      Under(q, "torch.utils.cpp_extension.load_inline_sources")) {
    return "py.dynamic-code";
  }
  if (Under(q, "functools.lru_cache") || Under(q, "functools.cache") || Under(q, "functools.cached_property")) {
    return "py.cross-call-cache";
  }
  if (Under(q, "operator.attrgetter") || Under(q, "operator.methodcaller")) return "py.dynamic-code";
  if (Under(q, "types.FunctionType") || Under(q, "types.CodeType") || Under(q, "types.LambdaType")) {
    return "py.dynamic-code";
  }
  if (Under(q, "torch.cuda.Stream") || Under(q, "torch.cuda.stream") || Under(q, "torch.cuda.ExternalStream") ||
      Under(q, "torch.cuda.set_stream") || Under(q, "torch.Stream") || Under(q, "torch.cuda.StreamContext")) {
    return "py.side-stream";
  }
  if (Under(q, "torch.cuda.graph") || Under(q, "torch.cuda.CUDAGraph") || Under(q, "torch.cuda.graphs") ||
      Under(q, "torch.cuda.make_graphed_callables") || Under(q, "torch.compile") || Under(q, "torch.jit") ||
      Under(q, "torch.fx") || Under(q, "triton.testing.do_bench_cudagraph")) {
    return "py.graph-capture";
  }
  if (Under(q, "torch._C.DisableTorchFunction") || Under(q, "torch._C._disabled_torch_function_impl") ||
      Under(q, "torch.Tensor._make_subclass") || Under(q, "torch._C._TensorBase") ||
      Under(q, "torch._C.TensorBase")) {
    return "py.tensor-subclass";
  }
  if (IsProbeState(q)) return "py.evaluator-access";
  return {};
}

bool IsLibraryCompute(std::string_view q) {
  if (UnderAny(kForeignComputeModules, q)) return true;
  if (q == "operator.matmul" || q == "operator.imatmul" || q == "operator.__matmul__") return true;
  if (!Under(q, "torch")) return false;
  if (Under(q, "torch.nn.functional")) return q != "torch.nn.functional.pad";
  if (Under(q, "torch.ops")) return Under(q, "torch.ops.aten") || Under(q, "torch.ops.prims");
  if (Under(q, "torch.cuda")) return false;  // Queries; streams and graphs have their own rules.
  if (Under(q, "torch.nn") || Under(q, "torch.utils") || Under(q, "torch.autograd") ||
      Under(q, "torch.backends") || Under(q, "torch.testing")) {
    return Under(q, "torch.nn.init");
  }
  if (Under(q, "torch.Tensor")) return IsComputeMethod(LastPart(q));
  std::string_view rest = q.substr(std::min(q.size(), std::string_view("torch.").size()));
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return !In(kTorchNonCompute, rest) && !rest.empty();
  // Under a submodule: the ones that compute (linalg, fft, special, sparse,
  // _C, nested, ...) are compute; version/backends/amp/... are not.
  return !In(kTorchNonComputeSubmodules, rest.substr(0, dot));
}

bool IsLibraryLayer(std::string_view q) {
  if (!Under(q, "torch.nn") || Under(q, "torch.nn.functional") || Under(q, "torch.nn.init")) return false;
  std::string_view rest = q.substr(std::string_view("torch.nn").size());
  if (rest.empty()) return false;
  rest.remove_prefix(1);
  if (Under(rest, "modules")) {
    rest = LastPart(rest);
  }
  if (rest.find('.') != std::string_view::npos) return false;
  return !In(kLayerExceptions, rest) && !rest.empty() && rest[0] >= 'A' && rest[0] <= 'Z';
}

bool IsComputeMethod(std::string_view name) {
  if (In(kComputeMethods, name)) return true;
  // In-place variants count as their base op: x.addmm_(a, b), x.clamp_min_(0).
  return name.size() > 2 && name.back() == '_' && name.front() != '_' &&
         In(kComputeMethods, name.substr(0, name.size() - 1));
}

bool IsLayerCallName(std::string_view name) {
  return name == "forward" || name == "__call__" || name == "_call_impl" || name == "_wrapped_call_impl";
}

bool IsIntrospectionAttribute(std::string_view name) { return In(kIntrospectionAttributes, name); }

bool IsLowPrecisionName(std::string_view q) {
  for (auto p : kLowPrecision) {
    if (Under(q, p)) return true;
  }
  // Triton's 8-bit floats under any of their names (float8e4nv, float8e5b16...).
  return Under(q, "triton.language") && q.find(".float8") != std::string_view::npos;
}

std::string_view RuleForBuiltinCall(std::string_view name) {
  if (name == "eval" || name == "exec" || name == "compile" || name == "__import__") return "py.dynamic-code";
  if (name == "open") return "py.file-io";
  if (name == "globals" || name == "locals" || name == "vars" || name == "breakpoint") {
    return "py.evaluator-access";
  }
  if (name == "id" || name == "hash") return "py.identity-key";
  return {};
}

}  // namespace kbox::static_check
