"""Several endpoints: a submission fails over when its endpoint is down, and
a job whose daemon went away is resubmitted to another."""
from conftest import python_job, rejected_job
from kbox_client import Client, RetryPolicy
import kbox_it as it


def test_submission_fails_over_to_the_second_endpoint(kboxd):
    dead_url = "http://127.0.0.1:%d" % it.closed_port()
    events = []
    client = Client([dead_url, kboxd.url], on_retry=events.append)
    dead = client.pool.endpoints[0]
    # A key that ranks the dead endpoint first, so the first attempt goes there.
    key = next(k for k in ("failover-%d" % i for i in range(1000)) if client.pool.pick(k) is dead)
    result = client.evaluate(rejected_job(), idempotency_key=key)
    assert result["status"] == "REJECTED", result
    assert [(e.kind, e.endpoint) for e in events] == [("connection", dead.url)], events
    assert events[0].delay_s == 0.0  # another endpoint was live: no backoff
    # The dead endpoint now cools down: the next submissions skip it.
    events.clear()
    jobs = [client.submit(rejected_job()) for _ in range(3)]
    assert {j.endpoint.url for j in jobs} == {kboxd.url} and events == []
    for j in jobs:
        client.wait(j)


def test_a_job_whose_daemon_stopped_is_resubmitted_elsewhere(kboxd_doomed, kboxd):
    events = []
    client = Client([kboxd_doomed.url, kboxd.url], on_retry=events.append,
                    retry=RetryPolicy(max_attempts=3, base_delay_s=0.1, endpoint_cooldown_s=60))
    doomed = client.pool.endpoints[0]
    key = next(k for k in ("doomed-%d" % i for i in range(1000)) if client.pool.pick(k) is doomed)
    job = client.submit(python_job(seed="31"), idempotency_key=key)
    assert job.endpoint is doomed
    doomed_id = job.job_id
    assert kboxd_doomed.stop() == 0  # drains the job, then exits
    result = client.wait(job)
    assert result["status"] == "CORRECT", result
    assert job.endpoint.url == kboxd.url and job.earlier_job_ids == [doomed_id]
    kinds = [e.kind for e in events]
    assert "connection" in kinds and kinds[-1] == "job_lost", events
