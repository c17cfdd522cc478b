"""POST /v1/evaluate end to end: one job per outcome, all submitted at session
start by the `jobs` fixture (conftest.py); each test waits for its own."""
import os

import pytest

import kbox_it as it
from kbox_it import describe

SPIN_TIME_LIMIT_S = it.SPIN_TIME_LIMIT_S
HONEST_SEED = it.HONEST_SEED            # sent as a JSON string
WRONG_SEED = str(it.WRONG_SEED)         # sent as a JSON number, echoed as a string


def no_reject(result):
    return all(v.get("severity") != "REJECT" for v in result.get("verdicts", []))


def test_honest_candidate_is_correct_and_timed(jobs, daemon):
    r = jobs.result("honest")
    assert r["status"] == "CORRECT", describe(r)
    assert r["rewardable"] is True, describe(r)
    assert no_reject(r)
    assert r["job_id"]
    assert "compile_log" not in r and "runtime_error" not in r, describe(r)

    s = r["settings"]
    assert s["seed"] == HONEST_SEED          # uint64: a JSON string, echoed as sent
    assert s["backend"] == "BACKEND_CPU"
    assert s["precision"] == "PRECISION_FP32"
    assert s["correctness_trials"] == 5
    assert s["measure_performance"] is True
    assert s["time_limit_s"] == 60           # the config's default_time_limit_s
    assert s["atol"] == pytest.approx(1e-4) and s["rtol"] == pytest.approx(1e-4)

    trials = r["trials"]
    assert len(trials) == 5, describe(r)
    assert all(t["passed"] for t in trials), describe(r)
    assert all(t["max_abs_diff"] <= 1e-4 for t in trials), describe(r)
    assert all("first_mismatch" not in t for t in trials), describe(r)
    assert len({t["seed"] for t in trials}) == 5, "trial seeds must differ"

    for key in ("candidate_timing", "reference_timing"):
        t = r[key]
        assert t["count"] > 0, describe(r)
        # Adaptive: performance_trials calls at least, until the lower
        # quartile is known to 1 %, at most ten times as many.
        assert s["performance_trials"] <= t["count"] <= 10 * s["performance_trials"], describe(r)
        assert t["median_ci_low_ms"] <= t["median_ms"] <= t["median_ci_high_ms"], describe(r)
        assert 0 < t["min_ms"] <= t["median_ms"] <= t["max_ms"], t
        assert t["method"] == "perf_counter", t
    assert r["speedup"] > 0
    # From the lower quartiles (what disturbs a timed call only adds time).
    assert r["speedup"] == pytest.approx(
        r["reference_timing"]["lower_quartile_ms"] / r["candidate_timing"]["lower_quartile_ms"], rel=1e-6)
    assert 0 < r["speedup_ci_low"] <= r["speedup"] <= r["speedup_ci_high"], describe(r)

    d = r["durations"]
    assert d["compile_ms"] > 0 and d["run_ms"] > 0
    assert d["total_ms"] >= d["compile_ms"] + d["run_ms"] - 1.0

    fp = r["fingerprint"]
    assert fp["torch_version"], fp
    assert fp["python_version"], fp
    assert fp["device_name"] == "cpu"
    assert fp["kbox_version"] == it.request(daemon.port, "GET", "/v1/info").json()["kbox_version"]


def test_cpp_syntax_error_points_at_candidate_line(jobs, daemon):
    r = jobs.result("cpp_syntax_error")
    line = it.marker_line(it.case_path("cand_cpp_syntax_error.py"), "KBOX_IT_SYNTAX_ERROR")
    assert r["status"] == "COMPILE_ERROR", describe(r)
    assert r["rewardable"] is False
    log = r["compile_log"]
    assert "candidate.py:%d" % line in log["text"], describe(r)
    assert log["first_error_line"] == line, describe(r)
    # The log is made safe to show: no host paths of the job.
    assert daemon.work_dir not in log["text"]
    assert daemon.work_dir not in r.get("output_tail", "")
    assert r["trials"] == []
    assert "candidate_timing" not in r and r["speedup"] == 0


def test_wrong_arithmetic_is_incorrect(jobs):
    r = jobs.result("off_by_one")
    assert r["status"] == "INCORRECT", describe(r)
    assert r["rewardable"] is False
    assert r["settings"]["seed"] == WRONG_SEED   # sent as a JSON number
    trials = r["trials"]
    assert trials, describe(r)
    for t in trials:
        assert t["passed"] is False, describe(r)
        # Every 7th element is off by exactly +1 (the values themselves lie in [-1, 1]).
        assert t["max_abs_diff"] == pytest.approx(1.0, abs=1e-5), t
        assert t["mismatch_fraction"] == pytest.approx(1.0 / 7.0, abs=1e-6), t
        m = t["first_mismatch"]
        assert m["output_index"] == 0
        assert [int(i) for i in m["index"]] == [0, 0], m   # flat index 0 is the first bad one
        assert m["actual"] - m["expected"] == pytest.approx(1.0, abs=1e-5), m
        assert -1.0 <= m["expected"] <= 1.0
    assert "candidate_timing" not in r and r["speedup"] == 0


def test_exception_in_forward_is_runtime_error(jobs):
    r = jobs.result("raises")
    line = it.marker_line(it.case_path("cand_raises.py"), "KBOX_IT_RAISE")
    assert r["status"] == "RUNTIME_ERROR", describe(r)
    assert r["rewardable"] is False
    e = r["runtime_error"]
    assert e["type"] == "KboxIntegrationError", e
    assert "deliberate failure from the integration test" in e["message"], e
    assert e["candidate_line"] == line, e
    assert e["phase"] == "PHASE_RUN", e
    assert "candidate.py" in e["traceback"], e
    assert "kbox_harness" not in e["traceback"], "harness frames must not be shown: %s" % e


def test_infinite_loop_times_out_and_leaves_no_process(jobs, daemon):
    r = jobs.result("spins_forever")
    assert r["status"] == "TIMEOUT", describe(r)
    assert r["rewardable"] is False
    assert r["settings"]["time_limit_s"] == SPIN_TIME_LIMIT_S
    assert r["runtime_error"]["phase"] == "PHASE_RUN", describe(r)
    assert "trials" not in r or all(not t["passed"] for t in r["trials"])
    run_ms = r["durations"]["run_ms"]
    # Killed at the limit, which counts from the end of kbox's set-up: not
    # before it, and not long after. run_ms also holds that set-up (the
    # torch import and the reference's), which under the whole suite on 2
    # cores has passed 10 s: the bound leaves room for it.
    assert "wall-clock limit (%d s)" % SPIN_TIME_LIMIT_S in r["message"], describe(r)
    assert SPIN_TIME_LIMIT_S * 1000 * 0.95 <= run_ms <= SPIN_TIME_LIMIT_S * 1000 + 60000, run_ms

    # Every process of the job (the stage and the child it forked, both with
    # the job directory in their argv and as cwd) was gone within 2 s of the
    # reply (scanned by conftest as soon as it arrived), and still is.
    left = jobs.reply("spins_forever").leftover_processes
    assert left == [], "processes of the timed-out job alive after the reply: %s" % left
    job_dir = os.path.join(daemon.work_dir, "jobs", r["job_id"])
    left = it.processes_mentioning(job_dir, exclude_pids=(daemon.pid, os.getpid()))
    assert not left, "processes of the timed-out job still alive: %s" % left
    assert not os.path.exists(job_dir), "job directory not removed after the result"


def test_reference_error_in_get_inputs(jobs):
    r = jobs.result("reference_error")
    assert r["status"] == "REFERENCE_ERROR", describe(r)
    assert r["rewardable"] is False
    e = r["runtime_error"]
    assert e["type"] == "BrokenProblemError", e
    assert "reference get_inputs is broken on purpose" in e["message"], e
    assert e["candidate_line"] == 0, e
    assert r["trials"] == []


def test_client_request_id_echoed_and_job_ids_unique(jobs):
    ids = set()
    for name in jobs.http_job_names():
        r = jobs.result(name)
        assert r["client_request_id"] == "it-" + name, describe(r)
        assert r["job_id"] not in ids, "job id %s reused" % r["job_id"]
        ids.add(r["job_id"])
        assert r["fingerprint"]["torch_version"], describe(r)


def test_candidate_cannot_reach_the_judge_through_proc(jobs):
    # The judge holds the reference's outputs and the trial seed. The
    # candidate's process runs under another uid than the judge, and the
    # stage's procfs hides every process of another uid (hidepid=invisible):
    # /proc/<judge> is ENOENT and /proc lists nothing but the candidate's own
    # process (docs/judge-boundary.md). ptrace and process_vm_readv are
    # seccomp's.
    r = jobs.result("reads_judge_memory")
    assert r["status"] == "CORRECT", describe(r)
    tail = r.get("output_tail", "")
    for what in ("mem", "fd/0", "environ"):
        assert "JUDGE_PROBE %s errno=2" % what in tail, tail[-3000:]
    assert " opened" not in tail, tail[-3000:]
    # It did look, and found no other process: not the judge, not init.
    looked = [line for line in tail.splitlines() if line.startswith("OTHER_PROBE looked at")]
    assert looked and int(looked[-1].split()[3]) == 0, tail[-3000:]


def test_names_planted_by_the_job_do_not_break_kbox(jobs):
    # Files, directories and links under every name kboxd makes for a job,
    # planted in every place a stage can write, at import in both stages:
    # kboxd makes its own where no stage writes, so the job is an honest one.
    r = jobs.result("plants_kbox_names")
    assert r["status"] == "CORRECT", describe(r)
    # It did plant (the run stage's import prints how many names it made).
    counts = [int(line.split()[1]) for line in r.get("output_tail", "").splitlines()
              if line.startswith("PLANTED ")]
    assert counts and max(counts) > 0, r.get("output_tail", "")[-2000:]


def test_candidate_code_writing_the_compile_stages_channel_is_the_candidates_failure(jobs):
    # In the compile stage candidate code shares the harness's process and its
    # result pipe: a forged HARNESS_FAILED, or a crash after announcing kbox's
    # harness, is the candidate's COMPILE_ERROR, never kbox's INFRA_ERROR
    # (which training masks, and kboxd retries).
    forged = jobs.result("forges_compile_report")
    assert forged["status"] == "COMPILE_ERROR", describe(forged)
    assert "after candidate code ran" in forged["message"], describe(forged)
    crashed = jobs.result("announces_harness_and_crashes")
    assert crashed["status"] == "COMPILE_ERROR", describe(crashed)
    assert crashed["runtime_error"]["type"] == "Crash", describe(crashed)
    # A compile report claiming its compiler was killed from outside: kbox's
    # failure while an attempt was left (run again), the candidate's on the last.
    killed = jobs.result("forges_compiler_kill")
    assert killed["status"] == "COMPILE_ERROR", describe(killed)
    assert "the failure is the candidate's" in killed["message"], describe(killed)
