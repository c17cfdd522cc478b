"""The run stage's dynamic anti-cheat checks (run.* rules), each caught by a
small pure-Python candidate (no extension build), as kboxd runs the stage."""
import os

from test_stages import Job, _check


def _rules(report):
    return {v["rule_id"] for v in report.get("verdicts", [])}


def _run(tmp_path, candidate, reference="ref_relu_scale.py", **overrides):
    return Job(tmp_path, candidate, reference).run("STAGE_RUN", **overrides)


def test_honest_candidate_draws_no_finding(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_honest.py"), "OK")
    assert _rules(report) == set()
    assert report["phase_ms"]["dynamic_checks"] > 0


def test_tensor_subclass_output_breaks_the_contract(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_subclass.py"), "INCORRECT")
    assert "run.output-contract" in _rules(report)
    assert "Deferred" in report["trials"][0]["failure"]


def test_input_mutation_fails_the_trial(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_mutates.py"), "INCORRECT")
    assert "run.input-mutation" in _rules(report)
    assert "changed its inputs" in report["trials"][0]["failure"]


def test_memoising_candidate_is_caught_in_the_timed_calls(tmp_path):
    # Right on every correctness trial; replays its last answer afterwards.
    report = _check(_run(tmp_path, "cand_dyn_memo.py"), "OK")
    assert "run.timed-output-mismatch" in _rules(report)


def test_patched_timer_is_a_finding_and_does_not_change_the_measurement(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_timer.py"), "OK")
    assert "run.harness-tampering" in _rules(report)
    assert "perf_counter" in next(v["message"] for v in report["verdicts"]
                                  if v["rule_id"] == "run.harness-tampering")
    # Measured with the harness's own clock: far above the fake 1 us a call.
    assert report["candidate_timing"]["median_ms"] > 0.002


def test_thread_left_running_is_a_finding(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_thread.py", measure_performance=False), "OK")
    assert "run.thread-started" in _rules(report)


def test_library_compute_shows_in_the_op_trace(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_library.py", measure_performance=False), "OK")
    assert "run.library-compute" in _rules(report)
    assert "relu" in next(v["message"] for v in report["verdicts"] if v["rule_id"] == "run.library-compute")


def test_different_answer_for_the_same_input_is_nondeterminism(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_flaky.py", measure_performance=False), "OK")
    assert "run.nondeterministic" in _rules(report)


def test_uninitialised_output_never_inherits_the_reference_result(tmp_path):
    # The reference's output is poisoned before it is freed.
    report = _check(_run(tmp_path, "cand_dyn_stale.py", measure_performance=False), "INCORRECT")
    assert not any(t["passed"] for t in report["trials"])


def test_degenerate_problem_is_judged_at_a_tightened_tolerance(tmp_path):
    # 1/32768 everywhere passes atol = 1e-4 on a wide softmax; not at 1 % of its RMS.
    report = _check(_run(tmp_path, "cand_dyn_constant.py", "ref_wide_softmax.py",
                         measure_performance=False), "INCORRECT")
    assert "run.degenerate-problem" in _rules(report)


def test_degenerate_problem_does_not_fail_an_honest_candidate(tmp_path):
    job = Job(tmp_path, "cand_dyn_constant.py", "ref_wide_softmax.py")
    with open(os.path.join(job.root, "candidate.py"), "w") as f:
        f.write("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                "    def forward(self, x):\n"
                "        e = (x - x.amax(-1, keepdim=True)).exp()\n"
                "        return e / e.sum(-1, keepdim=True)\n")
    report = _check(job.run("STAGE_RUN", measure_performance=False), "OK")
    assert "run.degenerate-problem" in _rules(report)
