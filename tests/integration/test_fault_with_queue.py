"""A run stage that dies as a GPU fault leaves it (kbox's own process gone in
the middle of a job), with honest jobs queued and set up ahead behind it on
the same device: the failed job is kbox's, run again and CORRECT; every job
behind it CORRECT, none lost, none run twice. On the CPU backend, against a
kboxd of its own with one run slot and run_stages_ahead at its default, so
the next job is set up beside the one that fails (docs/run-stages-ahead.md).
The GPU suite's queue_behind_fault is the same on a GPU, with a faulting
kernel and kbox's device probe.

Run alone with
  KBOX_BIN_DIR=$PWD/build/bin python3 -m pytest -q tests/integration/test_fault_with_queue.py
"""
import concurrent.futures
import os
import re
import signal
import time
import uuid

import pytest

import kbox_it as it
from kbox_it import describe

START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 600
BEHIND = 6
# Run stages by fork+exec: the test finds the first job's judge by its
# command line (kbox_stage.py with the job's run_spec.json), which a stage
# forked from a zygote does not carry. How the stage started is not what is
# tested: a dead stage with jobs queued and set up behind it is.
CONFIG = """\
preforked_run_stage: false
cpu_run_slots: 1
default_time_limit_s: 120
max_time_limit_s: 300
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
"""

# Each job's reference carries its own token: the test finds a job's stage
# processes by it, and no two jobs share a cached figure.
REFERENCE = """\
# fault-with-queue test %s
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
"""

CANDIDATE = """\
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(%d):
            y = x.clamp_min(0.0) * 2.0
        return y
"""
# The first job's calls repeat the work (about half a second a call): its
# stage runs for tens of seconds, long enough for the next job to be set up
# ahead beside it.
SLOW_REPEATS = 20000


@pytest.fixture(scope="module")
def jobs():
    """Replaces the session's job board (conftest.py): this module runs its
    own jobs on its own daemon."""
    yield None


def _payload(token, performance_trials, repeats=1):
    return {"reference_source": REFERENCE % token, "candidate_source": CANDIDATE % repeats,
            "backend": "BACKEND_CPU", "correctness_trials": 3, "performance_trials": performance_trials,
            # A pure-Python candidate has no kernel of its own (kernel.none):
            # the static rules are not what this test is about.
            "anticheat_profile": "off"}


def _run_stage_judges(token):
    """pids of the judge processes of run stages whose job's reference
    carries `token`: a kbox_stage.py with a run_spec.json whose parent is
    not a stage process (the candidate's process is the judge's child)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % entry, "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
            with open("/proc/%d/cmdline" % ppid, "rb") as f:
                parent = f.read()
        except (OSError, ValueError, IndexError):
            continue
        spec = next((a.decode() for a in argv if a.endswith(b"/run_spec.json")), None)
        if spec is None or b"kbox_stage.py" in parent:
            continue
        try:
            with open(os.path.join(os.path.dirname(spec), "reference.py"), errors="replace") as f:
                if token in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _metric(port, name, labels):
    text = it.request(port, "GET", "/metrics").text
    m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(labels)), text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def test_jobs_queued_behind_a_dead_stage_all_finish_once(jobs):
    with it.own_kboxd("kbox-it-fault-", CONFIG, (), START_TIMEOUT_S) as (proc, port, root):
        failing = uuid.uuid4().hex
        tokens = [uuid.uuid4().hex for _ in range(BEHIND)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=BEHIND + 1) as pool:
            # The jobs behind it are sent at once: their compile stages run
            # while it does, and the next one's run stage is set up ahead.
            first = pool.submit(it.post_json, port, _payload(failing, 20, SLOW_REPEATS), timeout=JOB_TIMEOUT_S)
            time.sleep(0.5)
            behind = [pool.submit(it.post_json, port, _payload(t, 20), timeout=JOB_TIMEOUT_S) for t in tokens]
            # Once the next job's judge runs beside the first's (set up
            # ahead while the first holds the device), the first's judge
            # ends as a device fault ends kbox's process: from outside, at once.
            deadline = time.monotonic() + 240
            judges, ahead = [], []
            while not (judges and ahead) and time.monotonic() < deadline and not first.done():
                judges = _run_stage_judges(failing)
                ahead = [t for t in tokens if _run_stage_judges(t)]
                time.sleep(0.1)
            assert judges and ahead and not first.done(), (
                "no job was set up ahead while the first ran (first's judges %s, ahead %s): %s"
                % (judges, ahead, describe(first.result().json()) if first.done() else "first still running"))
            for pid in judges:
                os.kill(pid, signal.SIGKILL)
            replies = [first.result()] + [f.result() for f in behind]

        results = []
        for reply in replies:
            assert reply.status == 200, reply
            results.append(reply.json())
        for r in results:
            assert r["status"] == "CORRECT" and r["rewardable"] is True, describe(r)
        ids = [r["job_id"] for r in results]
        assert len(set(ids)) == len(ids), ids
        # The first job was run again: once, as kbox's failure, not the candidate's.
        assert _metric(port, "kbox_infra_retries_total", 'cause="stage_killed"') == 1, \
            it.request(port, "GET", "/metrics").text
        assert _metric(port, "kbox_jobs_total", 'backend="cpu",status="correct"') == BEHIND + 1
