"""Python client of kboxd (standard library only), blocking and asyncio.

    from kbox_client import Client, make_request
    client = Client("http://kbox:8080")          # or $KBOX_URL, token from $KBOX_TOKEN
    result = client.evaluate(reference_source=ref, candidate_source=cand, backend="cuda")

See clients/python/README.md for retries and idempotency, the KernelBench
entry point (kbox_client.kernelbench) and the multi-turn feedback helper
(kbox_client.feedback).
"""
from .async_client import AsyncClient
from .client import Client
from .errors import (ApiError, ConnectionFailed, InfraError, KboxError, ReferenceFailed,
                     RetriesExhausted, Unauthenticated, WaitTimeout)
from .job import Job, RetryEvent
from .messages import make_check_request, make_request
from .results import Result
from .retry import NO_RETRY, RetryPolicy, backoff_delay, derived_key, parse_retry_after

__version__ = "0.1.0"

__all__ = [
    "ApiError", "AsyncClient", "Client", "ConnectionFailed", "InfraError", "Job", "KboxError",
    "NO_RETRY", "ReferenceFailed", "Result", "RetriesExhausted", "RetryEvent", "RetryPolicy",
    "Unauthenticated", "WaitTimeout", "backoff_delay", "derived_key", "make_check_request",
    "make_request", "parse_retry_after",
]
