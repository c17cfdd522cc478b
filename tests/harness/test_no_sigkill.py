"""The no-SIGKILL filter of candidate code (strict_filter.install_no_sigkill):
kboxd reads a SIGKILL it did not send, with no OOM kill, as a kill from
outside the job (kbox's fault), which holds only if candidate code cannot send
one. Each case runs in a fresh interpreter: the filter is for life."""
import os
import subprocess
import sys
import textwrap

import pytest

HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness")

pytestmark = pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 numbers")


def _script(code):
    full = "import sys; sys.path.insert(0, %r)\n" % HARNESS + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", full], capture_output=True, text=True,
                          timeout=120)


def test_sigkill_is_refused_to_every_call_and_thread_other_signals_pass():
    done = _script("""
        import os, signal, subprocess, threading
        from kbox_harness import strict_filter
        child = subprocess.Popen(["sleep", "60"])
        strict_filter.install_no_sigkill()
        refused = []
        def attempt(name, fn):
            try:
                fn()
            except PermissionError:
                refused.append(name)
        attempt("kill child", lambda: os.kill(child.pid, signal.SIGKILL))
        attempt("kill self", lambda: os.kill(os.getpid(), signal.SIGKILL))
        attempt("killpg", lambda: os.killpg(os.getpgid(0), signal.SIGKILL))
        attempt("tgkill", lambda: signal.pthread_kill(threading.get_ident(), signal.SIGKILL))
        # Installed with TSYNC: a thread started before or after is bound too.
        t = threading.Thread(target=attempt, args=("thread", lambda: os.kill(child.pid, 9)))
        t.start(); t.join()
        # The int the kernel reads is the low 32 bits.
        attempt("high bits", lambda: os.kill(child.pid, 9 | (1 << 32)))
        print(",".join(refused))
        os.kill(child.pid, signal.SIGTERM)
        print("child", child.wait())
        os.kill(os.getpid(), 0)  # signal 0 (a probe) still works
        print("alive")
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert set(lines[0].split(",")) >= {"kill child", "kill self", "killpg", "tgkill", "thread"}
    assert lines[1] == "child -15"
    assert lines[2] == "alive"


def test_program_shape():
    sys.path.insert(0, HARNESS)
    from kbox_harness import strict_filter
    prog = strict_filter.no_sigkill_program()
    assert len(prog) % 8 == 0
    assert 0 < len(prog) // 8 < 64


def test_the_cpu_limits_the_kernel_enforces_with_sigkill_cannot_be_set():
    # A limit lowered to what the process has used gets it SIGKILLed by the
    # kernel, which kboxd would read as a kill from outside the job.
    done = _script("""
        import resource
        from kbox_harness import strict_filter
        strict_filter.install_no_sigkill()
        refused = []
        def attempt(name, fn):
            try:
                fn()
            except PermissionError:
                refused.append(name)
            except ValueError as e:  # CPython's word for setrlimit's EPERM
                if "not allowed" not in str(e):
                    raise
                refused.append(name)
        cpu = resource.getrlimit(resource.RLIMIT_CPU)            # a read: allowed
        attempt("setrlimit cpu", lambda: resource.setrlimit(resource.RLIMIT_CPU, (1, 1)))
        attempt("prlimit cpu", lambda: resource.prlimit(0, resource.RLIMIT_CPU, (1, 1)))
        attempt("rttime", lambda: resource.setrlimit(resource.RLIMIT_RTTIME, (1, 1)))
        resource.prlimit(0, resource.RLIMIT_CPU)                 # a read through prlimit64
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        attempt("nofile", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
        print(",".join(refused))
        print(resource.getrlimit(resource.RLIMIT_CPU) == cpu)
    """)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert set(lines[0].split(",")) == {"setrlimit cpu", "prlimit cpu", "rttime"}, lines
    assert lines[1] == "True"
