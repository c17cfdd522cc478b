"""kbox_zygote.py's own checks before each fork (the zygote end to end, with
real sandboxes, is tests/sandbox/zygote_test.cc)."""
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "harness")

# Runs in a fresh interpreter with the zygote's start-up environment.
_SCRIPT = r"""
import sys, threading, time
sys.path.insert(0, sys.argv[1])
import kbox_zygote, torch
kbox_zygote.check_forkable()          # after importing torch and the harness: one thread, no CUDA
print("forkable", torch.cuda.is_initialized())
t = threading.Thread(target=time.sleep, args=(2,))
t.start()
try:
    kbox_zygote.check_forkable()
    print("second thread not noticed")
except kbox_zygote.ZygoteError as e:
    print("refused:", e)
"""


def test_zygote_imports_stay_single_threaded_and_cuda_free():
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTORCH_NVML_BASED_CUDA_CHECK": "1", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run([sys.executable, "-s", "-B", "-c", _SCRIPT, HARNESS], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "forkable False"
    assert lines[1] == "refused: zygote has 2 threads; it must stay single-threaded"


def test_stage_arguments_come_from_the_specs_argv():
    sys.path.insert(0, HARNESS)
    import kbox_zygote
    argv = ["/usr/bin/python3", "-s", "-B", "/h/kbox_stage.py", "--spec", "S", "--result-fd", "3"]
    assert kbox_zygote._stage_args(argv) == ["--spec", "S", "--result-fd", "3"]
    try:
        kbox_zygote._stage_args(["/bin/sh", "-c", "true"])
        raise AssertionError("a spec that does not run kbox_stage.py was accepted")
    except kbox_zygote.ZygoteError:
        pass


# A zygote's child defers torch's thread count (stage.defer_threads) until each
# of its processes has taken its boundary steps, which refuse a second thread
# (boundary.settle_judge): torch.set_num_threads starts its pool at once on
# PyTorch 2.x, and a judge holding 32 threads failed every GPU job.
_DEFER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
import torch
from kbox_harness import stage
stage.defer_threads(3)
print(torch.get_num_threads(), len(os.listdir("/proc/self/task")))
stage.apply_deferred_threads()
print(torch.get_num_threads())
"""


def test_the_stage_thread_count_waits_for_the_boundary():
    env = {"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-s", "-B", "-c", _DEFER, HARNESS], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1 1", "3"], out.stdout
