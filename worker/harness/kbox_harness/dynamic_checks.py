"""The run stage's dynamic anti-cheat checks (the run.* rules of docs/anticheat.md).

Each check looks at what the candidate did, not at its text: the type and
storage of what forward returned, whether it touched its inputs, whether the
same input gives the same answer twice, which ATen ops forward dispatched,
which threads it left behind, and whether it replaced functions the
evaluator relies on. Findings go to the stage report with a rule id; kboxd
grades them with the request's anti-cheat profile.

The checks that look inside forward (types, aliasing, threads, the op trace,
the guard) run in the candidate's process, where a determined candidate can
interfere with them; they are one layer. The judgement itself (comparison,
tolerance, input mutation, the clock cross-check) runs in the judge process,
which never runs candidate code (run_stage.py).
"""
import collections
import math
import threading
import time

import torch

from . import compare


class Findings(object):
    """The run.* findings of a stage, one per rule (the first message kept)."""

    def __init__(self):
        self._by_rule = collections.OrderedDict()

    def add(self, rule_id, message):
        self._by_rule.setdefault(rule_id, message)

    def has(self, rule_id):
        return rule_id in self._by_rule

    def verdicts(self):
        """kbox.v1.Verdict dicts; kboxd fills in the severity."""
        return [{"rule_id": r, "message": m, "phase": "PHASE_RUN"} for r, m in self._by_rule.items()]


# -- storage and identity -------------------------------------------------------

def tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        out = []
        for v in x:
            out.extend(tensors(v))
        return out
    if isinstance(x, dict):
        out = []
        for v in x.values():
            out.extend(tensors(v))
        return out
    return []


def flatten_outputs(out):
    return compare.flatten(out)


def storage_ptr(t):
    try:
        return t.untyped_storage().data_ptr()
    except AttributeError:  # PyTorch < 2.0
        return t.storage().data_ptr()


def same_values(a, b):
    """True when a and b hold the same tensors bit for bit where it matters:
    equal values, NaN where the other has NaN, same shapes and dtypes."""
    ta, tb = tensors(a), tensors(b)
    if len(ta) != len(tb):
        return False
    for x, y in zip(ta, tb):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not x.numel():
            continue
        with torch.no_grad():
            eq = x == y
            if x.is_floating_point() or x.is_complex():
                eq = eq | (torch.isnan(x) & torch.isnan(y))
            if not bool(eq.all()):
                return False
    return True


# -- memory the candidate could find -------------------------------------------------

def poison(out, keep):
    """Overwrites the reference's output tensors in place (NaN, or the
    largest value for integers) before they are freed, so memory the
    allocator hands to the candidate later can never hold the right answer.
    Tensors sharing storage with anything in `keep` (inputs, parameters) are
    left alone."""
    kept = {storage_ptr(t) for t in keep}
    for t in tensors(out):
        if storage_ptr(t) in kept or not t.numel():
            continue
        with torch.no_grad():
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(torch.iinfo(t.dtype).max)


# -- degenerate problems -----------------------------------------------------------

def _all_close_to(value, chunks, atol, rtol):
    """torch.allclose(full_like(r, value), r, atol, rtol) for a finite r given
    as float64 chunks (|value - r| <= atol + rtol*|r| everywhere)."""
    for _, part in chunks():
        if not bool(((part - value).abs_() <= part.abs() * rtol + atol).all()):
            return False
    return True


def _degenerate_tensor(r, atol, rtol):
    """(baseline name, root mean square) of the first trivial output that
    passes for floating tensor r: zeros, then (for more than one element
    that are not all equal) the mean everywhere; None when neither does.

    Computed in float64 on r's device over chunks (compare.flat_f64_chunks),
    scalars only coming back. A non-finite element makes both fail (allclose
    matches an infinity or NaN only with itself, and the mean is then not
    finite), so such a tensor is skipped as a whole."""
    def chunks():
        return compare.flat_f64_chunks(r)
    total = torch.zeros(3, dtype=torch.float64, device=r.device)  # sum, sum of squares, non-finite
    zeros_pass = True
    for _, part in chunks():
        absolute = part.abs()
        # One host sync a chunk: zeros pass while |r| <= atol + rtol*|r|.
        figures = torch.stack([part.sum(), part.square().sum(), (~torch.isfinite(part)).sum().to(part.dtype),
                               (absolute > absolute * rtol + atol).any().to(part.dtype)])
        total += figures[:3]
        zeros_pass = zeros_pass and not bool(figures[3])
    sum_, sum_sq, nonfinite = total.tolist()
    if nonfinite:
        return None
    n = r.numel()
    rms = (sum_sq / n) ** 0.5
    if zeros_pass:
        return "zeros", rms
    if n > 1:
        mean = sum_ / n
        if not _all_close_to(mean, chunks, 0.0, 0.0) and _all_close_to(mean, chunks, atol, rtol):
            return "the mean everywhere", rms
    return None


def degenerate(ref_out, atol, rtol):
    """(baseline name, tightened atol) when a trivial output would pass the
    tolerance for this reference output; None otherwise.

    The tightened atol is 1 % of the output's root-mean-square, so the
    candidate must get the values' shape right, not only their size."""
    worst = None
    with torch.no_grad():
        for r in compare.flatten(ref_out):
            if not isinstance(r, torch.Tensor) or not r.is_floating_point() or not r.numel():
                continue
            found = _degenerate_tensor(r, atol, rtol)
            if found is None:
                continue
            name, rms = found
            tight = min(atol, 0.01 * rms) if rms > 0 else atol
            if worst is None or tight < worst[1]:
                worst = (name, tight)
    return worst


# -- the ATen op trace ---------------------------------------------------------------

# ATen ops that are a library doing the work (op overload packet names).
# Arithmetic glue (add, mul, ...), copies, views and allocation are not.
LIBRARY_COMPUTE_OPS = frozenset("""
mm addmm bmm baddbmm matmul dot vdot mv addmv addr ger outer linear _addmm_activation einsum
tensordot kron convolution _convolution conv1d conv2d conv3d conv_transpose1d conv_transpose2d
conv_transpose3d cudnn_convolution cudnn_convolution_transpose mkldnn_convolution
miopen_convolution _convolution_mode _softmax softmax _log_softmax log_softmax
native_layer_norm layer_norm native_batch_norm _native_batch_norm_legit
_native_batch_norm_legit_no_training batch_norm native_group_norm group_norm instance_norm
_scaled_dot_product_flash_attention _scaled_dot_product_efficient_attention
_scaled_dot_product_cudnn_attention scaled_dot_product_attention _efficient_attention_forward
_flash_attention_forward relu relu_ gelu silu sigmoid tanh elu leaky_relu hardtanh softplus mish
hardsigmoid hardswish logsumexp cumsum cumprod sum mean amax amin max min prod var std var_mean
std_mean norm linalg_vector_norm _weight_norm max_pool2d_with_indices max_pool2d avg_pool2d
adaptive_avg_pool2d _adaptive_avg_pool2d max_pool3d_with_indices avg_pool3d
_adaptive_avg_pool3d upsample_bilinear2d upsample_nearest2d topk sort argmax argmin
""".split())


def _dispatch_mode_class():
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover - every supported PyTorch has it
        return None
    return TorchDispatchMode


def preload_dispatch_tracing():
    """Imports what trace_ops's first use imports: torch._dynamo, which
    PyTorch 2.x loads when a dispatch mode is first entered (1.13 has none).
    For a process that forks run stages (kbox_zygote.py): paid once there,
    not in every job."""
    _dispatch_mode_class()
    try:
        import torch._dynamo  # noqa: F401
    except ImportError:
        pass


def trace_ops(fn):
    """Runs fn() under a dispatch mode; returns (result, Counter of op names)."""
    mode_cls = _dispatch_mode_class()
    if mode_cls is None:
        return fn(), collections.Counter()
    ops = collections.Counter()

    class _Trace(mode_cls):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = getattr(func, "overloadpacket", func)
            ops[getattr(packet, "__name__", str(packet))] += 1
            return func(*args, **(kwargs or {}))

    with _Trace():
        result = fn()
    return result, ops


def library_ops(ops):
    return sorted(name for name in ops if name in LIBRARY_COMPUTE_OPS)


# -- threads -----------------------------------------------------------------------

def thread_snapshot():
    return {t.ident for t in threading.enumerate()}


def new_threads(before):
    """Python threads alive now that were not before."""
    return [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]


# -- what the evaluator relies on ------------------------------------------------------

def _watched():
    """(owner, attribute name) pairs the evaluator or a timing harness uses."""
    pairs = [(time, n) for n in ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
                                 "monotonic_ns", "process_time", "sleep")]
    # Not torch.manual_seed: PyTorch 2 wraps it itself when torch._dynamo is
    # first imported (which loading an extension can do), and the harness
    # seeds through torch.random anyway.
    pairs += [(torch, n) for n in ("allclose", "equal", "isclose", "save", "load")]
    # Also what the harness itself calls on inputs between timed calls
    # (perturbing, shifting): a replaced __mul__ could do the work there,
    # before the clock starts.
    pairs += [(torch.Tensor, n) for n in ("__eq__", "__ne__", "allclose", "equal", "cpu", "to", "clone",
                                          "copy_", "detach", "numpy", "tolist", "item", "__repr__",
                                          "data_ptr", "__torch_function__", "__mul__", "__getitem__",
                                          "view", "contiguous", "element_size", "numel")]
    pairs += [(torch, n) for n in ("empty", "empty_like", "from_numpy", "frombuffer")]
    pairs += [(torch.testing, "assert_close")]
    pairs += [(torch.cuda, n) for n in ("synchronize", "current_stream", "Event", "Stream")]
    pairs += [(torch.cuda.Event, n) for n in ("record", "elapsed_time", "synchronize", "query")]
    pairs += [(math, n) for n in ("isclose", "isfinite", "isnan")]
    return [(o, n) for o, n in pairs if hasattr(o, n)]


def _static_get(owner, name):
    """The attribute as stored (no descriptor binding: a classmethod read
    twice through getattr gives two different bound objects)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
        return None
    return getattr(owner, name, None)


class Guard(object):
    """Remembers the functions in _watched() (taken before any client code
    runs) and the harness's own module functions; check() reports and puts
    back anything replaced since."""

    def __init__(self, harness_modules=()):
        self._saved = [(owner, name, _static_get(owner, name)) for owner, name in _watched()]
        for module in harness_modules:
            for name, value in list(vars(module).items()):
                if callable(value) and not name.startswith("__"):
                    self._saved.append((module, name, value))
                if isinstance(value, type) and value.__module__ == module.__name__:
                    # The harness's own classes (timing.Clock...): their methods too.
                    for attr, member in list(vars(value).items()):
                        if callable(member) or isinstance(member, (staticmethod, classmethod)):
                            self._saved.append((value, attr, member))

    def check(self):
        """Names of everything replaced since construction; each is restored."""
        replaced = []
        for owner, name, original in self._saved:
            current = _static_get(owner, name)
            if current is not original:
                replaced.append("%s.%s" % (getattr(owner, "__name__", type(owner).__name__), name))
                try:
                    setattr(owner, name, original)
                except (AttributeError, TypeError):
                    pass
        return replaced


