"""The run stage with a cached reference figure (judge_cached_timing;
docs/reference-cache.md): a pure-Python candidate (no extension build) on
the CPU backend, as kboxd runs the stage. Whether the interleaved rounds
ran is read from their per-round trace (KBOX_TIMING_TRACE), which only
_measure writes."""
import json
import os

import pytest
import torch

from test_stages import FIXTURES, Job, _check, REPO

import sys
sys.path.insert(0, os.path.join(REPO, "worker", "harness"))
from kbox_harness import judge_cached_timing, modules  # noqa: E402


def _signature(reference="ref_relu_scale.py"):
    """The signature the judge computes for this reference on the CPU in fp32."""
    ref = modules.load_module("kbox_test_reference", os.path.join(FIXTURES, reference))
    return judge_cached_timing.input_signature(ref.get_inputs(), ref.get_init_inputs())


def _entry(lower_quartile_ms, signature=None):
    return {"timing": {"median_ms": 1.5 * lower_quartile_ms, "lower_quartile_ms": lower_quartile_ms,
                       "lower_quartile_ci_low_ms": 0.995 * lower_quartile_ms,
                       "lower_quartile_ci_high_ms": 1.005 * lower_quartile_ms, "count": 77,
                       "method": "perf_counter", "source": "live"},
            "input_signature": _signature() if signature is None else signature}


def _run(tmp_path, **spec):
    trace = os.path.join(str(tmp_path), "rounds.jsonl")
    job = Job(tmp_path / "job", "cand_dyn_honest.py")
    result = job.run("STAGE_RUN", env_overrides={"KBOX_TIMING_TRACE": trace}, performance_trials=10, **spec)
    report = _check(result, "OK")
    rounds = 0
    if os.path.exists(trace):
        with open(trace) as f:
            rounds = sum(1 for _ in f)
    return report, rounds


def test_signature_names_dtypes_shapes_and_init_values():
    x = [torch.zeros(4, 8, dtype=torch.float16), torch.zeros(3, dtype=torch.int64), 7]
    assert judge_cached_timing.input_signature(x, [2.0, (1, "a")]) == \
        "inputs=(float16[4,8],int64[3],7);init=(2.0,(1,'a'))"
    assert _signature() == "inputs=(float32[32,256]);init=(2.0)"
    long_ = judge_cached_timing.input_signature([torch.zeros(1)] * 200, [])
    assert long_.startswith("sha256:") and len(long_) == 7 + 64


def test_settled_is_the_quartile_interval_within_one_percent():
    assert judge_cached_timing.settled(_entry(2.0)["timing"])
    wide = dict(_entry(2.0)["timing"], lower_quartile_ci_high_ms=2.1)
    assert not judge_cached_timing.settled(wide)
    assert not judge_cached_timing.settled({"count": 0, "method": "perf_counter"})
    # A host that set reference_cache_max_relative_ci looser: 2.5 % passes 5 %.
    assert judge_cached_timing.settled(wide, 0.05)
    assert not judge_cached_timing.settled(wide, 0.02)


def test_the_cache_bound_comes_from_the_spec(tmp_path):
    # A bound of 50 % (looser than config allows, to make this certain on
    # any host): the live figure is offered whenever the reference's lower
    # quartile settles to it, the figure stored.
    report, _ = _run(tmp_path, fresh_reference_timing=True, reference_cache_max_relative_ci=0.5)
    assert judge_cached_timing.settled(report["reference_timing"], 0.5), report
    assert report["reference_for_cache"]["input_signature"] == _signature()


def test_slow_candidate_uses_the_cached_figure_and_the_reference_is_not_timed(tmp_path):
    # A cached reference of 1 ns: any candidate is slower, so the cached
    # figure stands and only the candidate is timed.
    report, rounds = _run(tmp_path, cached_reference=_entry(1e-6))
    ref, cand = report["reference_timing"], report["candidate_timing"]
    assert ref["source"] == "cache"
    assert ref["lower_quartile_ms"] == 1e-6 and ref["count"] == 77  # the entry, untouched
    assert cand["count"] >= 10 and cand["lower_quartile_ms"] > 0 and "source" not in cand
    assert cand["outside_median_ms"] > 0  # the judge's clock checked the candidate's
    assert rounds == 0  # no interleaved round ran
    assert "timing_candidate_alone" in report["phase_ms"]
    assert "reference_for_cache" not in report  # nothing measured to offer
    # The spot checks compared the honest candidate's timed outputs with the
    # reference's on the same values, and found them right.
    assert not [v for v in report.get("verdicts", []) if v.get("rule_id") == "run.timed-output-mismatch"]


def test_candidate_claiming_a_speedup_is_timed_live(tmp_path):
    # A cached reference of 1000 s: the candidate would be far faster than
    # live_recheck_speedup (1.0 by default), so both are timed live.
    report, rounds = _run(tmp_path, cached_reference=_entry(1e6))
    ref = report["reference_timing"]
    assert ref["source"] == "live" and ref["lower_quartile_ms"] < 1e3 and ref["count"] >= 10
    assert rounds >= 10
    assert "timing_candidate_alone" in report["phase_ms"]  # tried the cache first


def test_the_recheck_threshold_comes_from_the_spec(tmp_path):
    # With a threshold above any plausible speedup, the 1000 s figure stands.
    report, rounds = _run(tmp_path, cached_reference=_entry(1e6), live_recheck_speedup=1e12)
    assert report["reference_timing"]["source"] == "cache" and rounds == 0


def test_signature_mismatch_falls_back_to_live(tmp_path):
    report, rounds = _run(tmp_path, cached_reference=_entry(1e-6, "inputs=(float32[64,256]);init=(2.0)"))
    assert report["reference_timing"]["source"] == "live" and rounds >= 10
    assert "timing_candidate_alone" not in report["phase_ms"]


def test_fresh_reference_timing_forces_live(tmp_path):
    report, rounds = _run(tmp_path, cached_reference=_entry(1e-6), fresh_reference_timing=True)
    assert report["reference_timing"]["source"] == "live" and rounds >= 10
    assert "timing_candidate_alone" not in report["phase_ms"]
    # A live figure is offered for the cache, with the signature, exactly
    # when both sides' lower quartiles settled.
    both = judge_cached_timing.settled(report["reference_timing"]) and \
        judge_cached_timing.settled(report["candidate_timing"])
    offered = report.get("reference_for_cache")
    assert (offered is not None) == both
    if offered is not None:
        assert offered["input_signature"] == _signature()
        assert offered["timing"] == report["reference_timing"]
