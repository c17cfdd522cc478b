"""The HTTP surface: health, info, and every way a request can be refused.

These run while the session's jobs compile, so they also show that kboxd keeps
answering under load.
"""
import json

import pytest

import kbox_it as it

# Sources that pass the request checks; none of these requests gets that far
# unless the test says so.
VALID = {"reference_source": "x = 1\n", "candidate_source": "y = 2\n", "backend": "BACKEND_CPU"}
HEALTHZ_WITHIN_S = 5.0


def with_fields(**fields):
    payload = dict(VALID)
    for k, v in fields.items():
        if v is None:
            payload.pop(k, None)
        else:
            payload[k] = v
    return payload


def assert_error(reply, code, field=None):
    assert reply.status == code, reply
    assert reply.headers.get("content-type", "").startswith("application/json"), reply.headers
    body = reply.json()
    assert body["code"] == code, body
    assert body["message"], body
    if field is not None:
        assert body["field"] == field, body
    return body


def assert_healthy(port):
    reply = it.request(port, "GET", "/healthz", timeout=HEALTHZ_WITHIN_S)
    assert reply.status == 200, reply
    assert reply.json() == {"status": "ok"}
    assert reply.wall_s < HEALTHZ_WITHIN_S


def test_healthz(daemon):
    assert_healthy(daemon.port)


def test_info(daemon):
    reply = it.request(daemon.port, "GET", "/v1/info")
    assert reply.status == 200, reply
    info = reply.json()
    assert "BACKEND_CPU" in info["backends"]
    assert info["cpu_run_slots"] == 2
    assert info["max_time_limit_s"] == 120              # from the config file
    assert int(info["max_body_bytes"]) == 1048576        # uint64: a JSON string
    assert info["default_correctness_trials"] == 5
    assert info["software"]["torch_version"]


def test_malformed_json(daemon):
    assert_error(it.post_json(daemon.port, b'{"reference_source": "x", '), 400, "body")


def test_empty_body(daemon):
    assert_error(it.post_json(daemon.port, b""), 400, "body")


def test_unknown_field_is_named(daemon):
    payload = with_fields(reference_sauce="x")
    assert_error(it.post_json(daemon.port, payload), 400, "reference_sauce")


def test_bad_seed_is_named(daemon):
    assert_error(it.post_json(daemon.port, with_fields(seed="not-a-number")), 400, "seed")


def test_seed_at_2_pow_63_is_refused(daemon):
    assert_error(it.post_json(daemon.port, with_fields(seed=str(1 << 63))), 400, "seed")


def test_missing_candidate_source(daemon):
    assert_error(it.post_json(daemon.port, with_fields(candidate_source=None)), 400,
                 "candidate_source")


def test_missing_backend(daemon):
    assert_error(it.post_json(daemon.port, with_fields(backend=None)), 400, "backend")


def test_unknown_backend_name(daemon):
    assert_error(it.post_json(daemon.port, with_fields(backend="BACKEND_QUANTUM")), 400, "backend")


def test_unknown_backend_number(daemon):
    assert_error(it.post_json(daemon.port, with_fields(backend=42)), 400, "backend")


def test_time_limit_above_max(daemon):
    assert_error(it.post_json(daemon.port, with_fields(time_limit_s=121)), 400, "time_limit_s")


def test_client_request_id_too_long(daemon):
    assert_error(it.post_json(daemon.port, with_fields(client_request_id="x" * 129)), 400,
                 "client_request_id")


def test_wrong_method(daemon):
    reply = it.request(daemon.port, "GET", "/v1/evaluate")
    assert_error(reply, 405, "method")
    assert reply.headers.get("allow") == "POST"


def test_unknown_path(daemon):
    assert_error(it.request(daemon.port, "GET", "/v2/nothing"), 404, "path")


def test_unsupported_media_type(daemon):
    reply = it.request(daemon.port, "POST", "/v1/evaluate", json.dumps(VALID).encode(),
                       "text/plain")
    assert_error(reply, 415, "Content-Type")


ONE_MIB = 1 << 20
HUNDRED_MIB = 100 * ONE_MIB


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_100mb_body_is_refused(daemon, framing):
    head = (b"POST /v1/evaluate HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n")
    chunk = b"a" * ONE_MIB
    if framing == "content-length":
        head += b"Content-Length: %d\r\n\r\n" % HUNDRED_MIB
        chunks = (chunk for _ in range(100))
    else:
        head += b"Transfer-Encoding: chunked\r\n\r\n"
        framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"
        chunks = [framed for _ in range(100)] + [b"0\r\n\r\n"]
    raw, _ = it.raw_exchange(daemon.port, head, chunks, timeout=30)
    # Either an answer (413) or a closed connection is acceptable...
    if raw:
        assert it.status_of(raw) == 413, raw[:500]
        assert it.json_of(raw)["field"] == "body"
    # ...but the daemon must go on answering.
    assert_healthy(daemon.port)


def test_oversized_header_is_refused(daemon):
    head = (b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * (256 << 10) +
            b"\r\n\r\n")
    raw, _ = it.raw_exchange(daemon.port, head, timeout=30)
    if raw:
        assert it.status_of(raw) == 431, raw[:500]
    assert_healthy(daemon.port)


def test_garbage_request_line(daemon):
    raw, _ = it.raw_exchange(daemon.port, b"\x16\x03\x01 this is not http\r\n\r\n", timeout=30)
    if raw:
        assert it.status_of(raw) == 400, raw[:500]
    assert_healthy(daemon.port)
