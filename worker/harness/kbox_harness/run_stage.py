"""STAGE_RUN: load reference and candidate on the device, check, then time them."""
import copy
import hashlib
import random

import torch

from . import (candidate_import, compare, errors, extension_hook, fingerprint, modules,
               sanitize, strict_filter, timing)
from .protocol import CANDIDATE, HARNESS, REFERENCE

_DTYPES = {"PRECISION_FP16": torch.float16, "PRECISION_BF16": torch.bfloat16}


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

    # -- running client code ------------------------------------------------
    def call(self, party, fn, *args):
        """Runs fn under `party`; any exception becomes ClientFailed(party)."""
        self.pipe.enter(party)
        try:
            return fn(*args)
        except extension_hook.InfraError:
            raise
        except BaseException as e:
            raise ClientFailed(party, e)

    def seed_all(self, seed):
        torch.manual_seed(seed)
        random.seed(seed)
        if self.device.type == "cuda":
            torch.cuda.manual_seed_all(seed)
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

        t0 = timing.now_ms()
        init = self.call(REFERENCE, lambda: (self.seed_all(spec.seed), list(get_init_inputs()))[1])
        ref_model = self.call(REFERENCE, self.build_model, Model, init, spec.seed)
        cand_model = self.call(CANDIDATE, self.build_model, ModelNew, init, spec.seed)
        self.pipe.enter(HARNESS)
        self._timed("build_models", t0)

        t0 = timing.now_ms()
        try:
            for i in range(spec.correctness_trials):
                seed = trial_seed(spec.seed, i)
                inputs = self.inputs(seed, get_inputs)
                ref_in, cand_in = self.clone(inputs), self.clone(inputs)
                ref_out = self.call(REFERENCE, self.forward, ref_model, ref_in)
                cand_out = self.call(CANDIDATE, self.forward, cand_model, cand_in)
                self.pipe.enter(HARNESS)
                self.trials.append(dict(self._compare(ref_out, cand_out), seed=seed))
                del ref_out, cand_out, ref_in, cand_in
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

        if spec.measure_performance and spec.performance_trials > 0:
            t0 = timing.now_ms()
            try:
                self._measure(ref_model, cand_model, get_inputs)
            finally:
                self._timed("timing", t0)
        self.report.update(outcome="OK", message="correct on %d trials" % len(self.trials))

    def _compare(self, ref_out, cand_out):
        try:
            return compare.compare_outputs(ref_out, cand_out, self.spec.atol, self.spec.rtol)
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

    def _measure(self, ref_model, cand_model, get_inputs):
        spec = self.spec
        inputs = self.inputs(trial_seed(spec.seed, "timing"), get_inputs)
        ref_in, cand_in = self.clone(inputs), self.clone(inputs)
        method = timing.METHOD_CUDA if self.device.type == "cuda" else timing.METHOD_CPU
        args = (spec.warmup_calls, spec.performance_trials, self.device)
        ref_times = self.call(REFERENCE, timing.measure, ref_model, ref_in, *args)
        cand_times = self.call(CANDIDATE, timing.measure, cand_model, cand_in, *args)
        self.pipe.enter(HARNESS)
        self.report["reference_timing"] = timing.stats(ref_times, method)
        self.report["candidate_timing"] = timing.stats(cand_times, method)


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
