"""The client's pure functions, without a daemon: backoff, Retry-After,
derived keys, endpoint choice, request building, log trimming, redaction."""
import asyncio
import email.utils
import inspect
import random

import pytest

import kbox_client
from kbox_client import (ApiError, Client, RetryPolicy, Unauthenticated, backoff_delay,
                         derived_key, make_request, parse_retry_after)
from kbox_client.endpoints import Endpoint, EndpointPool
from kbox_client.feedback import describe_failure, scrub_seeds, trim_compile_log
from kbox_client.kernelbench import KernelExecResult, eval_kernel_against_ref

SECRET = "s3cret-token-0123456789abcdef"


def test_backoff_is_full_jitter_under_an_exponential_cap():
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(1)
    for attempt, cap in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)):
        delays = [backoff_delay(policy, attempt, None, rng) for _ in range(300)]
        assert all(0.0 <= d <= cap for d in delays), (attempt, max(delays))
        assert max(delays) > 0.8 * cap and min(delays) < 0.2 * cap  # spread over the range


def test_retry_after_is_a_floor_with_bounded_jitter():
    rng = random.Random(2)
    delays = [backoff_delay(RetryPolicy(), 1, 5.0, rng) for _ in range(200)]
    assert all(5.0 <= d <= 5.5 for d in delays)
    delays = [backoff_delay(RetryPolicy(), 1, 60.0, rng) for _ in range(200)]
    assert all(60.0 <= d <= 61.0 for d in delays)


def test_retry_after_forms():
    assert parse_retry_after("5") == 5.0
    assert parse_retry_after(" 120 ") == 120.0
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(30.0, abs=1.0)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    for bad in (None, "", "soon", "-3", "1.5"):
        assert parse_retry_after(bad) is None, bad


def test_policy_bounds_are_checked():
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError):
        RetryPolicy(deadline_s=-1)


def test_derived_keys_form_a_deterministic_chain():
    assert derived_key("k", 0) == "k"
    assert derived_key("k", 1) == "k#retry1"
    assert derived_key("k", 2) == "k#retry2"
    assert len({derived_key("k", n) for n in range(5)}) == 5


def test_endpoint_urls_are_normalised_and_checked():
    e = Endpoint("http://127.0.0.1:8080/")
    assert (e.host, e.port, e.prefix, e.url) == ("127.0.0.1", 8080, "", "http://127.0.0.1:8080")
    assert Endpoint("https://kbox.example/api").url == "https://kbox.example:443/api"
    assert Endpoint("http://[::1]:9000").host_header == "[::1]:9000"
    for bad in ("ftp://x", "kbox:8080", "http://user:pw@host:1"):
        with pytest.raises(ValueError):
            Endpoint(bad)
    with pytest.raises(ValueError):
        EndpointPool(["http://a:1", "http://a:1/"])


def test_keys_pick_a_stable_endpoint_and_spread():
    urls = ["http://a:1", "http://b:1", "http://c:1"]
    first, again = EndpointPool(urls), EndpointPool(list(reversed(urls)))
    picks = [first.pick("key-%d" % i).url for i in range(300)]
    assert picks == [again.pick("key-%d" % i).url for i in range(300)]  # any process, any order
    assert all(picks.count(u) > 60 for u in urls), {u: picks.count(u) for u in urls}


def test_unkeyed_picks_go_to_the_least_loaded_then_round_robin():
    pool = EndpointPool(["http://a:1", "http://b:1", "http://c:1"])
    a, b, c = pool.endpoints
    assert [pool.pick().url for _ in range(3)] == [a.url, b.url, c.url]
    pool.job_started(a, 2)
    pool.job_started(b, 1)
    assert pool.pick() is c
    pool.job_started(c, 3)
    assert pool.pick() is b
    pool.job_finished(a)
    pool.job_finished(a)
    assert pool.pick() is a


def test_a_refused_endpoint_cools_down_and_comes_back():
    now = [100.0]
    pool = EndpointPool(["http://a:1", "http://b:1"], cooldown_s=5, clock=lambda: now[0])
    a, b = pool.endpoints
    pool.mark_down(a)
    assert {pool.pick().url for _ in range(4)} == {b.url}
    assert pool.pick("any key") is b and not pool.has_live_other_than(b)
    pool.mark_down(b)
    assert pool.pick() is a  # all down: the one back first
    now[0] += 5.1
    assert {pool.pick().url for _ in range(4)} == {a.url, b.url}


def test_make_request_uses_the_proto3_json_mapping():
    req = make_request("ref", "cand", "cuda", precision="torch.float16", seed=2 ** 63,
                       correctness_trials=3, measure_performance=False,
                       anticheat_overrides={"py.matmul-operator": "off"}, fresh_reference_timing=True,
                       speedup_precision=0.02)
    assert req == {"reference_source": "ref", "candidate_source": "cand",
                   "backend": "BACKEND_CUDA", "precision": "PRECISION_FP16",
                   "seed": str(2 ** 63), "correctness_trials": 3, "measure_performance": False,
                   "anticheat_overrides": {"py.matmul-operator": "off"}, "fresh_reference_timing": True,
                   "speedup_precision": 0.02}
    with pytest.raises(ValueError):
        make_request("r", "c", "hip")
    with pytest.raises(ValueError):
        make_request("r", "c", "cpu", seed=-1)


def test_the_token_stays_out_of_reprs_and_errors(monkeypatch):
    client = Client("http://127.0.0.1:1", token=SECRET)
    for text in (repr(client), str(client), repr(vars(client)), repr(client._ctx.__dict__)):
        assert SECRET not in text
    assert "token set" in repr(client)
    monkeypatch.setenv("KBOX_TOKEN", SECRET)
    assert SECRET not in repr(vars(Client("http://127.0.0.1:1")))
    body = b'{"error":{"code":"UNAUTHENTICATED","message":"missing or invalid bearer token"}}'
    err = ApiError.from_reply("http://h:1", 401, body, None)
    assert isinstance(err, Unauthenticated) and err.code == "UNAUTHENTICATED"
    assert "invalid bearer token" in str(err)
    err = ApiError.from_reply("http://h:1", 409, b'{"code":409,"field":"jobs[0].x","message":"m"}',
                              None)
    assert (err.code, err.field, err.message) == (409, "jobs[0].x", "m")
    # Both shapes in one body, as kboxd sends them: the symbolic code, the top-level field.
    body = b'{"code":409,"field":"jobs[0].x","message":"m","error":{"code":"ALREADY_EXISTS","message":"m"}}'
    err = ApiError.from_reply("http://h:1", 409, body, None)
    assert (err.code, err.field, err.message) == ("ALREADY_EXISTS", "jobs[0].x", "m")


GCC_LOG = """[1/2] c++ [command omitted] -o main.o
FAILED: main.o
c++ [command omitted] -o main.o
main.cpp: In function 'at::Tensor f(at::Tensor)':
candidate.py:11:28: error: expected primary-expression before ')' token
    11 |     float broken = (1.0f + );
      |                            ^
candidate.py:12:5: warning: unused variable 'x'
candidate.py:13:9: error: 'y' was not declared in this scope
    13 |     y = 2;
      |     ^
candidate.py:14:9: error: third
candidate.py:15:9: error: fourth, never shown
ninja: build stopped: subcommand failed."""


def test_compile_logs_are_trimmed_to_the_first_errors():
    out = trim_compile_log(GCC_LOG)
    assert "candidate.py:11:28: error" in out and "(1.0f + );" in out and "In function" in out
    assert "candidate.py:13:9: error" in out and "candidate.py:14:9: error: third" in out
    assert "fourth" not in out and "warning" not in out
    assert "ninja" not in out and "FAILED" not in out and "[command omitted]" not in out
    nvcc = 'candidate.py(7): error: identifier "blockIdx_x" is undefined\n1 error detected'
    assert 'candidate.py(7): error: identifier' in trim_compile_log(nvcc)
    tb = "\n".join(["noise %d" % i for i in range(30)] + ["ImportError: no module named foo"])
    out = trim_compile_log(tb)
    assert out.endswith("ImportError: no module named foo") and "noise 0" not in out


def test_failure_clauses_keep_structure_and_drop_values():
    assert describe_failure("shape mismatch: expected [16, 8], got [16, 7]") == \
        "shape mismatch: expected [16, 8], got [16, 7]"
    assert describe_failure("output 1: expected 3.14159, got 2.0; output 2: dtype mismatch: "
                            "expected torch.float32, got torch.float16") == \
        ("output 1: a non-tensor value differs from the reference's; output 2: dtype mismatch: "
         "expected torch.float32, got torch.float16")
    assert "42" not in describe_failure("expected (42, 'x'), got None")


def test_seeds_are_scrubbed_wherever_they_appear():
    result = {"settings": {"seed": "123456789"}, "trials": [{"seed": "9876"}, {"seed": "42"}]}
    assert scrub_seeds("a 123456789 b 9876 c 98760 d 42", result) == \
        "a <seed> b <seed> c 98760 d 42"  # 42 hides nothing and may be a line number


def test_kernelbench_signature_and_result_shape():
    names = list(inspect.signature(eval_kernel_against_ref).parameters)
    assert names[:14] == ["original_model_src", "custom_model_src", "seed_num",
                          "num_correct_trials", "num_perf_trials", "measure_performance",
                          "timing_method", "verbose", "build_dir", "device", "backend",
                          "precision", "check_for_excessive_speedup",
                          "excessive_speedup_threshold"]
    r = KernelExecResult()
    assert r.model_dump() == r.dict() == {
        "compiled": False, "correctness": False, "metadata": {}, "runtime": -1.0,
        "runtime_stats": {}, "ref_runtime": -1.0, "ref_runtime_stats": {}}
    assert kbox_client.kernelbench.KernelExecResult(compiled=True).json().startswith('{"compiled"')


def _parse_reply(raw):
    from kbox_client import async_transport

    async def run():
        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        status, headers = await async_transport._read_head(reader)
        return status, headers, await async_transport._read_body(reader, headers)

    return asyncio.run(run())


def test_async_transport_reads_each_framing():
    assert _parse_reply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: b\r\n\r\nhello") == \
        (200, {"content-length": "5", "x-a": "b"}, b"hello")
    chunked = (b"HTTP/1.1 429 Too Many Requests\r\nTransfer-Encoding: chunked\r\n"
               b"Retry-After: 5\r\n\r\n4;ext=1\r\nwiki\r\n5\r\npedia\r\n0\r\nTrailer: x\r\n\r\n")
    status, headers, body = _parse_reply(chunked)
    assert (status, headers["retry-after"], body) == (429, "5", b"wikipedia")
    assert _parse_reply(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 503 No\r\n\r\nuntil eof")[::2] == \
        (503, b"until eof")
    with pytest.raises(ValueError):
        _parse_reply(b"SSH-2.0-OpenSSH\r\n\r\n")


def test_a_draining_daemons_503_with_retry_after_is_retried_after_the_wait():
    """kboxd draining for a restart answers submissions 503 + Retry-After
    (docs/api.md): the client waits at least that long and tries again."""
    from kbox_client.operations import Context, exchange
    from kbox_client.wire import Call, Response, Sleep

    events = []
    ctx = Context(EndpointPool("http://127.0.0.1:1"), RetryPolicy(), on_retry=events.append,
                  rng=random.Random(3))
    op = exchange(ctx, "POST", "/v1/jobs", b"{}")
    call = next(op)
    assert isinstance(call, Call) and call.path == "/v1/jobs"
    draining = Response(call.endpoint, 503, {"retry-after": "5"},
                        b'{"code":503,"error":{"code":"UNAVAILABLE","message":"kboxd is draining"}}')
    step = op.send(draining)
    assert isinstance(step, Sleep) and 5.0 <= step.seconds <= 5.5, step
    assert len(events) == 1 and events[0].status == 503 and events[0].retry_after == 5.0
    again = op.send(None)
    assert isinstance(again, Call) and again.path == "/v1/jobs"
    with pytest.raises(StopIteration) as done:
        op.send(Response(again.endpoint, 200, {}, b'{"jobs":[]}'))
    assert done.value.value.status == 200


def test_evaluate_many_plans_chunks_that_fit_and_keep_a_reference_together():
    from kbox_client import many
    requests = [{"reference_source": "A"}] * 5 + [{"reference_source": "B"}] * 3 + [{"reference_source": "A"}]
    infos = [{"max_in_flight_jobs": 4, "token_max_concurrent_jobs": 0},
             {"max_in_flight_jobs": 64, "token_max_concurrent_jobs": 3}]
    plan = many.Plan(requests, infos)
    assert plan.batch == 3 and plan.window == 7
    chunks = []
    while plan.pending:
        chunks.append(plan.next_chunk(room=7))
    assert [c for _, c in chunks] == [[0, 1, 2], [3, 4, 8], [5, 6, 7]]
    assert chunks[0][0] == chunks[1][0] == many.route_of({"reference_source": "A"})
    assert chunks[2][0] != chunks[0][0]
    # Never more than the room left in the window.
    plan = many.Plan(requests, infos)
    assert plan.next_chunk(room=1)[1] == [0]


def test_a_result_dict_reads_as_typed_classes():
    from kbox_client import Result
    doc = {"job_id": "j-1", "status": "CORRECT", "rewardable": True, "speedup": 2.3,
           "candidate_timing": {"count": 200, "lower_quartile_ms": 0.12, "method": "cuda_event"},
           "reference_timing": {"lower_quartile_ms": 0.28, "source": "cache"},
           "trials": [{"seed": "6058924587920641055", "passed": True, "max_abs_diff": 0}],
           "verdicts": [{"rule_id": "run.rounding-allowance", "severity": "INFO", "line": 3,
                         "phase": "PHASE_RUN"}],
           "durations": {"compile_ms": 31792.7, "run_ms": 3286.1},
           "field_of_a_later_kboxd": 1}
    result = Result.from_dict(doc)
    assert result.correct and result.candidates_fault
    assert result.candidate_timing.lower_quartile_ms == 0.12
    assert result.reference_timing.source == "cache"
    assert result.trials[0].seed == 6058924587920641055 and result.trials[0].passed
    assert result.verdicts[0].rule_id == "run.rounding-allowance" and result.verdicts[0].line == 3
    assert result.durations.run_ms == 3286.1 and result.durations.static_ms == 0.0
    assert result.raw["field_of_a_later_kboxd"] == 1
    cancelled = Result.from_dict({"status": "CANCELLED"})
    assert not cancelled.correct and not cancelled.candidates_fault
    assert cancelled.candidate_timing.count == 0 and cancelled.trials == ()


def test_the_typed_classes_name_only_fields_of_the_proto():
    import dataclasses
    import os
    import re
    from kbox_client import results
    proto = os.path.join(os.path.dirname(__file__), "..", "..", "..", "proto", "kbox", "v1",
                         "evaluation.proto")
    with open(proto) as f:
        text = f.read()
    for cls, message in results.PROTO_MESSAGES.items():
        body = re.search(r"^message %s \{(.*?)^\}" % message, text, re.M | re.S).group(1)
        names = set(re.findall(r"^\s+(?:repeated\s+)?[\w.]+\s+(\w+)\s*=\s*\d+;", body, re.M))
        for field in dataclasses.fields(cls):
            if field.name != "raw":
                assert field.name in names, "%s.%s is not a field of %s" % (cls.__name__, field.name, message)
