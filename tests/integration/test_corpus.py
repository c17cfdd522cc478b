"""Every CPU case of <shared>/corpus/legit: the service must agree with its
expect.json (the files are read in place, never copied into the repo)."""
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
