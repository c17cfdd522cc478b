"""The asyncio client: the operations of client.py on the event loop.

Transport: asyncio.open_connection with a small HTTP/1.1 implementation
(async_transport.py), not loop.run_in_executor over the blocking client. A job
spends most of its life in 60 s long polls; over an executor each waiting job
would hold a thread, so a trainer waiting on thousands of jobs would need
thousands of threads (or queue behind a small pool). Here a waiting job is a
suspended coroutine and a socket."""
from __future__ import annotations

import asyncio
from typing import Dict, List, Optional, Sequence

from . import async_transport
from . import operations as ops
from .client_base import ClientBase
from .errors import ConnectionFailed
from .job import Job
from .wire import Sleep


class AsyncClient(ClientBase):
    """Same methods as Client, as coroutines. Safe to share among the tasks
    of one event loop."""

    async def _run(self, op):
        value, error = None, None
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                value = await async_transport.perform(step, self._token.reveal())
            except ConnectionFailed as e:
                error = e

    async def evaluate(self, request: Optional[dict] = None, *,
                       idempotency_key: Optional[str] = None,
                       timeout_s: Optional[float] = None, **fields) -> dict:
        return await self._run(ops.evaluate(self._ctx, self._request(request, fields),
                                            idempotency_key, timeout_s))

    async def evaluate_direct(self, request: Optional[dict] = None, *,
                              timeout_s: Optional[float] = None, **fields) -> dict:
        return await self._run(ops.evaluate_direct(self._ctx, self._request(request, fields),
                                                   timeout_s))

    async def submit(self, request: Optional[dict] = None, *,
                     idempotency_key: Optional[str] = None, **fields) -> Job:
        jobs = await self._run(ops.submit(self._ctx, [(idempotency_key,
                                                       self._request(request, fields))]))
        return jobs[0]

    async def submit_batch(self, requests: Sequence[dict],
                           idempotency_keys: Optional[Sequence[Optional[str]]] = None
                           ) -> List[Job]:
        return await self._run(ops.submit(self._ctx, self._items(requests, idempotency_keys)))

    async def wait(self, job: Job, timeout_s: Optional[float] = None) -> dict:
        return await self._run(ops.wait(self._ctx, job, timeout_s))

    async def evaluate_batch(self, requests: Sequence[dict],
                             idempotency_keys: Optional[Sequence[Optional[str]]] = None,
                             timeout_s: Optional[float] = None) -> List[dict]:
        """One submission, then all the waits at once."""
        jobs = await self.submit_batch(requests, idempotency_keys)
        return list(await asyncio.gather(*(self.wait(job, timeout_s) for job in jobs)))

    async def status(self, job: Job) -> Job:
        return await self._run(ops.job_status(self._ctx, job))

    async def cancel(self, job: Job) -> Job:
        return await self._run(ops.cancel(self._ctx, job))

    async def jobs(self, state: Optional[str] = None, endpoint: Optional[str] = None) -> List[dict]:
        return await self._run(ops.list_jobs(self._ctx, state, self._endpoint(endpoint)))

    async def check(self, request: Optional[dict] = None, **fields) -> dict:
        return await self._run(ops.post_json(self._ctx, "/v1/check",
                                             self._check_request(request, fields)))

    async def info(self, endpoint: Optional[str] = None) -> dict:
        return await self._run(ops.get_json(self._ctx, "/v1/info", self._endpoint(endpoint)))

    async def health(self, endpoint: Optional[str] = None) -> dict:
        return await self._run(ops.get_json(self._ctx, "/healthz", self._endpoint(endpoint)))

    async def ready(self, endpoint: Optional[str] = None) -> Dict[str, object]:
        status, doc = await self._run(ops.probe(self._once, "/readyz", self._endpoint(endpoint)))
        if status not in (200, 503) or not isinstance(doc, dict):
            return {"ready": False, "reason": "HTTP %d from /readyz" % status}
        return doc
