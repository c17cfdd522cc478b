"""kbox's pre-forked stage parent: one per device slot (run stages) or compile
worker (compile stages) (docs/prefork.md).

Usage: python3 -s -B kbox_zygote.py --socket-fd N --enter-lib PATH

kboxd starts it as root on the host, like kbox-sandbox, with the stage's clean
environment and single-thread settings. It imports PyTorch and the harness
before any job, never initialises CUDA, and forks a fresh child per stage. The
child enters the sandbox itself (libkbox_sandbox_enter.so) and then runs the
same entry point as kbox_stage.py, whichever stage its spec names. The zygote
itself never runs candidate or reference code and holds nothing job-specific.

A run stage's zygote forks one child only: kboxd kills it when that stage
ends and has started its successor beside the stage, so no two jobs share a
memory image or an ASLR layout (docs/prefork.md). A compile worker's zygote
(preforked_compile_stage, off by default) forks one child per build: all its
builds share its image and layout (threat-model row S18), which is what that
flag weakens. Either way nothing of any job may ever reach this process but
the per-request spec path and two pipe descriptors.

Protocol on the inherited AF_UNIX SOCK_SEQPACKET socket (one job at a time):
  zygote -> kboxd  b"ready <pid> <stage threads>"  once, after the imports
  kboxd -> zygote  b"fork <sandbox spec path>"    + SCM_RIGHTS [output_w, result_w]
  zygote -> kboxd  b"pid <child pid>"  or  b"error <message>"
  zygote -> kboxd  b"exit <child pid> <wait status> <cpu ms>"   when it ends
EOF on the socket ends the zygote.
"""
import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import traceback

# -s drops user site-packages; our own package lives next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The thread-count variables kboxd sets for the zygote only (kbox_zygote
# must stay single-threaded); a run stage gets torch's usual default.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                     "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def _start_thread_probe():
    """What torch.get_num_threads() is in a fresh interpreter without the
    zygote's thread limits: the default an exec'd run stage gets (torch counts
    physical cores its own way). Started before the zygote's own imports so
    both import torch at once; a separate process, so no thread here."""
    env = {k: v for k, v in os.environ.items() if k not in _THREAD_VARIABLES}
    return subprocess.Popen([sys.executable, "-s", "-B", "-c",
                             "import torch; print(torch.get_num_threads())"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)


# kboxd passes the figure an earlier zygote of the slot reported (a property
# of the host's cores and torch, the same for every zygote), so that a
# single-use zygote per run stage costs one torch import, not two.
_STAGE_THREADS_ENV = "KBOX_STAGE_THREADS"
_thread_probe = (_start_thread_probe()
                 if __name__ == "__main__" and not os.environ.get(_STAGE_THREADS_ENV) else None)

import numpy  # noqa: E402,F401  (in the shared image: every run stage uses it)
import torch  # noqa: E402

from kbox_harness import dynamic_checks  # noqa: E402

# Whatever the run stage's dispatch-mode trace (dynamic_checks.trace_ops)
# imports at its first use is paid here once per zygote, not once per job;
# check_forkable() below still holds (no thread, no CUDA).
dynamic_checks.preload_dispatch_tracing()

from kbox_harness import compile_stage, run_stage, stage  # noqa: E402,F401

_PR_SET_PDEATHSIG = 1
_SETUP_FAILED = 125  # kbox-sandbox's status for "the sandbox could not be set up"
_RESULT_FD = 3
_STAGE_SCRIPT = "kbox_stage.py"


class ZygoteError(Exception):
    pass


def _die_with_parent(libc):
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise ZygoteError("prctl(PR_SET_PDEATHSIG) failed")


def check_forkable():
    """What every fork relies on: one thread (a fork copies only the caller;
    a lock another thread held would stay held in the child forever) and no
    CUDA context (a CUDA context does not survive fork; each job needs its own)."""
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        raise ZygoteError("zygote has %d threads; it must stay single-threaded" % threads)
    if torch.cuda.is_initialized():
        raise ZygoteError("zygote initialised CUDA; it must never")


def _spec_strings(lib, spec_path, field):
    path = spec_path.encode()
    needed = lib.kbox_sandbox_spec_strings(path, field, None, 0)
    if needed < 0:
        raise ZygoteError("cannot read the sandbox spec")
    buf = ctypes.create_string_buffer(max(needed, 1))
    lib.kbox_sandbox_spec_strings(path, field, buf, needed)
    return [s.decode() for s in buf.raw[:needed].split(b"\0")[:-1]]


def _stage_args(argv):
    """The arguments kbox_stage.py would get (--spec FILE --result-fd 3)."""
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == _STAGE_SCRIPT:
            return argv[i + 1:]
    raise ZygoteError("the spec's argv does not run %s" % _STAGE_SCRIPT)


def _child(lib, libc, zygote, spec_path, output_w, result_w, sock, stage_threads):
    """In the fresh child: take the job's descriptors and environment, enter
    the sandbox, run the stage. Never returns."""
    try:
        # Its own process group, which kboxd kills; the zygote sets it too,
        # before it tells kboxd the pid, so that kill can never miss it.
        os.setpgid(0, 0)
        _die_with_parent(libc)
        if os.getppid() != zygote:
            os._exit(_SETUP_FAILED)  # The zygote died before PDEATHSIG took hold.
        sock.close()
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(output_w, 1)
        os.dup2(output_w, 2)
        os.dup2(result_w, _RESULT_FD)
        for fd in {devnull, output_w, result_w} - {0, 1, 2, _RESULT_FD}:
            os.close(fd)
        argv = _spec_strings(lib, spec_path, 0)
        env = _spec_strings(lib, spec_path, 1)
        args = _stage_args(argv)
        # Exactly the spec's environment, as execve would have given it.
        os.environ.clear()
        for kv in env:
            name, _, value = kv.partition("=")
            os.environ[name] = value
        import tempfile
        tempfile.tempdir = None  # Re-read TMPDIR: the sandbox's private /tmp.
        err = ctypes.create_string_buffer(512)
        if lib.kbox_sandbox_enter(spec_path.encode(), err, len(err)) != 0:
            os.write(2, b"kbox-sandbox: " + err.value + b"\n")
            os._exit(_SETUP_FAILED)
        # The sandboxed program process from here on. OMP_NUM_THREADS=1 only
        # kept the zygote single-threaded; the stage gets torch's usual default
        # (libgomp read the variable once, at the zygote's import, so the
        # spec's environment could not change it anyway), each process once
        # its boundary steps, which need one thread, are taken.
        stage.defer_threads(stage_threads)
        sys.argv = [_STAGE_SCRIPT] + args
        stage.main(args)  # Ends with os._exit(0) after its report.
    except BaseException:
        try:
            os.write(2, ("kbox-sandbox: zygote child: " + traceback.format_exc()).encode())
        except BaseException:
            pass
    os._exit(_SETUP_FAILED)


def _serve_one(lib, libc, sock, message, fds, stage_threads):
    verb, _, spec_path = message.decode().partition(" ")
    if verb != "fork" or not spec_path or len(fds) != 2:
        for fd in fds:
            os.close(fd)
        sock.send(b"error malformed request")
        return
    output_w, result_w = fds
    check_forkable()
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        _child(lib, libc, zygote, spec_path, output_w, result_w, sock, stage_threads)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass  # The child has died already.
    os.close(output_w)
    os.close(result_w)
    sock.send(b"pid %d" % pid)
    _, status, usage = os.wait4(pid, 0)
    cpu_ms = (usage.ru_utime + usage.ru_stime) * 1e3
    sock.send(b"exit %d %d %.3f" % (pid, status, cpu_ms))


def _stage_threads():
    """torch.get_num_threads() of a fresh interpreter: kboxd's figure, or the probe's."""
    if _thread_probe is None:
        try:
            threads = int(os.environ.get(_STAGE_THREADS_ENV, ""))
        except ValueError:
            threads = 0
        if threads <= 0:
            raise ZygoteError("%s is not a positive thread count" % _STAGE_THREADS_ENV)
        return threads
    probe_out, _ = _thread_probe.communicate(timeout=600)
    try:
        return int(probe_out.decode().strip())
    except ValueError:
        raise ZygoteError("the thread-count probe failed (exit %s)" % _thread_probe.returncode)


def main(argv=None):
    parser = argparse.ArgumentParser(description="kbox pre-forked stage parent")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--enter-lib", required=True)
    args = parser.parse_args(argv)
    libc = ctypes.CDLL(None, use_errno=True)
    _die_with_parent(libc)
    # PyDLL: the call keeps the GIL, so the processes the library forks never
    # see it released half-way.
    lib = ctypes.PyDLL(args.enter_lib)
    lib.kbox_sandbox_enter.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.kbox_sandbox_enter.restype = ctypes.c_int
    lib.kbox_sandbox_spec_strings.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                                              ctypes.c_size_t]
    lib.kbox_sandbox_spec_strings.restype = ctypes.c_long
    sock = socket.socket(fileno=args.socket_fd)
    stage_threads = _stage_threads()
    check_forkable()
    sock.send(b"ready %d %d" % (os.getpid(), stage_threads))
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 4096, 2)
        if not message:
            for fd in fds:
                os.close(fd)
            return 0
        _serve_one(lib, libc, sock, message, fds, stage_threads)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except ZygoteError as e:
        sys.stderr.write("kbox-zygote: %s\n" % e)
        sys.exit(1)
