"""The reference's own rounding error as part of the tolerance.

An honest kernel that adds in another order than the reference (a row sum
with warp shuffles against torch.sum) differs from it by rounding alone; on
outputs that cancel to near zero that difference can pass atol (1e-4 for
fp32) while every value is as right as the reference's. So when an output
fails on values alone, the judge runs the reference again in float64 on the
same inputs, takes its fp32 result's largest distance from that as the
reference's own rounding error E, and compares again at atol + FACTOR x E.

FACTOR is 2^5: honest orders of summation stay within a few times the
reference's error, while a lower precision stays far outside (tf32 rounds
2^13 times coarser than fp32, fp16 and bf16 more): a precision downgrade is
still caught. E is measured on IEEE fp32: on a GPU where cuDNN (or
matmul) may round through TF32, the reference's fp32 result it is measured
from is computed again with TF32 off, on a copy of the model, so the
allowance never grows to TF32's error. No allowance is granted beyond
MAX_SHARE of the output's largest magnitude: a reference whose float64 result differs more is not
rounding but unstable or random (dropout), and says nothing about an honest
kernel's error. Every allowance granted is reported (run.rounding-allowance,
info). Only the reference's code and kbox's run here; the candidate's
process stays frozen (RunStage.call).
"""
import copy

import torch

from . import compare, inputs, judging, timing

FACTOR = 32
MAX_SHARE = 1e-3


def _to_float64(x):
    if isinstance(x, torch.Tensor):
        return x.detach().double() if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_to_float64(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_float64(v) for k, v in x.items()}
    return x


def _single_or_double(ref_out):
    """Whether every floating-point output is fp32 or fp64: a half-precision
    task's tolerance (1e-2) already covers rounding, and 32 times fp16's
    error would let bfloat16 (8 times coarser) pass as fp16."""
    floats = [r for r in compare.flatten(ref_out) if isinstance(r, torch.Tensor) and r.is_floating_point()]
    return bool(floats) and all(r.dtype in (torch.float32, torch.float64) for r in floats)


class RoundingAllowance(object):
    """Compares a candidate's output with the reference's, allowing the
    reference's own rounding error (see the module's doc). `stage` is the
    RunStage: its call (reference code, candidate frozen), forward, _compare,
    _summed and findings."""

    def __init__(self, stage):
        self._stage = stage
        self._copies = {}  # (id(reference model), dtype or None) -> its copy, or None: cannot be made

    def compare(self, ref_model, x, ref_out, cand_out, atol, what, baseline=None):
        """_compare of cand_out with baseline (default: ref_out, the
        reference's output on x) at atol; when that fails on values alone,
        again with the allowance. x: the inputs the reference's call got
        (None: no allowance). what: the call, for the finding ("trial 3")."""
        stage = self._stage
        baseline = ref_out if baseline is None else baseline
        result = stage._compare(baseline, cand_out, atol)
        if result["passed"] or result["failure"] or x is None:
            return result
        allowance = self.allowance(ref_model, x, ref_out)
        if not allowance:
            return result
        widened = stage._compare(baseline, cand_out, atol + allowance)
        if not widened["passed"]:
            return result
        stage.findings.add("run.rounding-allowance", (
            "%s: max abs diff %s is within atol %g plus %d times the reference's own rounding error "
            "on its inputs (%s, its result against float64's)"
            % (what, judging.fmt(widened["max_abs_diff"]), atol, FACTOR, judging.fmt(allowance / FACTOR))))
        return widened

    def allowance(self, ref_model, x, ref_out):
        """FACTOR x the reference's rounding error on x, or None (no float64
        run possible, nothing to pair, or more than MAX_SHARE of the
        output's largest magnitude)."""
        if not _single_or_double(ref_out):
            return None
        t0 = timing.now_ms()
        try:
            model64 = self._copy(ref_model, torch.float64)
            if model64 is None:
                return None
            out64 = self._stage.call(self._forward_float64, model64, _to_float64(x))
            ieee = ref_out
            if self.tf32_possible():
                model32 = self._copy(ref_model, None)
                if model32 is None:
                    return None
                ieee = self._stage.call(self._forward_ieee, model32, inputs.clone(x))
        except judging.ClientFailed:
            return None
        finally:
            self._stage._summed("rounding_allowance", t0)
        found = compare.rounding_error(ieee, out64)
        if found is None:
            return None
        error, largest = found
        if error <= 0.0 or FACTOR * error > MAX_SHARE * largest:
            return None
        return FACTOR * error

    def tf32_possible(self):
        """Whether the reference's fp32 ops may have rounded through TF32."""
        return self._stage.device.type == "cuda" and (
            torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32)

    def _copy(self, ref_model, dtype):
        """A copy of the reference's model, in `dtype` (None: as it is)."""
        key = (id(ref_model), dtype)
        if key not in self._copies:
            def made():
                model = copy.deepcopy(ref_model)
                return model if dtype is None else model.to(dtype)
            try:
                self._copies[key] = self._stage.call(made)
            except judging.ClientFailed:
                self._copies[key] = None
        return self._copies[key]

    def _forward_ieee(self, model, x):
        """The forward in fp32 with TF32 off."""
        before = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return self._stage.forward(model, x)
        finally:
            torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before

    def _forward_float64(self, model, x):
        """The forward with float64 as the default dtype, so tensors the
        reference makes inside it are float64 too."""
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:
            return self._stage.forward(model, x)
        finally:
            torch.set_default_dtype(before)
