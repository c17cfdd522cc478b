"""GPU backends (CUDA load_inline, Triton); skipped where no GPU is visible."""
import os
import sys

import pytest
import torch

import seccomp_bpf
from test_stages import Job, _check, marker_line

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness"))
from kbox_harness import timing  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _arch():
    major, minor = torch.cuda.get_device_capability(0)
    return "%d.%d" % (major, minor)


def _run(job, stage, backend, **overrides):
    # As kboxd does: no GPU in the compile stage, the job's one GPU in the run stage.
    env = {"TORCH_CUDA_ARCH_LIST": _arch(),
           "CUDA_VISIBLE_DEVICES": "" if stage == "STAGE_COMPILE" else
           os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0] or "0"}
    return job.run(stage, env_overrides=env, backend=backend, **overrides)


def test_cuda_load_inline_compile_then_run(tmp_path):
    job = Job(tmp_path, "cand_cuda_add.py", reference="ref_gpu_add.py")
    _check(_run(job, "STAGE_COMPILE", "BACKEND_CUDA"), "OK")
    report = _check(_run(job, "STAGE_RUN", "BACKEND_CUDA"), "OK")
    fp = report["fingerprint"]
    assert fp["device_name"] != "cpu" and fp["compute_capability"] == _arch()
    assert fp["cuda_version"] and fp["driver_version"]
    assert report["candidate_timing"]["method"] == "covered_cuda_event+device_sync"
    assert report["candidate_timing"]["median_ms"] > 0
    # The trusted reference's timed calls replay a CUDA graph (reference_graph).
    assert report["reference_timing"]["method"] == "cuda_graph_replay+covered_cuda_event+device_sync"
    assert "reference_capture" in report["phase_ms"]
    assert report["phase_ms"]["import_candidate"] < 10000  # loaded, not rebuilt


@pytest.mark.parametrize("fixture,outcome", [("cand_cuda_add.py", "used"),
                                             ("cand_cuda_pasted_op.py", "fell_back")])
def test_cuda_per_operator_headers(tmp_path, fixture, outcome):
    # The light try compiles the CUDA source against the operators it names
    # (per_operator_headers.py); one it cannot see fails that try and is
    # built as asked. Either way the run stage loads and judges the library.
    job = Job(tmp_path, fixture, reference="ref_gpu_add.py")
    report = _check(_run(job, "STAGE_COMPILE", "BACKEND_CUDA", light_headers=True,
                         cuda_per_operator_headers=True), "OK")
    assert report["cuda_per_operator_headers"] == outcome, report
    assert report["light_headers"] == ("used" if outcome == "used" else "fell_back")
    result = _check(_run(job, "STAGE_RUN", "BACKEND_CUDA"), "OK")
    assert result["message"].startswith("correct on"), result["message"]


def _as_kboxd(tmp_path, backend):
    """The sandbox settings kboxd gives a run stage of `backend`: Triton under
    the strict filter with ptxas in the broker (set-up warms Triton's one-time
    processes: its ldconfig and ptxas would otherwise start from candidate
    code, which the audit hook refuses)."""
    if backend != "BACKEND_TRITON":
        return {}
    return {"strict_seccomp_bpf": _strict(tmp_path), "ptxas_path": _triton_ptxas()}


def test_fp16_precision(tmp_path):
    # Inputs and models are cast to fp16; the Triton kernel follows the dtype.
    job = Job(tmp_path, "cand_triton_add.py", reference="ref_gpu_add.py")
    report = _check(_run(job, "STAGE_RUN", "BACKEND_TRITON", precision="PRECISION_FP16",
                         atol=1e-2, rtol=1e-2, **_as_kboxd(tmp_path, "BACKEND_TRITON")), "OK")
    assert len(report["trials"]) == 3


def test_nvcc_error_names_candidate_line(tmp_path):
    job = Job(tmp_path, "cand_cuda_error.py", reference="ref_gpu_add.py")
    report = _check(_run(job, "STAGE_COMPILE", "BACKEND_CUDA"), "COMPILE_FAILED")
    line = marker_line("cand_cuda_error.py", "CUDA-ERROR")
    assert "candidate.py:%d" % line in report["compile_log"]["text"], report["compile_log"]
    assert report["compile_log"]["first_error_line"] == line


def test_triton_run_ok(tmp_path):
    job = Job(tmp_path, "cand_triton_add.py", reference="ref_gpu_add.py")
    _check(_run(job, "STAGE_COMPILE", "BACKEND_TRITON"), "OK")
    report = _check(_run(job, "STAGE_RUN", "BACKEND_TRITON", **_as_kboxd(tmp_path, "BACKEND_TRITON")), "OK")
    assert report["fingerprint"]["triton_version"]


def test_async_fault_is_the_candidates(tmp_path):
    job = Job(tmp_path, "cand_cuda_async_fault.py", reference="ref_gpu_add.py")
    result = _run(job, "STAGE_RUN", "BACKEND_TRITON", **_as_kboxd(tmp_path, "BACKEND_TRITON"))
    # Either the fault surfaces at our sync as an exception, or the process
    # dies; in both cases the candidate is the last party announced.
    if result.report is not None:
        assert result.report["outcome"] == "CANDIDATE_FAILED", result.report
        assert result.parties[-2] == "CANDIDATE"


# -- under the run stage's strict seccomp filter (no fork, no exec) ---------------

def _strict(tmp_path):
    if not seccomp_bpf.available():
        pytest.skip("needs x86_64 and libseccomp")
    return seccomp_bpf.write_no_spawn_filter(str(tmp_path / "strict.bpf"))


def _triton_ptxas():
    triton = pytest.importorskip("triton")
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    if not os.access(path, os.X_OK):
        pytest.skip("Triton has no bundled ptxas")
    return path


def test_cuda_run_under_strict_filter(tmp_path):
    bpf = _strict(tmp_path)
    job = Job(tmp_path, "cand_cuda_add.py", reference="ref_gpu_add.py")
    _check(_run(job, "STAGE_COMPILE", "BACKEND_CUDA"), "OK")
    report = _check(_run(job, "STAGE_RUN", "BACKEND_CUDA", strict_seccomp_bpf=bpf), "OK")
    print("cuda strict phase_ms", report["phase_ms"])
    assert {"candidate_cuda_init", "strict_filter"} <= set(report["phase_ms"])


def test_triton_run_under_strict_filter(tmp_path):
    # ptxas (and Triton's launcher build) run in the broker, forked before the filter.
    bpf, ptxas = _strict(tmp_path), _triton_ptxas()
    job = Job(tmp_path, "cand_triton_add.py", reference="ref_gpu_add.py")
    _check(_run(job, "STAGE_COMPILE", "BACKEND_TRITON"), "OK")
    result = _run(job, "STAGE_RUN", "BACKEND_TRITON", strict_seccomp_bpf=bpf, ptxas_path=ptxas)
    report = _check(result, "OK")
    print("triton strict phase_ms", report["phase_ms"])
    assert {"tool_broker", "strict_filter"} <= set(report["phase_ms"])


def test_side_stream_work_is_counted_by_the_clock():
    # A matmul left on a side stream after the current stream's end event:
    # the device-wide figure counts it; an honest call is timed by its events.
    device = torch.device("cuda:0")
    a = torch.randn(4096, 4096, device=device)
    side = torch.cuda.Stream()

    def honest():
        return a @ a

    def hidden():
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            return a @ a

    def hidden_early():
        # Not ordered after the cover: runs while the cover spins. Bounded
        # by the cover, which is sized to this call's host time.
        with torch.cuda.stream(side):
            return a @ a

    times = {}
    for name, fn in (("honest", honest), ("hidden", hidden), ("hidden_early", hidden_early)):
        for _ in range(3):
            fn()
        clock = timing.Clock(device)
        clock.fit(fn)
        covered = [clock.time(fn) for _ in range(9)]
        bare = [clock.time(fn, cover=False) for _ in range(9)]
        times[name] = sorted(c[0] for c in covered)[4]
        times[name + "_exposed"] = timing.hidden_by_cover(
            [c[0] for c in covered], [b[0] for b in bare], [b[2] for b in bare])
        print(name, times[name], "cover", clock.cover_ms, "latency", clock.latency_ms, times[name + "_exposed"])
        assert clock.latency_ms < 0.5
    assert times["honest_exposed"] is None and times["hidden_exposed"] is None, times
    # Work started under the cover is either counted (it outlasts the cover)
    # or exposed by the uncovered calls.
    assert times["hidden_early_exposed"] or times["hidden_early"] > 0.7 * times["honest"], times
    assert times["hidden"] > 0.7 * times["honest"], times


def test_outrun_cover_is_detected():
    # A call whose host work (2 ms of Python before its kernel) outlasts a
    # 0.1 ms cover is marked outran; under a 10 ms cover it is not.
    import time as _time
    device = torch.device("cuda:0")
    x = torch.randn(1 << 20, device=device)

    def slow_host():
        _time.sleep(0.002)
        return x * 2

    clock = timing.Clock(device)
    clock.fit(lambda: x * 2)
    clock.cover_ms = 0.1
    short = [clock.time(slow_host) for _ in range(5)]
    clock.cover_ms = 10.0
    long_ = [clock.time(slow_host) for _ in range(5)]
    print("outran short", [t.outran for t in short], "long", [t.outran for t in long_])
    assert all(t.outran for t in short) and not any(t.outran for t in long_)
    assert sorted(t.ms for t in long_)[2] < 0.5 * sorted(t.ms for t in short)[2]


# -- the kernel-launch probe through CUPTI's callback API (launch_probe) ----------

_PROBE_LIBRARY = os.path.join(os.environ.get("KBOX_BIN_DIR", os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "build", "bin")),
    "libkbox_launch_probe.so")


def _rules(report):
    return {v.get("rule_id") for v in report.get("verdicts", [])}


@pytest.mark.parametrize("fixture,backend", [("cand_cuda_add.py", "BACKEND_CUDA"),
                                             ("cand_triton_add.py", "BACKEND_TRITON")])
def test_cupti_probe_sees_the_candidates_kernel(tmp_path, fixture, backend):
    if not os.path.exists(_PROBE_LIBRARY):
        pytest.skip("libkbox_launch_probe.so not built")
    job = Job(tmp_path, fixture, reference="ref_gpu_add.py")
    _check(_run(job, "STAGE_COMPILE", backend), "OK")
    # As kboxd runs them: Triton under the strict filter, ptxas in the broker
    # (set-up warms Triton's one-time processes; candidate code starts none).
    sandbox = _as_kboxd(tmp_path, backend)
    probe_ms = {}
    for library in ("", _PROBE_LIBRARY):
        report = _check(_run(job, "STAGE_RUN", backend, candidate_kernels=["add_kernel"],
                             launch_probe_library=library, **sandbox), "OK")
        assert "run.kernel-not-launched" not in _rules(report), report["verdicts"]
        # CUPTI saw the kernel itself: no confirming profiler run.
        assert "dynamic_probe_confirm" not in report["phase_ms"]
        probe_ms[library or "profiler"] = report["phase_ms"]["dynamic_probe"]
    print("%s dynamic_probe ms: %s" % (backend, probe_ms))


def test_cupti_probe_miss_is_confirmed_by_the_profiler(tmp_path):
    # A kernel name the candidate never launches: CUPTI misses it, the
    # profiler confirms, and the finding stands.
    if not os.path.exists(_PROBE_LIBRARY):
        pytest.skip("libkbox_launch_probe.so not built")
    job = Job(tmp_path, "cand_cuda_add.py", reference="ref_gpu_add.py")
    _check(_run(job, "STAGE_COMPILE", "BACKEND_CUDA"), "OK")
    report = _check(_run(job, "STAGE_RUN", "BACKEND_CUDA", candidate_kernels=["never_launched_kernel"],
                         launch_probe_library=_PROBE_LIBRARY), "OK")
    assert "run.kernel-not-launched" in _rules(report), report.get("verdicts")
    assert "dynamic_probe_confirm" in report["phase_ms"]


def test_exchange_through_pinned_memory(tmp_path):
    # GPU tensors leave through pinned memory and a load to the GPU reads the
    # file into pinned memory (exchange.PINNED_MAX_BYTES); the bits are the
    # same as the CPU path's, a transposed view and a conjugate included.
    from kbox_harness import exchange
    g = torch.Generator(device="cuda").manual_seed(7)
    out = torch.randn(257, 129, device="cuda", generator=g)
    z = torch.randn(33, device="cuda", dtype=torch.complex64, generator=g).conj()
    obj = {"out": out.t(), "z": z, "ints": torch.arange(7, device="cuda"), "k": 3}
    assert exchange._pinned((4,), torch.float32).is_pinned()
    path = str(tmp_path / "x.kbt")
    exchange.save(path, obj)
    back = exchange.load(path, device=torch.device("cuda"))
    assert back["out"].is_cuda and torch.equal(back["out"], out.t())
    assert torch.equal(back["z"], z.resolve_conj()) and back["k"] == 3
    assert torch.equal(back["ints"], torch.arange(7, device="cuda"))
    cpu = exchange.load(path)
    assert torch.equal(cpu["out"], out.t().cpu()) and not cpu["out"].is_pinned()


# get_inputs that only runs on the CPU: .numpy() of a tensor its factories
# made (on the GPU under the judge's device context it raises).
REFERENCE_CPU_ONLY_DRAW = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a + b


def get_inputs():
    a = torch.from_numpy(torch.randn(1000, 1024).numpy())
    return [a, torch.randn(1000, 1024)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("reference", ["device_draw", "cpu_only_draw"])
def test_inputs_drawn_on_the_device_or_else_on_the_cpu(tmp_path, reference):
    # The judge draws get_inputs() under the GPU's device context
    # (RunStage.draw); one that cannot run there is drawn on the CPU. Either
    # way the trials are judged as usual.
    job = Job(tmp_path, "cand_cuda_add.py", reference="ref_gpu_add.py")
    if reference == "cpu_only_draw":
        with open(os.path.join(job.root, "reference.py"), "w") as f:
            f.write(REFERENCE_CPU_ONLY_DRAW)
    _check(_run(job, "STAGE_COMPILE", "BACKEND_CUDA"), "OK")
    report = _check(_run(job, "STAGE_RUN", "BACKEND_CUDA"), "OK")
    assert all(t["passed"] for t in report["trials"])
    assert report["phase_ms"]["draws"] > 0
