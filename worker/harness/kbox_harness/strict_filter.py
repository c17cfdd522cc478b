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
# setrlimit(resource, new) and prlimit64(pid, resource, new, old); the
# limits whose hard value the kernel enforces with SIGKILL: RLIMIT_CPU (0)
# and RLIMIT_RTTIME (15).
_SETRLIMIT, _PRLIMIT64 = 160, 302
_SIGKILL_LIMITS = (0, 15)


def _arg_low(i):
    return 16 + 8 * i   # struct seccomp_data: nr, arch, ip, then args[6]


def _assemble(lines):
    """Classic BPF from (code, k, jump-if-true label, jump-if-false label)
    lines and ("label", name) markers; a jump label of None is the next line."""
    at, n = {}, 0
    for line in lines:
        if line[0] == "label":
            at[line[1]] = n
        else:
            n += 1
    prog, pc = [], 0
    for line in lines:
        if line[0] == "label":
            continue
        code, k, jt, jf = (tuple(line) + (None, None))[:4]
        off = lambda label: 0 if label is None else at[label] - pc - 1  # noqa: E731
        prog.append(struct.pack("=HBBI", code, off(jt), off(jf), k))
        pc += 1
    return b"".join(prog)


def no_sigkill_program():
    """A BPF program under which candidate code can bring about no SIGKILL:
    kill/tkill/tgkill with SIGKILL, and setting RLIMIT_CPU or RLIMIT_RTTIME
    (whose hard limit the kernel enforces with SIGKILL), fail with EPERM;
    everything else is allowed (the filters under it decide the rest).
    Reading a limit (prlimit64 with no new value, as getrlimit is) passes.

    Why: kboxd reads a stage that died by SIGKILL, with no kill of its own and
    no out-of-memory kill in the job's cgroup, as killed from outside the job:
    kbox's fault (INFRA_ERROR, retried), never the candidate's. That holds
    only if candidate code cannot cause one, to itself or to the judge: a
    compile stage's import that lowered its own CPU limit and spun was
    blamed on kbox. Ints are the arguments' low 32 bits; a pointer is null
    only with both words zero."""
    lines = [(_LD_W_ABS, 4),                                     # arch
             # Not x86_64: allow here; the stage policy under it kills foreign ABIs.
             (_JEQ_K, _AUDIT_ARCH_X86_64, None, "allow"),
             (_LD_W_ABS, 0),                                     # nr
             (_ALU_AND_K, 0xFFFFFFFF & ~_X32_SYSCALL_BIT)]
    for number, arg in _SIGNAL_CALLS:
        lines.append((_JEQ_K, number, "signal_arg%d" % arg, None))
    lines += [(_JEQ_K, _SETRLIMIT, "setrlimit", None),
              (_JEQ_K, _PRLIMIT64, "prlimit64", None),
              (_RET_K, _RET_ALLOW)]
    for arg in sorted({arg for _, arg in _SIGNAL_CALLS}):
        lines += [("label", "signal_arg%d" % arg),
                  (_LD_W_ABS, _arg_low(arg)),
                  (_JEQ_K, _SIGKILL, "eperm", "allow")]
    for name, resource_arg, then in (("setrlimit", 0, "eperm"), ("prlimit64", 1, "new_value")):
        lines += [("label", name), (_LD_W_ABS, _arg_low(resource_arg))]
        for i, limit in enumerate(_SIGKILL_LIMITS):
            last = i == len(_SIGKILL_LIMITS) - 1
            lines.append((_JEQ_K, limit, then, "allow" if last else None))
    lines += [("label", "new_value"),                          # prlimit64's new limit
              (_LD_W_ABS, _arg_low(2)), (_JEQ_K, 0, None, "eperm"),
              (_LD_W_ABS, _arg_low(2) + 4), (_JEQ_K, 0, "allow", "eperm"),
              ("label", "allow"), (_RET_K, _RET_ALLOW),
              ("label", "eperm"), (_RET_K, _RET_ERRNO_EPERM)]
    return _assemble(lines)


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
