"""What the client does, written once for both the blocking and the asyncio
client: each operation is a generator that yields Call (an HTTP exchange) and
Sleep steps and receives the Response (or has the transport's
ConnectionFailed thrown in). client.py and async_client.py drive the same
generators with http.client/time.sleep and asyncio respectively, so retries,
failover and idempotency behave identically in both.
"""
from __future__ import annotations

import math
import random
import time
import uuid
from typing import Callable, Generator, List, Optional, Sequence, Tuple

from .endpoints import Endpoint, EndpointPool
from .errors import ApiError, ConnectionFailed, RetriesExhausted, WaitTimeout
from .job import Job, RetryEvent
from .retry import RETRYABLE_STATUSES, RetryPolicy, backoff_delay, derived_key, parse_retry_after
from .wire import Call, Response, Sleep, encode_json

# kboxd answers a long poll after at most this many seconds (api_jobs.cc).
MAX_POLL_S = 60
# Slack on a long poll's socket timeout beyond the wait itself.
POLL_SLACK_S = 30
# A submission or a static check is answered at once; allow for a busy daemon.
QUICK_CALL_TIMEOUT_S = 60.0
# Default bound on evaluate()/wait(): a cold CUDA compile plus the longest run.
DEFAULT_JOB_TIMEOUT_S = 1800.0

Op = Generator[object, object, object]


class Context(object):
    """What the operations share: endpoints, the retry policy, the retry
    callback. Holds no token (the transport adds it)."""

    def __init__(self, pool: EndpointPool, policy: RetryPolicy,
                 on_retry: Optional[Callable[[RetryEvent], None]] = None,
                 rng: Optional[random.Random] = None, clock=time.monotonic):
        self.pool = pool
        self.policy = policy
        self.on_retry = on_retry
        self.rng = rng or random.Random()
        self.clock = clock

    def emit(self, event: RetryEvent) -> None:
        if self.on_retry is not None:
            self.on_retry(event)


def new_key() -> str:
    return "py-" + uuid.uuid4().hex


# -- one HTTP exchange, retried ------------------------------------------------------

def exchange(ctx: Context, method: str, path: str, body: Optional[bytes] = None, *,
             key: Optional[str] = None, pinned: Optional[Endpoint] = None,
             timeout_s: float = QUICK_CALL_TIMEOUT_S, idempotency_key: str = "") -> Op:
    """Sends the request until it gets a 2xx (returned) or a status that is
    not worth retrying (ApiError), within the policy's bounds
    (RetriesExhausted). `pinned`: only that endpoint (a job lives on one
    daemon); else `key` picks one (see endpoints.py), and an endpoint that
    refused is passed over on the next attempt when the key does not fix it."""
    policy = ctx.policy
    operation = "%s %s" % (method, path.split("?", 1)[0])
    started = ctx.clock()
    refused: List[Endpoint] = []
    attempt = 0
    while True:
        attempt += 1
        ep = pinned or ctx.pool.pick(key, exclude=() if key else refused)
        try:
            reply = yield Call(ep, method, path, body, timeout_s)
        except ConnectionFailed as e:
            ctx.pool.mark_down(ep)
            failure: Exception = e
            status, retry_after = None, None
            # Another daemon can take it right away; the same one needs time.
            immediate = pinned is None and ctx.pool.has_live_other_than(ep)
        else:
            assert isinstance(reply, Response)
            ctx.pool.mark_up(ep)
            if reply.status < 300:
                return reply
            retry_after = parse_retry_after(reply.headers.get("retry-after"))
            failure = ApiError.from_reply(ep.url, reply.status, reply.body, retry_after)
            if reply.status not in RETRYABLE_STATUSES:
                raise failure
            status, immediate = reply.status, False
        refused.append(ep)
        delay = 0.0 if immediate else backoff_delay(policy, attempt, retry_after, ctx.rng)
        if attempt >= policy.max_attempts or ctx.clock() + delay - started > policy.deadline_s:
            raise RetriesExhausted(operation, attempt, failure)
        ctx.emit(RetryEvent(kind="connection" if status is None else "http", operation=operation,
                            attempt=attempt, endpoint=ep.url, status=status,
                            reason=str(failure), retry_after=retry_after, delay_s=delay,
                            idempotency_key=idempotency_key))
        if delay > 0:
            yield Sleep(delay)


# -- jobs --------------------------------------------------------------------------------

def submit(ctx: Context, items: Sequence[Tuple[Optional[str], dict]],
           route_key: Optional[str] = None) -> Op:
    """POST /v1/jobs with (key, request) pairs, all or none admitted; a None
    key is drawn here, so that a retried submission never runs a job twice.
    `route_key` picks the endpoint (rendezvous hashing) when given, else the
    first caller-chosen key does. Returns the Jobs in order."""
    if not items:
        raise ValueError("submit needs at least one request")
    keyed = [(key or new_key(), bool(key), request) for key, request in items]
    sticky = route_key or next((k for k, caller, _ in keyed if caller), None)
    body = encode_json({"jobs": [{"idempotency_key": k, "request": r} for k, _, r in keyed]})
    reply = yield from exchange(ctx, "POST", "/v1/jobs", body, key=sticky,
                                idempotency_key=keyed[0][0])
    statuses = reply.json().get("jobs", [])
    if len(statuses) != len(keyed):
        raise ApiError(reply.endpoint.url, reply.status, message="kboxd answered %d jobs for %d"
                       % (len(statuses), len(keyed)))
    jobs = []
    for (key, caller, request), status in zip(keyed, statuses):
        job = Job(job_id=status["job_id"], idempotency_key=key, endpoint=reply.endpoint,
                  base_key=key, caller_key=caller, request=request)
        _update(job, status)
        jobs.append(job)
    ctx.pool.job_started(reply.endpoint, len(jobs))
    for job in jobs:
        job.counted = True
    return jobs


def _update(job: Job, status: dict) -> None:
    job.state = status.get("state", job.state)
    job.existing = bool(status.get("existing", job.existing))
    job.cancel_requested = bool(status.get("cancel_requested", job.cancel_requested))
    if job.state == "DONE":
        job.result = status.get("result") or {}


def _resubmit(ctx: Context, job: Job, key: str) -> Op:
    """Submits job.request again under `key` and makes `job` name the new job."""
    body = encode_json({"jobs": [{"idempotency_key": key, "request": job.request}]})
    reply = yield from exchange(ctx, "POST", "/v1/jobs", body,
                                key=job.base_key if job.caller_key else None,
                                idempotency_key=key)
    status = reply.json()["jobs"][0]
    _finish(ctx, job)
    job.earlier_job_ids.append(job.job_id)
    job.job_id, job.idempotency_key, job.endpoint = status["job_id"], key, reply.endpoint
    job.state, job.result, job.existing = "QUEUED", None, False
    _update(job, status)
    ctx.pool.job_started(reply.endpoint)
    job.counted = True


def _finish(ctx: Context, job: Job) -> None:
    if job.counted:
        ctx.pool.job_finished(job.endpoint)
        job.counted = False


def wait(ctx: Context, job: Job, timeout_s: Optional[float] = None) -> Op:
    """Long-polls until the job is done and returns its EvaluateResult.

    INFRA_ERROR: resubmitted under derived_key(base, n), at most
    policy.max_infra_retries times, then returned as it is. A job its daemon
    no longer knows (404: restarted, or the result expired) or cannot reach
    (retries exhausted on connection failures) is resubmitted under the same
    key, on another endpoint when the key does not fix it."""
    timeout_s = DEFAULT_JOB_TIMEOUT_S if timeout_s is None else timeout_s
    policy = ctx.policy
    started = ctx.clock()
    lost = 0
    while True:
        if job.done:
            result = job.result
            if result.get("status") != "INFRA_ERROR" or job.infra_retries >= policy.max_infra_retries:
                _finish(ctx, job)
                return result
            job.infra_retries += 1
            key = derived_key(job.base_key, job.infra_retries)
            delay = backoff_delay(policy, job.infra_retries, None, ctx.rng)
            ctx.emit(RetryEvent(kind="infra_error", operation="wait", attempt=job.infra_retries,
                                endpoint=job.endpoint.url, status=None,
                                reason="job %s ended INFRA_ERROR: %s"
                                % (job.job_id, result.get("message", "")),
                                retry_after=None, delay_s=delay, idempotency_key=key))
            yield Sleep(delay)
            yield from _resubmit(ctx, job, key)
            continue
        left = timeout_s - (ctx.clock() - started)
        if left <= 0:
            raise WaitTimeout(job.job_id, ctx.clock() - started)
        poll = max(1, min(MAX_POLL_S, int(math.ceil(left))))
        try:
            reply = yield from exchange(ctx, "GET", "/v1/jobs/%s?wait=%d" % (job.job_id, poll),
                                        pinned=job.endpoint, timeout_s=poll + POLL_SLACK_S,
                                        idempotency_key=job.idempotency_key)
        except (ApiError, RetriesExhausted) as e:
            gone = isinstance(e, ApiError) and e.status == 404
            unreachable = isinstance(e, RetriesExhausted) and isinstance(e.last, ConnectionFailed)
            if not (gone or unreachable) or lost >= policy.max_attempts:
                raise
            lost += 1
            ctx.emit(RetryEvent(kind="job_lost", operation="wait", attempt=lost,
                                endpoint=job.endpoint.url, status=getattr(e, "status", None),
                                reason=str(e), retry_after=None, delay_s=0.0,
                                idempotency_key=job.idempotency_key))
            yield from _resubmit(ctx, job, job.idempotency_key)
            continue
        _update(job, reply.json())


def evaluate(ctx: Context, request: dict, key: Optional[str], timeout_s: Optional[float]) -> Op:
    jobs = yield from submit(ctx, [(key, request)])
    result = yield from wait(ctx, jobs[0], timeout_s)
    return result


def evaluate_direct(ctx: Context, request: dict, timeout_s: Optional[float]) -> Op:
    """POST /v1/evaluate: one connection held for the whole job; no key, so
    an INFRA_ERROR result is simply sent again (it never counted)."""
    timeout_s = DEFAULT_JOB_TIMEOUT_S if timeout_s is None else timeout_s
    body = encode_json(request)
    retries = 0
    while True:
        reply = yield from exchange(ctx, "POST", "/v1/evaluate", body, timeout_s=timeout_s)
        result = reply.json()
        if result.get("status") != "INFRA_ERROR" or retries >= ctx.policy.max_infra_retries:
            return result
        retries += 1
        delay = backoff_delay(ctx.policy, retries, None, ctx.rng)
        ctx.emit(RetryEvent(kind="infra_error", operation="POST /v1/evaluate", attempt=retries,
                            endpoint=reply.endpoint.url, status=None,
                            reason="job %s ended INFRA_ERROR: %s"
                            % (result.get("job_id", "?"), result.get("message", "")),
                            retry_after=None, delay_s=delay))
        yield Sleep(delay)


def get_json(ctx: Context, path: str, endpoint: Optional[Endpoint] = None) -> Op:
    reply = yield from exchange(ctx, "GET", path, pinned=endpoint)
    return reply.json()


def post_json(ctx: Context, path: str, doc: dict) -> Op:
    reply = yield from exchange(ctx, "POST", path, encode_json(doc))
    return reply.json()


def job_status(ctx: Context, job: Job) -> Op:
    """GET /v1/jobs/<id> without waiting; updates and returns the job."""
    reply = yield from exchange(ctx, "GET", "/v1/jobs/%s" % job.job_id, pinned=job.endpoint)
    _update(job, reply.json())
    return job


def cancel(ctx: Context, job: Job) -> Op:
    """DELETE /v1/jobs/<id>: its stages are stopped and it ends CANCELLED
    (wait for it), unless it reached its own end first. A job already ended
    otherwise is an ApiError (409)."""
    reply = yield from exchange(ctx, "DELETE", "/v1/jobs/%s" % job.job_id, pinned=job.endpoint)
    _update(job, reply.json())
    return job


def list_jobs(ctx: Context, state: Optional[str], endpoint: Optional[Endpoint]) -> Op:
    """GET /v1/jobs[?state=]: the caller's jobs on one daemon (no results)."""
    path = "/v1/jobs" + ("?state=%s" % state if state else "")
    reply = yield from exchange(ctx, "GET", path, pinned=endpoint)
    return reply.json().get("jobs", [])


def probe(ctx: Context, path: str, endpoint: Optional[Endpoint] = None) -> Op:
    """One GET without retries, whatever its status (for /readyz, whose 503
    is an answer, not a failure). Returns (status, parsed JSON or None)."""
    ep = endpoint or ctx.pool.pick()
    reply = yield Call(ep, "GET", path, None, QUICK_CALL_TIMEOUT_S)
    try:
        doc = reply.json()
    except ValueError:
        doc = None
    return reply.status, doc
