"""The compile tier end to end (docs/compile-tier.md): a compile-role kboxd
and a run-role kboxd on this machine. The run node's jobs are built on the
compile node (which counts them) and run here; a compile error there is the
job's COMPILE_ERROR; a compile node killed mid-build loses no job (the run
node builds it itself).

Two C++ builds and a failed one (~20 s each on the CPU), the first two at once.
Run alone with
  KBOX_BIN_DIR=$PWD/build/bin python3 -m pytest -q -s tests/integration/test_compile_tier.py
"""
import concurrent.futures
import re
import signal
import time

import pytest

import kbox_it as it
from kbox_it import describe

START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 600
COMPILE_CONFIG = it.SMALL_JOBS_CONFIG + "build_cache_max_bytes: 1073741824\n"


@pytest.fixture(scope="module")
def jobs():
    """This module's daemons are its own (conftest.py's job board is not used)."""
    yield None


def metric(port, name, labels=""):
    text = it.request(port, "GET", "/metrics").text
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.MULTILINE)
    assert m, "%s%s not in /metrics" % (name, labels)
    return float(m.group(1))


def payload(candidate="cand_clamp_scale_ok.py", suffix=""):
    return {"reference_source": it.read(it.case_path("ref_clamp_scale.py")),
            "candidate_source": it.read(it.case_path(candidate)) + suffix,
            "backend": "BACKEND_CPU", "seed": it.HONEST_SEED, "correctness_trials": 3,
            "measure_performance": False}


def evaluate(port, body):
    reply = it.post_json(port, body, timeout=JOB_TIMEOUT_S)
    assert reply.status == 200, reply
    return reply.json()


def test_builds_go_to_the_compile_node_and_its_failures_are_the_jobs():
    with it.own_kboxd("kbox-it-compile-", COMPILE_CONFIG, ["--role", "compile", "--compile-workers", "2"],
                      START_TIMEOUT_S) as (_, compile_port, _root):
        info = it.request(compile_port, "GET", "/v1/info").json()
        assert info["role"] == "compile"
        # A compile node takes no jobs.
        refused = it.post_json(compile_port, payload())
        assert refused.status == 404 and "role compile" in refused.text, refused
        args = ["--role", "run", "--compile-endpoint", "http://127.0.0.1:%d" % compile_port]
        with it.own_kboxd("kbox-it-run-", it.SMALL_JOBS_CONFIG, args, START_TIMEOUT_S) as (_, run_port, _r):
            # A run node serves no builds.
            assert it.post_json(run_port, {}, path="/v1/builds").status == 404
            with concurrent.futures.ThreadPoolExecutor(2) as pool:
                honest = pool.submit(evaluate, run_port, payload(suffix="\n# tier honest\n"))
                broken = pool.submit(evaluate, run_port, payload("cand_cpp_syntax_error.py"))
                honest, broken = honest.result(), broken.result()
            assert honest["status"] == "CORRECT" and honest["rewardable"], describe(honest)
            assert broken["status"] == "COMPILE_ERROR", describe(broken)
            assert not broken["rewardable"]
            served = {o: metric(compile_port, "kbox_builds_served_total", '{outcome="%s"}' % o)
                      for o in ("built", "failed", "refused")}
            assert served == {"built": 1, "failed": 1, "refused": 0}, served
            asked = {o: metric(run_port, "kbox_remote_builds_total", '{outcome="%s"}' % o)
                     for o in ("built", "failed", "fallback")}
            assert asked == {"built": 1, "failed": 1, "fallback": 0}, asked
            # The compile CPU was spent on the compile node, none here.
            assert metric(compile_port, "kbox_stage_cpu_seconds_total",
                          '{backend="cpu",stage="compile"}') > 1
            assert metric(run_port, "kbox_stage_cpu_seconds_total", '{backend="cpu",stage="compile"}') == 0
            # The same job again: the run node's own build cache has it now.
            again = evaluate(run_port, payload(suffix="\n# tier honest\n"))
            assert again["status"] == "CORRECT" and again["build_cache_hit"], describe(again)
            assert metric(compile_port, "kbox_builds_served_total", '{outcome="built"}') == 1


def test_a_compile_node_killed_mid_build_loses_no_job():
    with it.own_kboxd("kbox-it-compile-kill-", COMPILE_CONFIG, ["--role", "compile", "--compile-workers", "1"],
                      START_TIMEOUT_S, may_be_killed=True) as (compile_proc, compile_port, _root):
        args = ["--role", "run", "--compile-endpoint", "http://127.0.0.1:%d" % compile_port]
        with it.own_kboxd("kbox-it-run-kill-", it.SMALL_JOBS_CONFIG, args, START_TIMEOUT_S) as (_, run_port, root):
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                job = pool.submit(evaluate, run_port, payload(suffix="\n# tier killed\n"))
                deadline = time.monotonic() + 120
                while metric(compile_port, "kbox_compile_slots", '{state="busy"}') < 1:
                    assert time.monotonic() < deadline, "the compile node never started the build"
                    time.sleep(0.2)
                compile_proc.send_signal(signal.SIGKILL)
                compile_proc.wait()
                result = job.result()
            assert result["status"] == "CORRECT" and result["rewardable"], describe(result)
            assert metric(run_port, "kbox_remote_builds_total", '{outcome="fallback"}') == 1
            assert metric(run_port, "kbox_stage_cpu_seconds_total", '{backend="cpu",stage="compile"}') > 1
            with open(root + "/kboxd.stderr", errors="replace") as f:
                assert "built here, not on the compile tier" in f.read()
