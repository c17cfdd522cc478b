"""GET /metrics after the session's jobs have finished."""
import os
import re

import kbox_it as it

JOBS_TOTAL = re.compile(r'^kbox_jobs_total\{([^}]*)\} ([0-9.e+]+)$', re.MULTILINE)


def test_metrics_count_finished_jobs(jobs, daemon):
    jobs.wait_all()
    results = [jobs.result(name) for name in jobs.http_job_names()]
    reply = it.request(daemon.port, "GET", "/metrics")
    assert reply.status == 200, reply
    assert reply.headers.get("content-type", "").startswith("text/plain")
    text = reply.text
    assert "# TYPE kbox_jobs_total counter" in text, text
    by_status = {}
    for labels, value in JOBS_TOTAL.findall(text):
        status = re.search(r'status="([^"]*)"', labels).group(1)
        by_status[status] = by_status.get(status, 0) + float(value)
    # Every finished job was counted (other tests' jobs only add to this).
    finished = len(results) + 1  # + the CLI's job
    assert sum(by_status.values()) >= finished, (by_status, text)
    for status in ("correct", "compile_error", "incorrect", "runtime_error", "timeout",
                   "reference_error"):
        expected = sum(1 for r in results if r["status"].lower() == status)
        assert by_status.get(status, 0) >= expected, (status, by_status)
    assert re.search(r"^kbox_jobs_in_flight 0$", text, re.MULTILINE), text
    assert "kbox_job_phase_duration_seconds" in text


def test_job_dirs_removed_after_results(jobs, daemon):
    jobs.wait_all()
    jobs_dir = os.path.join(daemon.work_dir, "jobs")
    left = os.listdir(jobs_dir) if os.path.isdir(jobs_dir) else []
    assert left == [], "job directories left behind: %s" % left
