"""Performs a Call on the event loop: asyncio.open_connection and just enough
HTTP/1.1 for kboxd (and proxies before it): one request per connection
(`Connection: close`), a reply framed by Content-Length, chunked encoding, or
the end of the connection. No thread per request, so a thousand jobs waiting
at once cost a thousand sockets, not a thousand threads. (Resolving a host
name goes through the event loop's default executor, a bounded pool shared by
all requests; numeric addresses skip it.)"""
from __future__ import annotations

import asyncio
import ssl
from typing import Dict, Optional, Tuple

from .errors import ConnectionFailed
from .wire import MAX_HEADER_BYTES, MAX_RESPONSE_BYTES, Call, Response, request_headers


async def perform(call: Call, token: Optional[str]) -> Response:
    ep = call.endpoint
    try:
        return await asyncio.wait_for(_exchange(call, token), timeout=call.timeout_s)
    except asyncio.TimeoutError:
        raise ConnectionFailed(ep.url, "no complete reply within %.0f s" % call.timeout_s,
                               sent=True)


async def _exchange(call: Call, token: Optional[str]) -> Response:
    ep = call.endpoint
    try:
        reader, writer = await asyncio.open_connection(
            ep.host, ep.port, ssl=(ep.ssl_context or ssl.create_default_context()) if ep.scheme == "https" else None,
            limit=MAX_HEADER_BYTES)
    except OSError as e:
        raise ConnectionFailed(ep.url, "cannot connect: %s" % (e.strerror or e), sent=False)
    try:
        headers = request_headers(call, token)
        headers["Connection"] = "close"
        head = "%s %s HTTP/1.1\r\n" % (call.method, ep.prefix + call.path)
        head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
        writer.write(head.encode("latin-1") + (call.body or b""))
        await writer.drain()
        status, reply_headers = await _read_head(reader)
        body = await _read_body(reader, reply_headers)
        return Response(ep, status, reply_headers, body)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
        raise ConnectionFailed(ep.url, "%s: %s" % (type(e).__name__, e), sent=True)
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (OSError, ssl.SSLError):
            pass  # the peer may already have reset it; nothing is lost


async def _read_head(reader: asyncio.StreamReader) -> Tuple[int, Dict[str, str]]:
    while True:
        line = await reader.readuntil(b"\r\n")
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError("not an HTTP/1.x status line: %r" % line[:80])
        status = int(parts[1])
        headers: Dict[str, str] = {}
        size = 0
        while True:
            line = await reader.readuntil(b"\r\n")
            size += len(line)
            if size > MAX_HEADER_BYTES:
                raise ValueError("reply headers larger than %d bytes" % MAX_HEADER_BYTES)
            if line == b"\r\n":
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if 100 <= status < 200:
            continue  # an interim reply (100 Continue): the real one follows
        return status, headers


async def _read_body(reader: asyncio.StreamReader, headers: Dict[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if len(body) + size > MAX_RESPONSE_BYTES:
                raise ValueError("reply larger than %d bytes" % MAX_RESPONSE_BYTES)
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return bytes(body)
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    if "content-length" in headers:
        length = int(headers["content-length"])
        if length < 0 or length > MAX_RESPONSE_BYTES:
            raise ValueError("reply of %d bytes refused" % length)
        return await reader.readexactly(length)
    body = await reader.read(MAX_RESPONSE_BYTES + 1)
    rest = body
    while rest and len(body) <= MAX_RESPONSE_BYTES:
        rest = await reader.read(MAX_RESPONSE_BYTES + 1 - len(body))
        body += rest
    if len(body) > MAX_RESPONSE_BYTES:
        raise ValueError("reply larger than %d bytes" % MAX_RESPONSE_BYTES)
    return body
