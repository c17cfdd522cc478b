"""The summary arithmetic of scripts/kbox-bench on synthetic records (stdlib
only, nothing started, milliseconds): the busy window, which jobs the rates
count, n/a without evaluated jobs, and when the baseline ratio is withheld."""
import argparse
import contextlib
import io
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import kbox_bench as bench  # noqa: E402

ARGS = argparse.Namespace(backend="cpu", concurrency=4, baseline_jobs=2)
INFO = {"cpu_run_slots": 1, "compile_workers": 2, "gpus": [{"name": "ignored on cpu"}]}


def record(job_id, submitted, done, run_ms, status="CORRECT", again=False, **durations):
    d = {"static_ms": 0.1, "compile_ms": 1000.0, "queue_wait_ms": 0.0, "run_ms": run_ms,
         "total_ms": (done - submitted) * 1000}
    d.update(durations)
    return {"id": job_id, "resubmission": again, "submitted": submitted, "done": done,
            "result": {"status": status, "rewardable": status == "CORRECT", "durations": d}}


def client_error(job_id):
    return {"id": job_id, "resubmission": False, "submitted": 0, "done": 0,
            "result": {"status": "CLIENT_ERROR", "message": "ConnectionRefusedError()"}}


def summarise(records, baseline=(), asked=0, info=INFO, args=ARGS):
    return bench.summarise(args, info, records, {}, list(baseline), "full size", asked)


def test_busy_window_starts_at_the_first_run():
    # Submitted at 0; the compile takes until 30; the runs cover 30-40 and 40-50.
    recs = [record("a", 0.0, 40.0, 10000.0), record("b", 0.0, 50.0, 10000.0)]
    wall, busy_window = bench.windows(recs)
    assert wall == 50.0 and busy_window == 20.0
    s = summarise(recs)
    assert s["busy_fraction"] == 1.0  # 20 s of runs over 20 s, not over the 50 s wall
    assert s["gpus"] == 0 and s["busy_slots"] == 1  # cpu backend: run slots, not info["gpus"]


def test_busy_counts_device_turns_where_reported():
    # With run stages ahead a job hands its turn over before its stage exits,
    # so run stages overlap: the device's busy time is the sum of the turns.
    recs = [record("a", 0.0, 40.0, 10000.0, device_turn_ms=8000.0),
            record("b", 0.0, 50.0, 10000.0, device_turn_ms=6000.0)]
    s = summarise(recs)
    assert abs(s["busy_fraction"] - 14.0 / 20.0) < 1e-9
    assert s["device_turn_ms_cold"] == (6000.0, 8000.0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    assert "device_turn_ms" in out.getvalue() and "70.0 %" in out.getvalue()


def test_a_turn_longer_than_its_run_opens_the_busy_window():
    # The first job's turn waited 5 s on its lane's zygote before its run
    # stage's process started: the device was the job's from 25 s, not 30 s.
    recs = [record("a", 0.0, 40.0, 10000.0, device_turn_ms=15000.0),
            record("b", 0.0, 50.0, 10000.0, device_turn_ms=9000.0)]
    assert bench.windows(recs) == (50.0, 25.0)
    assert abs(summarise(recs)["busy_fraction"] - 24.0 / 25.0) < 1e-9


def test_client_errors_are_not_counted_per_hour():
    recs = [record("a", 0.0, 36.0, 1000.0), client_error("b"), client_error("c")]
    s = summarise(recs)
    assert s["evaluated"] == 1 and s["jobs"] == 3
    assert abs(s["evals_per_hour"] - 100.0) < 1e-9 and abs(s["distinct_per_hour"] - 100.0) < 1e-9
    assert [row[1] for row in s["not_correct"]] == ["CLIENT_ERROR", "CLIENT_ERROR"]


def test_no_evaluated_job_prints_na():
    s = summarise([client_error("a")], baseline=[{"id": "a", "correct": True, "compile_s": 1.0,
                                                   "total_s": 2.0, "candidate_ms": 0.1,
                                                   "reference_ms": 0.1}], asked=1)
    assert s["evals_per_hour"] is None and s["busy_fraction"] is None and "ratio" not in s
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    assert "evaluations per hour (all) n/a; distinct per hour n/a" in out.getvalue()
    assert "no ratio" in out.getvalue()


def test_phase_percentiles_count_only_jobs_that_reached_the_phase():
    static_reject = record("r", 0.0, 1.0, 0.0, status="REJECTED", compile_ms=0.0)
    static_reject["result"]["verdicts"] = [{"phase": "PHASE_STATIC", "severity": "REJECT"}]
    compile_error = record("c", 0.0, 5.0, 0.0, status="COMPILE_ERROR", compile_ms=5000.0)
    ok = record("a", 0.0, 10.0, 3000.0, compile_ms=7000.0)
    table = bench.phase_table([static_reject, compile_error, ok])
    assert table["compile_ms"] == (5000.0, 7000.0)  # not 0 for the rejected one
    assert table["run_ms"] == (3000.0, 3000.0)
    assert table["static_ms"] == (0.1, 0.1)


def test_ratio_withheld_when_the_baseline_is_incomplete():
    recs = [record("a", 0.0, 36.0, 1000.0), record("b", 0.0, 36.0, 1000.0)]
    one = {"id": "a", "correct": True, "compile_s": 17.0, "total_s": 18.0, "candidate_ms": 0.1,
           "reference_ms": 0.1}
    s = summarise(recs, baseline=[one], asked=2)
    assert "ratio" not in s and "1 of 2" in s["ratio_withheld"]
    wrong = dict(one, id="b", correct=False, error="RuntimeError: build failed")
    s = summarise(recs, baseline=[one, wrong], asked=2)
    assert "ratio" not in s and "b" in s["ratio_withheld"]
    s = summarise(recs, baseline=[one, dict(one, id="b")], asked=2)
    assert abs(s["ratio"] - 200.0 / (3600.0 / 18.0)) < 1e-9


def test_baseline_sample_spreads_over_the_jobs():
    assert bench.baseline_sample(list(range(10)), 3) == [0, 3, 6]
    assert bench.baseline_sample(list(range(2)), 3) == [0, 1]
    assert bench.baseline_sample(list(range(5)), 0) == []


def test_stage_phases_and_start_up_come_from_the_results():
    a = record("a", 0.0, 40.0, 9000.0, run_phases_ms={"fork_candidate": 20.0, "setup": 600.0,
                                                       "dynamic_probe": 5900.0},
               compile_phases_ms={"import_candidate": 8000.0})
    b = record("b", 0.0, 50.0, 9000.0, run_phases_ms={"fork_candidate": 30.0, "setup": 400.0,
                                                       "dynamic_probe": 100.0})
    c = record("c", 0.0, 60.0, 9000.0)  # a result without the split (an older kboxd)
    s = summarise([a, b, c])
    assert s["run_phases_cold"]["setup"] == (bench.pct([600.0, 400.0], 50), bench.pct([600.0, 400.0], 99), 2)
    assert s["compile_phases_cold"] == {"import_candidate": (8000.0, 8000.0, 1)}
    assert s["start_up_p50_ms"] == bench.pct([620.0, 430.0], 50)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    text = out.getvalue()
    assert "run stage's own phases" in text and "dynamic_probe" in text
    assert "per-job start-up on the device (run stage's fork_candidate + setup" in text
    assert s["turn_start_ms"] is None and "turn_start" not in text


def test_the_turns_share_of_start_up_is_reported_beside_the_set_up():
    # Stages ahead: the set-up (here 1.5 s) ran before the turn; the device
    # itself waited only for the turn's start (20 ms).
    recs = [record("a", 0.0, 40.0, 9000.0, run_phases_ms={"fork_candidate": 100.0, "setup": 1400.0,
                                                          "turn_start": 20.0})]
    s = summarise(recs)
    assert s["start_up_p50_ms"] == 1500.0 and s["turn_start_ms"] == (20.0, 20.0)
    assert s["device_start_ms"] == (20.0, 20.0) and s["turns_waiting_on_set_up"] == (0, 1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    lines = out.getvalue().splitlines()
    set_up = [line for line in lines if line.startswith("per-job start-up on the device (")]
    turn = [line for line in lines if "on its device's turn (the turn waiting" in line]
    assert set_up and "NOT met" in set_up[0]
    assert turn and "p50 0.020 s" in turn[0] and "[target <= 0.5 s: met]" in turn[0]
    assert any("turns the device waited for, free, while their stage set up: 0 of 1;" in line for line in lines)


def test_a_turn_given_during_set_up_counts_its_wait_in_the_devices_start():
    # The turn came 700 ms before job a's set-up ended: the device waited
    # that long, then 20 ms to the first trial. Job b was ready in time.
    recs = [record("a", 0.0, 40.0, 9000.0, turn_set_up_wait_ms=700.0,
                   run_phases_ms={"setup": 1400.0, "turn_start": 20.0}),
            record("b", 0.0, 50.0, 9000.0, run_phases_ms={"setup": 1400.0, "turn_start": 30.0})]
    s = summarise(recs)
    assert s["device_start_ms"] == (bench.pct([720.0, 30.0], 50), bench.pct([720.0, 30.0], 99))
    assert s["turns_waiting_on_set_up"] == (1, 2) and s["turn_set_up_wait_ms"] == (700.0, 700.0)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    text = out.getvalue()
    assert "turns the device waited for, free, while their stage set up: 1 of 2 (waited p50 700 ms" in text


def test_start_up_is_not_measured_without_phases():
    s = summarise([record("a", 0.0, 40.0, 9000.0)])
    assert s["start_up_p50_ms"] is None and s["run_phases_cold"] == {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    assert "per-job start-up on the device: not measured" in out.getvalue()


def test_timed_rounds_and_the_speedups_precision_are_reported():
    def timed(job_id, rounds, speedup, low, high):
        r = record(job_id, 0.0, 40.0, 3000.0)
        r["result"].update(candidate_timing={"count": rounds}, speedup=speedup,
                           speedup_ci_low=low, speedup_ci_high=high)
        return r
    s = summarise([timed("a", 46, 2.0, 1.9, 2.1), timed("b", 90, 1.0, 0.98, 1.02), record("c", 0.0, 40.0, 3000.0)])
    assert s["timed_rounds"] == (bench.pct([46, 90], 50), bench.pct([46, 90], 99), 90)
    assert abs(s["speedup_half_width"][0] - 0.02) < 1e-9 and abs(s["speedup_half_width"][1] - 0.05) < 1e-9
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench.print_summary(s)
    assert "timed rounds per job p50" in out.getvalue() and "max 90" in out.getvalue()
    assert summarise([record("c", 0.0, 40.0, 3000.0)])["timed_rounds"] is None


def test_the_compile_tier_gets_the_last_cpus_and_the_run_node_the_rest(monkeypatch):
    monkeypatch.setattr(bench.os, "sched_getaffinity", lambda pid: {3, 0, 2, 1, 5, 4})
    assert bench.split_cpus(4) == ([0, 1], [2, 3, 4, 5])
    for cores in (0, 6):  # none for the tier, or none left for the run node
        try:
            bench.split_cpus(cores)
        except SystemExit as e:
            assert "CPUs" in str(e)
        else:
            raise AssertionError("split_cpus(%d) should refuse" % cores)


def test_the_compile_tiers_counters_are_read_by_outcome_and_differenced(monkeypatch):
    pages = iter([
        'kbox_builds_served_total{outcome="built"} 2\nkbox_builds_served_total{outcome="cached"} 0\n'
        'kbox_stage_cpu_seconds_total{backend="cuda",stage="compile"} 40.5\n'
        'kbox_stage_cpu_seconds_total{backend="cuda",stage="run"} 7\n',
        'kbox_builds_served_total{outcome="built"} 5\nkbox_builds_served_total{outcome="cached"} 1\n'
        'kbox_remote_builds_total{outcome="fallback"} 1\n'
        'kbox_stage_cpu_seconds_total{backend="cuda",stage="compile"} 120.5\n',
    ])
    monkeypatch.setattr(bench, "http", lambda server, path, timeout=90: next(pages))
    before, after = bench.scrape("x"), bench.scrape("x")
    assert before["compile_cpu_s"] == 40.5
    diff = bench.diff_tier(before, after)
    assert diff["served"] == {"built": 3.0, "cached": 1.0}
    assert diff["remote"] == {"fallback": 1.0}
    assert diff["compile_cpu_s"] == 80.0
