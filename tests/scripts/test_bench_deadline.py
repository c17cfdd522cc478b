"""scripts/kbox-bench's progress lines and --deadline: a run cut short
still prints where it stood and the summary of what finished, marked
PARTIAL. The end-to-end test runs the real kboxd (KBOX_BIN_DIR, default
<repo>/build/bin) with jobs that cannot finish within a 4-second deadline
(each needs a compile)."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import kbox_bench as bench  # noqa: E402

BIN = os.environ.get("KBOX_BIN_DIR") or os.path.join(REPO, "build", "bin")
SHARED = os.environ.get("KBOX_SHARED_DIR") or os.path.join(REPO, "..", "shared")


def test_progress_line_counts_statuses_compiles_and_queues():
    records = [{"result": {"status": "CORRECT"}}, {"result": {"status": "CORRECT"}},
               {"result": {"status": "INCORRECT"}}]
    metrics = {"kbox_build_cache_hits_total": 1.0, "kbox_build_cache_misses_total": 4.0,
               "compile": 2.0, "run_cpu": 0.0, "run_gpu": None}
    line = bench.progress_line(47.2, 10, 8, records, metrics)
    assert line == "[    47 s] submitted 8/10, compiles begun or cached 5, finished 3 (CORRECT 2, INCORRECT 1); " \
                   "queued: compile 2 run_cpu 0"
    assert bench.progress_line(0, 2, 0, [], None) == "[     0 s] submitted 0/2, compiles begun or cached ?, finished 0 (none)"


def test_a_past_deadline_stops_at_once_with_nothing_finished():
    stop = bench.Stop(deadline=0.0)
    # No server is contacted: the deadline is checked before any job is taken.
    records = bench.run_stream("http://127.0.0.1:9", [{"id": "a"}], lambda j: {}, set(), 1, "t", stop, 1.0)
    assert stop.why == "deadline" and records == []


@pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "kboxd")), reason="kboxd not built")
def test_deadline_prints_a_partial_summary_with_progress_lines(tmp_path):
    env = dict(os.environ, KBOX_BIN_DIR=BIN)
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "scripts", "kbox_bench.py"), "--backend", "cpu", "--jobs", "2",
         "--resubmit-share", "0", "--baseline-jobs", "0", "--shared", SHARED, "--deadline", "4",
         "--progress", "1", "--out", str(tmp_path), "--python", sys.executable],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, env=env)
    out = proc.stdout
    assert proc.returncode == 2, out
    assert "PARTIAL (deadline)" in out and "serial baseline on" not in out
    assert any(line.startswith("[") and "submitted" in line and "/2," in line for line in out.splitlines()), out
    assert (tmp_path / "summary.json").exists()
