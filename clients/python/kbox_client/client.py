"""The blocking client. Thread-safe: one Client may serve many threads."""
from __future__ import annotations

import concurrent.futures
import time
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from . import many
from . import operations as ops
from . import sync_transport
from .client_base import ClientBase
from .errors import ConnectionFailed
from .job import Job
from .wire import Sleep


class Client(ClientBase):
    """kboxd over HTTP, blocking. See ClientBase for the constructor.

    Requests are EvaluateRequest dicts (kbox_client.make_request builds one)
    or that function's keyword arguments; results are EvaluateResult dicts in
    the proto3 JSON mapping (proto/kbox/v1/evaluation.proto)."""

    def _run(self, op):
        value, error = None, None
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                continue
            try:
                value = sync_transport.perform(step, self._token.reveal())
            except ConnectionFailed as e:
                error = e

    # -- evaluation -----------------------------------------------------------------
    def evaluate(self, request: Optional[dict] = None, *, idempotency_key: Optional[str] = None,
                 timeout_s: Optional[float] = None, **fields) -> dict:
        """Submits one job and waits for its result (retried and resubmitted
        as described in wait)."""
        return self._run(ops.evaluate(self._ctx, self._request(request, fields), idempotency_key,
                                      timeout_s))

    def evaluate_direct(self, request: Optional[dict] = None, *,
                        timeout_s: Optional[float] = None, **fields) -> dict:
        """POST /v1/evaluate: the job on one held connection, without a key."""
        return self._run(ops.evaluate_direct(self._ctx, self._request(request, fields), timeout_s))

    def submit(self, request: Optional[dict] = None, *, idempotency_key: Optional[str] = None,
               **fields) -> Job:
        """Submits one job and returns at once."""
        return self._run(ops.submit(self._ctx, [(idempotency_key,
                                                 self._request(request, fields))]))[0]

    def submit_batch(self, requests: Sequence[dict],
                     idempotency_keys: Optional[Sequence[Optional[str]]] = None) -> List[Job]:
        """Submits many jobs in one request: kboxd admits all or none."""
        return self._run(ops.submit(self._ctx, self._items(requests, idempotency_keys)))

    def wait(self, job: Job, timeout_s: Optional[float] = None) -> dict:
        """The job's EvaluateResult once done (WaitTimeout after timeout_s)."""
        return self._run(ops.wait(self._ctx, job, timeout_s))

    def evaluate_batch(self, requests: Sequence[dict],
                       idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                       timeout_s: Optional[float] = None) -> List[dict]:
        """submit_batch, then every result in order (the jobs run
        concurrently in kboxd; waiting on them in turn costs nothing)."""
        jobs = self.submit_batch(requests, idempotency_keys)
        return [self.wait(job, timeout_s) for job in jobs]

    def evaluate_many(self, requests: Sequence[dict], *, timeout_s: Optional[float] = None,
                      return_exceptions: bool = False) -> Iterator[Tuple[int, object]]:
        """Evaluates any number of requests and yields (index, result) as
        each finishes, in no particular order.

        Work is split to fit kboxd's limits, read from /v1/info: at most
        min(max_in_flight_jobs, the token's max_concurrent_jobs) jobs per
        submission and in flight per endpoint. Requests with the same
        reference go to the same endpoint (rendezvous hashing on the
        reference), so its reference timing cache stays warm for a GRPO
        group. A job that fails in the client (retries exhausted, a wait
        timeout) raises, or with return_exceptions is yielded as its
        exception."""
        plan = many.Plan(requests, [self.info(e) for e in self.endpoints])
        with concurrent.futures.ThreadPoolExecutor(max_workers=plan.window) as pool:
            running: Dict[concurrent.futures.Future, int] = {}
            while plan.pending or running:
                while plan.pending and len(running) < plan.window:
                    route, chunk = plan.next_chunk(plan.window - len(running))
                    jobs = self._run(ops.submit(self._ctx, [(None, requests[i]) for i in chunk],
                                                route_key=route))
                    for index, job in zip(chunk, jobs):
                        running[pool.submit(self.wait, job, timeout_s)] = index
                done, _ = concurrent.futures.wait(running, return_when=concurrent.futures.FIRST_COMPLETED)
                for future in done:
                    index = running.pop(future)
                    error = future.exception()
                    if error is not None and not return_exceptions:
                        raise error
                    yield index, (error if error is not None else future.result())

    def status(self, job: Job) -> Job:
        """Refreshes job's state without waiting."""
        return self._run(ops.job_status(self._ctx, job))

    def cancel(self, job: Job) -> Job:
        """Cancels a submitted job (DELETE /v1/jobs/<id>); wait() then returns
        its CANCELLED result, or the one it reached first."""
        return self._run(ops.cancel(self._ctx, job))

    def jobs(self, state: Optional[str] = None, endpoint: Optional[str] = None) -> List[dict]:
        """The caller's jobs on one daemon (GET /v1/jobs), QUEUED, RUNNING or
        DONE only when `state` says so; without results."""
        return self._run(ops.list_jobs(self._ctx, state, self._endpoint(endpoint)))

    def check(self, request: Optional[dict] = None, **fields) -> dict:
        """POST /v1/check: the static anti-cheat checks alone."""
        return self._run(ops.post_json(self._ctx, "/v1/check",
                                       self._check_request(request, fields)))

    # -- the daemon -------------------------------------------------------------------
    def info(self, endpoint: Optional[str] = None) -> dict:
        return self._run(ops.get_json(self._ctx, "/v1/info", self._endpoint(endpoint)))

    def health(self, endpoint: Optional[str] = None) -> dict:
        return self._run(ops.get_json(self._ctx, "/healthz", self._endpoint(endpoint)))

    def ready(self, endpoint: Optional[str] = None) -> Dict[str, object]:
        """GET /readyz once, no retries: {"ready": bool, ...}."""
        status, doc = self._run(ops.probe(self._once, "/readyz", self._endpoint(endpoint)))
        if status not in (200, 503) or not isinstance(doc, dict):
            return {"ready": False, "reason": "HTTP %d from /readyz" % status}
        return doc
