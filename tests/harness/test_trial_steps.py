"""The correctness trials' steps (RunStage._trial): verdicts in trial order,
the tolerance computed while the candidate's process works with kboxd told it
is the candidate's window, per-step phases, and inputs the candidate's
process found unchanged not travelling back to the judge."""
import os
import sys

import pytest
import torch

from test_stages import Job, _check

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "harness"))
from kbox_harness import candidate_worker, run_stage  # noqa: E402

# Counts its forwards; the third (trial 2's) raises.
REFERENCE_THIRD_CALL_RAISES = '''
import torch
import torch.nn as nn

calls = [0]


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        calls[0] += 1
        if calls[0] >= 3:
            raise ValueError("reference failed on its third call")  # REF-THIRD
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return [2.0]
'''

# Right on its first forward (trial 0), raises on its second (trial 1).
CANDIDATE_SECOND_CALL_RAISES = '''
import torch
import torch.nn as nn

calls = [0]


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        calls[0] += 1
        if calls[0] >= 2:
            raise ValueError("candidate failed on its second call")
        return torch.relu(x) * self.scale
'''


def _job(tmp_path, candidate_fixture="cand_dyn_honest.py", candidate=None, reference=None):
    job = Job(tmp_path, candidate_fixture)
    for name, text in (("candidate.py", candidate), ("reference.py", reference)):
        if text is not None:
            with open(os.path.join(job.root, name), "w") as f:
                f.write(text)
    return job


def test_trial_one_fails_before_the_reference_fails_in_trial_two(tmp_path):
    # One trial after another: trial 1's candidate failure comes before
    # trial 2's reference failure, so it is the verdict.
    job = _job(tmp_path, candidate=CANDIDATE_SECOND_CALL_RAISES, reference=REFERENCE_THIRD_CALL_RAISES)
    report = _check(job.run("STAGE_RUN"), "CANDIDATE_FAILED")
    assert "second call" in report["error"]["message"]


def test_reference_failing_in_a_later_trial_is_the_references(tmp_path):
    job = _job(tmp_path, reference=REFERENCE_THIRD_CALL_RAISES)
    result = job.run("STAGE_RUN")
    report = _check(result, "REFERENCE_FAILED")
    assert "third call" in report["error"]["message"]
    assert 'File "reference.py", line 16' in report["error"]["traceback"]
    # Trials 0 and 1 were judged (and passed) before trial 2's failure.
    assert [t["passed"] for t in report["trials"]] == [True, True]
    assert result.parties[-2:] == ["REFERENCE", "HARNESS"]


def test_the_candidates_window_is_announced_as_the_candidates(tmp_path):
    # From sending a command to reading its reply kboxd is told the
    # candidate runs (a limit hit then is the candidate's), and no other
    # party is announced in between: each request to the candidate's
    # process is exactly one CANDIDATE window (import, build, 3 trials' call
    # and save, the second look's call and save). Reference code run inside
    # a window would split it in two.
    result = _job(tmp_path).run("STAGE_RUN", measure_performance=False)
    _check(result, "OK")
    assert result.parties.count("CANDIDATE") == 10, result.parties


def test_honest_trials_report_their_steps(tmp_path):
    report = _check(_job(tmp_path).run("STAGE_RUN"), "OK")
    # Every output crossed the arena: 3 trials, the second look, the
    # timing's spot checks.
    assert report["arena_outputs"] >= 5 and "memfd_outputs" not in report, report
    phases = report["phase_ms"]
    assert len(report["trials"]) == 3 and all(t["passed"] for t in report["trials"])
    for step in ("reference", "write", "candidate", "read", "compare"):
        assert phases["trial_" + step] >= 0
    for step in ("load", "forward", "save_write"):
        assert phases["trial_candidate_" + step] >= 0
    assert phases["degenerate_checks"] >= 0 and phases["draws"] > 0


@pytest.mark.parametrize("arena_bytes", [str(1 << 30), None], ids=["arena", "memfd"])
def test_inputs_changed_by_forward_still_travel_back(tmp_path, arena_bytes):
    # cand_dyn_mutates writes into its input: the copy taken before forward
    # differs, so the inputs go back and the judge flags the mutation. No
    # arena: every crossing is a memfd of its own on the crossing socket.
    job = _job(tmp_path, "cand_dyn_mutates.py")
    report = _check(job.run("STAGE_RUN", exchange_arena_bytes=arena_bytes), "INCORRECT")
    assert any(v["rule_id"] == "run.input-mutation" for v in report["verdicts"])
    assert "changed its inputs" in report["trials"][0]["failure"]
    assert ("arena_outputs" in report) == (arena_bytes is not None), report
    assert ("memfd_outputs" in report) == (arena_bytes is None), report


def test_inputs_are_copied_only_up_to_the_limit(monkeypatch):
    x = [torch.ones(16, 16), 3]
    copy = candidate_worker._copy_if_small(x)
    assert copy[1] == 3 and torch.equal(copy[0], x[0]) and copy[0].data_ptr() != x[0].data_ptr()
    monkeypatch.setattr(candidate_worker, "INPUT_COPY_MAX_BYTES", 16 * 16 * 4 - 1)
    assert candidate_worker._copy_if_small(x) is None


class _Stage(object):
    """Enough of RunStage for _candidate_output: its save is answered with
    `saved`, whatever read_output then finds."""

    def __init__(self, data):
        from kbox_harness import dynamic_checks
        self.findings = dynamic_checks.Findings()
        self.device = torch.device("cpu")
        self._data = data

    def ask(self, cmd):
        assert cmd["op"] == "save"
        return {"output": {"arena": 1}}

    def _candidate_steps(self, reply):
        pass

    def read_output(self, saved):
        return self._data


def test_an_output_without_inputs_needs_the_inputs_kept_reply():
    x = [torch.ones(4)]
    for reply, readable in (({"inputs_kept": True}, True), ({}, False), ({"inputs_kept": 1}, False)):
        stage = _Stage({"out": x[0] * 2})
        data, broken = run_stage.RunStage._candidate_output(stage, reply, x, x[0] * 2)
        assert (broken is None) == readable, (reply, broken)
        if readable:
            assert "inputs" not in data and torch.equal(data["out"], x[0] * 2)
