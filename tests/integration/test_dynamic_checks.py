"""The run stage's dynamic anti-cheat checks through kboxd: a finding graded
`reject` by the request's profile makes the job REJECTED, named as a run-time
verdict, with the honest timing it measured despite the patch."""
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
