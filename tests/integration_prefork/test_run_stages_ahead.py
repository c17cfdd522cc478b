"""Run stages prepared ahead (docs/run-stages-ahead.md) end to end: two jobs
sent at once to a kboxd with one CPU run slot and run_stages_ahead 1 (the
default). The second job's run stage must set up (its reference imported)
while the first job's candidate still runs, and its candidate must load only
after the first job's run stage ended; its wait counts as queueing, not as
its run. Once with fork+exec run stages, once through the zygotes.

Its own daemons: tests/integration's autouse job table would submit dozens of
unrelated jobs."""
import concurrent.futures
import os
import re
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import kbox_it as it  # noqa: E402

CONFIG = it.SMALL_JOBS_CONFIG + "cpu_run_slots: 1\n"

# Each prints a stamp (wall clock: the same for every process on the host) at
# the moments the test compares; kboxd returns the stages' output tail.
REFERENCE = '''
import time
import torch
import torch.nn as nn

print("REF_IMPORTED %.6f" % time.time(), flush=True)


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
'''

# Slow on purpose: the first job must still run while the second sets up.
CANDIDATE = '''
import time
import torch.nn as nn

print("CAND_IMPORTED %.6f" % time.time(), flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        time.sleep(2.5)
        out = x.clamp_min(0.0)
        print("FORWARD_END %.6f" % time.time(), flush=True)
        return out
'''


def last_stamp(result, marker):
    stamps = re.findall(marker + r" ([0-9.]+)", result.get("output_tail", ""))
    assert stamps, (marker, it.describe(result), result.get("output_tail"))
    return float(stamps[-1])


def evaluate(port, request_id, reference, candidate, measure_performance, trials=2, **fields):
    """One CPU job through /v1/evaluate, anti-cheat off; its result."""
    payload = dict({"reference_source": reference, "candidate_source": candidate,
                    "backend": "BACKEND_CPU", "client_request_id": request_id,
                    "measure_performance": measure_performance, "correctness_trials": trials,
                    "anticheat_profile": "off"}, **fields)
    reply = it.post_json(port, payload, timeout=600)
    assert reply.status == 200, reply.text
    return reply.json()


def config_for(mode):
    """The module's config, run stages by fork+exec or (kboxd's default)
    forked from single-use zygotes."""
    return CONFIG + ("preforked_run_stage: false\n" if mode == "fork_exec" else "")


@pytest.mark.parametrize("mode", ["fork_exec", "prefork"])
def test_second_job_sets_up_during_the_first_and_loads_after_it(mode):
    with it.own_kboxd("kbox-ahead-it-", config_for(mode), []) as (_, port, _):
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            results = list(pool.map(
                lambda name: evaluate(port, "ahead-%s-%s" % (mode, name), REFERENCE, CANDIDATE, False),
                ["a", "b"]))
        for r in results:
            assert r["status"] == "CORRECT", it.describe(r)
        first, second = sorted(results, key=lambda r: last_stamp(r, "CAND_IMPORTED"))
        first_done = last_stamp(first, "FORWARD_END")
        # Set up while the first job's candidate ran...
        assert last_stamp(second, "REF_IMPORTED") < first_done, (first, second)
        # ...but none of its candidate's code ran before the first job ended.
        assert last_stamp(second, "CAND_IMPORTED") > first_done, (first, second)
        # Waiting for the turn is queueing; the run excludes it.
        waited_s = last_stamp(second, "CAND_IMPORTED") - last_stamp(second, "REF_IMPORTED")
        assert second["durations"]["queue_wait_ms"] >= 1000 * waited_s * 0.5, second["durations"]
        assert second["durations"]["run_ms"] < 1000 * (
            last_stamp(second, "FORWARD_END") - last_stamp(second, "REF_IMPORTED")), \
            second["durations"]


# REFERENCE, failing at import the first time (as a reference may when the
# job holding the device has filled its memory) and importing on the second:
# the judge's home is the same for a stage run again in its workspace.
# Nothing a judge writes outlives its run (each gets a fresh judge-N
# directory as HOME, docs/judge-boundary.md): the first run is the one whose
# HOME is judge-1.
REFERENCE_FAILING_ONCE = '''
import os

if os.path.basename(os.environ["HOME"]) == "judge-1":
    raise RuntimeError("out of memory while another job held the device")
''' + REFERENCE


REFERENCE_FAILING_ALWAYS = '''
raise RuntimeError("this reference never imports")
''' + REFERENCE


@pytest.mark.parametrize("mode", ["fork_exec", "prefork"])
def test_set_up_failing_before_the_turn_runs_the_stage_again(mode):
    # set_up_again: kboxd runs the stage again in the same workspace, holding
    # the turn (its spec file replaced), and the job gets its true verdict.
    with it.own_kboxd("kbox-ahead-again-it-", config_for(mode), []) as (_, port, _):
        result = evaluate(port, "ahead-again-%s" % mode, REFERENCE_FAILING_ONCE, CANDIDATE, False,
                          trials=1)
        assert result["status"] == "CORRECT", it.describe(result)
        # Imported on the second try (the first raised before its stamp).
        assert "REF_IMPORTED" in result.get("output_tail", ""), result.get("output_tail")
        # A reference that fails on the second try too is the reference's
        # error: the stage run again never asks again (kboxd's INFRA_ERROR).
        result = evaluate(port, "ahead-again-always-%s" % mode, REFERENCE_FAILING_ALWAYS, CANDIDATE,
                          False, trials=1)
        assert result["status"] == "REFERENCE_ERROR", it.describe(result)


FAST_CANDIDATE = '''
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
'''


def test_timing_asks_kboxd_for_the_device_to_itself():
    # Three jobs at once on one CPU run slot with a stage ahead: each judge
    # asks for the device alone before timing (its 'q' note) and kboxd
    # answers once no stage prepared ahead is still setting up
    # (device_turns.h); every job gets its timing.
    with it.own_kboxd("kbox-ahead-quiet-it-", CONFIG, []) as (_, port, _):
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            results = list(pool.map(
                lambda name: evaluate(port, "ahead-quiet-" + name, REFERENCE, FAST_CANDIDATE, True),
                ["a", "b", "c"]))
        for r in results:
            assert r["status"] == "CORRECT", it.describe(r)
            assert "quiet_wait" in r["durations"]["run_phases_ms"], r["durations"]
            assert r["candidate_timing"]["count"] > 0


# A reference whose import takes seconds: the stage prepared ahead with it is
# still setting up when the job holding the device asks for its quiet.
def slow_reference(seconds):
    return '''
import time
time.sleep(%s)
''' % seconds + REFERENCE


def metric_value(port, name, labels):
    reply = it.request(port, "GET", "/metrics")
    assert reply.status == 200, reply.text
    total = 0.0
    for line in reply.text.splitlines():
        if line.startswith(name + "{") and all(l in line for l in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_the_holders_quiet_pauses_a_stage_still_setting_up():
    # Job a holds the device and asks for its quiet while job b's stage, set
    # up ahead, is still importing its slow reference: b's stage is stopped
    # (SIGSTOP, every thread confirmed) and a times at once, without waiting
    # for b's set-up (over 5 s here). Both get their verdicts.
    with it.own_kboxd("kbox-ahead-pause-it-", CONFIG, []) as (_, port, _):
        def evaluate_after(delay, name, reference):
            time.sleep(delay)
            return evaluate(port, "ahead-pause-" + name, reference, FAST_CANDIDATE, True)

        # Both lanes' zygotes ready first (a CPU lane starts its first zygote
        # at its first stage, each stage's successor beside it), so that b's
        # stage is importing its reference when a asks for its quiet.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            warm = list(pool.map(lambda n: evaluate(port, "ahead-pause-warm-%d" % n, REFERENCE,
                                                    FAST_CANDIDATE, False), [1, 2]))
        assert all(r["status"] == "CORRECT" for r in warm), [it.describe(r) for r in warm]

        # a's model takes 8 s to build (after its turn, before its quiet):
        # b's stage, sent 1 s after a, is importing its reference by then,
        # even when its compile stage ends seconds after a's on a busy host.
        slow_build = REFERENCE.replace(
            "class Model(nn.Module):\n",
            "class Model(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        time.sleep(8)\n\n")
        assert slow_build != REFERENCE
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            a = pool.submit(evaluate_after, 0, "a", slow_build)
            b = pool.submit(evaluate_after, 1.0, "b", slow_reference(12))
            first, second = a.result(), b.result()
        for r in (first, second):
            assert r["status"] == "CORRECT", it.describe(r)
            assert r["candidate_timing"]["count"] > 0
        quiet_wait_ms = first["durations"]["run_phases_ms"]["quiet_wait"]
        stopped = metric_value(port, "kbox_set_up_pauses_total", ['result="stopped"'])
        assert stopped >= 1, stopped
        assert quiet_wait_ms < 3000, first["durations"]


def test_the_time_limit_counts_from_the_end_of_set_up():
    # time_limit_s is the candidate's budget: a set-up slower than it (here
    # the reference's import; on a busy host, the torch import and CUDA
    # start) takes nothing from it. The set-up has its own limit
    # (run_set_up_limit_s); past it the stage ends, blamed on whoever ran:
    # here the reference, never the candidate.
    config = CONFIG + "run_set_up_limit_s: 20\n"
    with it.own_kboxd("kbox-ahead-set-up-it-", config, []) as (_, port, _):
        def evaluate_after(delay, name, reference):
            time.sleep(delay)
            return evaluate(port, "set-up-" + name, reference, FAST_CANDIDATE, False, time_limit_s=5)

        # The slow job first, alone: the turn is its at once, so its whole
        # set-up falls inside its run (not in a wait for the turn).
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            slow = pool.submit(evaluate_after, 0, "slow", slow_reference(8))
            hung = pool.submit(evaluate_after, 1.0, "hung", slow_reference(300))
            slow, hung = slow.result(), hung.result()
        assert slow["status"] == "CORRECT", it.describe(slow)
        assert slow["durations"]["queue_wait_ms"] < 1000, slow["durations"]
        assert slow["durations"]["run_ms"] > 8000, slow["durations"]
        assert hung["status"] == "REFERENCE_ERROR", it.describe(hung)
        assert "did not finish setting up within its set-up limit (20 s)" in hung["message"], \
            it.describe(hung)
        assert hung["durations"]["run_ms"] < 20000 + 15000, hung["durations"]


RAISING_CANDIDATE = '''
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("no kernel today")
'''


def test_a_judged_holder_hands_the_turn_over_before_its_stage_exits():
    # A holder whose candidate was judged (correct or incorrect) and whose
    # process is gone sends 'e' (run_stage._hand_over_turn): the device's
    # turn passes on then, not at its stage's exit. device_turn_ms ends at
    # the hand-over, run_ms at the exit. A candidate that failed keeps the
    # turn to the end (a device probe may be due).
    with it.own_kboxd("kbox-ahead-hand-over-it-", CONFIG, []) as (_, port, _):
        jobs = [("a", FAST_CANDIDATE), ("b", FAST_CANDIDATE), ("c", RAISING_CANDIDATE)]
        with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
            a, b, c = pool.map(lambda job: evaluate(
                port, "hand-over-" + job[0], REFERENCE, job[1], False, trials=1), jobs)
        for r in (a, b):
            assert r["status"] == "CORRECT", it.describe(r)
            d = r["durations"]
            assert "hand_over" in d["run_phases_ms"], d
            assert 0 < d["device_turn_ms"] < d["run_ms"], d
        assert c["status"] == "RUNTIME_ERROR", it.describe(c)
        d = c["durations"]
        assert "hand_over" not in d["run_phases_ms"], d
        assert d["device_turn_ms"] >= d["run_ms"] - 1, d
        # The first stage got its turn on a free device, before its set-up
        # (CUDA start, the reference's import) was over: the turn waited for
        # it (turn_set_up_wait_ms), a part of the turn.
        waits = [r["durations"].get("turn_set_up_wait_ms", 0.0) for r in (a, b, c)]
        assert max(waits) > 0, waits
        for r, wait in zip((a, b, c), waits):
            assert wait <= r["durations"]["device_turn_ms"], r["durations"]
