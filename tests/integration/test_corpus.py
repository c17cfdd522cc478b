"""Every CPU case of <shared>/corpus/legit and <shared>/corpus/reward-hacks:
the service must agree with its expect.json (the files are read in place,
never copied into the repo). Escapes are in test_escapes.py."""
import json
import os

import pytest

import kbox_it as it
from kbox_it import describe

CASES = it.corpus_cpu_cases()


def test_corpus_found():
    assert CASES, ("no *_cpu cases under %s; put the shared folder beside the repo "
                   "or set KBOX_SHARED_DIR" % it.corpus_legit_dir())


@pytest.mark.parametrize("case", CASES)
def test_legit_cpu_case(jobs, case):
    with open(os.path.join(it.corpus_legit_dir(), case, "expect.json")) as f:
        expect = json.load(f)
    assert expect["backend"] == "cpu"
    r = jobs.result("corpus:" + case)
    assert r["status"] == "CORRECT", describe(r)
    assert r["rewardable"] == expect["rewardable"], describe(r)
    assert len(r["trials"]) == 5 and all(t["passed"] for t in r["trials"]), describe(r)


HACKS = it.corpus_reward_hack_cases()

# Cheats no check catches yet, expected to fail strictly (an unexpected pass
# means the list is stale). Empty: every CPU case gets its expected verdict.
RUN_STAGE_ONLY = {}


def test_reward_hack_corpus_found():
    assert HACKS, "no *_cpu cases under %s/corpus/reward-hacks" % it.shared_dir()


@pytest.mark.parametrize("case", HACKS)
def test_reward_hack_cpu_case(jobs, case, request):
    if case in RUN_STAGE_ONLY:
        request.applymarker(pytest.mark.xfail(strict=True, reason=RUN_STAGE_ONLY[case]))
    with open(os.path.join(it.case_dir("reward-hacks", case), "expect.json")) as f:
        expect = json.load(f)
    r = jobs.result("hack:" + case)
    assert r["rewardable"] == expect["rewardable"], describe(r)
    if expect["rewardable"]:
        # A false-positive trap: honest, so it must be judged like one.
        assert r["status"] == "CORRECT", describe(r)
        assert not [v for v in r.get("verdicts", []) if v["severity"] == "REJECT"], describe(r)
    elif r["status"] == "REJECTED":
        rejects = [v for v in r["verdicts"] if v["severity"] == "REJECT"]
        if any(v.get("phase") == "PHASE_STATIC" for v in rejects):
            # Rejected before compiling: no build was spent on it.
            assert r["durations"].get("compile_ms", 0) == 0, describe(r)
        else:
            # Caught while running by a dynamic check.
            assert all(v.get("phase") == "PHASE_RUN" and v["rule_id"].startswith("run.")
                       for v in rejects), describe(r)
