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
import operator
import sys
import threading
import time
import types

import torch

from . import compare

# Bound before any candidate code loads: the harness's steps in the
# candidate's process reach torch's module functions through these only.
_isnan = torch.isnan
_isfinite = torch.isfinite
_isin = torch.isin
_no_grad = torch.no_grad


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
        with _no_grad():
            eq = x == y
            if x.is_floating_point() or x.is_complex():
                eq = eq | (_isnan(x) & _isnan(y))
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

def _degenerate_tensor(r, atol, rtol):
    """(baseline name, root mean square) of the first trivial output that
    passes for floating tensor r: zeros, then (for more than one element
    that are not all equal) the mean everywhere; None when neither does.

    Computed in float64 on r's device over chunks (compare.flat_f64_chunks)
    in two passes (sums, then distances from the mean) whose figures stay on
    the device until one read at the end: the check runs for every trial and
    every spot-checked timed output, on the device's turn, where each read
    back is a host sync. A non-finite element makes both fail (allclose
    matches an infinity or NaN only with itself, and the mean is then not
    finite), so such a tensor is skipped as a whole."""
    # sum, sum of squares, non-finite elements, elements zeros miss
    sums = torch.zeros(4, dtype=torch.float64, device=r.device)
    for _, part in compare.flat_f64_chunks(r):
        absolute = part.abs()
        sums += torch.stack([part.sum(), part.square().sum(), (~torch.isfinite(part)).sum().to(part.dtype),
                             (absolute > absolute * rtol + atol).sum().to(part.dtype)])
    n = r.numel()
    mean = sums[0] / n
    # elements not equal to the mean, elements the mean misses
    off_mean = torch.zeros(2, dtype=torch.float64, device=r.device)
    for _, part in compare.flat_f64_chunks(r):
        distance = (part - mean).abs_()
        off_mean += torch.stack([(distance > 0).sum().to(part.dtype),
                                 (distance > part.abs() * rtol + atol).sum().to(part.dtype)])
    sum_, sum_sq, nonfinite, zeros_miss, not_mean, mean_miss = torch.cat([sums, off_mean]).tolist()
    if nonfinite:
        return None
    rms = (sum_sq / n) ** 0.5
    if not zeros_miss:
        return "zeros", rms
    if n > 1 and not_mean and not mean_miss:
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


# -- results kept across calls ---------------------------------------------------------

_MAX_HELD_TENSORS = 512
_OUTPUT_SAMPLE = 64      # values of an output looked for in what the model holds
_MIN_DISTINCT = 16       # outputs with fewer distinct values are not looked for
_KEPT_SHARE = 0.9        # a held tensor holding this share of the sample keeps a copy
_MEMBERSHIP_MAX = 1 << 22  # larger held tensors are searched for a verbatim copy only


def held_tensors(model):
    """(name, tensor) of what a model holds: its and its submodules'
    parameters, buffers and tensor attributes (one level into lists, tuples
    and dicts). Read from the objects' dicts, not through methods a model
    could override."""
    out, seen, stack = [], set(), [("", model)]
    while stack and len(out) < _MAX_HELD_TENSORS:
        prefix, obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict):
            continue
        for name, value in list(attrs.items()):
            if name in ("_parameters", "_buffers", "_modules") and isinstance(value, dict):
                items = list(value.items())
            elif isinstance(value, (list, tuple)):
                items = [("%s[%d]" % (name, i), v) for i, v in enumerate(value[:64])]
            elif isinstance(value, dict):
                items = [("%s[%r]" % (name, k), v) for k, v in list(value.items())[:64]]
            else:
                items = [(name, value)]
            for key, v in items:
                if isinstance(v, torch.Tensor):
                    out.append((prefix + str(key), v))
                elif isinstance(v, torch.nn.Module):
                    stack.append((prefix + str(key) + ".", v))
    return out[:_MAX_HELD_TENSORS]


def output_copies(model, out):
    """Names of the tensors `model` holds that contain a copy of an output it
    returned (sharing no storage with it): the store of a cache that replays
    results in later calls (H10). Looked for by a sample of each floating
    output's distinct values; outputs with too few distinct values are
    skipped (a copy of them proves nothing)."""
    found = []
    held = held_tensors(model)
    with _no_grad():
        for o in compare.flatten(out):
            if not isinstance(o, torch.Tensor) or not o.is_floating_point() or o.numel() < _MIN_DISTINCT:
                continue
            flat = o.detach().reshape(-1)
            step = max(1, flat.numel() // (_OUTPUT_SAMPLE * 4))
            sample = flat[::step]
            sample = sample[_isfinite(sample) & (sample != 0)].unique()[:_OUTPUT_SAMPLE]
            if sample.numel() < _MIN_DISTINCT:
                continue
            ptr = storage_ptr(o)
            for name, h in held:
                if h.device != o.device or not h.is_floating_point() or h.numel() < o.numel() or \
                        storage_ptr(h) == ptr:
                    continue
                if _holds_copy(h.detach().reshape(-1), flat, sample):
                    found.append(name)
    return sorted(set(found))[:8]


def _holds_copy(h, flat, sample):
    """Whether h holds flat's values: most of a sample of them anywhere (h up
    to _MEMBERSHIP_MAX elements: a sort of h), or flat verbatim as one block."""
    if h.numel() <= _MEMBERSHIP_MAX:
        return float(_isin(sample, h).float().mean()) >= _KEPT_SHARE
    first = int((flat == sample[0]).nonzero()[0])
    n = flat.numel()
    for p in (h == sample[0]).nonzero()[:8].reshape(-1).tolist():
        start = p - first
        if 0 <= start and start + n <= h.numel() and bool((h[start:start + n] == flat).all()):
            return True
    return False


# -- the ATen op trace ---------------------------------------------------------------

# ATen ops that are glue, not a library doing the work (op overload packet
# names; an in-place variant counts as its base op: addmm_ is addmm, and an
# out= variant is an overload of its base op's packet already). Everything
# else forward dispatches is library compute (docs/anticheat.md, "Dynamic
# checks"): the default is deny, so an op this list forgets rejects an honest
# candidate rather than rewards a passthrough. What is here: allocation and
# random fills, views, layout and copies, indexing, concatenation and
# padding, and the arithmetic and comparisons Python's operators map to
# (x + self.bias, mask & other): the same glue the static rules allow.
GLUE_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
new_ones full full_like new_full scalar_tensor arange linspace tensor lift lift_fresh lift_fresh_copy
zero fill normal uniform bernoulli random rand randn randint randperm rand_like randn_like randint_like
resize set detach alias view view_as _unsafe_view _reshape_alias reshape as_strided t transpose
permute expand expand_as squeeze unsqueeze flatten unflatten narrow slice select split split_with_sizes
chunk unbind movedim unfold diagonal clone contiguous copy _copy_from _copy_from_and_resize _to_copy to
type_as _local_scalar_dense item _has_compatible_shallow_copy_type is_nonzero resolve_conj resolve_neg conj
_conj _neg_view is_same_size sym_size sym_stride sym_numel sym_storage_offset record_stream
index index_select index_put gather scatter masked_fill masked_select where
cat stack constant_pad_nd pad repeat
add sub rsub mul div true_divide floor_divide remainder fmod neg pow
eq ne lt le gt ge logical_and logical_or logical_not logical_xor bitwise_and bitwise_or bitwise_xor
bitwise_not __and__ __or__ __xor__ __lshift__ __rshift__ clamp clamp_min clamp_max
""".split())


def op_base(name):
    """The op an ATen packet name stands for: an in-place variant (addmm_)
    is its base op (addmm); dunder names stay as they are."""
    if name.endswith("_") and not name.endswith("__") and len(name) > 1:
        return name[:-1]
    return name


def _dispatch_mode_class():
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover - every supported PyTorch has it
        return None
    return TorchDispatchMode


def preload_dispatch_tracing():
    """One trace of a tiny op, so that whatever trace_ops's first use
    imports is imported now (during set-up, not on the device's turn; and
    before the guard's snapshot). For a process that forks run stages
    (kbox_zygote.py): paid once there, not in every job."""
    trace_ops(lambda: torch.ones(2) + 1)


def trace_ops(fn):
    """Runs fn() under a dispatch mode; returns (result, Counter of op names)."""
    mode_cls = _dispatch_mode_class()
    if mode_cls is None:
        return fn(), collections.Counter()
    ops = collections.Counter()

    class _Trace(mode_cls):
        # PyTorch 2.x wraps a mode's __torch_dispatch__ in
        # torch._disable_dynamo when this says so (the default), and that
        # wrapper imports torch._dynamo at the first op: 4.5-6.3 s of every
        # run stage's set-up on the GPU host. The wrapper only matters while
        # dynamo compiles, and nothing can unless the candidate imported it
        # (torch.compile, which the strict profile rejects): so only then.
        @classmethod
        def _should_skip_dynamo(cls):
            return "torch._dynamo" in sys.modules

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = getattr(func, "overloadpacket", func)
            ops[getattr(packet, "__name__", str(packet))] += 1
            return func(*args, **(kwargs or {}))

    with _Trace():
        result = fn()
    return result, ops


def library_ops(ops):
    """The library compute among traced op names: every op that is not glue."""
    return sorted({op_base(name) for name in ops} - GLUE_OPS)


# -- threads -----------------------------------------------------------------------

def thread_snapshot():
    return {t.ident for t in threading.enumerate()}


def new_threads(before):
    """Python threads alive now that were not before."""
    return [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]


# -- what the evaluator relies on ------------------------------------------------------

# Namespaces whose every function, class and module the guard watches: what
# the harness, its timers and its comparisons reach by name, and what a
# candidate would patch to reach into them (a replaced torch.mul ran the
# candidate's code inside kbox's own steps).
# Checked after every command and right after every call of candidate code
# (cheap: what the harness's own steps and timers reach by name).
def _core_namespaces():
    import builtins
    return [time, math, builtins, threading, torch.Tensor, torch.cuda.Event]


# Checked at fewer, unpredictable points (the large namespaces, ~1,500
# functions: each check costs a tenth of a millisecond): after the
# candidate's import and build, every observed call and every save.
def _wide_namespaces():
    import torch.nn.functional
    return [torch, torch.nn.functional, torch.nn.Module, torch.cuda, torch.testing]


# Entries PyTorch itself rebinds after start-up: torch.manual_seed (wrapped
# when torch._dynamo is first imported, which loading an extension can do).
_REBOUND_BY_TORCH = {("torch", "manual_seed"), ("torch", "seed"), ("torch", "initial_seed")}


def _watchable(value):
    return callable(value) or isinstance(value, (type, types.ModuleType, staticmethod, classmethod))


def _static_get(owner, name):
    """The attribute as stored (no descriptor binding: a classmethod read
    twice through getattr gives two different bound objects)."""
    if isinstance(owner, type):
        for klass in owner.__mro__:
            if name in vars(klass):
                return vars(klass)[name]
        return None
    return getattr(owner, name, None)


class _Space(object):
    """One namespace's watched entries as taken: name -> object."""

    def __init__(self, owner, names=None):
        self.owner = owner
        self.label = getattr(owner, "__name__", type(owner).__name__)
        d = vars(owner)
        if names is None:
            names = [n for n, v in d.items() if _watchable(v) and (self.label, n) not in _REBOUND_BY_TORCH]
        self.saved = {n: d[n] for n in names if n in d}
        self._get = operator.itemgetter(*self.saved) if len(self.saved) > 1 else None
        self._print = self._fingerprint()

    def _fingerprint(self):
        """Identities of the watched entries, in order: one C-level pass."""
        d = vars(self.owner)
        try:
            if self._get is None:
                return tuple(id(d[n]) for n in self.saved)
            return tuple(map(id, self._get(d)))
        except KeyError:
            return None

    def changed(self):
        """(names replaced or removed since; each is put back)."""
        if self._fingerprint() == self._print:
            return []
        d = vars(self.owner)
        replaced = []
        for name, original in self.saved.items():
            if d.get(name, _MISSING) is not original:
                replaced.append("%s.%s" % (self.label, name))
                try:
                    setattr(self.owner, name, original)
                except (AttributeError, TypeError):
                    pass
        self._print = self._fingerprint()
        return replaced


_MISSING = object()


class Guard(object):
    """Remembers every function, class and module of the watched namespaces
    and of the harness's own modules (and their classes' methods), taken
    before any client code runs; check() reports and puts back anything
    replaced or removed since. Added entries are not reported: PyTorch adds
    submodules as they are imported. check(wide=False) looks at the core
    namespaces only: the harness's steps reach nothing else by name."""

    def __init__(self, harness_modules=()):
        self._spaces = [_Space(owner) for owner in _core_namespaces()]
        self._wide = [_Space(owner) for owner in _wide_namespaces()]
        for module in harness_modules:
            self._spaces.append(_Space(module, [n for n, v in vars(module).items()
                                                if _watchable(v) and not n.startswith("__")]))
            for value in list(vars(module).values()):
                if isinstance(value, type) and value.__module__ == module.__name__:
                    # The harness's own classes (timing.Clock...): their methods too.
                    self._spaces.append(_Space(value, [n for n, m in vars(value).items()
                                                       if _watchable(m) and not n.startswith("__")]))

    def check(self, wide=True):
        """Names of everything replaced since construction; each is restored."""
        replaced = []
        for space in self._spaces + (self._wide if wide else []):
            replaced.extend(space.changed())
        return replaced
