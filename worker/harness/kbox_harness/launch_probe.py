"""The kernel-launch probe (libkbox_launch_probe.so, CUPTI's callback API):
which kernels a stretch of code launched, for run.kernel-not-launched
(docs/anticheat.md, "Kernel launches"). Starting it costs milliseconds where
torch.profiler's CUDA activities cost ~6 s per fresh process on the H100
(docs/benchmarks.md).

The library's path comes from the StageSpec (kboxd binds it read-only
into the sandbox from beside kbox-sandbox). CUPTI is the one this process's
torch mapped, else the one bundled with torch's CUDA wheels, else the
toolkit's; the candidate's process finds it before the candidate's code
loads (a library the candidate maps under that name is never taken).

What the probe reports comes from the candidate's own process, as the
profiler's did: the judge takes a launch it reports as the absence of one
finding, and confirms a miss with the profiler before it counts
(run_stage._second_looks).
"""
import ctypes
import glob
import os
import sys

# What the library's start returns (kbox_launch_probe.cc).
STARTED, IN_USE, NO_CUPTI = 0, 1, 2
_NAMES_BYTES = 1 << 20


class ProbeUnavailable(Exception):
    """CUPTI or the library cannot be loaded on this host: the check is
    skipped, as without a GPU."""


class ProbeRefused(Exception):
    """CUPTI loaded but would not record (another subscriber in the
    process): something in the candidate's process holds it."""


def cupti_path():
    """The libcupti to open: one already mapped into this process, else
    torch's bundled or the toolkit's; None when there is none."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(" ")[-1]
                if "/libcupti.so" in path:
                    return path
    except OSError:
        pass
    roots = []
    try:
        import torch
        torch_dir = os.path.dirname(torch.__file__)
        roots += [os.path.join(torch_dir, "lib"),
                  os.path.join(os.path.dirname(torch_dir), "nvidia", "*", "lib"),
                  os.path.join(os.path.dirname(torch_dir), "nvidia", "*", "*", "lib")]
    except ImportError:  # pragma: no cover
        pass
    cuda_home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    roots += [os.path.join(cuda_home, "extras", "CUPTI", "lib64"), os.path.join(cuda_home, "lib64")]
    for root in roots:
        found = sorted(glob.glob(os.path.join(root, "libcupti.so*")), key=len)
        if found:
            return found[0]
    return None


class LaunchProbe(object):
    def __init__(self, library_path, cupti):
        if not library_path or not os.path.exists(library_path):
            raise ProbeUnavailable("no launch probe library (%s)" % (library_path or "not configured"))
        self.cupti = cupti
        if self.cupti is None:
            raise ProbeUnavailable("no libcupti found beside torch or the CUDA toolkit")
        try:
            lib = ctypes.CDLL(library_path)
        except OSError as e:
            raise ProbeUnavailable("cannot load %s: %s" % (library_path, e))
        lib.kbox_launch_probe_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.kbox_launch_probe_start.restype = ctypes.c_int
        lib.kbox_launch_probe_stop.argtypes = []
        lib.kbox_launch_probe_stop.restype = ctypes.c_int
        lib.kbox_launch_probe_names.argtypes = [ctypes.c_char_p, ctypes.c_size_t,
                                                ctypes.POINTER(ctypes.c_uint64),
                                                ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int)]
        lib.kbox_launch_probe_names.restype = ctypes.c_int
        self.lib = lib

    def start(self):
        error = ctypes.create_string_buffer(512)
        r = self.lib.kbox_launch_probe_start(self.cupti.encode(), error, len(error))
        why = error.value.decode("utf-8", "replace")
        if r == NO_CUPTI:
            raise ProbeUnavailable(why)
        if r != STARTED:
            raise ProbeRefused(why)

    def stop(self):
        r = self.lib.kbox_launch_probe_stop()
        if r != 0:
            sys.stderr.write("kbox: cuptiUnsubscribe returned %d\n" % r)

    def result(self):
        """{"kernels": [names], "launches": n, "graph_launches": n,
        "dropped": bool}: names as CUPTI gives them (mangled C++ names,
        Triton's plain ones)."""
        buf = ctypes.create_string_buffer(_NAMES_BYTES)
        launches, graphs, dropped = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_int()
        self.lib.kbox_launch_probe_names(buf, len(buf), ctypes.byref(launches), ctypes.byref(graphs),
                                         ctypes.byref(dropped))
        names = [n for n in buf.value.decode("utf-8", "replace").split("\n") if n]
        return {"kernels": names, "launches": launches.value, "graph_launches": graphs.value,
                "dropped": bool(dropped.value)}
