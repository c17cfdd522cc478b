"""A submitted job as the client tracks it, and the record of a retry."""
from __future__ import annotations

import dataclasses
from typing import List, Optional

from .endpoints import Endpoint


@dataclasses.dataclass(eq=False)
class Job(object):
    """A job submitted through POST /v1/jobs. `wait` updates it in place:
    after an INFRA_ERROR resubmission or a failover it names the newest job,
    and `earlier_job_ids` the ones it replaced (which never count)."""
    job_id: str
    idempotency_key: str
    endpoint: Endpoint
    state: str = "QUEUED"
    existing: bool = False       # the key named a job submitted earlier
    cancel_requested: bool = False  # cancel() was accepted before it ended
    result: Optional[dict] = None
    # The key the caller gave (or the client drew); retries derive theirs from it.
    base_key: str = ""
    # True when the caller chose the key: it then decides the endpoint.
    caller_key: bool = False
    infra_retries: int = 0
    earlier_job_ids: List[str] = dataclasses.field(default_factory=list)
    request: dict = dataclasses.field(default_factory=dict, repr=False)
    counted: bool = dataclasses.field(default=False, repr=False)

    @property
    def done(self) -> bool:
        return self.state == "DONE" and self.result is not None

    def __repr__(self):
        return "Job(%s at %s, key %r, %s)" % (self.job_id, self.endpoint.url,
                                             self.idempotency_key, self.state)


@dataclasses.dataclass(frozen=True)
class RetryEvent(object):
    """Passed to the client's on_retry callback before each wait and retry.

    kind: "connection" (no HTTP answer), "http" (a retryable status),
    "infra_error" (a job ended INFRA_ERROR and is resubmitted under
    `idempotency_key`), "job_lost" (its daemon no longer knows the job, or
    cannot be reached: resubmitted under the same key)."""
    kind: str
    operation: str
    attempt: int
    endpoint: str
    status: Optional[int]
    reason: str
    retry_after: Optional[float]
    delay_s: float
    idempotency_key: str = ""
