"""The run stage's dynamic anti-cheat checks through kboxd: a finding graded
`reject` by the request's profile makes the job REJECTED, named as a run-time
verdict, with the honest timing it measured despite the patch."""
import pytest

import kbox_it as it
from kbox_it import describe


def test_timer_patch_is_rejected_at_run_time(jobs):
    r = jobs.result("dynamic_timer_patch")
    assert r["status"] == "REJECTED", describe(r)
    assert r["rewardable"] is False
    run = [v for v in r["verdicts"] if v.get("phase") == "PHASE_RUN"]
    assert any(v["rule_id"] == "run.harness-tampering" and v["severity"] == "REJECT" for v in run), describe(r)
    assert "while running" in r["message"] and "run.harness-tampering" in r["message"], r["message"]
    # It compiled and ran: the static rules that would have stopped it were off.
    assert r["durations"]["compile_ms"] > 0 and r["durations"]["run_ms"] > 0
    assert not [v for v in r["verdicts"] if v.get("phase") == "PHASE_STATIC" and v["severity"] == "REJECT"]


# What stops each of corpus-new's reward hacks once the static rules are off
# (conftest's "dynamic:" jobs): the run stage's own defences, each a class.
DYNAMIC_RULES = {
    "h1_inplace_addmm_cpu": {"run.library-compute"},           # the op trace, in-place folded
    "h1cpp_direct_blas_sgemm_cpu": {"run.native-library-compute"},  # the library's imports: sgemm_
    "h1cpp_dispatcher_redispatch_cpu": {"run.native-dispatcher"},   # ... c10::Dispatcher
    "h10_scaled_input_replay_cpu": {"run.output-kept"},        # its model keeps the outputs
    "h12_prep_step_patch_cpu": {"run.harness-tampering"},       # torch.mul replaced
    "h26_reference_slowdown_cpu": {"run.background-work", "run.native-thread"},  # threads left running
}


def test_every_corpus_new_hack_has_a_run_stage_defence():
    assert set(it.dynamic_corpus_new_cases()) == set(DYNAMIC_RULES)


@pytest.mark.parametrize("case", sorted(DYNAMIC_RULES))
def test_corpus_new_hacks_are_stopped_by_the_run_stage_alone(jobs, case):
    r = jobs.result("dynamic:" + case)
    assert r["status"] == "REJECTED" and r["rewardable"] is False, describe(r)
    run = {v["rule_id"] for v in r["verdicts"] if v.get("phase") == "PHASE_RUN" and v["severity"] == "REJECT"}
    assert run & DYNAMIC_RULES[case], describe(r)
    assert not [v for v in r["verdicts"] if v.get("phase") == "PHASE_STATIC" and v["severity"] == "REJECT"]
