"""Evaluate, submit, batch and wait against a real kboxd, and what is not
retried (a request kboxd refuses on its merits)."""
import pytest

from conftest import EXAMPLE_KEY, case, python_job, rejected_job
from kbox_client import ApiError, Client


def recording_client(url, **kwargs):
    events = []
    return Client(url, on_retry=events.append, **kwargs), events


def test_info_and_health(kboxd):
    client = Client(kboxd.url)
    assert client.health() == {"status": "ok"}
    info = client.info()
    assert "BACKEND_CPU" in info["backends"] and info["max_in_flight_jobs"] >= 1
    ready = client.ready()  # /readyz (issue 7); a kboxd without it is reported not ready
    assert ready["ready"] is True or ready == {"ready": False, "reason": "HTTP 404 from /readyz"}


def test_submit_then_wait(kboxd):
    client, events = recording_client(kboxd.url)
    job = client.submit(python_job(seed="11"))
    assert job.job_id and job.endpoint.url == kboxd.url and job.state in ("QUEUED", "RUNNING")
    assert job.idempotency_key.startswith("py-") and not job.existing  # drawn by the client
    result = client.wait(job)
    assert result["status"] == "CORRECT", result
    assert result["job_id"] == job.job_id and job.state == "DONE"
    assert len(result["trials"]) == 2 and events == []


def test_batch_keeps_the_order_of_its_requests(kboxd):
    client = Client(kboxd.url)
    requests = [python_job(seed="12"), python_job("cand_matmul_wrong_values.py", seed="13"),
                rejected_job()]
    jobs = client.submit_batch(requests, ["batch-ok", None, "batch-rejected"])
    assert [j.idempotency_key for j in jobs][::2] == ["batch-ok", "batch-rejected"]
    assert len({j.job_id for j in jobs}) == 3
    results = [client.wait(j) for j in jobs]
    assert [r["status"] for r in results] == ["CORRECT", "INCORRECT", "REJECTED"], results
    assert client.evaluate_batch([rejected_job()])[0]["status"] == "REJECTED"


def test_a_resubmitted_key_returns_the_same_job(kboxd):
    client = Client(kboxd.url)
    first = client.submit(python_job(seed="14"), idempotency_key="same-key")
    result = client.wait(first)
    again = client.submit(python_job(seed="14"), idempotency_key="same-key")
    assert again.job_id == first.job_id and again.existing and again.done
    assert again.result == result
    # evaluate() under the key is answered by that job too: nothing runs again.
    assert client.evaluate(python_job(seed="14"), idempotency_key="same-key") == result


def test_refusals_on_the_merits_are_not_retried(kboxd):
    client, events = recording_client(kboxd.url)
    client.submit(python_job(seed="15"), idempotency_key="one-request-per-key")
    with pytest.raises(ApiError) as conflict:
        client.submit(python_job(seed="16"), idempotency_key="one-request-per-key")
    assert conflict.value.status == 409 and conflict.value.field == "jobs[0].idempotency_key"
    with pytest.raises(ApiError) as bad:
        client.evaluate(python_job(backend="BACKEND_UNSPECIFIED"))
    assert bad.value.status == 400 and bad.value.field.startswith("jobs[0].request.")
    assert events == []


def test_static_check(kboxd):
    reply = Client(kboxd.url).check(candidate_source=rejected_job()["candidate_source"],
                                    reference_source=rejected_job()["reference_source"],
                                    backend="cpu")
    assert reply["rejected"] is True
    assert any(v["rule_id"] == "py.matmul-operator" for v in reply["verdicts"])


def test_evaluate_the_example_with_its_build(build_jobs):
    result = build_jobs.result("example")
    assert result["status"] == "CORRECT" and result["rewardable"], result
    assert build_jobs.jobs["example"].idempotency_key == EXAMPLE_KEY
    assert result["candidate_timing"]["count"] > 0 and result["speedup"] > 0


def test_cancel_stops_a_job_and_jobs_lists_it(kboxd):
    client = Client(kboxd.url)
    spinning = client.submit(python_job("cand_spins_forever.py", time_limit_s=100,
                                        reference_source=case("ref_clamp_scale.py")))
    assert spinning.job_id in {j["job_id"] for j in client.jobs()}
    client.cancel(spinning)
    assert spinning.cancel_requested or spinning.done
    result = client.wait(spinning, timeout_s=60)
    assert result["status"] == "CANCELLED", result
    assert spinning.infra_retries == 0  # not an INFRA_ERROR: nothing was resubmitted
    done = client.jobs(state="DONE")
    assert spinning.job_id in {j["job_id"] for j in done}
    finished = client.submit(python_job(seed="16"))
    assert client.wait(finished)["status"] == "CORRECT"
    with pytest.raises(ApiError) as late:
        client.cancel(finished)
    assert late.value.status == 409
