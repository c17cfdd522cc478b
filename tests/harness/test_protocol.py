"""protocol.py, errors.py, timing.py and kbox_probe.py."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import errors, protocol, sanitize, timing  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The interpreter running the tests (/usr/bin/python3 here, the venv on GPU hosts).
PYTHON = sys.executable


def test_spec_defaults_and_string_uint64(tmp_path):
    p = tmp_path / "spec.json"
    p.write_text(json.dumps({"stage": "STAGE_RUN", "seed": "18446744073709551615",
                             "backend": "BACKEND_CUDA", "atol": "NaN"}))
    spec = protocol.read_spec(str(p))
    assert spec.seed == 2 ** 64 - 1 and spec.is_gpu and spec.precision == "PRECISION_UNSPECIFIED"
    assert spec.rtol == 0.0 and spec.measure_performance is False and spec.warmup_calls == 0
    assert spec.correctness_trials == protocol.DEFAULT_CORRECTNESS_TRIALS
    assert spec.max_log_bytes == protocol.DEFAULT_MAX_LOG_BYTES


def test_pipe_writes_one_line_per_event_and_dedups_enter():
    r, w = os.pipe()
    pipe = protocol.ResultPipe(w)
    pipe.enter("HARNESS")
    pipe.enter("HARNESS")
    pipe.enter("CANDIDATE")
    pipe.report({"outcome": "OK", "phase_ms": {"x": float("inf")}, "message": "a\ud800b"})
    pipe.report({"outcome": "OK"})  # nothing may follow the report
    os.close(w)
    lines = os.fdopen(r, "rb").read().decode("utf-8").splitlines()
    assert lines[:2] == ['{"enter":"HARNESS"}', '{"enter":"CANDIDATE"}']
    assert len(lines) == 3
    report = json.loads(lines[2])["report"]
    assert report["phase_ms"]["x"] == "Infinity" and report["message"] == "a?b"


def test_runtime_error_hides_harness_frames_and_paths(tmp_path):
    cand = tmp_path / "candidate.py"
    cand.write_text("def f():\n    raise KeyError('k')\n")
    ns = {}
    exec(compile(cand.read_text(), str(cand), "exec"), ns)
    try:
        ns["f"]()
    except KeyError as e:
        exc = e
    scrubber = sanitize.PathScrubber(str(cand), "", "")
    err = errors.runtime_error(exc, "PHASE_RUN", scrubber, 4096, str(cand))
    assert err["type"] == "KeyError" and err["candidate_line"] == 2
    assert 'File "candidate.py", line 2, in f' in err["traceback"]
    assert "test_protocol.py" in err["traceback"]  # not a harness file: kept
    assert str(tmp_path) not in err["traceback"]


def test_timing_stats():
    s = timing.stats([1.0, 2.0, 3.0, 4.0], "perf_counter")
    assert s == {"mean_ms": 2.5, "median_ms": 2.5, "std_ms": (1.25) ** 0.5, "min_ms": 1.0,
                 "max_ms": 4.0, "count": 4, "method": "perf_counter", "iqr_ms": 1.5,
                 # Fewer than 6 samples: the interval is the whole range.
                 "median_ci_low_ms": 1.0, "median_ci_high_ms": 4.0,
                 # The lower quartile: what speedup is computed from.
                 "lower_quartile_ms": 1.75, "lower_quartile_ci_low_ms": 1.0,
                 "lower_quartile_ci_high_ms": 4.0}
    assert timing.stats([5.0], "x")["median_ms"] == 5.0


def test_probe_prints_json():
    out = subprocess.run([PYTHON, "-s", "-B", os.path.join(REPO, "worker", "harness",
                                                             "kbox_probe.py")],
                         stdout=subprocess.PIPE, check=True, timeout=120).stdout
    info = json.loads(out)
    assert info["torch_version"] and info["python_version"].count(".") == 2
    assert set(info) == {"python_version", "torch_version", "cuda_version", "triton_version",
                         "driver_version", "gpus", "python_paths", "ptxas_path"}
    assert all(os.path.isabs(p) for p in info["python_paths"])
    assert isinstance(info["ptxas_path"], str)
    for gpu in info["gpus"]:
        assert set(gpu) == {"index", "name", "compute_capability", "memory_bytes"}


def test_the_device_turn_bytes_are_harness_protos():
    # kboxd and the judge speak one byte per message on the turn's FIFOs;
    # both take the bytes from harness.proto's DeviceTurnSignal and
    # DeviceTurnNote (C++ through the generated enums, the harness here).
    import re
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "proto", "kbox", "v1", "harness.proto")).read()
    for enum in ("DeviceTurnSignal", "DeviceTurnNote"):
        body = re.search(r"enum %s \{(.*?)\}" % enum, text, re.S).group(1)
        values = dict(re.findall(r"^\s*([A-Z_]+) = (\d+);", body, re.M))
        named = {k: int(v) for k, v in values.items() if not k.endswith("_UNSPECIFIED")}
        assert named, enum
        for name, byte in named.items():
            assert getattr(protocol, name) == bytes([byte]), (enum, name)
