"""kbox_harness.timing: the pure parts of the clock (CPU here; the GPU paths
are in test_gpu.py)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness"))
from kbox_harness import timing  # noqa: E402


def test_stream_time_stands_when_the_device_wide_figure_is_only_latency():
    assert timing.device_counted(0.100, 0.130, 0.040) == 0.100
    assert timing.device_counted(0.100, 0.140, 0.040) == 0.100


def test_work_past_the_end_event_is_counted():
    # A side stream ran 0.5 ms after the stream's end event.
    assert abs(timing.device_counted(0.100, 0.640, 0.040) - 0.600) < 1e-12


def test_outside_clock_agrees_with_an_honest_candidate():
    inside = [1.00, 1.02, 0.99, 1.01, 1.00]
    outside = [1.31, 1.33, 1.30, 1.32, 1.31]
    overhead = [0.30, 0.31, 0.29, 0.30]
    assert timing.outside_disagrees(inside, outside, overhead) is None


def test_outside_clock_catches_hidden_time():
    inside = [0.01] * 8
    outside = [5.3] * 8
    overhead = [0.3] * 8
    why = timing.outside_disagrees(inside, outside, overhead)
    assert why and "judge" in why


def test_outside_clock_ignores_gaps_below_its_resolution():
    # 0.2 ms hidden of a 0.25 ms call: below what a pipe round trip resolves.
    assert timing.outside_disagrees([0.05] * 8, [0.55] * 8, [0.3] * 8) is None


def test_too_few_calls_prove_nothing():
    assert timing.outside_disagrees([0.01, 0.01], [5.0, 5.0], [0.3]) is None


def test_sync_latency_is_zero_on_the_cpu():
    assert timing.sync_latency(torch.device("cpu"), timing.L2Flush(torch.device("cpu"))) == 0.0


def test_median_confidence_interval_narrows_with_more_calls():
    few = [1.0 + 0.01 * (i % 7) for i in range(10)]
    many = [1.0 + 0.01 * (i % 7) for i in range(1000)]
    assert timing.relative_ci(many) < timing.relative_ci(few)
    lo, hi = timing.median_ci(many)
    assert lo <= sorted(many)[500] <= hi
