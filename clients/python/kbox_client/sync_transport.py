"""Performs a Call with http.client: one connection per exchange (a job's
exchanges are seconds apart; a pooled connection would mostly be stale)."""
from __future__ import annotations

import http.client
import socket
import ssl
from typing import Optional

from .errors import ConnectionFailed
from .wire import MAX_RESPONSE_BYTES, Call, Response, request_headers


def perform(call: Call, token: Optional[str]) -> Response:
    ep = call.endpoint
    if ep.scheme == "https":
        conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=call.timeout_s,
                                           context=ep.ssl_context or ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(ep.host, ep.port, timeout=call.timeout_s)
    sent = False
    try:
        try:
            conn.connect()
        except (OSError, socket.timeout) as e:
            raise ConnectionFailed(ep.url, "cannot connect: %s" % _describe(e), sent=False)
        sent = True
        conn.request(call.method, ep.prefix + call.path, body=call.body,
                     headers=request_headers(call, token))
        reply = conn.getresponse()
        body = reply.read(MAX_RESPONSE_BYTES + 1)
        if len(body) > MAX_RESPONSE_BYTES:
            raise ConnectionFailed(ep.url, "reply larger than %d bytes" % MAX_RESPONSE_BYTES, sent)
        return Response(ep, reply.status, {k.lower(): v for k, v in reply.getheaders()}, body)
    except (OSError, socket.timeout, http.client.HTTPException) as e:
        raise ConnectionFailed(ep.url, _describe(e), sent=sent)
    finally:
        conn.close()


def _describe(e: BaseException) -> str:
    text = str(e) or type(e).__name__
    return "%s: %s" % (type(e).__name__, text) if text != type(e).__name__ else text
