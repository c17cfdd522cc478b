"""The judge's timing rounds (a part of run_stage.RunStage).

Reference and candidate are timed in interleaved rounds, each on the same
fresh perturbed input set at fresh addresses, the L2 flushed before each call
(timing.Clock). The candidate's calls happen in its own process; this
process checks the times that process reports against its own clock, and
compares the outputs of a random share of the timed calls (chosen after the
call) with the reference's.
"""
import json
import os
import sys

import torch

from . import floor, inputs, judging, reference_graph, timing
from .protocol import CANDIDATE, HARNESS

# Timing stops once both lower quartiles (the figures speedup is computed
# from: timing.SPEEDUP_QUANTILE) are known to 1 % (95 % confidence) after at
# least performance_trials calls each, or at this budget, or at
# _MAX_CALLS_FACTOR * performance_trials calls.
_TIMING_BUDGET_MS = 10000.0
_MAX_CALLS_FACTOR = 10
_TIMING_POOL = 4          # distinct input sets drawn for timing
_SPOT_CHECK_SHARE = 0.25  # timed outputs compared with the reference's
_MAX_SPOT_CHECKS = 24     # each one sends the output back (the exchange arena or a file)
_OVERHEAD_CALLS = 12      # empty rounds that calibrate the outside clock
_OVERHEAD_EVERY = 8       # and one more after every this many timed rounds
# A file that receives one JSON line per timed round, for studying the clock
# (scripts/speedup_spread.py --trace). kboxd never sets it: a stage's
# environment is built from a fixed list (worker/stage_runner.cc), and what
# is written there is never read back by the judge.
_TRACE_ENV = "KBOX_TIMING_TRACE"


class TimingRounds(object):
    """Mixed into RunStage: uses its ask/call/draw/prepare/write helpers."""

    def _timing_pool(self, get_inputs):
        """The timing rounds' input sets, drawn from their own seeds and sent
        to the candidate's process once per stage (a live measurement after
        a cached one uses the same sets)."""
        if self._pool is None:
            pool = [self.prepare(self.draw(judging.trial_seed(self.seed, "timing-%d" % k), get_inputs))
                    for k in range(_TIMING_POOL)]
            # All sets in one crossing (the input arena, or a file where they
            # do not fit), loaded by the candidate's process at once; the
            # judge keeps its own copies.
            where = self.inputs_for_candidate(pool, "pool")
            self.ask(dict(where, op="pool"), HARNESS)
            self.release_inputs(where)
            self._pool = pool
        return self._pool

    def _warm_up(self, ref_model, pool, reference, candidate):
        """spec.warmup_calls untimed calls of either side on the pool's sets.
        They bring caches, allocators and JIT compilers to their steady state
        and measure nothing, so they may run before the holder's quiet
        (run_stage._timing_alone), beside another stage's CUDA start."""
        for w in range(self.spec.warmup_calls):
            k = w % len(pool)
            if reference:
                self.call(self.forward, ref_model, inputs.shifted(pool[k], 1))
            if candidate:
                self.ask({"op": "prep", "pool": k, "scale": 0.0, "shift": 1}, HARNESS)
                self.ask({"op": "time"})

    def _measure(self, ref_model, get_inputs, reference_warm):
        """Interleaved timing: each round times the reference here and then
        the candidate in its process, on the same fresh perturbed input set at
        fresh addresses, the L2 flushed before each call and the clock stopped
        after a device-wide sync. Outputs of a random share of the candidate's
        timed calls (all of the first two; chosen after the call) are
        compared with the reference's, and the candidate's own clock is
        checked against the time this process saw its calls take. The
        candidate is warm already (_measure_timing); the reference too when
        reference_warm."""
        spec = self.spec
        pool = self._timing_pool(get_inputs)
        if not reference_warm:
            self._warm_up(ref_model, pool, reference=True, candidate=False)
        clock = timing.Clock(self.device, generous=True)
        t0 = timing.now_ms()
        graph = self._capture_reference(ref_model, pool)
        # Each side sizes its own launch cover to its warm model (timing.Clock).
        self.call(clock.fit, self._reference_call(ref_model, graph, pool[0], 0.0)[1])
        self.ask({"op": "prep", "pool": 0, "scale": 0.0, "shift": 1}, HARNESS)
        fit = self.ask({"op": "fit"})
        cand_cover = judging.number(fit.get("cover_ms")) or 0.0
        self._summed("timing_fit", t0)
        overhead = self._calibrate(clock, len(pool))
        ref_times, cand_times, outside = [], [], []
        outran = [0, 0]  # calls whose host launch work outlasted the cover: reference, candidate
        uncovered = ([], [])  # the candidate's calls without the cover: times, host times
        checks = 0
        trace = _RoundTrace(os.environ.get(_TRACE_ENV))
        started = timing.now_ms()
        max_calls = max(spec.performance_trials, _MAX_CALLS_FACTOR * spec.performance_trials)
        for j in range(max_calls):
            k = j % len(pool)
            steps = trace.steps()
            d = self.rng.uniform(-1e-3, 1e-3)
            ref_in, ref_fn = self._reference_call(ref_model, graph, pool[k], d)
            steps.lap("ref_prep")
            ref = self.call(clock.time, ref_fn)
            ref_out = ref.out
            steps.lap("ref_call")
            self.ask({"op": "prep", "pool": k, "scale": d, "shift": self.rng.randrange(1, 9)}, HARNESS)
            steps.lap("cand_prep")
            reply, ms = self.ask_timed({"op": "time"})
            steps.lap("cand_call")
            outside.append(ms)
            cand_ms = judging.number(reply.get("ms"))
            if cand_ms is None:
                raise judging.ClientFailed(CANDIDATE, message="candidate's process sent no time for a timed call")
            ref_times.append(ref.ms)
            cand_times.append(cand_ms)
            outran[0] += 1 if ref.outran else 0
            record = dict(round=j, ref_ms=ref.ms, ref_host_ms=ref.host_ms, ref_outran=ref.outran,
                          ref_cover_gpu_ms=ref.cover_gpu_ms, ref_cover_ms=clock.cover_ms, cand_ms=cand_ms,
                          cand_outran=reply.get("outran"), cand_cover_gpu_ms=reply.get("cover_gpu_ms"),
                          outside_ms=ms)
            outran[1] += 1 if reply.get("outran") is True else 0
            if checks < _MAX_SPOT_CHECKS and (j < 2 or self.rng.random() < _SPOT_CHECK_SHARE):
                checks += 1
                self._spot_check(j, k, ref_out, ref_in)
                steps.lap("spot_check")
            del ref_out, ref_in, ref
            if self.device.type == "cuda" and j % 2 == 1:
                checks += self._uncovered_call(ref_model, pool, k, uncovered, checks < _MAX_SPOT_CHECKS, j)
                steps.lap("uncovered")
            if j % _OVERHEAD_EVERY == _OVERHEAD_EVERY - 1:
                overhead.append(self._empty_round(clock, k))
                steps.lap("empty_round")
            trace.write(steps_ms=steps.laps, **record)
            n = j + 1
            if n >= spec.performance_trials:
                settled = timing.relative_ci(ref_times) <= 0.01 and timing.relative_ci(cand_times) <= 0.01
                if settled or timing.now_ms() - started > _TIMING_BUDGET_MS:
                    break
        self._summed("timing_rounds", started)
        trace.close()
        method = timing.METHOD_CUDA if self.device.type == "cuda" else timing.METHOD_CPU
        self.report["reference_timing"] = timing.stats(ref_times, reference_graph.METHOD if graph else method)
        cand = timing.stats(cand_times, method)
        if self.device.type == "cuda":
            self.report["reference_timing"].update(cover_ms=clock.cover_ms, outran_calls=outran[0])
            cand.update(cover_ms=cand_cover, outran_calls=outran[1])
        cand["outside_median_ms"] = timing.stats(outside, method)["median_ms"]
        self.report["candidate_timing"] = cand
        why = timing.outside_disagrees(cand_times, outside, overhead) or \
            timing.hidden_by_cover(cand_times, uncovered[0], uncovered[1])
        if why:
            self.findings.add("run.timing-mismatch", why)
        self._physical_floor(cand["lower_quartile_ms"])

    def _reference_call(self, ref_model, graph, base, d):
        """(the inputs the reference's call sees, the call) for pool set
        `base` perturbed by d (inputs.perturbed): a replay of the captured
        graph with the perturbed values written into its buffers, or the
        eager forward on them at a fresh address. Either way written in one
        pass, with no intermediate copy (d = 0 leaves the values as they are:
        x * 1.0 == x)."""
        if graph is not None:
            self.call(inputs.load_perturbed, graph.static, base, d)
            return graph.static, graph.replay
        ref_in = inputs.perturbed_shifted(base, d, self.rng.randrange(1, 9))
        return ref_in, lambda: self._no_grad(ref_model, ref_in)

    def _capture_reference(self, ref_model, pool):
        """The reference's forward as a CUDA graph for its timed calls
        (reference_graph), or None where it cannot be captured faithfully:
        it is then timed eagerly under its cover, as the candidate is."""
        if self.device.type != "cuda":
            return None
        t0 = timing.now_ms()
        graph = self.call(reference_graph.Capture, lambda x: self._no_grad(ref_model, x), pool,
                          lambda a, b: self._compare(a, b)["passed"], self.device)
        self._timed("reference_capture", t0)
        if graph.graph is None:
            sys.stderr.write("kbox: reference timed eagerly, not replayed from a CUDA graph: %s\n"
                             % graph.why_not)
            return None
        return graph

    def _uncovered_call(self, ref_model, pool, k, uncovered, may_check, j):
        """One candidate call without the launch cover, on its own perturbed
        input (so an output cached from the covered call cannot answer it),
        recorded for timing.hidden_by_cover and spot-checked like the
        others. Returns the number of spot checks made (0 or 1)."""
        d = self.rng.uniform(-1e-3, 1e-3)
        self.ask({"op": "prep", "pool": k, "scale": d, "shift": self.rng.randrange(1, 9)}, HARNESS)
        reply = self.ask({"op": "time", "cover": False})
        ms, host = judging.number(reply.get("ms")), judging.number(reply.get("host_ms"))
        if ms is None or host is None:
            raise judging.ClientFailed(CANDIDATE, message="candidate's process sent no time for a timed call")
        uncovered[0].append(ms)
        uncovered[1].append(host)
        if not may_check or self.rng.random() >= _SPOT_CHECK_SHARE:
            return 0
        ref_in = inputs.perturbed_shifted(pool[k], d, 1)
        ref_out = self.call(self.forward, ref_model, ref_in)
        self._spot_check(j, k, ref_out, ref_in)
        return 1

    def ask_timed(self, cmd):
        """ask(), plus the milliseconds from sending the command to reading
        the reply by this process's clock (the party announcements to kboxd
        happen outside that window)."""
        self.pipe.enter(CANDIDATE)
        t0 = timing.now_ms()
        self.send(cmd)
        reply = self.receive()
        return reply, timing.now_ms() - t0

    def _calibrate(self, clock, pool_size):
        """Rounds shaped like the timed ones (this process's GPU work, the
        candidate process's prep, a timed call under its cover) with empty
        calls on both sides: what the outside clock adds to a timed call,
        GPU context switches between the two processes included. Only
        harness code runs in them. More are made during the timed rounds
        (_empty_round), so a host that gets busier meanwhile (other jobs'
        compiles on a loaded machine) is not read as time hidden from the
        candidate's clock."""
        t0 = timing.now_ms()
        overhead = [self._empty_round(clock, k % pool_size) for k in range(_OVERHEAD_CALLS)]
        self._summed("timing_calibrate", t0)
        return overhead

    def _empty_round(self, clock, k):
        """The outside clock's milliseconds for one round with empty calls."""
        clock.time(lambda: None)
        self.ask({"op": "prep", "pool": k, "scale": 0.0, "shift": 1}, HARNESS)
        return self.ask_timed({"op": "time", "empty": True})[1]

    @staticmethod
    def _no_grad(model, x):
        with torch.no_grad():
            return model(*x)

    def _spot_check(self, j, k, ref_out, ref_in):
        """Compares timed call j's output (on pool set k) with the reference's."""
        t0 = timing.now_ms()
        try:
            self._compare_timed_output(j, k, ref_out, ref_in)
        finally:
            self._summed("timing_spot_checks", t0)

    def _compare_timed_output(self, j, k, ref_out, ref_in):
        out_file = self.new_file("timed")
        reply = self.ask({"op": "save", "out": out_file, "inputs": False}, HARNESS)
        data, broken = self._candidate_output(reply, out_file, ref_in, ref_out, with_inputs=False)
        if broken is not None:
            self.findings.add("run.timed-output-mismatch", "timed call %d: %s" % (j + 1, broken))
            return
        result = self._compare(ref_out, data["out"], self._tolerance(ref_out, ("pool", k)))
        if not result["passed"]:
            self.findings.add("run.timed-output-mismatch",
                              "timed call %d returned a wrong output (max abs diff %s): the timed calls "
                              "did not all do the work" % (j + 1, judging.fmt(result["max_abs_diff"])))

    def _physical_floor(self, cand_ms):
        if self.device.type != "cuda" or self.ref_sample is None:
            return
        t0 = timing.now_ms()
        bandwidth = floor.measure_copy_bandwidth(self.device)
        nbytes = floor.bytes_moved(*self.ref_sample)
        least = floor.floor_ms(nbytes, bandwidth)
        self._timed("physical_floor", t0)
        self.report["physical_floor_ms"] = least
        if least > 0 and cand_ms < least:
            self.findings.add("run.below-physical-floor",
                              "lower quartile %.4g ms is below the %.4g ms needed to move %d bytes of inputs "
                              "and outputs once at this GPU's bandwidth" % (cand_ms, least, nbytes))


class _RoundTrace(object):
    """One JSON line per timed round appended to `path`; nothing without one."""

    def __init__(self, path):
        self._file = open(path, "a") if path else None

    def steps(self):
        """A _Laps for one round's steps (taken only when tracing)."""
        return _Laps(self._file is not None)

    def write(self, **record):
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")

    def close(self):
        if self._file is not None:
            self._file.close()


class _Laps(object):
    """Milliseconds of each step of a timed round, for KBOX_TIMING_TRACE's
    steps_ms (where the time between timed calls goes); nothing is timed
    without a trace."""

    def __init__(self, on):
        self.laps = {}
        self._on = on
        self._t = timing.now_ms() if on else 0.0

    def lap(self, name):
        if self._on:
            t = timing.now_ms()
            self.laps[name] = round(t - self._t, 3)
            self._t = t
