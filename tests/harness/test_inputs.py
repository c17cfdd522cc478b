"""inputs.transform: on the tensors' own device, the same values as the
first version (which drew on the CPU) for a fixed seed."""
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import inputs  # noqa: E402


def _first_version(xs, name, seed):
    """inputs.transform as first written: on the CPU, in float64, one
    generator for all tensors in order."""
    gen = torch.Generator()
    gen.manual_seed(seed)
    out = []
    for x in xs:
        if name == inputs.SCALED:
            factor = math.exp((torch.rand((), generator=gen, dtype=torch.float64).item() * 2 - 1)
                              * math.log(2.0))
            out.append(x * factor)
        elif name == inputs.HEAVY_TAILED:
            noise = torch.randn(x.shape, generator=gen, dtype=torch.float64)
            out.append((x.to(torch.float64) * torch.exp(0.75 * noise)).to(x.dtype))
        else:
            x64 = x.to(torch.float64)
            finite = x64[torch.isfinite(x64)]
            u = torch.rand(x.shape, generator=gen, dtype=torch.float64) * finite.abs().max()
            out.append((torch.sign(x64) * u).to(x.dtype))
    return out


def _bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else
                               torch.int32 if t.element_size() == 4 else torch.int64)


def _sample():
    a = torch.randn(37, 53, generator=torch.Generator().manual_seed(1))
    a[0, :4] = torch.tensor([float("nan"), float("inf"), 0.0, -0.0])
    return [a, torch.randn(3, 4, dtype=torch.float64), torch.randn(6).half()]


@pytest.mark.parametrize("name", [inputs.SCALED, inputs.HEAVY_TAILED, inputs.RANGE_UNIFORM])
def test_cpu_values_are_those_of_the_first_version_bit_for_bit(name):
    xs = _sample()
    got = inputs.transform(xs, name, 12345)
    for g, w in zip(got, _first_version(xs, name, 12345)):
        assert g.dtype == w.dtype and torch.equal(_bits(g), _bits(w))


def test_structure_integers_and_as_drawn_are_kept():
    xs = [torch.randn(4), (torch.arange(5), torch.ones(2, dtype=torch.bool)), 3]
    assert inputs.transform(xs, inputs.AS_DRAWN, 1) is xs
    out = inputs.transform(xs, inputs.HEAVY_TAILED, 1)
    assert isinstance(out[1], tuple) and out[1][0] is xs[1][0] and out[1][1] is xs[1][1] and out[2] == 3
    assert torch.equal(torch.sign(out[0]), torch.sign(xs[0]))


def test_same_seed_same_values_other_seed_other_values():
    xs = _sample()
    for name in (inputs.SCALED, inputs.HEAVY_TAILED, inputs.RANGE_UNIFORM):
        a, b, c = (inputs.transform(xs, name, s) for s in (9, 9, 10))
        assert all(torch.equal(_bits(p), _bits(q)) for p, q in zip(a, b))
        assert not torch.equal(_bits(a[1]), _bits(c[1]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_tensors_are_transformed_on_their_device():
    xs = [t.cuda() for t in _sample()]
    for name in (inputs.SCALED, inputs.HEAVY_TAILED, inputs.RANGE_UNIFORM):
        a, b = inputs.transform(xs, name, 5), inputs.transform(xs, name, 5)
        for p, q, x in zip(a, b, xs):
            assert p.device == x.device and torch.equal(_bits(p), _bits(q))
            assert torch.equal(torch.sign(p[torch.isfinite(p)]), torch.sign(x[torch.isfinite(p)]))
