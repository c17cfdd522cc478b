"""What the blocking and the asyncio client share: endpoints, token, retry
policy, and turning arguments into request bodies."""
from __future__ import annotations

import os
import ssl
from typing import Callable, List, Optional, Sequence, Tuple, Union

from .endpoints import Endpoint, EndpointPool
from .job import RetryEvent
from .messages import make_check_request, make_request
from .operations import Context
from .retry import RetryPolicy


class _Secret(object):
    """Holds the bearer token so that no repr, vars() dump or traceback
    shows it."""
    __slots__ = ("_value",)

    def __init__(self, value: Optional[str]):
        self._value = value or None

    def reveal(self) -> Optional[str]:
        return self._value

    def __repr__(self):
        return "<token set>" if self._value else "<no token>"

    __str__ = __repr__


class ClientBase(object):
    """endpoints: a URL, a comma-separated list or a sequence of URLs; None
    reads $KBOX_URL (then $KBOX_SERVER, then http://127.0.0.1:8080).
    token: the bearer secret; None reads $KBOX_TOKEN; "" sends none.
    ca_file: PEM CA bundle for https endpoints (None: $KBOX_CA_FILE, else the
    system's); verify=False skips certificate checks.
    retry: bounds of retries (RetryPolicy()); on_retry: called with a
    RetryEvent before every wait or resubmission (for logs and metrics; the
    event never holds the token or request bodies)."""

    def __init__(self, endpoints: Union[None, str, Sequence[str]] = None, *,
                 token: Optional[str] = None, retry: Optional[RetryPolicy] = None,
                 on_retry: Optional[Callable[[RetryEvent], None]] = None,
                 ca_file: Optional[str] = None, verify: bool = True):
        self.retry_policy = retry or RetryPolicy()
        self.pool = EndpointPool(endpoints, cooldown_s=self.retry_policy.endpoint_cooldown_s)
        # https endpoints: the system's CAs, or ca_file (None reads $KBOX_CA_FILE);
        # verify=False accepts any certificate (a test rig, never production).
        context = ssl.create_default_context(cafile=ca_file or os.environ.get("KBOX_CA_FILE") or None)
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        for endpoint in self.pool.endpoints:
            endpoint.ssl_context = context
        self._token = _Secret(os.environ.get("KBOX_TOKEN") if token is None else token)
        self._ctx = Context(self.pool, self.retry_policy, on_retry)
        self._once = Context(self.pool, RetryPolicy(max_attempts=1, max_infra_retries=0))

    def __repr__(self):
        return "%s(endpoints=[%s], token=%r)" % (type(self).__name__, ", ".join(
            e.url for e in self.pool.endpoints), self._token)

    @property
    def endpoints(self) -> List[str]:
        return [e.url for e in self.pool.endpoints]

    def _endpoint(self, url: Optional[str]) -> Optional[Endpoint]:
        if url is None:
            return None
        wanted = Endpoint(url).url
        for e in self.pool.endpoints:
            if e.url == wanted:
                return e
        raise ValueError("%s is not one of this client's endpoints" % url)

    @staticmethod
    def _request(request: Optional[dict], fields: dict) -> dict:
        if request is None:
            return make_request(**fields)
        if fields:
            raise TypeError("pass either a request dict or its fields, not both")
        if not isinstance(request, dict):
            raise TypeError("request must be a dict (see kbox_client.make_request)")
        return request

    @staticmethod
    def _check_request(request: Optional[dict], fields: dict) -> dict:
        if request is None:
            return make_check_request(**fields)
        if fields:
            raise TypeError("pass either a request dict or its fields, not both")
        return request

    @staticmethod
    def _items(requests: Sequence[dict], keys: Optional[Sequence[Optional[str]]]
               ) -> List[Tuple[Optional[str], dict]]:
        requests = list(requests)
        if keys is None:
            keys = [None] * len(requests)
        keys = list(keys)
        if len(keys) != len(requests):
            raise ValueError("%d idempotency keys for %d requests" % (len(keys), len(requests)))
        return list(zip(keys, requests))
