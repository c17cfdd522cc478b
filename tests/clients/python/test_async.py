"""The asyncio client: many jobs at once on one thread."""
import asyncio
import threading
import time

from conftest import python_job
from kbox_client import AsyncClient


def test_async_jobs_run_concurrently_without_a_thread_each(kboxd):
    threads_before = threading.active_count()
    timeline = {}
    threads_seen = []

    async def one(client, n):
        job = await client.submit(python_job(seed=str(40 + n)))
        timeline[n] = [time.monotonic(), None]
        threads_seen.append(threading.active_count())
        result = await client.wait(job)
        timeline[n][1] = time.monotonic()
        return result

    async def run():
        client = AsyncClient(kboxd.url)
        singles = await asyncio.gather(*(one(client, n) for n in range(4)))
        batch = await client.evaluate_batch([python_job(seed="50"), python_job(seed="51")])
        return singles, batch

    singles, batch = asyncio.run(run())
    assert [r["status"] for r in singles + batch] == ["CORRECT"] * 6
    assert len({r["job_id"] for r in singles + batch}) == 6
    # Every job was submitted before the first one finished: the waits overlapped.
    assert max(t[0] for t in timeline.values()) < min(t[1] for t in timeline.values())
    assert max(threads_seen) <= threads_before  # no thread per job (nor per request)
