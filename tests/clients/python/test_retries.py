"""Retries against a real kboxd: refusals with Retry-After (its in-flight
bound filled with --max-in-flight-jobs 1), the retry deadline, and a real
INFRA_ERROR resubmitted under a derived key without ever running a finished
job again."""
import asyncio
import os
import shutil
import time

import pytest

from conftest import example_sources, python_job
from kbox_client import (AsyncClient, Client, InfraError, RetriesExhausted, RetryPolicy,
                         derived_key)
from kbox_client.feedback import next_turn_message
from kbox_client.kernelbench import eval_kernel_against_ref


def occupy(daemon):
    """Submits a job that holds the daemon's only in-flight place for a few
    seconds; returns it (the caller waits on it)."""
    client = Client(daemon.url)
    return client, client.submit(python_job(seed="21"))


def check_refusal_then_success(events, started, finished):
    refusals = [e for e in events if e.kind == "http"]
    assert refusals, events
    first = refusals[0]
    # kboxd answers 503 on /v1/evaluate and 429 on /v1/jobs today; both are
    # to become 429 (RESOURCE_EXHAUSTED). Its Retry-After is 5 s today.
    assert first.status in (429, 503) and first.retry_after >= 1.0, first
    assert first.delay_s >= first.retry_after
    assert finished - started >= first.retry_after  # it waited for Retry-After


def test_submit_refused_with_retry_after_waits_and_succeeds(kboxd_single):
    holder, held = occupy(kboxd_single)
    events = []
    client = Client(kboxd_single.url, on_retry=events.append)
    started = time.monotonic()
    job = client.submit(python_job(seed="22"))
    check_refusal_then_success(events, started, time.monotonic())
    assert client.wait(job)["status"] == "CORRECT"
    assert holder.wait(held)["status"] == "CORRECT"


def test_evaluate_direct_refused_with_retry_after_waits_and_succeeds(kboxd_single):
    holder, held = occupy(kboxd_single)
    events = []
    client = Client(kboxd_single.url, on_retry=events.append)
    started = time.monotonic()
    result = client.evaluate_direct(python_job(seed="23"))
    check_refusal_then_success(events, started, time.monotonic())
    assert result["status"] == "CORRECT"
    holder.wait(held)


def test_async_submit_refused_with_retry_after_waits_and_succeeds(kboxd_single):
    holder, held = occupy(kboxd_single)
    events = []

    async def run():
        client = AsyncClient(kboxd_single.url, on_retry=events.append)
        started = time.monotonic()
        job = await client.submit(python_job(seed="24"))
        check_refusal_then_success(events, started, time.monotonic())
        return await client.wait(job)

    assert asyncio.run(run())["status"] == "CORRECT"
    holder.wait(held)


def test_a_retry_after_past_the_deadline_ends_the_call(kboxd_single):
    holder, held = occupy(kboxd_single)
    client = Client(kboxd_single.url, retry=RetryPolicy(deadline_s=0.5))
    started = time.monotonic()
    with pytest.raises(RetriesExhausted) as e:
        client.submit(python_job(seed="25"))
    assert time.monotonic() - started < 2.0  # did not sleep into a hopeless wait
    assert e.value.attempts == 1 and e.value.last.status in (429, 503)
    holder.wait(held)


def test_infra_error_is_resubmitted_under_a_derived_key(kboxd_single):
    """A real INFRA_ERROR: kboxd cannot create job directories while its jobs
    folder is a file. The retry callback mends it, so the resubmission under
    key#retry1 runs; replaying the key later walks the same chain."""
    jobs_dir = os.path.join(kboxd_single.work_dir, "jobs")
    events = []

    def break_jobs_dir():
        shutil.rmtree(jobs_dir, ignore_errors=True)
        with open(jobs_dir, "w") as f:
            f.write("not a directory\n")

    def mend(event):
        events.append(event)
        if event.kind == "infra_error" and os.path.isfile(jobs_dir):
            os.remove(jobs_dir)

    break_jobs_dir()
    try:
        # With no resubmissions left, INFRA_ERROR comes back as it is, and the
        # helpers built on results refuse to treat it as the candidate's.
        plain = Client(kboxd_single.url, retry=RetryPolicy(max_infra_retries=0))
        broken = plain.evaluate(python_job(seed="26"))
        assert broken["status"] == "INFRA_ERROR", broken
        with pytest.raises(InfraError):
            next_turn_message(broken)
        with pytest.raises(InfraError):
            eval_kernel_against_ref(*example_sources(), backend="cpu", client=plain)

        client = Client(kboxd_single.url, on_retry=mend,
                        retry=RetryPolicy(base_delay_s=0.2, max_infra_retries=2))
        job = client.submit(python_job(seed="27"), idempotency_key="infra-key")
        result = client.wait(job)
    finally:
        if os.path.isfile(jobs_dir):
            os.remove(jobs_dir)
    assert result["status"] == "CORRECT", result
    infra = [e for e in events if e.kind == "infra_error"]
    assert [e.idempotency_key for e in infra] == ["infra-key#retry1"], events
    assert job.idempotency_key == derived_key("infra-key", 1) and len(job.earlier_job_ids) == 1
    first_id = job.earlier_job_ids[0]

    # A restarted client replaying the key: the INFRA_ERROR job, then its
    # derived key's finished job; nothing new runs.
    replay_events = []
    replay = Client(kboxd_single.url, on_retry=replay_events.append,
                    retry=RetryPolicy(base_delay_s=0.0))
    again = replay.submit(python_job(seed="27"), idempotency_key="infra-key")
    assert again.job_id == first_id and again.existing
    assert replay.wait(again) == result
    assert again.job_id == result["job_id"] and again.existing
    assert again.earlier_job_ids == [first_id]
