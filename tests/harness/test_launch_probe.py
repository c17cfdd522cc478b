"""The kernel-launch probe's harness side (launch_probe.py, run_stage's
name matching). The CUPTI library's callback handling is pinned by
tests/unit/launch_probe; runs on a GPU are in test_gpu.py."""
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "worker", "harness"))
from kbox_harness import candidate_worker, launch_probe, protocol, run_stage  # noqa: E402

LIBRARY = os.path.join(os.environ.get("KBOX_BIN_DIR", os.path.join(REPO, "build", "bin")),
                       "libkbox_launch_probe.so")


@pytest.mark.parametrize("launched", [
    "add_kernel(float const*, float const*, float*, long)",   # profiler, demangled
    "void add_kernel<float>(float const*, float*, int)",
    "_Z10add_kernelPKfS0_Pfl",                                  # CUPTI, mangled
    "_ZN4kbox10add_kernelEPKfPfi",                              # in a namespace
    "_Z10add_kernelIfEvPKT_PS0_i",                              # a template
    "add_kernel",                                               # Triton
])
def test_the_candidates_kernel_is_recognised(launched):
    assert run_stage._names_kernel(launched, "add_kernel")


@pytest.mark.parametrize("launched", [
    "_Z11add_kernel2PKfPf",      # another kernel whose name starts alike
    "_Z11xadd_kernelPKfPf",
    "_Z110add_kernelxxxxx",       # a length that is not add_kernel's
    "void at::native::vectorized_elementwise_kernel<4, add_kernel_functor>(int)",
    "fused_add_kernel_2",
])
def test_other_kernels_are_not_the_candidates(launched):
    assert not run_stage._names_kernel(launched, "add_kernel")


def test_no_library_or_no_cupti_is_unavailable(tmp_path):
    with pytest.raises(launch_probe.ProbeUnavailable):
        launch_probe.LaunchProbe(str(tmp_path / "missing.so"), "/usr/lib/libcupti.so")
    with pytest.raises(launch_probe.ProbeUnavailable):
        launch_probe.LaunchProbe("", "/usr/lib/libcupti.so")
    if os.path.exists(LIBRARY):
        with pytest.raises(launch_probe.ProbeUnavailable):
            launch_probe.LaunchProbe(LIBRARY, None)


@pytest.mark.skipif(not os.path.exists(LIBRARY), reason="libkbox_launch_probe.so not built")
def test_a_cupti_that_cannot_be_opened_is_unavailable(tmp_path):
    probe = launch_probe.LaunchProbe(LIBRARY, str(tmp_path / "libcupti.so.13"))
    with pytest.raises(launch_probe.ProbeUnavailable) as e:
        probe.start()
    assert "cannot load CUPTI" in str(e.value)


@pytest.mark.skipif(not os.path.exists(LIBRARY), reason="libkbox_launch_probe.so not built")
def test_the_cupti_path_is_settled_before_the_candidate_loads(tmp_path):
    # The candidate's process prepares the probe in set-up: a library the
    # candidate's code later maps under CUPTI's name is not the one it opens.
    toolkit = tmp_path / "cuda" / "extras" / "CUPTI" / "lib64"
    toolkit.mkdir(parents=True)
    evil = tmp_path / "evil"
    evil.mkdir()
    data = open(LIBRARY, "rb").read()  # any library: only paths matter here
    (toolkit / "libcupti.so").write_bytes(data)
    (evil / "libcupti.so.13").write_bytes(data)
    code = ("import ctypes, sys, torch; sys.path.insert(0, %r)\n"
            "from kbox_harness import candidate_worker, launch_probe, protocol\n"
            "spec = protocol.StageSpec({'stage': 'STAGE_RUN', 'launch_probe_library': %r})\n"
            "probe, why = candidate_worker.prepare_launch_probe(spec, torch.device('cuda'))\n"
            "assert probe is not None, why\n"
            "ctypes.CDLL(%r)\n"
            "assert launch_probe.cupti_path() == %r, launch_probe.cupti_path()\n"
            "print(probe.cupti)\n"
            % (os.path.join(REPO, "worker", "harness"), LIBRARY, str(evil / "libcupti.so.13"),
               str(evil / "libcupti.so.13")))
    env = dict(os.environ, CUDA_HOME=str(tmp_path / "cuda"))
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         universal_newlines=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    # Where torch bundles its own, that one; else the toolkit's.
    assert out.stdout.strip().endswith("libcupti.so") or "/nvidia/" in out.stdout, out.stdout
    assert "evil" not in out.stdout


def test_no_probe_on_the_cpu_or_without_the_library():
    import torch
    gpu_spec = protocol.StageSpec({"stage": "STAGE_RUN", "launch_probe_library": LIBRARY})
    assert candidate_worker.prepare_launch_probe(gpu_spec, torch.device("cpu")) == (None, None)
    plain = protocol.StageSpec({"stage": "STAGE_RUN"})
    assert candidate_worker.prepare_launch_probe(plain, torch.device("cuda")) == (None, None)


def test_the_spec_names_the_library():
    spec = protocol.StageSpec({"stage": "STAGE_RUN", "launch_probe_library": "/opt/kbox/libkbox_launch_probe.so"})
    assert spec.launch_probe_library == "/opt/kbox/libkbox_launch_probe.so"
    assert protocol.StageSpec({"stage": "STAGE_RUN"}).launch_probe_library == ""
