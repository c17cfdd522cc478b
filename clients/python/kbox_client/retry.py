"""When and how long to wait before trying again (pure functions; the
operations in operations.py apply them).

Retried: connection failures, 5xx, 429, and (by resubmitting) results whose
status is INFRA_ERROR. A Retry-After from kboxd is a floor on the wait; other
waits are exponential with full jitter, so that many clients refused at the
same moment do not come back at the same moment. Every retry is bounded twice:
by a number of attempts and by a deadline.
"""
from __future__ import annotations

import dataclasses
import email.utils
import random
import time
from typing import Optional

# Statuses worth another attempt: the daemon (or a proxy before it) was
# overloaded or failed before acting on the request.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the retries of one call."""
    # Most attempts of one HTTP call (the first included).
    max_attempts: int = 8
    # First backoff step, seconds; step n is base * 2**(n-1), at most max_delay_s.
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    # No retry starts later than this many seconds after the call's first
    # attempt (a Retry-After that would end past it ends the call instead).
    deadline_s: float = 300.0
    # Resubmissions of a job that ended INFRA_ERROR, each under a new key
    # derived from the first (see derived_key). 0 disables them.
    max_infra_retries: int = 2
    # How long an endpoint that refused a connection is passed over, seconds.
    endpoint_cooldown_s: float = 5.0

    def __post_init__(self):
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_delay_s < 0 or self.max_delay_s < 0 or self.deadline_s < 0:
            raise ValueError("delays and deadline must not be negative")
        if self.max_infra_retries < 0:
            raise ValueError("max_infra_retries must not be negative")


NO_RETRY = RetryPolicy(max_attempts=1, max_infra_retries=0)


def backoff_delay(policy: RetryPolicy, attempt: int, retry_after: Optional[float] = None,
                  rng: Optional[random.Random] = None) -> float:
    """Seconds to wait after the `attempt`-th failed attempt (1-based).

    Full jitter: uniform in [0, min(max_delay, base * 2**(attempt-1))]. With a
    Retry-After, the wait is that, plus up to 10 % (at most 1 s) of jitter."""
    rng = rng or random
    if retry_after is not None:
        return retry_after + rng.uniform(0.0, min(1.0, 0.1 * retry_after))
    cap = min(policy.max_delay_s, policy.base_delay_s * (2.0 ** max(0, attempt - 1)))
    return rng.uniform(0.0, cap)


def parse_retry_after(value: Optional[str], now: Optional[float] = None) -> Optional[float]:
    """Retry-After in seconds from its two forms (delta-seconds or an HTTP
    date); None when absent or malformed. Never negative."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return float(int(value))
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def derived_key(base_key: str, retry: int) -> str:
    """The idempotency key of the `retry`-th resubmission of a job that ended
    INFRA_ERROR.

    kboxd answers a known key with its stored job, an INFRA_ERROR one
    included, so a resubmission needs another key; deriving it (rather than
    drawing a fresh one) makes a client that restarts and replays `base_key`
    walk the same chain of jobs, so nothing that did finish runs twice."""
    if retry <= 0:
        return base_key
    return "%s#retry%d" % (base_key, retry)
