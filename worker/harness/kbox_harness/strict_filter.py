"""Installs the run stage's strict seccomp filter (no process creation, no exec).

kboxd compiles the filter with libseccomp and passes the path of the raw BPF
program (StageSpec.strict_seccomp_bpf): an array of `struct sock_filter`
{u16 code; u8 jt; u8 jf; u32 k} in host byte order, exactly as
seccomp_export_bpf writes it. The harness installs it with
SECCOMP_FILTER_FLAG_TSYNC so that every thread of the process (torch's
OpenMP pool, CUDA's threads) is bound by it, after CUDA is initialised and
before the candidate's code runs.
"""
import ctypes
import os
import platform

_SYS_SECCOMP = {"x86_64": 317}
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1
_PR_SET_NO_NEW_PRIVS = 38
_SOCK_FILTER_SIZE = 8
_BPF_MAXINSNS = 4096


class StrictFilterError(Exception):
    """The filter could not be installed: kbox's fault, never the candidate's."""


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def read_program(path):
    """The filter's bytes, checked for shape (whole instructions, kernel's size limit)."""
    with open(path, "rb") as f:
        data = f.read()
    n, rest = divmod(len(data), _SOCK_FILTER_SIZE)
    if rest or n == 0 or n > _BPF_MAXINSNS:
        raise StrictFilterError(
            "cannot install the strict seccomp filter: %s holds %d bytes, not 1..%d "
            "instructions of %d bytes" % (path, len(data), _BPF_MAXINSNS, _SOCK_FILTER_SIZE))
    return data


def install(path):
    """Installs the BPF program at `path` on every thread of this process."""
    machine = platform.machine()
    nr = _SYS_SECCOMP.get(machine)
    if nr is None:
        raise StrictFilterError("cannot install the strict seccomp filter: unsupported "
                                "architecture %s" % machine)
    data = read_program(path)
    libc = ctypes.CDLL(None, use_errno=True)
    # Set by the sandbox already; needed (and harmless) outside it.
    if libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise StrictFilterError("cannot install the strict seccomp filter: prctl("
                                "PR_SET_NO_NEW_PRIVS): errno %d (%s)" % (err, os.strerror(err)))
    buf = ctypes.create_string_buffer(data, len(data))
    prog = _SockFprog(len(data) // _SOCK_FILTER_SIZE, ctypes.cast(buf, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                       ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if ret == -1:
        err = ctypes.get_errno()
        raise StrictFilterError("cannot install the strict seccomp filter: errno %d (%s)"
                                % (err, os.strerror(err)))
    if ret != 0:
        # With TSYNC, a positive return is the id of a thread that could not
        # be synchronised (it runs under a different filter tree).
        raise StrictFilterError("cannot install the strict seccomp filter: thread %d could "
                                "not be synchronised" % ret)
