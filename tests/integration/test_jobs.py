"""The asynchronous API: POST /v1/jobs (one or many, with idempotency keys)
and GET /v1/jobs/<id>[?wait=S]. The jobs are small pure-PyTorch candidates run
with the "off" profile (no extension to build), so each takes a few seconds."""
import json
import time

import kbox_it as it


def _item(key="", seed=None):
    request = {"reference_source": it.read(it.case_path("ref_matmul_relu.py")),
               "candidate_source": it.read(it.case_path("cand_matmul_python.py")),
               "backend": "BACKEND_CPU", "anticheat_profile": "off",
               "measure_performance": False}
    if seed is not None:
        request["seed"] = str(seed)
    return {"idempotency_key": key, "request": request}


def _spin_item(key):
    """A job whose forward never returns: it holds its run stage until killed."""
    request = {"reference_source": it.read(it.case_path("ref_clamp_scale.py")),
               "candidate_source": it.read(it.case_path("cand_spins_forever.py")),
               "backend": "BACKEND_CPU", "anticheat_profile": "off",
               "measure_performance": False, "time_limit_s": 100}
    return {"idempotency_key": key, "request": request}


def _submit(daemon, items):
    return it.post_json(daemon.port, {"jobs": items}, path="/v1/jobs")


def _wait(daemon, job_id, seconds=60):
    reply = it.request(daemon.port, "GET", "/v1/jobs/%s?wait=%d" % (job_id, seconds),
                       timeout=seconds + 30)
    assert reply.status == 200, reply
    return reply.json()


def test_batch_runs_and_long_poll_returns_each_result(daemon):
    reply = _submit(daemon, [_item("batch-a", seed=1), _item(seed=2)])
    assert reply.status == 200, reply
    jobs = reply.json()["jobs"]
    assert len(jobs) == 2 and jobs[0]["job_id"] != jobs[1]["job_id"]
    assert jobs[0]["idempotency_key"] == "batch-a"
    assert all(j["state"] in ("QUEUED", "RUNNING") for j in jobs), jobs
    assert not any(j.get("existing") for j in jobs)
    for job in jobs:
        done = _wait(daemon, job["job_id"])
        assert done["state"] == "DONE", done
        result = done["result"]
        assert result["job_id"] == job["job_id"]
        assert result["status"] == "CORRECT", it.describe(result)


def test_a_resubmitted_key_returns_the_first_job_and_runs_nothing(daemon):
    first = _submit(daemon, [_item("retry-me", seed=3)]).json()["jobs"][0]
    done = _wait(daemon, first["job_id"])
    again = _submit(daemon, [_item("retry-me", seed=3)])
    assert again.status == 200, again
    job = again.json()["jobs"][0]
    assert job["job_id"] == first["job_id"] and job["existing"] is True
    assert job["state"] == "DONE" and job["result"] == done["result"]


def test_a_key_reused_for_another_request_is_a_conflict(daemon):
    _submit(daemon, [_item("one-request-only", seed=4)])
    reply = _submit(daemon, [_item("other", seed=9), _item("one-request-only", seed=5)])
    assert reply.status == 409, reply
    assert reply.json()["field"] == "jobs[1].idempotency_key"
    # The batch was refused whole: its first job was not kept either.
    again = _submit(daemon, [_item("other", seed=10)]).json()["jobs"][0]
    assert not again.get("existing")


def test_wait_returns_early_while_the_job_runs(daemon):
    job = _submit(daemon, [_item(seed=6)]).json()["jobs"][0]
    reply = it.request(daemon.port, "GET", "/v1/jobs/%s" % job["job_id"])
    assert reply.status == 200 and reply.json()["state"] in ("QUEUED", "RUNNING", "DONE")
    assert reply.wall_s < 2
    _wait(daemon, job["job_id"])


def test_bad_submissions_name_the_field(daemon):
    reply = _submit(daemon, [])
    assert reply.status == 400 and reply.json()["field"] == "jobs", reply
    bad = _item()
    bad["request"]["backend"] = "BACKEND_UNSPECIFIED"
    reply = _submit(daemon, [_item(), bad])
    assert reply.status == 400, reply
    assert reply.json()["field"].startswith("jobs[1].request."), reply
    reply = it.request(daemon.port, "GET", "/v1/jobs/no-such-job")
    assert reply.status == 404 and reply.json()["field"] == "job_id", reply
    reply = it.request(daemon.port, "GET", "/v1/jobs/x?wait=soon")
    assert reply.status == 400 and reply.json()["field"] == "wait", reply
    reply = it.request(daemon.port, "PUT", "/v1/jobs", b"{}", "application/json")
    assert reply.status == 405, reply
    assert json.loads(reply.body)["field"] == "method"


def test_a_batch_that_can_never_fit_is_a_400_naming_the_limit(daemon):
    info = it.request(daemon.port, "GET", "/v1/info").json()
    limit = info["max_in_flight_jobs"]
    reply = _submit(daemon, [_item(seed=100 + i) for i in range(limit + 1)])
    assert reply.status == 400, reply
    body = reply.json()
    assert body["field"] == "jobs" and "max_in_flight_jobs is %d" % limit in body["message"], body


def test_the_callers_jobs_are_listed_by_state(daemon):
    job = _submit(daemon, [_item("listed", seed=200)]).json()["jobs"][0]
    _wait(daemon, job["job_id"])
    listed = it.request(daemon.port, "GET", "/v1/jobs?state=DONE").json()["jobs"]
    mine = [j for j in listed if j["job_id"] == job["job_id"]]
    assert mine and mine[0]["state"] == "DONE" and mine[0]["idempotency_key"] == "listed", listed
    assert not mine[0].get("result")
    assert all(j["state"] == "DONE" for j in listed)
    everything = it.request(daemon.port, "GET", "/v1/jobs").json()["jobs"]
    assert job["job_id"] in {j["job_id"] for j in everything}
    reply = it.request(daemon.port, "GET", "/v1/jobs?state=SOON")
    assert reply.status == 400 and reply.json()["field"] == "state", reply
    reply = it.request(daemon.port, "DELETE", "/v1/jobs")
    assert reply.status == 405 and reply.headers.get("allow") == "GET, POST", reply


def test_a_cancelled_job_ends_cancelled_and_no_other_is_touched(daemon):
    jobs = _submit(daemon, [_spin_item("cancel-me"),
                            _item("beside-the-cancelled", seed=300)]).json()["jobs"]
    spinning, honest = jobs[0]["job_id"], jobs[1]["job_id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if it.request(daemon.port, "GET", "/v1/jobs/" + spinning).json()["state"] == "RUNNING":
            break
        time.sleep(0.2)
    time.sleep(3)  # Likely in its run stage by now; queued, the cancel ends its wait instead.
    asked = time.monotonic()
    reply = it.request(daemon.port, "DELETE", "/v1/jobs/" + spinning)
    assert reply.status == 202, reply
    assert reply.json()["cancel_requested"] is True and reply.json()["state"] != "DONE"
    done = _wait(daemon, spinning)
    # Stopped, not run to its 100 s time limit.
    assert time.monotonic() - asked < 30, done
    result = done["result"]
    assert result["status"] == "CANCELLED", it.describe(result)
    assert not result.get("rewardable")
    assert "cancelled by its client" in result["message"]
    assert _wait(daemon, honest)["result"]["status"] == "CORRECT"

    # Cancelling again is answered with the result; a finished job is left as it is.
    again = it.request(daemon.port, "DELETE", "/v1/jobs/" + spinning)
    assert again.status == 200 and again.json()["result"]["status"] == "CANCELLED", again
    reply = it.request(daemon.port, "DELETE", "/v1/jobs/" + honest)
    assert reply.status == 409 and "already ended CORRECT" in reply.json()["message"], reply
    assert _wait(daemon, honest)["result"]["status"] == "CORRECT"
    reply = it.request(daemon.port, "DELETE", "/v1/jobs/no-such-job")
    assert reply.status == 404 and reply.json()["field"] == "job_id", reply
    reply = it.request(daemon.port, "PUT", "/v1/jobs/" + honest, b"{}", "application/json")
    assert reply.status == 405 and reply.headers.get("allow") == "GET, DELETE", reply
