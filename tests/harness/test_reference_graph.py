"""reference_graph.Capture: the reference's timed calls replayed from a CUDA
graph, and the eager fallback for forwards a graph cannot reproduce."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness"))
from kbox_harness import reference_graph, timing  # noqa: E402

gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _same(a, b):
    return torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def _pool(device, n=4, shape=(256, 256)):
    g = torch.Generator().manual_seed(7)
    return [[torch.randn(shape, generator=g).to(device)] for _ in range(n)]


def test_no_capture_off_the_gpu():
    pool = _pool(torch.device("cpu"))
    capture = reference_graph.Capture(lambda x: x[0] * 2, pool, _same, torch.device("cpu"))
    assert capture.graph is None and capture.why_not == "not a CUDA device"


def test_inputs_of_different_shapes_are_not_captured():
    # A graph fixes shapes: a pool whose sets differ keeps the eager clock.
    # Checked before any CUDA call, so it runs anywhere.
    pool = [[torch.zeros(4)], [torch.zeros(5)]]
    capture = reference_graph.Capture(lambda x: x[0], pool, _same, torch.device("cuda", 0))
    assert capture.graph is None and "differ in shape" in capture.why_not


@gpu
def test_replay_answers_each_loaded_input_as_eager_does():
    device = torch.device("cuda", 0)
    w = torch.randn(256, 256, device=device)

    def forward(x):
        return torch.relu(x[0] @ w) + 1.0

    pool = _pool(device)
    capture = reference_graph.Capture(forward, pool, _same, device)
    assert capture.graph is not None, capture.why_not
    for x in pool:
        capture.load(x)
        assert _same(capture.replay().clone(), forward(x))


@gpu
def test_a_forward_that_syncs_with_the_host_is_timed_eagerly():
    device = torch.device("cuda", 0)

    def forward(x):
        return x[0] * float(x[0].abs().max().item())  # a host sync: not capturable

    capture = reference_graph.Capture(forward, _pool(device), _same, device)
    assert capture.graph is None and capture.why_not.startswith("capture failed")
    forward(_pool(device)[0])  # the context still works after the failed capture
    torch.cuda.synchronize(device)


@gpu
def test_a_forward_whose_work_depends_on_host_values_is_timed_eagerly():
    # Captured fine, but the host read of the values is frozen into the
    # graph: the check replay on another input disagrees with eager.
    device = torch.device("cuda", 0)
    seen = {"scale": None}

    def forward(x):
        if torch.cuda.is_current_stream_capturing():
            return x[0] * seen["scale"]
        seen["scale"] = float(x[0][0, 0])  # host read outside capture
        return x[0] * seen["scale"]

    capture = reference_graph.Capture(forward, _pool(device), _same, device)
    assert capture.graph is None and "differed from the eager forward" in capture.why_not


@gpu
def test_replayed_reference_times_no_slower_than_eager():
    # The graph runs the same kernels without the gaps between launches.
    device = torch.device("cuda", 0)
    w = torch.randn(1024, 1024, device=device)

    def forward(x):
        y = x[0] @ w
        for _ in range(8):
            y = torch.tanh(y) * 0.5
        return y

    pool = _pool(device, shape=(1024, 1024))
    capture = reference_graph.Capture(forward, pool, _same, device)
    assert capture.graph is not None, capture.why_not
    clock = timing.Clock(device, generous=True)
    x = pool[0]
    forward(x)
    clock.fit(lambda: forward(x))
    eager = sorted(clock.time(lambda: forward(x)).ms for _ in range(50))[25]
    capture.load(x)
    clock.fit(capture.replay)
    replayed = sorted(clock.time(capture.replay).ms for _ in range(50))[25]
    print("eager median %.4f ms, replayed %.4f ms" % (eager, replayed))
    assert replayed <= eager * 1.05
