"""The kboxd endpoints a client spreads its jobs over.

A job with a caller-chosen idempotency key goes to the first live endpoint in
an order fixed by the key (rendezvous hashing): kboxd remembers keys per
daemon, so a client that restarts and resubmits the key must reach the same
daemon for the key to mean anything. Other jobs go to the live endpoint with
the fewest outstanding jobs (submitted through this client and not yet waited
for), ties broken round robin. An endpoint that refused a connection is passed
over for a cooldown; when every endpoint is cooling down the one that will be
back first is tried.
"""
from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.parse
from typing import Iterable, List, Optional, Sequence, Union

DEFAULT_URL = "http://127.0.0.1:8080"


class Endpoint(object):
    """One kboxd base URL (http or https, optional path prefix)."""

    def __init__(self, url: str):
        parsed = urllib.parse.urlsplit(url.strip())
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError("endpoint %r is not an http:// or https:// URL" % url)
        if parsed.username or parsed.password:
            raise ValueError("endpoint URLs must not carry credentials; pass token= instead")
        self.scheme = parsed.scheme
        self.host = parsed.hostname
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.prefix = parsed.path.rstrip("/")
        host = "[%s]" % self.host if ":" in self.host else self.host
        self.url = "%s://%s:%d%s" % (self.scheme, host, self.port, self.prefix)
        self.host_header = host if self.port == (443 if self.scheme == "https" else 80) \
            else "%s:%d" % (host, self.port)
        self.outstanding = 0
        self.down_until = 0.0
        self.ssl_context = None  # set by the client: its CA file and verify switch

    def __repr__(self):
        return "Endpoint(%s)" % self.url


def urls_from_env() -> List[str]:
    """$KBOX_URL (comma separated), else $KBOX_SERVER (the CLI's), else the default."""
    raw = os.environ.get("KBOX_URL") or os.environ.get("KBOX_SERVER") or DEFAULT_URL
    return [u for u in (p.strip() for p in raw.split(",")) if u]


class EndpointPool(object):
    """Thread-safe choice among endpoints (one lock; nothing blocks under it)."""

    def __init__(self, urls: Union[None, str, Sequence[str]] = None, cooldown_s: float = 5.0,
                 clock=time.monotonic):
        if urls is None:
            urls = urls_from_env()
        elif isinstance(urls, str):
            urls = [u for u in (p.strip() for p in urls.split(",")) if u]
        if not urls:
            raise ValueError("at least one endpoint URL is needed")
        self.endpoints = [Endpoint(u) for u in urls]
        seen = set()
        for e in self.endpoints:
            if e.url in seen:
                raise ValueError("endpoint %s is listed twice" % e.url)
            seen.add(e.url)
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next = 0

    def __repr__(self):
        return "EndpointPool(%s)" % ", ".join(e.url for e in self.endpoints)

    def pick(self, key: Optional[str] = None, exclude: Iterable[Endpoint] = ()) -> Endpoint:
        """The endpoint for the next submission (see the module comment);
        endpoints in `exclude` only when nothing else is left."""
        excluded = set(id(e) for e in exclude)
        with self._lock:
            now = self._clock()
            candidates = [e for e in self.endpoints if id(e) not in excluded] or list(self.endpoints)
            live = [e for e in candidates if e.down_until <= now]
            if not live:
                return min(candidates, key=lambda e: e.down_until)
            if key:
                return min(live, key=lambda e: _rendezvous_rank(key, e.url))
            fewest = min(e.outstanding for e in live)
            tied = [e for e in live if e.outstanding == fewest]
            chosen = tied[self._next % len(tied)]
            self._next += 1
            return chosen

    def has_live_other_than(self, endpoint: Endpoint) -> bool:
        with self._lock:
            now = self._clock()
            return any(e is not endpoint and e.down_until <= now for e in self.endpoints)

    def mark_down(self, endpoint: Endpoint) -> None:
        with self._lock:
            endpoint.down_until = self._clock() + self._cooldown_s

    def mark_up(self, endpoint: Endpoint) -> None:
        with self._lock:
            endpoint.down_until = 0.0

    def job_started(self, endpoint: Endpoint, count: int = 1) -> None:
        with self._lock:
            endpoint.outstanding += count

    def job_finished(self, endpoint: Endpoint) -> None:
        with self._lock:
            endpoint.outstanding = max(0, endpoint.outstanding - 1)


def _rendezvous_rank(key: str, url: str) -> bytes:
    # Smallest digest wins; stable across processes (unlike hash()).
    return hashlib.sha256(("%s\0%s" % (url, key)).encode("utf-8")).digest()
