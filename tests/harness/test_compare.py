"""compare.py: tolerance, NaN/inf, shapes, dtypes, nested outputs."""
import json
import math
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import compare, protocol  # noqa: E402

ATOL = RTOL = 1e-4


def cmp(ref, cand, atol=ATOL, rtol=RTOL):
    return compare.compare_outputs(ref, cand, atol, rtol)


def test_equal_passes():
    x = torch.randn(4, 5)
    r = cmp(x, x.clone())
    assert r["passed"] and r["max_abs_diff"] == 0 and r["mismatch_fraction"] == 0
    assert "first_mismatch" not in r and r["failure"] == ""


def test_within_tolerance_passes_and_reports_diffs():
    x = torch.ones(3, 3)
    r = cmp(x, x + 5e-5)
    assert r["passed"] and 0 < r["max_abs_diff"] < 1e-4 and r["max_rel_diff"] > 0


def test_first_mismatch_is_row_major_first():
    ref = torch.zeros(2, 3, 4)
    cand = ref.clone()
    cand[1, 2, 0] = 3.0
    cand[1, 0, 3] = -1.0
    r = cmp(ref, cand)
    assert not r["passed"] and r["max_abs_diff"] == 3.0
    assert r["first_mismatch"] == {"output_index": 0, "index": [1, 0, 3], "expected": 0.0,
                                   "actual": -1.0}
    assert r["mismatch_fraction"] == pytest.approx(2 / 24.0)


def test_rtol_scales_with_reference():
    ref = torch.tensor([1000.0])
    assert cmp(ref, ref + 0.05, atol=0, rtol=1e-4)["passed"]
    assert not cmp(ref, ref + 0.2, atol=0, rtol=1e-4)["passed"]


def test_nan_and_inf_semantics():
    nan, inf = float("nan"), float("inf")
    ref = torch.tensor([nan, inf, -inf, 1.0])
    assert cmp(ref, ref.clone())["passed"]  # NaN == NaN, inf == inf
    r = cmp(torch.tensor([1.0, 2.0]), torch.tensor([nan, 2.0]))
    assert not r["passed"] and math.isnan(r["max_abs_diff"]) and "NaN" in r["failure"]
    r = cmp(torch.tensor([inf]), torch.tensor([-inf]))
    assert not r["passed"] and r["max_abs_diff"] == inf
    r = cmp(torch.tensor([inf]), torch.tensor([1e30]))
    assert not r["passed"]
    # Non-finite values still serialise as strict JSON.
    line = protocol.encode_line({"report": {"trials": [r]}})
    json.loads(line, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    assert b'"Infinity"' in line


def test_shape_dtype_and_type_failures():
    r = cmp(torch.zeros(64, 1024), torch.zeros(64, 512))
    assert not r["passed"] and r["failure"] == "shape mismatch: expected [64, 1024], got [64, 512]"
    assert r["max_abs_diff"] == 0
    r = cmp(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
    assert not r["passed"] and r["failure"].startswith("dtype mismatch")
    r = cmp(torch.zeros(2), [0.0, 0.0])
    assert not r["passed"] and "expected 1 outputs, got 2" in r["failure"]
    r = cmp(torch.zeros(2), "nope")
    assert not r["passed"] and "expected a torch.Tensor, got str" in r["failure"]


def test_tuple_outputs_flatten():
    a, b = torch.randn(3), torch.randn(2, 2)
    assert cmp((a, [b]), (a.clone(), (b.clone(),)))["passed"]
    b2 = b.clone()
    b2[1, 1] += 1
    r = cmp((a, b), (a.clone(), b2))
    assert not r["passed"] and r["first_mismatch"]["output_index"] == 1
    assert r["first_mismatch"]["index"] == [1, 1]


def test_half_and_int_outputs():
    h = torch.randn(8).half()
    assert cmp(h, h.clone())["passed"]
    i = torch.arange(5)
    assert not cmp(i, i + 1)["passed"]
    assert cmp(torch.zeros(0, 3), torch.zeros(0, 3))["passed"]
