"""Abusive HTTP clients against a real kboxd (docs/reliability.md, "Hostile
input"): slow clients, oversized headers and bodies, deeply nested JSON,
invalid UTF-8, unknown enum values, wrong types (strings for bools and
numbers included), duplicate keys, and
thousands of idle connections. Each gets a clear 4xx with a JSON
ErrorResponse or a closed connection within a bounded time, and GET /healthz
keeps answering within HEALTHZ_P99_TARGET_S while the slow and idle clients
are at it (its latencies are printed; run with -s to see them).

Nothing here reaches a worker: every request is refused while it is read or
decoded, so the module needs no torch and runs in well under 90 s.
"""
import json
import os
import resource
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import http.client

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import kbox_it as it  # noqa: E402

START_TIMEOUT_S = 120
HEADER_TIMEOUT_S = 2      # the daemon's header_timeout_s
READ_TIMEOUT_S = 4        # its read_timeout_s
MAX_BODY_BYTES = 65536    # its max_body_bytes
# How late past its deadline the daemon may close a slow connection: its
# timers are exact, this is the slack for a loaded 2-core CI machine.
CLOSE_SLACK_S = 2.0
# A refusal of a malformed request comes back within this.
REFUSAL_WITHIN_S = 5.0
HEALTHZ_P99_TARGET_S = 0.100
IDLE_CONNECTIONS = 2000
MAX_CONNECTIONS = IDLE_CONNECTIONS + 500

CONFIG = """\
header_timeout_s: %d
read_timeout_s: %d
max_body_bytes: %d
max_source_bytes: 32768
max_connections: %d
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
""" % (HEADER_TIMEOUT_S, READ_TIMEOUT_S, MAX_BODY_BYTES, MAX_CONNECTIONS)

VALID = {"reference_source": "x = 1\n", "candidate_source": "y = 2\n", "backend": "BACKEND_CPU"}
POST_PATHS = ("/v1/evaluate", "/v1/check")


def raise_fd_limit(wanted):
    """Raises this process's soft open-file limit (kboxd inherits it) towards `wanted`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


class Daemon(object):
    def __init__(self, root, name, config):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        config_path = os.path.join(self.dir, "kbox.textproto")
        with open(config_path, "w") as f:
            f.write(it.sectioned(config))
        self.stderr_path = os.path.join(self.dir, "kboxd.stderr")
        args = [os.path.join(it.bin_dir(), "kboxd"), "--listen", "127.0.0.1:0",
                "--work-dir", os.path.join(self.dir, "work"), "--config", config_path] + it.NO_PCH
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=err)
        line, seen = it.read_ready_line(self.proc, START_TIMEOUT_S)
        if line is None:
            self.stop()
            pytest.fail("kboxd did not start: %s\n%s" % ("\n".join(seen), self.stderr()))
        self.port = int(line.rsplit(":", 1)[1])

    def stderr(self):
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def root():
    path = tempfile.mkdtemp(prefix="kbox-hostile-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def daemon(root):
    limit = raise_fd_limit(IDLE_CONNECTIONS * 2 + 1024)
    if limit != resource.RLIM_INFINITY and limit < IDLE_CONNECTIONS + 256:
        pytest.fail("open-file limit %d is too low for %d connections and cannot be raised"
                    % (limit, IDLE_CONNECTIONS))
    d = Daemon(root, "kboxd", CONFIG)
    yield d
    assert d.alive(), d.stderr()
    d.stop()


# -- /healthz latency, measured while the abuse goes on ----------------------------------------

class HealthProbe(object):
    """GET /healthz on a fresh connection, back to back, until stopped; keeps each latency
    (a failure counts as infinitely slow)."""

    def __init__(self, port):
        self.port = port
        self.latencies = []
        self.failures = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                conn.request("GET", "/healthz")
                res = conn.getresponse()
                body = res.read()
                conn.close()
                ok = res.status == 200 and json.loads(body) == {"status": "ok"}
            except (OSError, http.client.HTTPException, ValueError) as e:
                ok, body = False, repr(e).encode()
            elapsed = time.monotonic() - t0
            if ok:
                self.latencies.append(elapsed)
            else:
                self.failures.append(body[:200])
            self._stop.wait(0.01)  # a probe every ~10 ms, not a busy loop

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def report(self, what):
        lat = sorted(self.latencies)
        assert lat, "no /healthz answer at all during %s (%s)" % (what, self.failures[:3])
        p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1000.0  # noqa: E731
        print("\nhealthz during %s: %d probes, p50 %.1f ms, p99 %.1f ms, max %.1f ms, %d failed"
              % (what, len(lat), p(0.50), p(0.99), lat[-1] * 1000.0, len(self.failures)))
        assert not self.failures, self.failures[:3]
        assert p(0.99) <= HEALTHZ_P99_TARGET_S * 1000.0, "p99 %.1f ms" % p(0.99)


# -- raw sockets ----------------------------------------------------------------------------

def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setblocking(False)
    return s


def closed_by_peer(s):
    """True once the server has closed `s` (EOF or reset); drains what it sent."""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except BlockingIOError:
        return False
    except OSError:
        return True


def trickle_until_closed(port, count, head, byte_every_s, give_up_s):
    """Opens `count` connections, sends `head` on each, then one more byte ('X-a: b' header
    bytes) on each every `byte_every_s` until the server closes it. Returns each
    connection's lifetime in seconds (None: still open after `give_up_s`)."""
    socks = [connect(port) for _ in range(count)]
    opened = time.monotonic()
    for s in socks:
        s.sendall(head)
    lifetimes = [None] * count
    trickle = b"X-Slow: " + b"a" * 100000
    sent = 0
    while time.monotonic() - opened < give_up_s and None in lifetimes:
        open_socks = [s for i, s in enumerate(socks) if lifetimes[i] is None]
        readable, _, _ = select.select(open_socks, [], [], byte_every_s)
        now = time.monotonic()
        for i, s in enumerate(socks):
            if lifetimes[i] is None and s in readable and closed_by_peer(s):
                lifetimes[i] = now - opened
        for i, s in enumerate(socks):
            if lifetimes[i] is None:
                try:
                    s.send(trickle[sent % len(trickle):sent % len(trickle) + 1])
                except OSError:
                    lifetimes[i] = now - opened
        sent += 1
    for s in socks:
        s.close()
    return lifetimes


def exchange(port, data, timeout=REFUSAL_WITHIN_S + 5):
    """Sends `data` on a fresh connection and reads until the server closes it or stops
    sending; returns (bytes received, seconds taken)."""
    t0 = time.monotonic()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server answered and closed before all of it was sent
        received = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                received += chunk
                if b"\r\n\r\n" in received:
                    head, body = received.split(b"\r\n\r\n", 1)
                    length = [int(l.split(b":")[1]) for l in head.split(b"\r\n")
                              if l.lower().startswith(b"content-length:")]
                    if length and len(body) >= length[0]:
                        break
        except OSError:
            pass
        return received, time.monotonic() - t0
    finally:
        s.close()


def assert_json_refusal(raw, code, field=None):
    assert it.status_of(raw) == code, raw[:500]
    head = raw.split(b"\r\n\r\n", 1)[0].lower()
    assert b"content-type: application/json" in head, head
    body = it.json_of(raw)  # also: the body is valid UTF-8 and valid JSON
    assert body["code"] == code, body
    assert body["message"], body
    if field is not None:
        assert body["field"] == field, body
    return body


def post(port, path, body, content_type=b"application/json"):
    if isinstance(body, str):
        body = body.encode("utf-8")
    head = (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: kbox\r\nContent-Type: " + content_type
            + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n")
    raw, took = exchange(port, head + body)
    assert took < REFUSAL_WITHIN_S, "took %.1f s" % took
    return raw


def with_fields(**fields):
    payload = dict(VALID)
    payload.update(fields)
    return json.dumps(payload)


# -- slow clients ---------------------------------------------------------------------------

def test_slowloris_headers_are_cut_at_the_header_timeout(daemon):
    with HealthProbe(daemon.port) as probe:
        lifetimes = trickle_until_closed(
            daemon.port, 50, b"GET /healthz HTTP/1.1\r\nHost: kbox\r\n", byte_every_s=0.2,
            give_up_s=HEADER_TIMEOUT_S + CLOSE_SLACK_S + 3)
    assert None not in lifetimes, "connections still open: %d" % lifetimes.count(None)
    assert max(lifetimes) <= HEADER_TIMEOUT_S + CLOSE_SLACK_S, max(lifetimes)
    assert min(lifetimes) >= HEADER_TIMEOUT_S - 0.5, min(lifetimes)
    print("\nslowloris headers: 50 connections closed after %.2f-%.2f s (header_timeout_s %d)"
          % (min(lifetimes), max(lifetimes), HEADER_TIMEOUT_S))
    probe.report("slowloris headers (50 connections)")


def test_slow_body_is_cut_at_the_read_timeout(daemon):
    head = (b"POST /v1/check HTTP/1.1\r\nHost: kbox\r\nContent-Type: application/json\r\n"
            b"Content-Length: 60000\r\n\r\n")
    with HealthProbe(daemon.port) as probe:
        lifetimes = trickle_until_closed(daemon.port, 50, head, byte_every_s=0.2,
                                         give_up_s=READ_TIMEOUT_S + CLOSE_SLACK_S + 3)
    assert None not in lifetimes, "connections still open: %d" % lifetimes.count(None)
    assert max(lifetimes) <= READ_TIMEOUT_S + CLOSE_SLACK_S, max(lifetimes)
    # The headers came at once, so the header deadline does not cut a slow body.
    assert min(lifetimes) >= READ_TIMEOUT_S - 0.5, min(lifetimes)
    print("\nslow body: 50 connections closed after %.2f-%.2f s (read_timeout_s %d)"
          % (min(lifetimes), max(lifetimes), READ_TIMEOUT_S))
    probe.report("slow bodies (50 connections)")


def test_idle_connection_flood(daemon):
    """IDLE_CONNECTIONS sockets opened and left idle: kboxd keeps serving, then closes
    them at the header timeout."""
    with HealthProbe(daemon.port) as probe:
        t0 = time.monotonic()
        socks = [connect(daemon.port) for _ in range(IDLE_CONNECTIONS)]
        opened_s = time.monotonic() - t0
        # Every one of them was accepted (none refused): each is open now.
        assert not any(closed_by_peer(s) for s in socks)
        deadline = t0 + HEADER_TIMEOUT_S + opened_s + CLOSE_SLACK_S + 3
        remaining = list(socks)
        poller = select.poll()  # select() stops at descriptor 1023
        for s in socks:
            poller.register(s, select.POLLIN)
        while remaining and time.monotonic() < deadline:
            poller.poll(200)
            still = []
            for s in remaining:
                if closed_by_peer(s):
                    poller.unregister(s)
                else:
                    still.append(s)
            remaining = still
        closed_after = time.monotonic() - t0
    for s in socks:
        s.close()
    assert not remaining, "%d idle connections still open" % len(remaining)
    print("\nidle flood: %d connections opened in %.2f s, all closed by kboxd after %.2f s"
          % (IDLE_CONNECTIONS, opened_s, closed_after))
    probe.report("%d idle connections" % IDLE_CONNECTIONS)


def test_connections_past_max_connections_get_503(root):
    d = Daemon(root, "kboxd-small", CONFIG.replace("max_connections: %d" % MAX_CONNECTIONS,
                                                   "max_connections: 16"))
    try:
        held = [connect(d.port) for _ in range(16)]
        try:
            # The accept loop sees them in order; the 17th is over the limit.
            raw, took = exchange(d.port, b"GET /healthz HTTP/1.1\r\nHost: kbox\r\n\r\n")
            body = assert_json_refusal(raw, 503, "connection")
            assert "max_connections" in body["message"], body
            assert took < REFUSAL_WITHIN_S
        finally:
            for s in held:
                s.close()
        # Their places come back as soon as kboxd sees them closed.
        deadline = time.monotonic() + 10
        while True:
            try:
                reply = it.request(d.port, "GET", "/healthz", timeout=5)
            except OSError:
                reply = None
            if reply is not None and reply.status == 200:
                break
            assert time.monotonic() < deadline, reply
    finally:
        d.stop()


# -- oversized ------------------------------------------------------------------------------

def test_oversized_header_gets_431(daemon):
    raw, took = exchange(daemon.port, b"GET /healthz HTTP/1.1\r\nHost: kbox\r\nX-Big: "
                         + b"a" * (32 << 10) + b"\r\n\r\n")
    assert_json_refusal(raw, 431, "headers")
    assert took < REFUSAL_WITHIN_S


def test_many_headers_get_431(daemon):
    headers = b"".join(b"X-H%d: v\r\n" % i for i in range(4000))
    raw, took = exchange(daemon.port, b"GET /healthz HTTP/1.1\r\nHost: kbox\r\n" + headers + b"\r\n")
    assert_json_refusal(raw, 431, "headers")
    assert took < REFUSAL_WITHIN_S


def test_oversized_body_gets_413_before_it_is_sent(daemon):
    # Only the headers go out: kboxd refuses on the declared length.
    head = (b"POST /v1/evaluate HTTP/1.1\r\nHost: kbox\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (MAX_BODY_BYTES * 100))
    raw, took = exchange(daemon.port, head)
    assert_json_refusal(raw, 413, "body")
    assert took < REFUSAL_WITHIN_S


def test_oversized_chunked_body_gets_413(daemon):
    chunk = b"%x\r\n%s\r\n" % (16384, b"a" * 16384)
    head = (b"POST /v1/evaluate HTTP/1.1\r\nHost: kbox\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    raw, took = exchange(daemon.port, head + chunk * (MAX_BODY_BYTES // 16384 + 2))
    assert_json_refusal(raw, 413, "body")
    assert took < REFUSAL_WITHIN_S


def test_source_over_max_source_bytes_gets_400(daemon):
    for path in POST_PATHS:
        raw = post(daemon.port, path, with_fields(candidate_source="#" * 40000))
        assert_json_refusal(raw, 400, "candidate_source")


# -- hostile JSON ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", POST_PATHS + ("/v1/jobs",))
@pytest.mark.parametrize("body", [
    b"[" * 60000,
    b"{" * 60000,
    b'{"candidate_source":' + b"[" * 60000,
    b'{"anticheat_overrides":{"a":' + b'{"a":' * 10000,
    b'{"jobs":[{"request":' * 3000,
], ids=["brackets", "braces", "in_a_field", "in_a_map", "in_jobs"])
def test_deeply_nested_json_gets_400(daemon, path, body):
    assert_json_refusal(post(daemon.port, path, body), 400)


@pytest.mark.parametrize("path", POST_PATHS)
@pytest.mark.parametrize("body", [
    b'{"reference_source": "x = 1\n", "candidate_source": "\xff\xfe", "backend": "BACKEND_CPU"}',
    b'{"reference_source": "\xc0\xaf", "candidate_source": "y", "backend": "BACKEND_CPU"}',
    b'{"reference_source": "\xed\xa0\x80", "candidate_source": "y", "backend": "BACKEND_CPU"}',
    b'{"\xff\xfe": 1}',
    b'{"backend": "BACKEND_\xff"}',
    b'{"client_request_id": "\\ud800"}',
], ids=["bad_bytes", "overlong", "surrogate_bytes", "in_a_key", "in_an_enum", "lone_surrogate_escape"])
def test_invalid_utf8_gets_400(daemon, path, body):
    assert_json_refusal(post(daemon.port, path, body), 400)


def test_invalid_utf8_in_content_type_gets_415(daemon):
    raw = post(daemon.port, "/v1/check", json.dumps(VALID), content_type=b"text/\xff\xfe")
    assert_json_refusal(raw, 415, "Content-Type")


@pytest.mark.parametrize("path", POST_PATHS)
@pytest.mark.parametrize("field,value", [
    ("backend", "BACKEND_TPU"), ("backend", 99), ("backend", -1), ("backend", "backend_cpu"),
    ("precision", "PRECISION_FP8"), ("precision", 42), ("precision", 2 ** 40),
])
def test_unknown_enum_values_get_400(daemon, path, field, value):
    assert_json_refusal(post(daemon.port, path, with_fields(**{field: value})), 400, field)


@pytest.mark.parametrize("field,value", [
    ("candidate_source", 5), ("candidate_source", ["x"]), ("backend", True),
    ("correctness_trials", -1), ("correctness_trials", "many"), ("correctness_trials", 1e100),
    ("seed", []), ("atol", {}), ("measure_performance", 2), ("anticheat_overrides", [1]),
    ("time_limit_s", 1.5),
])
def test_wrong_types_get_400(daemon, field, value):
    body = assert_json_refusal(post(daemon.port, "/v1/evaluate", with_fields(**{field: value})), 400)
    # protobuf names the field in most of its messages; where it does not, the body is blamed
    # and the message still says which field.
    assert body["field"] in (field, "body"), body
    assert field in body["message"] or body["field"] == field, body


@pytest.mark.parametrize("field,value", [
    ("fresh_reference_timing", "yes"), ("fresh_reference_timing", "1"),
    ("fresh_reference_timing", "true"), ("measure_performance", "false"),
    ("correctness_trials", "5"), ("time_limit_s", "60"), ("atol", "0.01"),
])
def test_strings_for_bools_and_numbers_get_400(daemon, field, value):
    # protobuf's parser takes these; kboxd's type check refuses them, naming the field.
    body = assert_json_refusal(post(daemon.port, "/v1/evaluate", with_fields(**{field: value})),
                               400, field)
    assert "must be" in body["message"], body
    submit = json.dumps({"jobs": [{"request": VALID}, {"request": dict(VALID, **{field: value})}]})
    assert_json_refusal(post(daemon.port, "/v1/jobs", submit), 400, "jobs[1].request." + field)


@pytest.mark.parametrize("body", [
    b'{"jobs": {}}', b'{"jobs": [1]}', b'{"jobs": "x"}', b'{"jobs": [{"request": []}]}',
    b'[]', b'"x"', b'null', b'1',
])
def test_wrong_types_in_a_submission_get_400(daemon, body):
    assert_json_refusal(post(daemon.port, "/v1/jobs", body), 400)


@pytest.mark.parametrize("path", POST_PATHS)
@pytest.mark.parametrize("body", [
    b'{"candidate_source": "a", "candidate_source": "b", "reference_source": "x", '
    b'"backend": "BACKEND_CPU"}',
    b'{"candidate_source": "a", "reference_source": "x", "backend": "BACKEND_CPU", '
    b'"backend": "BACKEND_CUDA"}',
    b'{"candidate_source": "a", "reference_source": "x", "backend": "BACKEND_CPU", '
    b'"anticheat_overrides": {"r": "off"}, "anticheat_overrides": {"r": "warn"}}',
], ids=["string", "enum", "map"])
def test_duplicate_keys_get_400(daemon, path, body):
    assert_json_refusal(post(daemon.port, path, body), 400)


def test_daemon_survived_it_all(daemon):
    assert daemon.alive(), daemon.stderr()
    reply = it.request(daemon.port, "GET", "/healthz", timeout=5)
    assert reply.status == 200, reply
