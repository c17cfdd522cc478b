"""floor.py: bytes counted once per addressed byte; floor_ms; GPU copy bandwidth."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import floor  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_plain_tensors_sum():
    a, b = torch.ones(10), torch.ones(3, dtype=torch.float64)
    assert floor.bytes_moved(a, b) == 40 + 24
    assert floor.bytes_moved([a, b], []) == 64


def test_views_and_aliases_count_once():
    x = torch.ones(4, 8)
    assert floor.bytes_moved((x, x), x) == 128
    assert floor.bytes_moved([x, x.view(32), x.t(), x[1:], x.view(torch.int32)], None) == 128


def test_expand_counts_memory_not_numel():
    x = torch.ones(8)
    assert floor.bytes_moved(x.expand(1000, 8), None) == 32
    assert floor.bytes_moved(torch.tensor(2.0).expand(5, 5), None) == 4


def test_slices_count_their_range():
    x = torch.ones(100)
    assert floor.bytes_moved(x[:10], None) == 40
    # Disjoint slices add up; overlapping ones merge.
    assert floor.bytes_moved([x[:10], x[50:60]], None) == 80
    assert floor.bytes_moved([x[:10], x[5:15]], None) == 60
    # A strided view addresses the range from its first to its last element.
    assert floor.bytes_moved(x[::10], None) == (90 + 1) * 4


def test_nested_and_non_tensors():
    a, b, c = torch.ones(2), torch.ones(3), torch.ones(4)
    inputs = {"x": [a, (b, 3, "s", None)], "y": 1.5, "z": {"w": (c,)}}
    assert floor.bytes_moved(inputs, ("no", 7, None)) == 36
    assert floor.bytes_moved(None, 5) == 0
    assert floor.bytes_moved([], {}) == 0


def test_empty_and_zero_dim():
    assert floor.bytes_moved(torch.empty(0, 5), torch.tensor(1, dtype=torch.int8)) == 1


def test_self_referencing_output():
    loop = [torch.ones(2)]
    loop.append(loop)
    assert floor.bytes_moved(None, loop) == 8


def test_complex_and_bool():
    z = torch.ones(3, dtype=torch.complex128)
    assert floor.bytes_moved([z, z.real, z.imag], torch.ones(5, dtype=torch.bool)) == 48 + 5


def test_floor_ms():
    bw = 1e12  # 1 TB/s
    assert floor.floor_ms(1.25e9, bw) == pytest.approx(1.0)
    assert floor.floor_ms(0, bw) == 0.0
    assert floor.floor_ms(10 ** 9, None) == 0.0
    assert floor.floor_ms(10 ** 9, 0) == 0.0


def test_cpu_bandwidth_is_none():
    assert floor.measure_copy_bandwidth("cpu") is None
    assert floor.measure_copy_bandwidth(torch.device("cpu")) is None


@needs_cuda
def test_cuda_copy_bandwidth():
    bw = floor.measure_copy_bandwidth("cuda", nbytes=64 << 20, repeats=3)
    # Any GPU kbox runs on copies at 100 GB/s to 20 TB/s (read + write).
    assert 1e11 < bw < 2e13, bw
    assert floor.measure_copy_bandwidth(torch.device("cuda", 0)) > 1e11


@needs_cuda
def test_cuda_bytes_moved():
    x = torch.ones(1024, device="cuda")
    assert floor.bytes_moved([x, x[:512]], x.cpu()) == 8192
