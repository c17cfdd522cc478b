"""The reference timing cache end to end (docs/reference-cache.md), against a
kboxd of its own: two jobs with the same reference, the first timed live,
the second against the cached figure; fresh_reference_timing times it live
again. Pure-Python candidates (no C++ build), a few seconds a job.

Run alone with
  KBOX_BIN_DIR=$PWD/build/bin python3 -m pytest -q tests/integration/test_reference_cache.py
"""
import os
import re
import uuid

import pytest

import kbox_it as it
from kbox_it import describe

START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 300
CONFIG = """\
default_time_limit_s: 60
max_time_limit_s: 120
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
build_cache_max_bytes: 0
# CI's loaded 2-core host times these calls to 1.1-2.5 %, never the default
# 1 % (docs/reference-cache.md): the bound a busy CPU node would set.
reference_cache_max_relative_ci: 0.05
"""
MAX_RELATIVE_CI = 0.05

# A token makes this reference's key unlike any other test's. 64 x 256
# elements stay under PyTorch's intra-op grain (32768), so each call is
# single-threaded: on a loaded 2-core host multi-threaded calls jittered by
# 1.4-5 % and never settled to the judge's 1 %.
REFERENCE = """\
# reference-cache test %s
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return [2.0]
"""

# Does the reference's work 32 times: far slower than it, so its speedup over
# the cached figure stays below live_recheck_speedup (default 1.0) even when
# the cached figure was taken under heavier load. With 4 times, where a
# call's fixed overhead dominates, the live speedup was ~0.65, and once on
# CI's loaded host 1.011 against a figure timed while the host was busier.
SLOW_CANDIDATE = """\
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        for _ in range(32):
            y = x.clamp_min(0.0) * self.scale
        return y
"""


@pytest.fixture(scope="module")
def jobs():
    """Replaces the session's job board (conftest.py): this module runs its
    own jobs on its own daemon."""
    yield None


class OwnDaemon(object):
    def __init__(self, proc, port, root):
        self.proc, self.port, self.root = proc, port, root

    def evaluate(self, payload):
        reply = it.post_json(self.port, payload, timeout=JOB_TIMEOUT_S)
        assert reply.status == 200, reply
        return reply.json()

    def metric(self, name):
        text = it.request(self.port, "GET", "/metrics").text
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.MULTILINE)
        assert m, "%s not in /metrics" % name
        return float(m.group(1))

    def stderr(self):
        with open(os.path.join(self.root, "kboxd.stderr"), errors="replace") as f:
            return f.read()


@pytest.fixture(scope="module")
def daemon_with_cache():
    with it.own_kboxd('kbox-it-refcache-', CONFIG, (), START_TIMEOUT_S) as (proc, port, root):
        yield OwnDaemon(proc, port, root)


def _relative_ci(timing):
    lq = timing.get("lower_quartile_ms", 0)
    return (timing["lower_quartile_ci_high_ms"] - timing["lower_quartile_ci_low_ms"]) / (2 * lq) if lq > 0 \
        else float("inf")


def _settled(timing):
    """The judge's rule for offering a live figure (the reference's lower
    quartile to the configured bound)."""
    return _relative_ci(timing) <= MAX_RELATIVE_CI


def test_same_reference_is_timed_live_then_taken_from_the_cache(daemon_with_cache):
    d = daemon_with_cache
    payload = {"reference_source": REFERENCE % uuid.uuid4().hex, "candidate_source": SLOW_CANDIDATE,
               "backend": "BACKEND_CPU", "correctness_trials": 2, "performance_trials": 200,
               # A pure-Python candidate has no kernel (kernel.none): the
               # static rules are not what this test is about.
               "anticheat_profile": "off"}
    # Only a live figure whose timing settled is stored; on a loaded host a
    # run may end at its time budget first, and then the next one is live
    # again. A few tries, each checked for what it must show.
    stored, seen = None, []
    for _ in range(4):
        live = d.evaluate(payload)
        assert live["status"] == "CORRECT", describe(live)
        assert live["reference_timing"]["source"] == "live", describe(live)
        seen.append(_relative_ci(live["reference_timing"]))
        if _settled(live["reference_timing"]):
            stored = live
            break
    assert stored is not None, "no live reference figure settled in four tries (relative CIs %s)" % seen
    assert d.metric("kbox_reference_cache_entries") == 1

    cached = d.evaluate(payload)
    assert cached["status"] == "CORRECT", describe(cached)
    ref = cached["reference_timing"]
    assert ref["source"] == "cache", describe(cached)
    # The live job's figure, and the speedup computed from it.
    for key in ("lower_quartile_ms", "median_ms", "count"):
        assert ref[key] == stored["reference_timing"][key]
    assert cached["speedup"] == pytest.approx(ref["lower_quartile_ms"] /
                                              cached["candidate_timing"]["lower_quartile_ms"])
    assert cached["speedup"] < 1.0
    assert d.metric("kbox_reference_cache_hits_total") == 1

    fresh = d.evaluate(dict(payload, fresh_reference_timing=True))
    assert fresh["status"] == "CORRECT", describe(fresh)
    assert fresh["reference_timing"]["source"] == "live"
    assert d.metric("kbox_reference_cache_hits_total") == 1
