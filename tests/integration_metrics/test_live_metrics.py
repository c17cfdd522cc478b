"""GET /metrics of a live kboxd after cheap jobs: promtool accepts it, and the
series each job should move moved. GET /readyz answers per its contract."""
import json
import shutil
import subprocess

import pytest

import conftest
import kbox_it as it


def test_cheap_jobs_end_as_expected(job_run):
    _, replies, _, _ = job_run
    for name, reply in replies.items():
        assert reply.status == 200, (name, reply)
    assert replies["check_reject"].json()["rejected"] is True
    assert replies["static_reject"].json()["status"] == "REJECTED"
    correct = replies["correct_python"].json()
    assert correct["status"] == "CORRECT", it.describe(correct)
    forked = replies["forks_in_forward"].json()
    assert forked["status"] == "SANDBOX_VIOLATION", it.describe(forked)


def test_promtool_accepts_the_live_metrics(job_run):
    _, _, text, _ = job_run
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found: scripts/install-deps installs Debian's prometheus"
    run = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True,
                         timeout=60)
    out = (run.stdout + run.stderr).decode("utf-8", "replace")
    assert run.returncode == 0 and out.strip() == "", out


def moved(before, after, name, **labels):
    return after.total(name, **labels) - before.total(name, **labels)


def test_each_job_moved_its_series(job_run):
    before, _, _, after = job_run
    # Jobs by backend and status: three evaluations, one of each outcome.
    for status in ("rejected", "correct", "sandbox_violation"):
        assert moved(before, after, "kbox_jobs_total", backend="cpu", status=status) == 1, status
    assert moved(before, after, "kbox_jobs_total") == 3
    # Phases: the strict evaluation was checked (and rejected); the two under
    # profile "off" skipped the checker, compiled (imported), waited for a
    # CPU slot and ran.
    count = "kbox_job_phase_duration_seconds_count"
    expected = {"static": 1, "compile": 2, "queue_wait": 2, "run": 2, "total": 3}
    for phase, n in expected.items():
        assert moved(before, after, count, backend="cpu", phase=phase) == n, phase
    assert after.total("kbox_job_phase_duration_seconds_sum", phase="run") > 0
    # The sandbox stopped the fork: one violation, of a strict-filter or audit kind.
    assert moved(before, after, "kbox_sandbox_violations_total") == 1
    assert (moved(before, after, "kbox_sandbox_violations_total", kind="seccomp_strict")
            + moved(before, after, "kbox_sandbox_violations_total", kind="audit_denied")) == 1
    # Anti-cheat: the check and the evaluation each rejected the matmul operator.
    assert moved(before, after, "kbox_anticheat_verdicts_total", rule="py.matmul-operator",
                 severity="reject") == 2
    assert moved(before, after, "kbox_static_check_duration_seconds_count") == 2
    assert moved(before, after, "kbox_http_responses_total", code="2xx") >= 4
    # Nothing was kbox's fault, and no worker crashed.
    assert after.total("kbox_infra_errors_total") == 0
    assert after.total("kbox_worker_crashes_total") == 0


def test_point_in_time_gauges(job_run):
    _, _, _, after = job_run
    assert after.value("kbox_jobs_in_flight") == 0
    assert after.value("kbox_jobs_in_flight_limit") == conftest.MAX_IN_FLIGHT
    assert after.value("kbox_device_healthy", device="cpu") == 1
    assert after.value("kbox_run_slots", device="cpu", state="idle") == 2
    assert after.value("kbox_run_slots", device="cpu", state="busy") == 0
    assert after.total("kbox_queue_depth") == 0
    assert after.value("kbox_compile_slots", state="busy") == 0
    assert after.value("kbox_compile_slots", state="idle") >= 1
    assert after.value("kbox_insecure_mode") == 0


def test_readyz_is_ready(kboxd):
    reply = it.request(kboxd.port, "GET", "/readyz")
    assert reply.status == 200, reply
    assert reply.headers["content-type"] == "application/json"
    assert json.loads(reply.body) == {"ready": True}
    assert it.request(kboxd.port, "POST", "/readyz", b"").status == 405
    # Liveness is unchanged beside it.
    assert it.request(kboxd.port, "GET", "/healthz").json() == {"status": "ok"}
