"""The judge's timing rounds (a part of run_stage.RunStage).

Reference and candidate are timed in interleaved rounds, each on the same
freshly drawn input set, the L2 flushed before each call (timing.Clock). The candidate's calls happen in its own process; this
process checks the times that process reports against its own clock, and
compares the outputs of a random share of the timed calls (chosen after the
call) with the reference's.
"""
import json
import os
import sys

import torch

from . import floor, inputs, judging, reference_graph, timing
from .protocol import CANDIDATE

# Timing stops once the speedup (the ratio of the two lower quartiles:
# timing.SPEEDUP_QUANTILE) is known to the job's speedup_precision (its ~95 %
# interval's half-width over it), after at least performance_trials rounds
# and _MIN_SPOT_CHECKS compared timed outputs; or at this budget, or at
# _MAX_CALLS_FACTOR * performance_trials rounds. What the reward is computed
# from is the ratio, so that is what must be known: a rule on each quartile
# alone (1 % each) never settled for 83 % of kbox-bench's candidates, whose
# calls of ~0.06 ms scatter by a few per cent, and ran them all to the cap.
_TIMING_BUDGET_MS = 10000.0
_MAX_CALLS_FACTOR = 10
# Compared timed outputs before the rounds may stop early: a candidate that
# skips its work on the quarter of its calls that would own the lower
# quartile is caught with probability 1 - 0.75^24 = 99.9 % (timing.py,
# SPEEDUP_QUANTILE). At _SPOT_CHECK_SHARE that takes about 46 rounds.
_MIN_SPOT_CHECKS = 24
# Calibration rounds time the reference too when its call takes at most this
# long (longer calls dwarf what the outside clock's calibration can miss).
_CALIBRATE_WITH_REFERENCE_MS = 2.0
# Timed rounds after which the judge watches for work the candidate's
# process left running (run_stage._idle_check).
_IDLE_CHECKS = 3
# The share of timed outputs compared with the reference's, chosen after
# each call, in every round to the last. Never capped: a candidate that knew
# when the checks run out could answer honestly until then, skip its work in
# the rounds after, and own the lower quartile speedup is computed from.
# Half, not a quarter: the rounds end once _MIN_SPOT_CHECKS were made, and a
# check (~5.5 ms on an H200) costs less than the rounds a quarter would add
# (~8.6 ms each): 46 rounds instead of 90 for the same 24 checks.
_SPOT_CHECK_SHARE = 0.5
# The share of the uncovered calls (_uncovered_call) compared likewise: they
# only feed timing.hidden_by_cover, never the speedup, and each check costs a
# reference call of its own.
_UNCOVERED_CHECK_SHARE = 0.25
_OVERHEAD_CALLS = 12      # empty rounds that calibrate the outside clock
_OVERHEAD_EVERY = 8       # and one more after every this many timed rounds
# Rounds that confirm a disagreement of the two clocks before it is a
# finding: each an empty round, then a timed call (_confirm_outside).
_CONFIRM_ROUNDS = 12
# A file that receives one JSON line per timed round, for studying the clock
# (tests/harness/test_reference_cache.py reads it). kboxd never sets it: a stage's
# environment is built from a fixed list (worker/stage_runner.cc), and what
# is written there is never read back by the judge.
_TRACE_ENV = "KBOX_TIMING_TRACE"


class TimingRounds(object):
    """Mixed into RunStage: uses its ask/call/draw/prepare/cross helpers."""

    def _timing_set(self, get_inputs, tag):
        """Fresh inputs for one timed call (or a warm-up, fit or calibration
        call), drawn as the correctness trials' are: the reference's
        get_inputs() under a seed of their own, then the trials'
        distributions in turn. No two calls of the stage see the same values
        or values that are a scaling of another's, so a result kept from an
        earlier call, or rescaled from one, is wrong here; and every call's
        inputs are laid out as a trial's (fresh tensors at offset 0), so
        their layout cannot tell a timed call from a checked one."""
        n = self._timing_sets
        self._timing_sets += 1
        raw = self.draw(judging.trial_seed(self.seed, "timing-%s" % tag), get_inputs)
        name = inputs.for_trial(n)
        if name == inputs.AS_DRAWN:
            return self.prepare(raw)
        return self.prepare(inputs.transform(self.on_device(raw), name,
                                             judging.trial_seed(self.seed, "timing-dist-%s" % tag)))

    def _warm_up(self, ref_model, get_inputs, reference, candidate):
        """spec.warmup_calls untimed calls of either side on fresh inputs.
        They bring caches, allocators and JIT compilers to their steady state
        and measure nothing, so they may run before the holder's quiet
        (run_stage._timing_alone), beside another stage's CUDA start."""
        for w in range(self.spec.warmup_calls):
            x = self._timing_set(get_inputs, "warm-%d" % w)
            where = self.cross(x) if candidate else None  # before the reference may change x
            if reference:
                self.call(self.forward, ref_model, x)
            if candidate:
                self.ask({"op": "call", "inputs": where})

    def _measure(self, ref_model, get_inputs, reference_warm):
        """Interleaved timing: each round times the reference here and then
        the candidate in its process, on the same fresh input set, the L2
        flushed before each call and the clock stopped after a device-wide
        sync. Outputs of a random share of the candidate's timed calls (all
        of the first two; chosen after the call) are compared with the
        reference's, and the candidate's own clock is checked against the
        time this process saw its calls take. The candidate is warm already
        (_measure_timing); the reference too when reference_warm."""
        spec = self.spec
        if not reference_warm:
            self._warm_up(ref_model, get_inputs, reference=True, candidate=False)
        clock = timing.Clock(self.device, generous=True)
        t0 = timing.now_ms()
        graph = self._capture_reference(ref_model, get_inputs)
        # Each side sizes its own launch cover to its warm model (timing.Clock).
        x = self._timing_set(get_inputs, "fit")
        where = self.cross(x)
        self.call(clock.fit, self._reference_call(ref_model, graph, x)[1])
        fit = self.ask({"op": "call", "inputs": where, "fit": True})
        cand_cover = judging.number(fit.get("cover_ms")) or 0.0
        self._summed("timing_fit", t0)
        overhead = self._calibrate(clock, get_inputs, ref_model, graph)
        ref_times, cand_times, outside = [], [], []
        checks = 0  # timed outputs compared
        outran = [0, 0]  # calls whose host launch work outlasted the cover: reference, candidate
        uncovered = ([], [])  # the candidate's calls without the cover: times, host times
        idle_checks = self._idle_check_rounds()
        trace = _RoundTrace(os.environ.get(_TRACE_ENV))
        started = timing.now_ms()
        max_calls = max(spec.performance_trials, _MAX_CALLS_FACTOR * spec.performance_trials)
        for j in range(max_calls):
            steps = trace.steps()
            x = self._timing_set(get_inputs, j)
            where = self.cross(x)  # before the reference's call may change x
            steps.lap("draw")
            ref_in, ref_fn = self._reference_call(ref_model, graph, x)
            ref = self.call(clock.time, ref_fn)
            ref_out = ref.out
            steps.lap("ref_call")
            reply, cand_ms, ms = self._timed_call(where, idle_check=j in idle_checks)
            steps.lap("cand_call")
            outside.append(ms)
            ref_times.append(ref.ms)
            cand_times.append(cand_ms)
            outran[0] += 1 if ref.outran else 0
            record = dict(round=j, ref_ms=ref.ms, ref_host_ms=ref.host_ms, ref_outran=ref.outran,
                          ref_cover_gpu_ms=ref.cover_gpu_ms, ref_cover_ms=clock.cover_ms, cand_ms=cand_ms,
                          cand_outran=reply.get("outran"), cand_cover_gpu_ms=reply.get("cover_gpu_ms"),
                          outside_ms=ms)
            outran[1] += 1 if reply.get("outran") is True else 0
            if j < 2 or self.rng.random() < _SPOT_CHECK_SHARE:
                self._spot_check(j, reply, ref_out, ref_in, ref_model, x)
                checks += 1
                steps.lap("spot_check")
            del ref_out, ref_in, ref, x
            if self.device.type == "cuda" and j % 2 == 1:
                self._uncovered_call(ref_model, get_inputs, uncovered, j)
                steps.lap("uncovered")
            if j % _OVERHEAD_EVERY == _OVERHEAD_EVERY - 1:
                overhead.append(self._empty_round(clock))
                steps.lap("empty_round")
            trace.write(steps_ms=steps.laps, **record)
            if self._timing_done(j + 1, checks, started, timing.quantile_with_ci(ref_times), cand_times):
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
        why = self._outside_disagrees(cand_times, outside, overhead, clock, get_inputs, (ref_model, graph)) or \
            timing.hidden_by_cover(cand_times, uncovered[0], uncovered[1])
        if why:
            self.findings.add("run.timing-mismatch", why)
        self._physical_floor(cand["lower_quartile_ms"])

    def _timing_done(self, rounds, checks, started, reference, cand_times):
        """Whether the timing rounds may stop after `rounds` of them, `checks`
        timed outputs compared: at least performance_trials rounds, then at
        the budget, or once _MIN_SPOT_CHECKS outputs were compared and the
        speedup is known to the job's speedup_precision (0: never early).
        reference: the reference's (lower quartile, low, high)
        (timing.quantile_with_ci), or None when not known yet."""
        spec = self.spec
        if rounds < spec.performance_trials:
            return False
        if timing.now_ms() - started > _TIMING_BUDGET_MS:
            return True
        if spec.speedup_precision <= 0 or checks < _MIN_SPOT_CHECKS:
            return False
        within = timing.speedup_relative_ci(reference, timing.quantile_with_ci(cand_times))
        return within <= spec.speedup_precision

    def _outside_disagrees(self, cand_times, outside, overhead, clock, get_inputs, reference):
        """timing.outside_disagrees for the timed rounds, confirmed on rounds
        of its own before it is believed. The empty rounds that measure the
        outside clock's overhead are spread thinly (_OVERHEAD_EVERY), so on a
        host whose load changes between them (other jobs' compiles on a busy
        machine) an honest candidate's calls can look longer from outside
        than the overhead measured earlier explains. The confirmation
        alternates an empty round and a timed call, so both see the same
        load; time hidden from the candidate's clock shows in every call it
        hides, and shows again. reference: (model, graph) to call before each
        timed call as the timed rounds do, or None."""
        why = timing.outside_disagrees(cand_times, outside, overhead)
        if not why:
            return None
        t0 = timing.now_ms()
        inside, outside, overhead = [], [], []
        for k in range(_CONFIRM_ROUNDS):
            overhead.append(self._empty_round(clock))
            x = self._timing_set(get_inputs, "confirm-%d" % k)
            where = self.cross(x)
            if reference is not None:
                self.call(clock.time, self._reference_call(reference[0], reference[1], x)[1])
            _, cand_ms, ms = self._timed_call(where)
            inside.append(cand_ms)
            outside.append(ms)
            del x
        self._summed("timing_confirm_outside", t0)
        again = timing.outside_disagrees(inside, outside, overhead)
        if not again:
            sys.stderr.write("kbox: the outside clock's disagreement was not confirmed (%s)\n" % why)
            return None
        return "%s; confirmed on %d rounds alternating with empty ones: %s" % (why, _CONFIRM_ROUNDS, again)

    def _timed_call(self, where, idle_check=False):
        """One timed call of the candidate on the crossed inputs `where`:
        (its reply, the time its own clock gave, the outside clock's ms)."""
        reply, outside_ms = self.ask_timed({"op": "call", "inputs": where}, idle_check=idle_check)
        cand_ms = judging.number(reply.get("ms"))
        if cand_ms is None:
            raise judging.ClientFailed(CANDIDATE, message="candidate's process sent no time for a timed call")
        return reply, cand_ms, outside_ms

    def _idle_check_rounds(self):
        """The timed rounds after which the judge watches the candidate's
        process for work left running (run_stage._idle_check): the first,
        and two chosen at random among the first performance_trials."""
        rounds = max(1, self.spec.performance_trials)
        return {0} | {self.rng.randrange(rounds) for _ in range(_IDLE_CHECKS - 1)}

    def _reference_call(self, ref_model, graph, x):
        """(the inputs the reference's call sees, the call) for the input set
        x: a replay of the captured graph with x written into its buffers, or
        the eager forward on x."""
        if graph is not None:
            self.call(graph.load, x)
            return graph.static, graph.replay
        return x, lambda: self._no_grad(ref_model, x)

    def _capture_reference(self, ref_model, get_inputs):
        """The reference's forward as a CUDA graph for its timed calls
        (reference_graph), or None where it cannot be captured faithfully:
        it is then timed eagerly under its cover, as the candidate is."""
        if self.device.type != "cuda":
            return None
        t0 = timing.now_ms()
        sets = [self._timing_set(get_inputs, "graph-%d" % k) for k in range(2)]
        graph = self.call(reference_graph.Capture, lambda x: self._no_grad(ref_model, x), sets,
                          lambda a, b: self._compare(a, b)["passed"], self.device)
        self._timed("reference_capture", t0)
        if graph.graph is None:
            sys.stderr.write("kbox: reference timed eagerly, not replayed from a CUDA graph: %s\n"
                             % graph.why_not)
            return None
        return graph

    def _uncovered_call(self, ref_model, get_inputs, uncovered, j):
        """One candidate call without the launch cover, on fresh inputs of
        its own, recorded for timing.hidden_by_cover and spot-checked like
        the others."""
        y = self._timing_set(get_inputs, "uncovered-%d" % j)
        reply = self.ask({"op": "call", "inputs": self.cross(y), "cover": False})
        ms, host = judging.number(reply.get("ms")), judging.number(reply.get("host_ms"))
        if ms is None or host is None:
            raise judging.ClientFailed(CANDIDATE, message="candidate's process sent no time for a timed call")
        uncovered[0].append(ms)
        uncovered[1].append(host)
        if self.rng.random() >= _UNCOVERED_CHECK_SHARE:
            return
        ref_in = inputs.clone(y)  # y stays as drawn, for the rounding allowance
        ref_out = self.call(self.forward, ref_model, ref_in)
        self._spot_check(j, reply, ref_out, ref_in, ref_model, y)

    def _calibrate(self, clock, get_inputs, ref_model=None, graph=None):
        """Rounds shaped like the timed ones with an empty call on the
        candidate's side: what the outside clock adds to a timed call. Each
        draws and sends a fresh input set as a timed round does and, when
        the rounds time the reference and its call is short enough for the
        difference to matter (_CALIBRATE_WITH_REFERENCE_MS), times the
        reference on it too: the GPU context switches between the two
        processes, and the caches a round's work here leaves behind for the
        candidate's process, are in the figure. Only harness and reference
        code runs in them. More are made during the timed rounds
        (_empty_round), so a host that gets busier meanwhile (other jobs'
        compiles on a loaded machine) is not read as time hidden from the
        candidate's clock."""
        t0 = timing.now_ms()
        self._calibration = (get_inputs, None)
        if ref_model is not None:
            x = self._timing_set(get_inputs, "calibration")
            ms = self.call(clock.time, self._reference_call(ref_model, graph, x)[1]).ms
            if ms <= _CALIBRATE_WITH_REFERENCE_MS:
                self._calibration = (get_inputs, (ref_model, graph))
        overhead = [self._empty_round(clock) for _ in range(_OVERHEAD_CALLS)]
        self._summed("timing_calibrate", t0)
        return overhead

    def _empty_round(self, clock):
        """The outside clock's milliseconds for one round with an empty
        call on the candidate's side (_calibrate)."""
        get_inputs, reference = self._calibration
        x = self._timing_set(get_inputs, "calibration-%d" % self._timing_sets)
        where = self.cross(x)
        if reference is not None:
            self.call(clock.time, self._reference_call(reference[0], reference[1], x)[1])
        else:
            clock.time(lambda: None)
        return self.ask_timed({"op": "call", "inputs": where, "empty": True})[1]

    @staticmethod
    def _no_grad(model, x):
        with torch.no_grad():
            return model(*x)

    def _spot_check(self, j, reply, ref_out, ref_in, ref_model, x):
        """Compares timed call j's output with the reference's. x: the
        inputs as drawn, for the reference's float64 run (rounding)."""
        t0 = timing.now_ms()
        try:
            self._compare_timed_output(j, reply, ref_out, ref_in, ref_model, x)
        finally:
            self._summed("timing_spot_checks", t0)

    def _compare_timed_output(self, j, reply, ref_out, ref_in, ref_model, x):
        data, broken = self._candidate_output(reply, ref_in, ref_out, with_inputs=False)
        if broken is not None:
            self.findings.add("run.timed-output-mismatch", "timed call %d: %s" % (j + 1, broken))
            return
        # Once a timed call is known wrong, no float64 reference run is spent
        # on the allowance for the next (the finding is made; the rest only
        # confirm it).
        known_wrong = self.findings.has("run.timed-output-mismatch")
        result = self.rounding.compare(ref_model, None if known_wrong else x, ref_out, data["out"],
                                       self._tolerance(ref_out, ("timing", j)), "timed call %d" % (j + 1))
        if not result["passed"]:
            self.findings.add("run.timed-output-mismatch",
                              "timed call %d returned a wrong output (max abs diff %s): the timed calls "
                              "did not all do the work" % (j + 1, judging.fmt(result["max_abs_diff"])))

    def ask_timed(self, cmd, idle_check=False):
        """ask(), plus the milliseconds from sending the command to reading
        the reply by this process's clock (the party announcements to kboxd,
        the thaw before and the freeze after happen outside that window)."""
        self.pipe.enter(CANDIDATE)
        self._thaw()
        t0 = timing.now_ms()
        self.send(cmd)
        reply = self.receive(idle_check=idle_check)
        return reply, self.replied_at - t0

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
