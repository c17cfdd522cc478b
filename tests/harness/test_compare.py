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


# -- chunked comparison ---------------------------------------------------------------

def _whole_tensor(ref, cand, atol, rtol):
    """The rule on the whole tensor at once, in float64 (what compare did
    before it chunked): (mismatches, non-finite mismatches, max abs, max rel,
    first mismatching flat index or None)."""
    rf, cf = ref.to(torch.float64).reshape(-1), cand.to(torch.float64).reshape(-1)
    finite = torch.isfinite(rf) & torch.isfinite(cf)
    same = (rf == cf) | (torch.isnan(rf) & torch.isnan(cf))
    diff = torch.where(same, torch.zeros_like(rf), (cf - rf).abs())
    bad = ~torch.where(finite, diff <= atol + rtol * rf.abs(), same)
    first = int(bad.nonzero()[0]) if bool(bad.any()) else None
    return (int(bad.sum()), int((bad & ~finite).sum()), float(diff.max()),
            float((diff / (rf.abs() + 1e-12)).max()), first)


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 7)
    monkeypatch.setattr(compare, "CPU_CHUNK_ELEMENTS", 7)


def _check_like_whole(ref, cand):
    n_bad, n_nonfinite, max_abs, max_rel, first = _whole_tensor(ref, cand, ATOL, RTOL)
    r = cmp(ref, cand)
    assert r["mismatch_fraction"] == pytest.approx(n_bad / float(ref.numel()))
    assert ("NaN/Inf placement differs at %d element(s)" % n_nonfinite in r["failure"]) == bool(n_nonfinite)
    for got, want in ((r["max_abs_diff"], max_abs), (r["max_rel_diff"], max_rel)):
        assert got == want or (math.isnan(got) and math.isnan(want))
    if first is None:
        assert r["passed"] and "first_mismatch" not in r
    else:
        assert not r["passed"]
        assert r["first_mismatch"]["index"] == compare._unravel(first, list(ref.shape))
    return r


def test_mismatch_only_in_the_last_chunk_is_found(small_chunks):
    ref = torch.randn(5, 9)  # 45 elements: six full chunks of 7 and one of 3
    cand = ref.clone()
    cand[4, 8] += 1.0
    r = _check_like_whole(ref, cand)
    assert r["first_mismatch"]["index"] == [4, 8]
    assert r["mismatch_fraction"] == pytest.approx(1 / 45.0)
    assert r["max_abs_diff"] == pytest.approx(1.0, rel=1e-6)


def test_first_mismatch_is_the_earliest_across_chunks(small_chunks):
    ref = torch.zeros(3, 10)
    cand = ref.clone()
    cand[2, 9] = 5.0   # last chunk, largest
    cand[1, 0] = -2.0  # third chunk (flat 10), first
    cand[1, 3] = 1.0   # same chunk, later
    r = _check_like_whole(ref, cand)
    assert r["first_mismatch"] == {"output_index": 0, "index": [1, 0], "expected": 0.0, "actual": -2.0}
    assert r["max_abs_diff"] == 5.0


def test_nan_and_inf_across_chunk_boundaries(small_chunks):
    nan, inf = float("nan"), float("inf")
    ref = torch.arange(30, dtype=torch.float32)
    ref[6], ref[7], ref[13] = nan, inf, -inf  # either side of the boundary at 7, and a chunk's end
    cand = ref.clone()
    assert _check_like_whole(ref, cand)["passed"]  # NaN matches NaN, inf matches inf
    cand[20] = nan   # NaN where the reference has a number
    cand[7] = -inf   # the wrong infinity
    cand[27] += 1.0  # an ordinary mismatch in the last chunk
    r = _check_like_whole(ref, cand)
    assert "NaN/Inf placement differs at 2 element(s)" in r["failure"]
    assert r["first_mismatch"]["index"] == [7] and math.isnan(r["max_abs_diff"])


def test_chunked_matches_the_whole_tensor_rule_on_random_outputs(small_chunks):
    gen = torch.Generator().manual_seed(3)
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0])
    for case in range(40):
        ref = torch.randn(4, 11, generator=gen)
        cand = ref + torch.randn(4, 11, generator=gen) * (10 ** -(case % 6))
        for t in (ref, cand):  # a few special values in either tensor
            where = torch.randint(0, 44, (case % 4,), generator=gen)
            t.view(-1)[where] = specials[torch.randint(0, 5, (case % 4,), generator=gen)]
        _check_like_whole(ref, cand)


def test_complex_outputs_chunk_over_their_real_view(small_chunks):
    ref = torch.randn(3, 5, dtype=torch.complex64)
    cand = ref.clone()
    cand[2, 3] += 1j  # imaginary part of element 13: real-view index [2, 3, 1]
    r = cmp(ref, cand)
    assert not r["passed"] and r["first_mismatch"]["index"] == [2, 3, 1]
    assert r["mismatch_fraction"] == pytest.approx(1 / 30.0)
