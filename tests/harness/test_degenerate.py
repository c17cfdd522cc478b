"""dynamic_checks.degenerate: chunked on the output's device, the same
verdicts as torch.allclose against the whole tensor."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import compare, dynamic_checks  # noqa: E402


def _whole_tensor(ref_out, atol, rtol):
    """The rule with torch.allclose on whole float64 tensors (what the check
    did before it was chunked)."""
    worst = None
    for r in compare.flatten(ref_out):
        if not isinstance(r, torch.Tensor) or not r.is_floating_point() or not r.numel():
            continue
        r64 = r.to(torch.float64)
        finite = r64[torch.isfinite(r64)]
        if not finite.numel():
            continue
        trivial = [("zeros", torch.zeros_like(r64))]
        if r64.numel() > 1 and not bool((r64 == r64.mean()).all()):
            trivial.append(("the mean everywhere", torch.full_like(r64, float(r64.mean()))))
        for name, t in trivial:
            if bool(torch.allclose(t, r64, atol=atol, rtol=rtol, equal_nan=True)):
                rms = float(finite.pow(2).mean().sqrt())
                tight = min(atol, 0.01 * rms) if rms > 0 else atol
                if worst is None or tight < worst[1]:
                    worst = (name, tight)
                break
    return worst


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 5)
    monkeypatch.setattr(compare, "CPU_CHUNK_ELEMENTS", 5)


def _same_as_whole(ref_out, atol=1e-4, rtol=1e-4):
    got, want = dynamic_checks.degenerate(ref_out, atol, rtol), _whole_tensor(ref_out, atol, rtol)
    assert (got is None) == (want is None)
    if got is not None:
        assert got[0] == want[0] and got[1] == pytest.approx(want[1], rel=1e-12)
    return got


def test_small_values_pass_as_zeros(small_chunks):
    out = torch.full((4, 6), 3e-5)
    out[3, 5] = 5e-5  # the largest value in the last chunk
    assert _same_as_whole(out)[0] == "zeros"
    out[3, 5] = 2e-4  # too large for zeros at atol 1e-4 (and not the mean either)
    assert _same_as_whole(out) is None


def test_a_flat_output_passes_as_its_mean(small_chunks):
    out = torch.full((3, 7), 1.0 / 21) + torch.linspace(-1e-5, 1e-5, 21).view(3, 7)
    name, tight = _same_as_whole(out, atol=1e-3)
    assert name == "the mean everywhere" and tight == pytest.approx(0.01 * (1.0 / 21), rel=1e-3)


def test_constant_output_is_not_degenerate_by_its_mean(small_chunks):
    # Every element equal: the mean would be the exact answer, not a shortcut.
    assert _same_as_whole(torch.full((11,), 0.5)) is None


def test_non_finite_anywhere_makes_nothing_trivial(small_chunks):
    for special in (float("nan"), float("inf"), -float("inf")):
        out = torch.full((12,), 1e-6)
        out[11] = special  # in the last chunk
        assert _same_as_whole(out) is None
    assert _same_as_whole(torch.full((4,), float("nan"))) is None


def test_the_tightest_output_wins_over_several(small_chunks):
    a = torch.full((9,), 2e-5)
    b = torch.full((6,), 0.25) + torch.linspace(0, 1e-5, 6)
    c = torch.randn(8)  # not degenerate
    name, tight = _same_as_whole((c, [a, b]))
    assert name == "zeros" and tight == pytest.approx(2e-7)


def test_random_outputs_match_the_whole_tensor_rule(small_chunks):
    gen = torch.Generator().manual_seed(11)
    for case in range(60):
        n = 1 + case % 17
        base = torch.rand((), generator=gen).item() * (10 ** -(case % 7))
        spread = 10 ** -(case % 9)
        out = base + spread * torch.randn(n, generator=gen, dtype=torch.float64)
        _same_as_whole(out.to(torch.float32 if case % 2 else torch.float64), atol=1e-3, rtol=1e-3)


def test_integer_and_empty_outputs_are_skipped():
    assert dynamic_checks.degenerate((torch.zeros(3, dtype=torch.int64), torch.zeros(0)), 1e-2, 1e-2) is None


def test_the_judge_computes_it_once_per_input_set(monkeypatch):
    from types import SimpleNamespace
    from kbox_harness import run_stage
    calls = []
    real = dynamic_checks.degenerate
    monkeypatch.setattr(dynamic_checks, "degenerate", lambda *a: calls.append(a) or real(*a))
    stage = run_stage.RunStage.__new__(run_stage.RunStage)
    stage.spec = SimpleNamespace(atol=1e-4, rtol=1e-4)
    stage.findings, stage.tolerances, stage.phase_ms = dynamic_checks.Findings(), {}, {}
    small = torch.full((8,), 3e-5)
    assert stage._tolerance(small, ("trial", 0)) == pytest.approx(3e-7)
    assert stage._tolerance(small * (1 + 1e-3), ("trial", 0)) == pytest.approx(3e-7)  # second look
    for k in range(3):  # spot checks of three timed calls, each its own input set
        assert stage._tolerance(torch.randn(8), ("timing", k)) == 1e-4
    assert len(calls) == 4 and stage.findings.has("run.degenerate-problem")
