"""The judge's timing against a cached reference figure (docs/reference-cache.md).

kboxd may hand the run stage its reference cache's entry for this reference
(StageSpec.cached_reference: the reference's timing from an earlier live run
on the same device and software, and the input signature it was measured
on). When the signature is what this job's inputs have and the request did
not ask for a fresh measurement, only the candidate is timed, with the same
per-call method as the interleaved rounds (its process's clock with the L2
flushed and the launch cover, the judge's outside clock, empty calibration
rounds, uncovered calls on a GPU, spot checks of timed outputs against the
reference's), until the speedup over the cached figure is known to the
job's speedup_precision (judge_timing.TimingRounds._timing_done). The speedup over the
cached figure decides: below live_recheck_speedup the cached figure stands;
at or above it (a candidate claiming to beat the reference, where rewards
are earned) both are timed live, interleaved, as without a cache
(judge_timing.TimingRounds._measure).

A live measurement whose reference lower quartile settled (to the StageSpec's
reference_cache_max_relative_ci, 1 % by default) is offered back to
kboxd (StageReport.reference_for_cache) with the input signature.
"""
import hashlib
import sys

import torch

from . import judge_timing, judging, timing

SOURCE_LIVE = "live"
SOURCE_CACHE = "cache"

# Signatures longer than this are sent as their SHA-256 (a reference with
# hundreds of inputs should not make every StageSpec large).
_MAX_SIGNATURE_CHARS = 1024


def describe(x):
    """What of an input decides how long the reference takes: tensors by
    dtype and shape, numbers and strings by value (an int in init inputs is
    often a size), containers by their items, anything else by type."""
    if isinstance(x, torch.Tensor):
        return "%s[%s]" % (str(x.dtype).replace("torch.", ""), ",".join(str(d) for d in x.shape))
    if isinstance(x, (bool, int, float, str)) or x is None:
        return repr(x)
    if isinstance(x, (list, tuple)):
        return "(%s)" % ",".join(describe(v) for v in x)
    if isinstance(x, dict):
        return "{%s}" % ",".join("%s:%s" % (describe(k), describe(v)) for k, v in sorted(x.items(), key=str))
    return type(x).__name__


def input_signature(forward_inputs, init_inputs):
    """The input signature of a job: forward inputs as the reference sees
    them (on the device, in the stage's dtype) and init inputs."""
    text = "inputs=%s;init=%s" % (describe(list(forward_inputs)), describe(list(init_inputs)))
    if len(text) > _MAX_SIGNATURE_CHARS:
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    return text


def settled(stats, max_relative_ci=0.01):
    """Whether a Timing dict's lower quartile is known to max_relative_ci
    (by default 1 %), from the reported figures."""
    known = timing.reported_quantile(stats)
    if known is None or known[0] <= 0:
        return False
    lq, lo, hi = known
    return (hi - lo) / (2.0 * lq) <= max_relative_ci


class CachedReferenceTiming(object):
    """Mixed into RunStage beside judge_timing.TimingRounds: the branch
    around _measure that may use a cached reference figure."""

    def _measure_timing(self, ref_model, get_inputs, init_inputs):
        """Both timings, or the candidate's against the cached reference
        figure. The warm-up calls come first, beside
        whatever another stage does on the device: they only bring both
        sides to their steady state. Everything timed, the fits and the
        calibration rounds included, runs with the device to this stage
        alone (run_stage._timing_alone)."""
        spec = self.spec
        signature = input_signature(self.ref_sample[0], init_inputs) if self.ref_sample else ""
        cached = spec.cached_reference
        usable = (cached is not None and not spec.fresh_reference_timing and signature
                  and cached.get("input_signature") == signature
                  and (judging.number(cached["timing"].get("lower_quartile_ms")) or 0.0) > 0)
        if cached is not None and not usable:
            sys.stderr.write("kbox: cached reference figure not used (%s): timing both live\n" % (
                "fresh_reference_timing" if spec.fresh_reference_timing else "input signature differs"))
        t0 = timing.now_ms()
        self._warm_up(ref_model, get_inputs, reference=not usable, candidate=True)
        self._timed("timing_warm_up", t0)
        self._timing_alone(lambda: self._measure_either(ref_model, get_inputs, signature, usable))

    def _measure_either(self, ref_model, get_inputs, signature, usable):
        spec = self.spec
        if usable:
            t0 = timing.now_ms()
            cand = self._measure_candidate_alone(ref_model, get_inputs)
            self._timed("timing_candidate_alone", t0)
            ref = dict(spec.cached_reference["timing"], source=SOURCE_CACHE)
            speedup = ref["lower_quartile_ms"] / cand["lower_quartile_ms"] \
                if cand.get("lower_quartile_ms") else float("inf")
            if speedup < spec.live_recheck_speedup:
                self.report["reference_timing"] = ref
                self.report["candidate_timing"] = cand
                return
            sys.stderr.write("kbox: speedup %.4g over the cached reference figure reaches %g: "
                             "timing both live\n" % (speedup, spec.live_recheck_speedup))
        self._measure(ref_model, get_inputs, reference_warm=not usable)
        ref = self.report["reference_timing"]
        ref["source"] = SOURCE_LIVE
        # The reference's figure is what is stored, so its own interval
        # decides; the candidate's says nothing about it (and with the rounds
        # ending at the speedup's precision it rarely reaches 1 %: only 45 of
        # 129 jobs on an H200 found an entry when both had to settle, 120 of
        # 152 before).
        if signature and settled(ref, spec.reference_cache_max_relative_ci):
            self.report["reference_for_cache"] = {"timing": dict(ref), "input_signature": signature}

    def _measure_candidate_alone(self, ref_model, get_inputs):
        """The candidate's side of _measure's rounds, with the reference run
        (untimed) only for the calls that are spot-checked. Returns the
        candidate's Timing dict; adds the same findings as _measure."""
        spec = self.spec
        # Not fitted: only the empty calibration rounds use it, so their
        # shape matches the interleaved rounds' (the judge's turn, then the
        # candidate's).
        clock = timing.Clock(self.device, generous=True)
        t0 = timing.now_ms()
        fit = self.ask({"op": "call", "inputs": self.cross(self._timing_set(get_inputs, "fit")), "fit": True})
        cand_cover = judging.number(fit.get("cover_ms")) or 0.0
        self._summed("timing_fit", t0)
        overhead = self._calibrate(clock, get_inputs)
        cand_times, outside, outran, uncovered = [], [], 0, ([], [])
        checks = 0  # timed outputs compared
        reference = timing.reported_quantile(spec.cached_reference["timing"])
        idle_checks = self._idle_check_rounds()
        started = timing.now_ms()
        max_calls = max(spec.performance_trials, judge_timing._MAX_CALLS_FACTOR * spec.performance_trials)
        for j in range(max_calls):
            x = self._timing_set(get_inputs, j)
            where = self.cross(x)
            reply, cand_ms, ms = self._timed_call(where, idle_check=j in idle_checks)
            outside.append(ms)
            cand_times.append(cand_ms)
            outran += 1 if reply.get("outran") is True else 0
            if j < 2 or self.rng.random() < judge_timing._SPOT_CHECK_SHARE:
                # As _measure's rounds: the reference on the same inputs,
                # compared with the timed output.
                ref_out = self.call(self.forward, ref_model, x)
                self._spot_check(j, reply, ref_out, x, ref_model, x)
                checks += 1
                del ref_out
            del x
            if self.device.type == "cuda" and j % 2 == 1:
                self._uncovered_call(ref_model, get_inputs, uncovered, j)
            if j % judge_timing._OVERHEAD_EVERY == judge_timing._OVERHEAD_EVERY - 1:
                overhead.append(self._empty_round(clock))
            if self._timing_done(j + 1, checks, started, reference, cand_times):
                break
        self._summed("timing_rounds", started)
        method = timing.METHOD_CUDA if self.device.type == "cuda" else timing.METHOD_CPU
        cand = timing.stats(cand_times, method)
        if self.device.type == "cuda":
            cand.update(cover_ms=cand_cover, outran_calls=outran)
        cand["outside_median_ms"] = timing.stats(outside, method)["median_ms"]
        why = self._outside_disagrees(cand_times, outside, overhead, clock, get_inputs, None) or \
            timing.hidden_by_cover(cand_times, uncovered[0], uncovered[1])
        if why:
            self.findings.add("run.timing-mismatch", why)
        self._physical_floor(cand["lower_quartile_ms"])
        return cand
