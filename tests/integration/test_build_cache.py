"""The build cache end to end (docs/build-cache.md), against a kboxd of its own
with a fresh cache: the same CPU candidate twice (the second skips its compile
stage), then two identical new submissions at once (one compile between them).

Two C++ builds in all (~20 s each on the CPU). Run alone with
  KBOX_BIN_DIR=$PWD/build/bin python3 -m pytest -q -s tests/integration/test_build_cache.py
(-s shows the compile_ms figures it prints).
"""
import concurrent.futures
import os
import re

import pytest

import kbox_it as it
from kbox_it import describe

START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 600
CONFIG = it.SMALL_JOBS_CONFIG + "build_cache_max_bytes: 1073741824\n"


@pytest.fixture(scope="module")
def jobs():
    """Replaces the session's job board (conftest.py) for this module: these
    tests submit their own jobs to their own daemon, so running this file
    alone compiles only what it needs."""
    yield None


class CachedDaemon(object):
    def __init__(self, proc, port, root):
        self.proc = proc
        self.port = port
        self.root = root
        self.work_dir = os.path.join(root, "work")
        self.cache_dir = os.path.join(self.work_dir, "build-cache")

    def evaluate(self, payload):
        reply = it.post_json(self.port, payload, timeout=JOB_TIMEOUT_S)
        assert reply.status == 200, reply
        return reply.json()

    def metric(self, name):
        text = it.request(self.port, "GET", "/metrics").text
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.MULTILINE)
        assert m, "%s not in /metrics:\n%s" % (name, text)
        return float(m.group(1))

    def stderr(self):
        with open(os.path.join(self.root, "kboxd.stderr"), errors="replace") as f:
            return f.read()

    def entries(self):
        return sorted(n for n in os.listdir(self.cache_dir) if re.fullmatch(r"[0-9a-f]{64}", n))


@pytest.fixture(scope="module")
def cached_daemon():
    with it.own_kboxd('kbox-it-cache-', CONFIG, ["--compile-workers", "2"], START_TIMEOUT_S) as (proc, port, root):
        yield CachedDaemon(proc, port, root)


def payload(candidate_suffix=""):
    return {"reference_source": it.read(it.case_path("ref_clamp_scale.py")),
            "candidate_source": it.read(it.case_path("cand_clamp_scale_ok.py")) + candidate_suffix,
            "backend": "BACKEND_CPU", "seed": "424242", "correctness_trials": 3,
            "measure_performance": False}


def same_outcome(a, b):
    """The fields a cache hit must not change."""
    keys = ("status", "rewardable", "message", "verdicts", "settings", "compile_log",
            "runtime_error")
    for key in keys:
        assert a.get(key) == b.get(key), "%s differs:\n%s\n%s" % (key, describe(a), describe(b))
    assert [(t["seed"], t["passed"]) for t in a["trials"]] == \
        [(t["seed"], t["passed"]) for t in b["trials"]]


def test_second_identical_job_skips_compile(cached_daemon):
    d = cached_daemon
    cold = d.evaluate(payload())
    assert cold["status"] == "CORRECT", describe(cold)
    assert not cold.get("build_cache_hit", False), describe(cold)
    assert len(d.entries()) == 1, "the OK build was not stored"

    hit = d.evaluate(payload())
    cold_ms, hit_ms = cold["durations"]["compile_ms"], hit["durations"]["compile_ms"]
    print("\nbuild cache: compile_ms cold %.1f, hit %.1f (%.0fx)" % (cold_ms, hit_ms,
                                                                    cold_ms / max(hit_ms, 1e-3)))
    assert hit.get("build_cache_hit") is True, describe(hit)
    assert hit["job_id"] != cold["job_id"]
    assert 0 < hit_ms < cold_ms / 10, (cold_ms, hit_ms)
    assert hit["durations"]["run_ms"] > 0
    same_outcome(cold, hit)
    # The compile stage's output came with the build: the tails agree too.
    assert hit.get("output_tail", "") == cold.get("output_tail", "")
    assert d.metric("kbox_build_cache_hits_total") == 1
    assert d.metric("kbox_build_cache_misses_total") == 1
    assert d.metric("kbox_build_cache_corrupt_entries_total") == 0
    assert d.metric("kbox_build_cache_bytes") > 0


def test_concurrent_identical_jobs_compile_once(cached_daemon):
    d = cached_daemon
    hits0 = d.metric("kbox_build_cache_hits_total")
    misses0 = d.metric("kbox_build_cache_misses_total")
    # A new key (a comment changes the source), sent twice at once.
    job = payload("\n# build cache: concurrent copy\n")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(d.evaluate, [job, job]))
    flags = sorted(bool(r.get("build_cache_hit", False)) for r in results)
    assert flags == [False, True], [describe(r) for r in results]
    same_outcome(results[0], results[1])
    assert results[0]["status"] == "CORRECT", describe(results[0])
    assert d.metric("kbox_build_cache_misses_total") - misses0 == 1
    assert d.metric("kbox_build_cache_hits_total") - hits0 == 1
    assert len(d.entries()) == 2
    print("\nbuild cache, concurrent pair: compile_ms %s" %
          ", ".join("%.1f%s" % (r["durations"]["compile_ms"],
                                " (hit)" if r.get("build_cache_hit") else "")
                    for r in results))
