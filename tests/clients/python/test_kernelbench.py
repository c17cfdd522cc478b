"""kbox_client.kernelbench on real jobs."""
import pytest

from conftest import TIMING_OVERRIDES, example_sources, python_job, rejected_job
from kbox_client import kernelbench
from kbox_client.kernelbench import eval_kernel_against_ref, to_kernel_exec_result

KB_STATS = {"mean", "std", "min", "max", "num_trials", "hardware", "device"}


@pytest.fixture
def configured(kboxd, monkeypatch):
    monkeypatch.setenv("KBOX_URL", kboxd.url)
    client = kernelbench.configure()  # from $KBOX_URL
    assert client.endpoints == [kboxd.url]
    yield client
    kernelbench.configure(kboxd.url)


def test_shim_rejected_candidate_is_not_correct(configured):
    job = rejected_job()
    r = eval_kernel_against_ref(job["reference_source"], job["candidate_source"], backend="cpu")
    assert (r.compiled, r.correctness, r.runtime) == (False, False, -1.0)
    assert r.metadata["anticheat_rejected"][0]["rule_id"] == "py.matmul-operator"


def test_shim_incorrect_candidate(configured):
    # Plain PyTorch, which the default (strict) profile rejects: configure
    # the profile that lets it run, so its output is judged.
    job = python_job("cand_matmul_wrong_shape.py")
    kernelbench.configure(configured.endpoints, anticheat_profile="off")
    r = eval_kernel_against_ref(job["reference_source"], job["candidate_source"], backend="cpu",
                                num_correct_trials=2)
    assert (r.compiled, r.correctness) == (True, False)
    assert "shape mismatch" in r.metadata["correctness_issue"]
    assert r.metadata["correctness_trials"] == "(0 / 2)"


def test_shim_on_the_example_uses_the_build_cache(build_jobs, configured):
    build_jobs.result("example")  # its build is in the cache now
    kernelbench.configure(configured.endpoints, anticheat_overrides=TIMING_OVERRIDES)
    ref, cand = example_sources()
    r = eval_kernel_against_ref(ref, cand, seed_num=7, num_correct_trials=2, num_perf_trials=5,
                                measure_performance=True, backend="cpu")
    assert (r.compiled, r.correctness) == (True, True), r.metadata
    assert r.metadata["kbox"]["build_cache_hit"] is True
    assert r.metadata["correctness_trials"] == "(2 / 2)"
    assert r.runtime > 0 and r.ref_runtime > 0
    assert KB_STATS <= set(r.runtime_stats) and KB_STATS <= set(r.ref_runtime_stats)
    assert r.runtime == r.runtime_stats["mean"] and r.runtime_stats["num_trials"] >= 5
    assert r.metadata["hardware"] == "cpu" and r.metadata["device"] == "cpu"
    assert set(r.model_dump()) == {"compiled", "correctness", "metadata", "runtime",
                                   "runtime_stats", "ref_runtime", "ref_runtime_stats"}


def test_shim_compile_error(build_jobs):
    r = to_kernel_exec_result(build_jobs.result("syntax_error"))
    assert (r.compiled, r.correctness) == (False, False)
    assert "error" in r.metadata["compilation_error"]
