"""The static anti-cheat checks through the real daemon: POST /v1/check (JSON
and binary protobuf), the static phase of POST /v1/evaluate (a reject ends the
job before anything is compiled), profiles and per-request overrides, their
validation, `kbox check`, and the metrics.

The evaluation jobs (static_*) are submitted at session start (conftest.py)."""
import json
import os
import re
import struct
import subprocess

import pytest

import kbox_it as it
from kbox_it import describe

MATMUL_REF = it.case_path("ref_matmul_relu.py")
MATMUL_CAND = it.case_path("cand_matmul_operator.py")     # C++ relu, `a @ b` in forward
PYTHON_CAND = it.case_path("cand_matmul_python.py")       # no kernel at all
HONEST_CAND = it.case_path("cand_clamp_scale_ok.py")
# C++ through a helper's parameter: read after the compile, from what the
# compile stage reports (docs/anticheat.md, "Sources kbox reads after the compile").
HELPER_CAND = it.case_path("cand_clamp_scale_helper.py")
HELPER_ATEN_CAND = it.case_path("cand_clamp_scale_helper_aten.py")


def matmul_line():
    return it.marker_line(MATMUL_CAND, "KBOX_IT_MATMUL")


def check_json(daemon, **fields):
    payload = {"candidate_source": it.read(MATMUL_CAND), "backend": "BACKEND_CPU"}
    payload.update({k: v for k, v in fields.items() if v is not None})
    for k in [k for k, v in fields.items() if v is None]:
        payload.pop(k, None)
    return it.post_json(daemon.port, payload, path="/v1/check")


def assert_refused(reply, field):
    assert reply.status == 400, reply
    body = reply.json()
    assert body["code"] == 400 and body["field"] == field, body
    assert body["message"].startswith(field), body


# -- a minimal protobuf codec (the tests use the standard library only) -----------------

def _varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _bytes_field(number, data):
    if isinstance(data, str):
        data = data.encode("utf-8")
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _varint_field(number, value):
    return _varint(number << 3) + _varint(value)


def _decode(data):
    """Field number -> list of values (ints for varints, floats for fixed64,
    bytes for length-delimited)."""
    fields, i = {}, 0

    def varint():
        nonlocal i
        shift = result = 0
        while True:
            b = data[i]
            i += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value = struct.unpack("<d", data[i:i + 8])[0]
            i += 8
        elif wire == 2:
            n = varint()
            value = data[i:i + n]
            i += n
        elif wire == 5:
            value = data[i:i + 4]
            i += 4
        else:
            raise AssertionError("unexpected wire type %d" % wire)
        fields.setdefault(number, []).append(value)
    return fields


# -- POST /v1/check --------------------------------------------------------------------

def test_check_json_rejects_matmul_operator(daemon):
    reply = check_json(daemon, reference_source=it.read(MATMUL_REF), client_request_id="it-check")
    assert reply.status == 200, reply
    assert reply.headers.get("content-type", "").startswith("application/json")
    r = reply.json()
    assert r["rejected"] is True, r
    assert r["anticheat_profile"] == "strict", r     # the daemon's default
    assert r["client_request_id"] == "it-check"
    assert r["truncated"] is False
    assert 0 <= r["duration_ms"] < 1000, r
    rejects = [v for v in r["verdicts"] if v["severity"] == "REJECT"]
    assert [v["rule_id"] for v in rejects] == ["py.matmul-operator"], r
    v = rejects[0]
    assert v["line"] == matmul_line(), r
    assert v["column"] > 0 and v["phase"] == "PHASE_STATIC", r
    assert "a @ b" in v["snippet"] and v["snippet"] == v["snippet"].strip(), r
    assert v["message"], r


def test_check_protobuf(daemon):
    body = (_bytes_field(1, it.read(MATMUL_CAND)) + _bytes_field(2, it.read(MATMUL_REF)) +
            _varint_field(3, 1) +                                   # BACKEND_CPU
            _bytes_field(7, "it-check-pb"))
    reply = it.request(daemon.port, "POST", "/v1/check", body, "application/x-protobuf")
    assert reply.status == 200, reply
    assert reply.headers.get("content-type", "").startswith("application/x-protobuf")
    r = _decode(reply.body)
    assert r[1] == [1], r                                           # rejected
    assert r[3] == [b"strict"] and r[6] == [b"it-check-pb"], r
    verdicts = [_decode(v) for v in r[2]]
    matmul = [v for v in verdicts if v[1] == [b"py.matmul-operator"]]
    assert len(matmul) == 1, verdicts
    v = matmul[0]
    assert v[2] == [3] and v[3] == [matmul_line()], v               # REJECT, line
    assert v[7] == [1], v                                           # PHASE_STATIC
    assert b"a @ b" in v[6][0], v                                   # snippet


def test_check_protobuf_with_override(daemon):
    entry = _bytes_field(1, "py.matmul-operator") + _bytes_field(2, "info")
    body = _bytes_field(1, it.read(MATMUL_CAND)) + _varint_field(3, 1) + _bytes_field(6, entry)
    reply = it.request(daemon.port, "POST", "/v1/check", body, "application/x-protobuf")
    assert reply.status == 200, reply
    r = _decode(reply.body)
    assert r.get(1, [0]) == [0], r                                  # not rejected
    severities = [_decode(v).get(2) for v in r[2]]
    assert [1] in severities, r                                     # INFO


def test_check_honest_candidate_passes(daemon):
    reply = check_json(daemon, candidate_source=it.read(HONEST_CAND),
                       reference_source=it.read(it.case_path("ref_clamp_scale.py")))
    assert reply.status == 200, reply
    r = reply.json()
    assert r["rejected"] is False, r
    assert all(v["severity"] != "REJECT" for v in r["verdicts"]), r


def test_check_override_downgrades(daemon):
    reply = check_json(daemon, anticheat_overrides={"py.matmul-operator": "suspicious"})
    assert reply.status == 200, reply
    r = reply.json()
    assert r["rejected"] is False, r
    assert r["anticheat_profile"] == "strict", r
    matmul = [v for v in r["verdicts"] if v["rule_id"] == "py.matmul-operator"]
    assert [v["severity"] for v in matmul] == ["SUSPICIOUS"], r


def test_check_off_profile_reports_nothing(daemon):
    reply = check_json(daemon, candidate_source=it.read(PYTHON_CAND), anticheat_profile="off")
    assert reply.status == 200, reply
    r = reply.json()
    assert r["rejected"] is False and r["verdicts"] == [] and r["anticheat_profile"] == "off", r


def test_check_unknown_profile_is_400(daemon):
    assert_refused(check_json(daemon, anticheat_profile="paranoid"), "anticheat_profile")


def test_check_unknown_rule_is_400(daemon):
    assert_refused(check_json(daemon, anticheat_overrides={"py.no-such-rule": "off"}),
                   "anticheat_overrides[py.no-such-rule]")


def test_check_bad_severity_is_400(daemon):
    assert_refused(check_json(daemon, anticheat_overrides={"py.matmul-operator": "warn"}),
                   "anticheat_overrides[py.matmul-operator]")


def test_check_needs_backend_and_candidate(daemon):
    assert_refused(check_json(daemon, backend=None), "backend")
    assert_refused(check_json(daemon, candidate_source=None), "candidate_source")


def test_check_get_is_405(daemon):
    reply = it.request(daemon.port, "GET", "/v1/check")
    assert reply.status == 405, reply


def test_info_lists_profiles(daemon):
    info = it.request(daemon.port, "GET", "/v1/info").json()
    assert {"strict", "lenient", "off"} <= set(info["anticheat_profiles"]), info
    assert info["default_anticheat_profile"] == "strict", info


# -- POST /v1/evaluate ---------------------------------------------------------------

def test_evaluate_bad_profile_is_400(daemon):
    payload = {"reference_source": it.read(MATMUL_REF), "candidate_source": it.read(MATMUL_CAND),
               "backend": "BACKEND_CPU", "anticheat_profile": "nope"}
    assert_refused(it.post_json(daemon.port, payload), "anticheat_profile")


def test_evaluate_bad_override_is_400(daemon):
    payload = {"reference_source": it.read(MATMUL_REF), "candidate_source": it.read(MATMUL_CAND),
               "backend": "BACKEND_CPU", "anticheat_overrides": {"py.matmul-operator": "LOUD"}}
    assert_refused(it.post_json(daemon.port, payload), "anticheat_overrides[py.matmul-operator]")


def test_evaluate_rejects_before_compiling(daemon):
    # Submitted here rather than with the session's jobs, to time it alone:
    # a rejected job never waits for a compile worker.
    payload = {"reference_source": it.read(MATMUL_REF), "candidate_source": it.read(MATMUL_CAND),
               "backend": "BACKEND_CPU", "client_request_id": "it-static-quick"}
    reply = it.post_json(daemon.port, payload)
    assert reply.status == 200, reply
    r = reply.json()
    assert r["status"] == "REJECTED", describe(r)
    assert reply.wall_s < 5, "a statically rejected job took %.1f s" % reply.wall_s


@pytest.mark.waits_for_jobs
def test_evaluate_rejected_job(jobs):
    r = jobs.result("static_rejected")
    line = matmul_line()
    assert r["status"] == "REJECTED", describe(r)
    assert r["rewardable"] is False
    assert r["message"].startswith(
        "rejected by anti-cheat rule py.matmul-operator at candidate.py:%d: " % line), r["message"]
    d = r["durations"]
    assert d["compile_ms"] == 0 and d["run_ms"] == 0, d
    assert d["static_ms"] > 0, d
    assert r["trials"] == [] and "compile_log" not in r, describe(r)
    assert r["settings"]["anticheat_profile"] == "strict"
    rejects = [v for v in r["verdicts"] if v["severity"] == "REJECT"]
    assert len(rejects) == 1 and rejects[0]["rule_id"] == "py.matmul-operator", describe(r)
    assert rejects[0]["line"] == line and rejects[0]["phase"] == "PHASE_STATIC"
    assert "a @ b" in rejects[0]["snippet"]


@pytest.mark.waits_for_jobs
def test_evaluate_off_profile_compiles_and_runs(jobs):
    # The same matmul, in a candidate strict rejects on several rules.
    r = jobs.result("static_off")
    assert r["status"] == "CORRECT", describe(r)
    assert r["rewardable"] is True
    assert r["verdicts"] == [], describe(r)
    assert r["settings"]["anticheat_profile"] == "off"
    assert r["durations"]["compile_ms"] > 0 and r["durations"]["run_ms"] > 0
    assert r["durations"]["static_ms"] == 0   # every rule off: the checker did not run


@pytest.mark.waits_for_jobs
def test_evaluate_override_downgrades_and_rides_along(jobs):
    r = jobs.result("static_override")
    assert r["status"] == "CORRECT", describe(r)
    # A suspicious verdict is reported, and does not cost the reward.
    assert r["rewardable"] is True, describe(r)
    matmul = [v for v in r["verdicts"] if v["rule_id"] == "py.matmul-operator"]
    assert [v["severity"] for v in matmul] == ["SUSPICIOUS"], describe(r)
    assert matmul[0]["line"] == matmul_line()
    # The run stage's op trace sees the same matmul (aten mm), overridden too.
    traced = [v for v in r["verdicts"] if v["rule_id"] == "run.library-compute"]
    assert [(v["severity"], v["phase"]) for v in traced] == [("SUSPICIOUS", "PHASE_RUN")], describe(r)
    assert "mm" in traced[0]["message"]
    assert all(v["severity"] != "REJECT" for v in r["verdicts"]), describe(r)
    assert r["settings"]["anticheat_profile"] == "strict"


def test_check_does_not_reject_what_it_defers_to_the_compile(daemon):
    # No compile here: the C++ the checker cannot read is judged by
    # /v1/evaluate once the compile stage has reported it.
    for path in (HELPER_CAND, HELPER_ATEN_CAND):
        reply = check_json(daemon, candidate_source=it.read(path),
                           reference_source=it.read(it.case_path("ref_clamp_scale.py")))
        assert reply.status == 200, reply
        r = reply.json()
        assert r["rejected"] is False, r
        assert not [v for v in r["verdicts"] if v["rule_id"] == "py.unresolved-extension-source"], r


@pytest.mark.waits_for_jobs
def test_evaluate_source_through_a_helper_is_checked_after_the_compile(jobs):
    # REJECTED by py.unresolved-extension-source before: now its text is read.
    r = jobs.result("static_deferred_honest")
    assert r["status"] == "CORRECT", describe(r)
    assert r["rewardable"] is True, describe(r)
    assert all(v["severity"] != "REJECT" for v in r["verdicts"]), describe(r)
    assert not [v for v in r["verdicts"] if v["rule_id"] == "py.unresolved-extension-source"], describe(r)
    d = r["durations"]
    assert d["compile_ms"] > 0 and d["run_ms"] > 0, d
    assert r.get("build_cache_hit", False) is False    # such a job always compiles


@pytest.mark.waits_for_jobs
def test_evaluate_aten_in_a_deferred_source_is_rejected_after_the_compile(jobs):
    r = jobs.result("static_deferred_aten")
    line = it.marker_line(HELPER_ATEN_CAND, "KBOX_IT_ATEN")
    assert r["status"] == "REJECTED", describe(r)
    assert r["rewardable"] is False
    assert r["message"].startswith(
        "rejected by anti-cheat rule cpp.aten-compute at candidate.py:%d: " % line), r["message"]
    d = r["durations"]
    assert d["compile_ms"] > 0 and d["run_ms"] == 0, d     # compiled, never run
    assert r["trials"] == [], describe(r)
    rejects = [v for v in r["verdicts"] if v["severity"] == "REJECT"]
    # at::matmul, at::diag and .clamp, each at its column.
    assert rejects and {v["rule_id"] for v in rejects} == {"cpp.aten-compute"}, describe(r)
    for v in rejects:
        # The text stands in candidate.py verbatim: the verdicts name its line.
        assert v["phase"] == "PHASE_COMPILE" and v["line"] == line, v
        assert "at::matmul" in v["snippet"], v
    # Nothing of the static phase rejected it: it went on to the compile.
    assert all(v["phase"] != "PHASE_STATIC" or v["severity"] != "REJECT" for v in r["verdicts"])


# -- kbox check -------------------------------------------------------------------------

def kbox_check(daemon, *args):
    p = subprocess.run([os.path.join(it.bin_dir(), "kbox"), "check", "--server", daemon.url] +
                       list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def test_cli_check_clean_exits_0(daemon):
    rc, out, err = kbox_check(daemon, HONEST_CAND, "--reference", it.case_path("ref_clamp_scale.py"))
    assert rc == 0, (rc, out, err)
    assert "not rejected" in out and "under profile strict" in out, out


def test_cli_check_rejected_exits_1(daemon):
    rc, out, err = kbox_check(daemon, MATMUL_CAND, "--reference", MATMUL_REF)
    assert rc == 1, (rc, out, err)
    line = matmul_line()
    assert re.search(r"^candidate\.py:%d:\d+: reject py\.matmul-operator: " % line, out,
                     re.MULTILINE), out
    assert re.search(r"^\s+return _ext\.relu_out\(a @ b\)", out, re.MULTILINE), out  # snippet
    assert "REJECTED" in out.splitlines()[-1], out


def test_cli_check_rule_override_exits_0(daemon):
    rc, out, err = kbox_check(daemon, MATMUL_CAND, "--rule", "py.matmul-operator=suspicious",
                              "--rule", "py.file-io=info")
    assert rc == 0, (rc, out, err)
    assert re.search(r"^candidate\.py:\d+:\d+: suspicious py\.matmul-operator: ", out,
                     re.MULTILINE), out


def test_cli_check_json(daemon):
    rc, out, err = kbox_check(daemon, PYTHON_CAND, "--json", "--profile", "off")
    assert rc == 0, (rc, out, err)
    r = json.loads(out)
    assert r["rejected"] is False and r["anticheat_profile"] == "off", r


def test_cli_check_usage_errors_exit_2(daemon, tmp_path):
    assert kbox_check(daemon)[0] == 2                                   # no FILE
    assert kbox_check(daemon, str(tmp_path / "missing.py"))[0] == 2
    assert kbox_check(daemon, MATMUL_CAND, "--rule", "py.matmul-operator")[0] == 2
    assert kbox_check(daemon, MATMUL_CAND, "--backend", "tpu")[0] == 2


def test_cli_check_refused_exits_2(daemon):
    rc, _, err = kbox_check(daemon, MATMUL_CAND, "--profile", "paranoid")
    assert rc == 2 and "[anticheat_profile]" in err, (rc, err)
    rc, _, err = kbox_check(daemon, MATMUL_CAND, "--rule", "py.nope=off")
    assert rc == 2 and "[anticheat_overrides[py.nope]]" in err, (rc, err)


def test_cli_check_unreachable_exits_3():
    p = subprocess.run([os.path.join(it.bin_dir(), "kbox"), "check", "--server",
                        "http://127.0.0.1:%d" % it.closed_port(), MATMUL_CAND],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 3, p


def kbox_eval(daemon, *args):
    p = subprocess.run([os.path.join(it.bin_dir(), "kbox"), "eval", "--server", daemon.url,
                        "--reference", MATMUL_REF, "--candidate", MATMUL_CAND, "--no-perf"] +
                       list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def test_cli_eval_summary_prints_verdicts(daemon):
    # Rejected statically, so it returns at once.
    rc, out, err = kbox_eval(daemon)
    assert rc == 0, (rc, out, err)
    assert ": REJECTED (not rewardable)" in out.splitlines()[0], out
    assert "anti-cheat verdicts (profile strict;" in out, out
    assert re.search(r"^\s+candidate\.py:%d:\d+: reject py\.matmul-operator: " % matmul_line(),
                     out, re.MULTILINE), out


def test_cli_eval_profile_and_rule_reach_the_server(daemon):
    rc, _, err = kbox_eval(daemon, "--profile", "paranoid")
    assert rc == 2 and "[anticheat_profile]" in err, (rc, err)
    rc, _, err = kbox_eval(daemon, "--rule", "py.matmul-operator=loud")
    assert rc == 2 and "[anticheat_overrides[py.matmul-operator]]" in err, (rc, err)


# -- metrics ---------------------------------------------------------------------------

def test_metrics_count_verdicts(daemon):
    assert check_json(daemon).status == 200   # at least one py.matmul-operator reject
    text = it.request(daemon.port, "GET", "/metrics").text
    assert "# TYPE kbox_anticheat_verdicts_total counter" in text, text
    m = re.search(r'^kbox_anticheat_verdicts_total\{rule="py.matmul-operator",'
                  r'severity="reject"\} ([0-9.e+]+)$', text, re.MULTILINE)
    assert m and float(m.group(1)) >= 1, text
    assert re.search(r"^kbox_static_check_duration_seconds_count [1-9]", text, re.MULTILINE), text
    assert 'kbox_static_check_duration_seconds_bucket{le="1e-05"}' in text, text
