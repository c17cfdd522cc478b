"""Test helper: compiles a "no process creation, no exec" seccomp filter with
libseccomp (through ctypes) and exports it as kboxd does (seccomp_export_bpf),
so the harness's strict-filter code can be tested without the C++ side."""
import ctypes
import ctypes.util
import errno
import os
import platform

SCMP_ACT_KILL_PROCESS = 0x80000000
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_MASKED_EQ = 7
CLONE_THREAD = 0x00010000


def SCMP_ACT_ERRNO(e):
    return 0x00050000 | (e & 0x0000FFFF)


class ScmpArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def _libseccomp():
    if platform.machine() != "x86_64":
        return None
    for name in ("libseccomp.so.2", ctypes.util.find_library("seccomp")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


LIB = _libseccomp()


def available():
    return LIB is not None


def write_no_spawn_filter(path):
    """Allows everything but fork, vfork, execve, execveat, clone without
    CLONE_THREAD, setrlimit and prlimit64 (killed, as policy/seccomp/
    run_strict.policy kills them); clone3 fails with ENOSYS (its flags live
    in memory a filter cannot read, and glibc then falls back to clone)."""
    lib = LIB
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int,
                                           ctypes.c_uint, ctypes.POINTER(ScmpArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    assert ctx
    try:
        def add(action, name, *cmps):
            nr = lib.seccomp_syscall_resolve_name(name.encode())
            assert nr >= 0, name
            arr = (ScmpArgCmp * max(1, len(cmps)))(*cmps)
            rc = lib.seccomp_rule_add_array(ctx, action, nr, len(cmps), arr)
            assert rc == 0, (name, rc)

        for name in ("fork", "vfork", "execve", "execveat", "setrlimit", "prlimit64"):
            add(SCMP_ACT_KILL_PROCESS, name)
        add(SCMP_ACT_KILL_PROCESS, "clone", ScmpArgCmp(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0))
        add(SCMP_ACT_ERRNO(errno.ENOSYS), "clone3")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            assert lib.seccomp_export_bpf(ctx, fd) == 0
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    return path
