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
import struct

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
    _install_program(read_program(path), "the strict seccomp filter")


# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_W_ABS = 0x20
_ALU_AND_K = 0x54
_JEQ_K = 0x15
_RET_K = 0x06
_RET_ALLOW = 0x7fff0000
_RET_ERRNO_EPERM = 0x00050000 | 1
_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_SYSCALL_BIT = 0x40000000
# x86_64 numbers of the calls that send a signal to a pid, and the argument
# holding the signal: kill(pid, sig), tkill(tid, sig), tgkill(tgid, tid, sig).
# (rt_sigqueueinfo, rt_tgsigqueueinfo and pidfd_send_signal are refused by
# the stage policies already.)
_SIGNAL_CALLS = ((62, 1), (200, 1), (234, 2))
_SIGKILL = 9


def no_sigkill_program():
    """A BPF program that makes kill/tkill/tgkill with SIGKILL fail with EPERM
    and allows everything else (the filters under it decide the rest).

    Why: kboxd reads a stage that died by SIGKILL, with no kill of its own and
    no out-of-memory kill in the job's cgroup, as killed from outside the job:
    kbox's fault (INFRA_ERROR), never the candidate's. That holds only if
    candidate code cannot send SIGKILL, to itself or to the judge.
    The signal is an int: only the argument's low 32 bits count."""
    def insn(code, k, jt=0, jf=0):
        return (code, jt, jf, k)
    n = len(_SIGNAL_CALLS)
    prog = [insn(_LD_W_ABS, 4)]                         # arch
    # Not x86_64: allow here; the stage policy under it kills foreign ABIs.
    prog.append(insn(_JEQ_K, _AUDIT_ARCH_X86_64, 0, 2 + n + 1 + 2 * n))
    prog.append(insn(_LD_W_ABS, 0))                    # nr
    prog.append(insn(_ALU_AND_K, 0xFFFFFFFF & ~_X32_SYSCALL_BIT))
    # One jump per call to its argument check below; none: allow.
    for i, (number, _) in enumerate(_SIGNAL_CALLS):
        prog.append(insn(_JEQ_K, number, (n - i - 1) + 1 + 2 * i, 0))
    prog.append(insn(_RET_K, _RET_ALLOW))
    for i, (_, arg) in enumerate(_SIGNAL_CALLS):
        prog.append(insn(_LD_W_ABS, 16 + 8 * arg))     # low word of args[arg]
        # SIGKILL: to the EPERM return; else to the allow return.
        to_eperm = 2 * (n - i - 1) + 1
        prog.append(insn(_JEQ_K, _SIGKILL, to_eperm, to_eperm - 1))
    prog.append(insn(_RET_K, _RET_ALLOW))
    prog.append(insn(_RET_K, _RET_ERRNO_EPERM))
    return b"".join(struct.pack("=HBBI", code, jt, jf, k) for code, jt, jf, k in prog)


def install_no_sigkill():
    """Installs no_sigkill_program() on every thread of this process."""
    _install_program(no_sigkill_program(), "the no-SIGKILL seccomp filter")


def _no_new_privs():
    try:
        with open("/proc/self/status") as f:
            return any(line.split() == ["NoNewPrivs:", "1"] for line in f)
    except OSError:
        return False


def _install_program(data, what):
    machine = platform.machine()
    nr = _SYS_SECCOMP.get(machine)
    if nr is None:
        raise StrictFilterError("cannot install %s: unsupported architecture %s" % (what, machine))
    libc = ctypes.CDLL(None, use_errno=True)
    # Set by the sandbox already (and the compile stage's policy does not
    # allow setting it again); needed outside it.
    if not _no_new_privs() and libc.prctl(ctypes.c_int(_PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise StrictFilterError("cannot install %s: prctl(" % what +
                                "PR_SET_NO_NEW_PRIVS): errno %d (%s)" % (err, os.strerror(err)))
    buf = ctypes.create_string_buffer(data, len(data))
    prog = _SockFprog(len(data) // _SOCK_FILTER_SIZE, ctypes.cast(buf, ctypes.c_void_p))
    libc.syscall.restype = ctypes.c_long
    ret = libc.syscall(ctypes.c_long(nr), ctypes.c_long(_SECCOMP_SET_MODE_FILTER),
                       ctypes.c_long(_SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if ret == -1:
        err = ctypes.get_errno()
        raise StrictFilterError("cannot install %s: errno %d (%s)"
                                % (what, err, os.strerror(err)))
    if ret != 0:
        # With TSYNC, a positive return is the id of a thread that could not
        # be synchronised (it runs under a different filter tree).
        raise StrictFilterError("cannot install %s: thread %d could not be synchronised"
                                % (what, ret))
