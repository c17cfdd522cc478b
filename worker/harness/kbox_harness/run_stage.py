"""STAGE_RUN: load reference and candidate on the device, check, then time them."""
import copy
import hashlib
import random

import torch

from . import (candidate_import, compare, dynamic_checks, errors, extension_hook, fingerprint,
               modules, sanitize, strict_filter, timing)
from .protocol import CANDIDATE, HARNESS, REFERENCE

_DTYPES = {"PRECISION_FP16": torch.float16, "PRECISION_BF16": torch.bfloat16}

# Seeding functions as they were before any client code loaded: a candidate
# that replaced torch.manual_seed at import must not choose the reference's
# weights (the guard does not watch it: PyTorch 2 rewraps it itself).
_manual_seed = torch.manual_seed
_cuda_manual_seed_all = torch.cuda.manual_seed_all
_random_seed = random.seed

# Harness modules whose functions the guard watches (besides torch and time).
_GUARDED_MODULES = (compare, dynamic_checks, errors, modules, sanitize, timing)

# Timing stops once both medians are known to 1 % (95 % confidence) after at
# least performance_trials calls each, or at this budget, or at
# _MAX_CALLS_FACTOR * performance_trials calls.
_TIMING_BUDGET_MS = 10000.0
_MAX_CALLS_FACTOR = 10
_TIMING_POOL = 4          # distinct input sets drawn for timing
_SPOT_CHECK_SHARE = 0.25  # timed outputs compared with the reference's


class ClientFailed(Exception):
    """Client code (reference or candidate) raised; `party` says whose."""

    def __init__(self, party, exc):
        Exception.__init__(self, party)
        self.party = party
        self.exc = exc


class StageEnd(Exception):
    """Ends the stage early with the report as it stands."""


def trial_seed(seed, i):
    """63-bit seed of trial i (or of a named phase), stable across hosts and versions."""
    digest = hashlib.blake2b(("kbox:%d:%s" % (seed, i)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


class RunStage(object):
    def __init__(self, spec, pipe):
        self.spec = spec
        self.pipe = pipe
        self.device = torch.device("cpu" if not spec.is_gpu else "cuda:0")
        self.dtype = _DTYPES.get(spec.precision, torch.float32)
        self.scrubber = candidate_import.default_scrubber(spec)
        self.phase_ms = {}
        self.trials = []
        self.report = {"phase_ms": self.phase_ms}
        self.broker = None
        self.findings = dynamic_checks.Findings()
        self.guard = None
        self.rng = random.SystemRandom()

    # -- running client code ------------------------------------------------
    def call(self, party, fn, *args):
        """Runs fn under `party`; any exception becomes ClientFailed(party).
        Afterwards every function the evaluator relies on is put back if
        client code replaced it; when the candidate did, that is a finding."""
        self.pipe.enter(party)
        try:
            return fn(*args)
        except extension_hook.InfraError:
            raise
        except BaseException as e:
            raise ClientFailed(party, e)
        finally:
            self._check_guard(party)

    def _check_guard(self, party):
        if self.guard is None:
            return
        replaced = self.guard.check()
        if replaced and party == CANDIDATE:
            self.findings.add("run.harness-tampering",
                              "candidate replaced %s" % ", ".join(replaced[:6]))

    def seed_all(self, seed):
        _manual_seed(seed)
        _random_seed(seed)
        if self.device.type == "cuda":
            _cuda_manual_seed_all(seed)
        try:
            import numpy
            numpy.random.seed(seed % (1 << 32))
        except ImportError:
            pass

    def prepare(self, x):
        """Moves tensors to the device and floating ones to the stage's dtype."""
        if isinstance(x, torch.Tensor):
            x = x.to(self.device)
            return x.to(self.dtype) if x.is_floating_point() else x
        if isinstance(x, (list, tuple)):
            return type(x)(self.prepare(v) for v in x)
        return x

    def clone(self, x):
        if isinstance(x, torch.Tensor):
            return x.clone()
        if isinstance(x, (list, tuple)):
            return type(x)(self.clone(v) for v in x)
        try:
            return copy.deepcopy(x)
        except Exception:
            return x

    def build_model(self, cls, init, seed):
        self.seed_all(seed)
        model = cls(*copy.deepcopy(init))
        if isinstance(model, torch.nn.Module):
            model.to(self.device)
            model.to(self.dtype)  # casts floating parameters and buffers only
        return model

    def forward(self, model, inputs):
        with torch.no_grad():
            out = model(*inputs)
        timing.device_sync(self.device)  # async CUDA errors belong to this party
        return out

    def inputs(self, seed, get_inputs):
        raw = self.call(REFERENCE, lambda: (self.seed_all(seed), list(get_inputs()))[1])
        self.pipe.enter(HARNESS)
        return self.prepare(raw)

    # -- the stage ----------------------------------------------------------
    def run(self):
        self.pipe.enter(HARNESS)
        # Taken before any client code (the reference's included) has run.
        self.guard = dynamic_checks.Guard(_GUARDED_MODULES)
        if self.spec.ptxas_path:
            # Forked first: before CUDA exists in this process and before any
            # client code could tamper with what the broker inherits.
            t0 = timing.now_ms()
            from . import tool_broker
            self.broker = tool_broker.Broker(self.spec.ptxas_path).start()
            self._timed("tool_broker", t0)
        self.report["fingerprint"] = dict(fingerprint.software(), **fingerprint.device(self.device))
        try:
            self._run()
        except ClientFailed as f:
            self.pipe.enter(HARNESS)
            who = "reference" if f.party == REFERENCE else "candidate"
            self.report.update(
                outcome="REFERENCE_FAILED" if f.party == REFERENCE else "CANDIDATE_FAILED",
                message=errors.one_line("%s raised %s" % (who, sanitize.sanitize(
                    errors.exception_line(f.exc), self.scrubber))),
                error=errors.runtime_error(f.exc, "PHASE_RUN", self.scrubber,
                                           self.spec.max_log_bytes, self.spec.candidate_path))
        except StageEnd:
            pass
        if self.trials:
            self.report["trials"] = self.trials
        verdicts = self.findings.verdicts()
        if verdicts:
            self.report["verdicts"] = verdicts
        return self.report

    def _timed(self, name, t0):
        self.phase_ms[name] = timing.now_ms() - t0

    def _init_cuda(self):
        """Everything CUDA sets up once (context, its threads and memfds, cuBLAS)
        happens here, before the strict filter, under HARNESS."""
        torch.cuda.init()
        x = torch.ones((16, 16), device=self.device)
        y = (x @ x + 1).sum()
        torch.cuda.synchronize(self.device)
        del x, y

    def _prepare_triton(self):
        from . import triton_prep
        if self.spec.strict_seccomp_bpf:
            triton_prep.warm()
        if self.broker is not None:
            triton_prep.install(self.broker)

    def _run(self):
        spec = self.spec
        if self.device.type == "cuda":
            t0 = timing.now_ms()
            self._init_cuda()
            self._timed("cuda_init", t0)
        if spec.backend == "BACKEND_TRITON" and (spec.strict_seccomp_bpf or self.broker):
            t0 = timing.now_ms()
            self._prepare_triton()
            self._timed("triton_prep", t0)
        t0 = timing.now_ms()
        ref = self.call(REFERENCE, modules.load_module, modules.REFERENCE_MODULE,
                        spec.reference_path)
        Model = self.call(REFERENCE, modules.require, ref, "Model", "reference")
        get_inputs = self.call(REFERENCE, modules.require, ref, "get_inputs", "reference")
        get_init_inputs = self.call(REFERENCE, modules.require, ref, "get_init_inputs",
                                    "reference")
        self._timed("import_reference", t0)

        if spec.strict_seccomp_bpf:
            # From here on no thread of this process may fork or exec.
            self.pipe.enter(HARNESS)
            # Its import looks for nvcc/hipcc with `which` when CUDA_HOME /
            # ROCM_HOME are unset: done now, while a process may still start.
            import torch.utils.cpp_extension  # noqa: F401
            t0 = timing.now_ms()
            strict_filter.install(spec.strict_seccomp_bpf)
            self._timed("strict_filter", t0)

        ModelNew = self._import_candidate()
        self._check_guard(CANDIDATE)  # Import-time patches (timers, comparisons).

        t0 = timing.now_ms()
        init = self.call(REFERENCE, lambda: (self.seed_all(spec.seed), list(get_init_inputs()))[1])
        ref_model = self.call(REFERENCE, self.build_model, Model, init, spec.seed)
        cand_model = self.call(CANDIDATE, self.build_model, ModelNew, init, spec.seed)
        self.pipe.enter(HARNESS)
        self._timed("build_models", t0)

        t0 = timing.now_ms()
        first = None  # (inputs, candidate output, atol) of trial 0
        try:
            for i in range(spec.correctness_trials):
                seed = trial_seed(spec.seed, i)
                inputs = self.inputs(seed, get_inputs)
                result, cand_out, atol = self._trial(ref_model, cand_model, inputs)
                self.trials.append(dict(result, seed=seed))
                if i == 0 and result["passed"]:
                    first = (inputs, cand_out, atol)
                del cand_out
        finally:
            self._timed("correctness", t0)

        failed = [t for t in self.trials if not t["passed"]]
        if failed:
            worst = _worst([t["max_abs_diff"] for t in self.trials])
            message = "%d of %d trials differ; max abs diff %s" % (
                len(failed), len(self.trials), _fmt(worst))
            reasons = [t["failure"] for t in failed if t.get("failure")]
            if reasons:
                message += "; " + reasons[0]
            self.report.update(outcome="INCORRECT", message=errors.one_line(message))
            return

        if first is not None:
            t0 = timing.now_ms()
            self._second_looks(cand_model, *first)
            self._timed("dynamic_checks", t0)
        if spec.measure_performance and spec.performance_trials > 0:
            t0 = timing.now_ms()
            try:
                self._measure(ref_model, cand_model, get_inputs)
            finally:
                self._timed("timing", t0)
        self.report.update(outcome="OK", message="correct on %d trials" % len(self.trials))

    # -- one correctness trial ------------------------------------------------
    def _keep(self, inputs, model):
        """Tensors the reference's output may legitimately share storage with."""
        keep = list(dynamic_checks.tensors(inputs))
        if isinstance(model, torch.nn.Module):
            keep += list(model.parameters()) + list(model.buffers())
        return keep

    def _reference_output(self, ref_model, ref_in, fn=None):
        """Runs the reference, keeps a copy of its output, and poisons the
        original so no later allocation can hand it to the candidate."""
        out = self.call(REFERENCE, fn or self.forward, ref_model, ref_in)
        self.pipe.enter(HARNESS)
        saved = self.clone(out)
        dynamic_checks.poison(out, self._keep(ref_in, ref_model))
        del out
        return saved

    def _tolerance(self, ref_out):
        """The request's atol, tightened when a trivial output would pass."""
        found = dynamic_checks.degenerate(ref_out, self.spec.atol, self.spec.rtol)
        if found is None:
            return self.spec.atol
        name, tight = found
        self.findings.add("run.degenerate-problem",
                          "%s would pass atol=%g on this problem; judged at atol=%g"
                          % (name, self.spec.atol, tight))
        return tight

    def _trial(self, ref_model, cand_model, inputs):
        """(TrialResult fields, candidate output, atol used) of one trial."""
        ref_in, cand_in = self.clone(inputs), self.clone(inputs)
        ref_out = self._reference_output(ref_model, ref_in)
        ref_kept = dynamic_checks.same_values(ref_in, inputs)
        threads = dynamic_checks.thread_snapshot()
        cand_out = self.call(CANDIDATE, self.forward, cand_model, cand_in)
        self.pipe.enter(HARNESS)
        left = dynamic_checks.new_threads(threads)
        if left:
            self.findings.add("run.thread-started", "forward left %d thread(s) running (%s)" % (
                len(left), ", ".join(sorted({t.name for t in left}))[:80]))
        atol = self._tolerance(ref_out)
        # Before anything touches the output: a subclass may run code when used.
        broken = dynamic_checks.output_contract(cand_out, ref_out, cand_in, ref_in)
        if broken:
            self.findings.add("run.output-contract", broken)
            return _failed(broken), None, atol
        if not dynamic_checks.same_values(cand_in, inputs) and not dynamic_checks.same_values(cand_in, ref_in):
            message = "candidate changed its inputs (the reference leaves them as they were)" \
                if ref_kept else "candidate changed its inputs differently from the reference"
            self.findings.add("run.input-mutation", message)
            return _failed(message), None, atol
        return self._compare(ref_out, cand_out, atol), cand_out, atol

    def _second_looks(self, cand_model, inputs, first_out, atol):
        """Trial 0's input again: the same answer (determinism), and the ATen
        ops forward dispatches (library compute the text did not show)."""
        again = self.call(CANDIDATE, self.forward, cand_model, self.clone(inputs))
        self.pipe.enter(HARNESS)
        same = self._compare(first_out, again, atol)
        if not same["passed"]:
            self.findings.add("run.nondeterministic",
                              "trial 0's input gave different outputs on a second call (max abs diff %s)"
                              % _fmt(same["max_abs_diff"]))
        del again
        traced, ops = self.call(CANDIDATE, dynamic_checks.trace_ops,
                                lambda: self.forward(cand_model, self.clone(inputs)))
        self.pipe.enter(HARNESS)
        del traced
        library = dynamic_checks.library_ops(ops)
        if library:
            self.findings.add("run.library-compute",
                              "forward dispatched library compute: " + ", ".join(library[:8]))

    def _compare(self, ref_out, cand_out, atol=None):
        try:
            return compare.compare_outputs(ref_out, cand_out, self.spec.atol if atol is None else atol,
                                           self.spec.rtol)
        except Exception as e:
            # Odd outputs (tensor subclasses, ...) the comparison cannot handle
            # count as a difference, not as a crash of the harness.
            return {"passed": False, "max_abs_diff": 0.0, "max_rel_diff": 0.0,
                    "mismatch_fraction": 0.0, "failure": errors.one_line(
                "outputs could not be compared: " + errors.exception_line(e))}

    def _import_candidate(self):
        spec = self.spec
        imp = candidate_import.import_candidate(spec, self.pipe)
        self.phase_ms["import_candidate"] = imp.ms
        syntax = imp.syntax_error(spec.candidate_path)
        if imp.not_built is not None:
            message, log = candidate_import.not_built_failure(spec, imp.not_built, self.scrubber)
        elif imp.build_failed:
            message, log = candidate_import.build_failure(spec, imp, self.scrubber)
        elif syntax is not None:
            message, log = candidate_import.syntax_failure(spec, syntax, self.scrubber)
        elif imp.exc is not None:
            err = errors.runtime_error(imp.exc, "PHASE_RUN", self.scrubber, spec.max_log_bytes,
                                       spec.candidate_path)
            message = "candidate failed to import: " + sanitize.sanitize(
                errors.exception_line(imp.exc), self.scrubber)
            text, truncated = sanitize.bound(err["traceback"], spec.max_log_bytes)
            log = {"text": text, "truncated": truncated,
                   "first_error_line": err["candidate_line"]}
        elif not isinstance(getattr(imp.module, "ModelNew", None), type):
            message = "candidate defines no class ModelNew"
            log = {"text": "candidate.py: " + message, "truncated": False, "first_error_line": 0}
        else:
            return imp.module.ModelNew
        self.report.update(outcome="COMPILE_FAILED", message=errors.one_line(message),
                           compile_log=log)
        raise StageEnd()

    # -- timing ---------------------------------------------------------------
    def _perturbed(self, inputs):
        """The input set with every floating tensor scaled by 1 + d, |d| <=
        1e-3, drawn per call: no two timed calls see the same values, so a
        cache keyed on values (or on addresses) never hits."""
        d = self.rng.uniform(-1e-3, 1e-3)

        def one(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point():
                return x * (1.0 + d)
            if isinstance(x, (list, tuple)):
                return type(x)(one(v) for v in x)
            return x
        return one(inputs)

    def _shifted(self, x):
        """A copy at a fresh address: a view into a slightly larger buffer,
        offset by a multiple of 256 bytes (vector loads stay aligned)."""
        if isinstance(x, torch.Tensor):
            step = max(1, 256 // max(1, x.element_size()))
            k = step * self.rng.randrange(1, 9)
            buf = torch.empty(x.numel() + k, dtype=x.dtype, device=x.device)
            view = buf[k:].view(x.shape)
            view.copy_(x)
            return view
        if isinstance(x, (list, tuple)):
            return type(x)(self._shifted(v) for v in x)
        return self.clone(x)

    def _timed_forward(self, model, inputs, flush):
        def run():
            with torch.no_grad():
                return model(*inputs)
        return timing.timed_call(run, self.device, flush)

    def _measure(self, ref_model, cand_model, get_inputs):
        """Interleaved timing: each round times the reference and then the
        candidate on a fresh perturbed input set at fresh addresses, the L2
        flushed before each call and the clock stopped after a device-wide
        sync. A share of the candidate's timed outputs (chosen at random, all
        of the first two) is compared with the reference's output for the same
        input, so skipping or replaying work in timed calls is caught."""
        spec = self.spec
        pool = [self.inputs(trial_seed(spec.seed, "timing-%d" % k), get_inputs)
                for k in range(_TIMING_POOL)]
        flush = timing.L2Flush(self.device)
        for w in range(spec.warmup_calls):
            x = pool[w % len(pool)]
            self.call(REFERENCE, self.forward, ref_model, self._shifted(x))
            self.call(CANDIDATE, self.forward, cand_model, self._shifted(x))
        self.pipe.enter(HARNESS)
        method = timing.METHOD_CUDA if self.device.type == "cuda" else timing.METHOD_CPU
        ref_times, cand_times = [], []
        started = timing.now_ms()
        max_calls = max(spec.performance_trials, _MAX_CALLS_FACTOR * spec.performance_trials)
        for j in range(max_calls):
            x = self._perturbed(pool[j % len(pool)])
            ref_in = self._shifted(x)
            ref_ms, ref_out = self.call(REFERENCE, self._timed_forward, ref_model, ref_in, flush)
            self.pipe.enter(HARNESS)
            ref_saved = self.clone(ref_out)
            dynamic_checks.poison(ref_out, self._keep(ref_in, ref_model))
            del ref_out, ref_in
            cand_in = self._shifted(x)
            cand_ms, cand_out = self.call(CANDIDATE, self._timed_forward, cand_model, cand_in, flush)
            self.pipe.enter(HARNESS)
            ref_times.append(ref_ms)
            cand_times.append(cand_ms)
            if j < 2 or self.rng.random() < _SPOT_CHECK_SHARE:
                self._spot_check(j, ref_saved, cand_out, cand_in)
            del cand_out, cand_in, ref_saved
            n = j + 1
            if n >= spec.performance_trials:
                settled = timing.relative_ci(ref_times) <= 0.01 and timing.relative_ci(cand_times) <= 0.01
                if settled or timing.now_ms() - started > _TIMING_BUDGET_MS:
                    break
        self.report["reference_timing"] = timing.stats(ref_times, method)
        self.report["candidate_timing"] = timing.stats(cand_times, method)

    def _spot_check(self, j, ref_out, cand_out, cand_in):
        broken = dynamic_checks.output_contract(cand_out, ref_out, cand_in, None)
        if broken:
            self.findings.add("run.output-contract", "timed call %d: %s" % (j + 1, broken))
            return
        result = self._compare(ref_out, cand_out, self._tolerance(ref_out))
        if not result["passed"]:
            self.findings.add("run.timed-output-mismatch",
                              "timed call %d returned a wrong output (max abs diff %s): the timed calls "
                              "did not all do the work" % (j + 1, _fmt(result["max_abs_diff"])))


def _failed(failure):
    return {"passed": False, "max_abs_diff": 0.0, "max_rel_diff": 0.0, "mismatch_fraction": 0.0,
            "failure": errors.one_line(failure)}


def _worst(values):
    worst = 0.0
    for v in values:
        if v != v:
            return v
        worst = max(worst, v)
    return worst


def _fmt(x):
    if x != x:
        return "NaN"
    return "%.6g" % x if abs(x) != float("inf") else ("Infinity" if x > 0 else "-Infinity")


def run(spec, pipe):
    return RunStage(spec, pipe).run()
