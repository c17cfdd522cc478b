"""The reference's own rounding error in the tolerance (kbox_harness.rounding):
a sum more exact than the reference's passes, so does one whose rounding
changes from call to call (as atomics'), a precision downgrade does not, and
a random reference earns no allowance."""
import os
import sys

import torch

from test_stages import Job, _check

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import compare, dynamic_checks, rounding  # noqa: E402


def _rules(report):
    return {v["rule_id"]: v["message"] for v in report.get("verdicts", [])}


def _run(tmp_path, candidate):
    return Job(tmp_path, candidate, "ref_row_sum.py").run("STAGE_RUN", measure_performance=False)


def test_a_more_exact_sum_passes_with_the_allowance_reported(tmp_path):
    report = _check(_run(tmp_path, "cand_row_sum_sequential.py"), "OK")
    assert all(t["passed"] for t in report["trials"]), report["trials"]
    # Trial 0 (the drawn inputs, rows that cancel) differs by more than atol.
    assert report["trials"][0]["max_abs_diff"] > 1e-4 + 1e-4 * 1.0
    message = _rules(report)["run.rounding-allowance"]
    assert message.startswith("trial 0: max abs diff") and "32 times" in message
    assert report["phase_ms"]["rounding_allowance"] > 0


def test_rounding_that_differs_from_call_to_call_is_not_nondeterminism(tmp_path):
    # As atomics round: the second look at trial 0 differs from the first by
    # rounding alone, within the reference's own error's allowance.
    report = _check(_run(tmp_path, "cand_row_sum_shuffled.py"), "OK")
    assert all(t["passed"] for t in report["trials"]), report["trials"]
    assert "run.nondeterministic" not in _rules(report), _rules(report)


def test_a_precision_downgrade_gets_no_allowance(tmp_path):
    report = _check(_run(tmp_path, "cand_row_sum_bf16.py"), "INCORRECT")
    assert not report["trials"][-1]["passed"]
    assert "run.rounding-allowance" not in _rules(report)


class _Stage(object):
    """What RoundingAllowance uses of a RunStage, on the CPU."""

    def __init__(self):
        self.findings = dynamic_checks.Findings()
        self.device = torch.device("cpu")

    def call(self, fn, *args):
        return fn(*args)

    def forward(self, model, x):
        with torch.no_grad():
            return model(*x)

    def _compare(self, ref_out, cand_out, atol):
        return compare.compare_outputs(ref_out, cand_out, atol, 1e-4)

    def _summed(self, name, t0):
        pass


class _Noisy(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=1) + 1e-2 * torch.rand(x.shape[0])


def test_a_random_reference_earns_no_allowance():
    x = [torch.randn(16, 512)]
    stage = _Stage()
    allowance = rounding.RoundingAllowance(stage)
    ref = _Noisy()
    assert allowance.allowance(ref, x, ref(*x)) is None
    result = allowance.compare(ref, x, ref(*x), ref(*x), 1e-4, "trial 0")
    assert not result["passed"] and not stage.findings.has("run.rounding-allowance")


def test_tensors_made_inside_forward_are_float64_in_its_float64_run():
    class Made(torch.nn.Module):
        def forward(self, x):
            # matmul refuses mixed dtypes: a float32 ones() beside float64
            # inputs would fail the float64 run.
            return x @ torch.ones(x.shape[1], 1)

    x = [64 * torch.randn(8, 4096)]
    ref = Made()
    error, largest = compare.rounding_error(ref(*x), rounding._to_float64(x)[0].sum(dim=1, keepdim=True))
    assert 0 < error < 1e-3 * largest
    assert rounding.RoundingAllowance(_Stage()).allowance(ref, x, ref(*x)) == rounding.FACTOR * error
    assert torch.get_default_dtype() == torch.float32


def test_where_tf32_may_round_the_error_is_measured_on_ieee_fp32(monkeypatch):
    seen = []

    class Sum(torch.nn.Module):
        def forward(self, x):
            seen.append((x.dtype, torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32))
            return x.sum(dim=1, keepdim=True)

    x = [64 * torch.randn(8, 4096)]
    ref = Sum()
    allowance = rounding.RoundingAllowance(_Stage())
    monkeypatch.setattr(allowance, "tf32_possible", lambda: True)
    tf32_before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    # A reference output far off (as TF32's would be): not what E is measured on.
    assert allowance.allowance(ref, x, ref(*x) + 1.0) is not None
    assert seen[1:] == [(torch.float64,) + tf32_before, (torch.float32, False, False)]
    assert (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32) == tf32_before


def test_half_precision_outputs_get_no_allowance():
    # Large values exact in fp16 (1024), small ones rounded: 32 times the
    # error stays under 0.1 % of the largest value, so only the dtype rule
    # refuses the allowance here.
    class Half(torch.nn.Module):
        def forward(self, x):
            small = (x.float().sum(dim=1) * 1e-3).to(x.dtype)
            return torch.stack([torch.full_like(small, 1024.0), small])

    x = [(64 * torch.randn(8, 4096)).half()]
    ref = Half()
    assert rounding.RoundingAllowance(_Stage()).allowance(ref, x, ref(*x)) is None


def test_outputs_that_cannot_be_paired_give_none():
    assert compare.rounding_error((torch.ones(3),), (torch.ones(3), torch.ones(3))) is None
    assert compare.rounding_error(torch.ones(3), torch.ones(4)) is None
    assert compare.rounding_error(torch.full((3,), float("nan")), torch.ones(3)) is None
