"""The run stage's strict seccomp filter and the tool broker (ptxas for Triton)."""
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

import seccomp_bpf

HARNESS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness")
sys.path.insert(0, HARNESS)

from kbox_harness import strict_filter, tool_broker, triton_prep  # noqa: E402

needs_seccomp = pytest.mark.skipif(not seccomp_bpf.available(),
                                   reason="needs x86_64 and libseccomp")


@pytest.fixture(scope="module")
def bpf(tmp_path_factory):
    if not seccomp_bpf.available():
        pytest.skip("needs x86_64 and libseccomp")
    return seccomp_bpf.write_no_spawn_filter(str(tmp_path_factory.mktemp("bpf") / "s.bpf"))


@pytest.fixture
def fake_ptxas(tmp_path):
    """A "ptxas" that logs its arguments into the file after -o, prints to
    both streams, and exits 3 when asked to fail."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    path = tmp_path / "bin" / "ptxas"
    path.parent.mkdir()
    path.write_text(textwrap.dedent("""\
        #!/bin/sh
        out=""
        prev=""
        for a in "$@"; do
            [ "$prev" = "-o" ] && out="$a"
            [ "$a" = "--fail" ] && { echo "ptxas fatal: asked to" >&2; exit 3; }
            prev="$a"
        done
        [ -n "$out" ] && echo "$*" > "$out"
        echo "ptxas stdout"
        echo "ptxas stderr" >&2
        exit 0
        """))
    path.chmod(0o755)
    return str(path), str(tmp)


def _script(code, **env):
    """Runs `code` in a fresh interpreter with the harness importable."""
    full = "import sys; sys.path.insert(0, %r)\n" % HARNESS + textwrap.dedent(code)
    e = dict(os.environ)
    e.update(env)
    return subprocess.run([sys.executable, "-c", full], capture_output=True, env=e, timeout=120)


# -- the strict filter ------------------------------------------------------------------

@needs_seccomp
def test_filter_kills_fork_on_every_thread_threads_still_work(bpf):
    r = _script("""
        import os, threading
        from kbox_harness import strict_filter
        go = threading.Event()
        def forker():  # a thread started before the filter: TSYNC must cover it
            go.wait()
            os.fork()
            print("fork got through", flush=True)
        early = threading.Thread(target=forker)
        early.start()
        strict_filter.install(%r)
        done = []
        t = threading.Thread(target=done.append, args=(1,))  # clone(CLONE_THREAD)
        t.start(); t.join()
        print("threads ok" if done == [1] else "thread failed", flush=True)
        go.set()
        early.join()
        print("still alive", flush=True)
        """ % bpf)
    assert r.returncode == -signal.SIGSYS, (r.returncode, r.stdout, r.stderr)
    assert r.stdout.decode().splitlines() == ["threads ok"], r.stderr


@needs_seccomp
@pytest.mark.parametrize("call", ["os.system('true')", "subprocess.run(['true'])",
                                  "os.execv('/bin/true', ['true'])"])
def test_filter_kills_spawn_and_exec(bpf, call):
    r = _script("""
        import os, subprocess
        from kbox_harness import strict_filter
        strict_filter.install(%r)
        print("installed", flush=True)
        %s
        print("got through", flush=True)
        """ % (bpf, call))
    assert r.returncode == -signal.SIGSYS, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == b"installed\n"


def test_filter_file_must_hold_whole_instructions(tmp_path):
    for size in (0, 12, 8 * 4097):
        p = tmp_path / ("f%d" % size)
        p.write_bytes(b"\0" * size)
        with pytest.raises(strict_filter.StrictFilterError, match="cannot install"):
            strict_filter.read_program(str(p))


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86_64 only")
def test_kernel_rejecting_the_program_is_reported(tmp_path):
    # One instruction that loads and never returns: the kernel answers EINVAL.
    p = tmp_path / "invalid.bpf"
    p.write_bytes(b"\x20\x00\x00\x00\x00\x00\x00\x00")
    r = _script("""
        from kbox_harness import strict_filter
        try:
            strict_filter.install(%r)
        except strict_filter.StrictFilterError as e:
            print(e)
        """ % str(p))
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == \
        "cannot install the strict seccomp filter: errno 22 (Invalid argument)"


# -- the tool broker --------------------------------------------------------------------

def test_broker_runs_ptxas_and_refuses_everything_else(fake_ptxas, tmp_path):
    ptxas, tmp = fake_ptxas
    src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.o")
    open(src, "w").close()
    broker = tool_broker.Broker(ptxas, roots=[tmp]).start()
    try:
        rc, stdout, stderr = broker.run_ptxas(
            [ptxas, "-lineinfo", "-v", "--gpu-name=sm_90a", src, "-o", out])
        assert (rc, stdout, stderr) == (0, b"ptxas stdout\n", b"ptxas stderr\n")
        with open(out) as f:
            assert f.read() == "-lineinfo -v --gpu-name=sm_90a %s -o %s\n" % (src, out)
        assert broker.run_ptxas([ptxas, "--fail"])[0] == 3
        refused = [
            (["/bin/sh", "-c", "id"], None),                    # another binary
            ([os.path.join(tmp, "..", "bin", "ptxas") + "x"], None),
            ([ptxas, "/etc/passwd", "-o", out], None),          # path outside the dirs
            ([ptxas, src, "-o", str(tmp_path / "k.o")], None),  # output outside
            ([ptxas, "--options-file=" + src], None),           # arguments from a file
            ([ptxas, "--output-file=/etc/x", src], None),       # option value outside
            ([ptxas, "k.ptx"], "/"),                             # cwd outside
        ]
        for argv, cwd in refused:
            with pytest.raises(tool_broker.BrokerRefused):
                broker.run_ptxas(argv, cwd=cwd)
        # A relative path resolves against the (allowed) cwd.
        assert broker.run_ptxas([ptxas, "k.ptx", "-o", "k2.o"], cwd=tmp)[0] == 0
        # Raw requests the client class would not send are refused, not fatal.
        assert "refused" in _raw(broker, {"op": "exec", "argv": ["/bin/sh"]})
        assert "refused" in _raw(broker, ["not", "an", "object"])
        assert broker.run_ptxas([ptxas, "-v"])[0] == 0  # still serving
    finally:
        pid = broker.pid
        broker.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # exited when its socket closed, and reaped


def _raw(broker, obj):
    with broker._lock:
        tool_broker._send(broker._sock, obj)
        return tool_broker._recv(broker._sock, 1 << 20)


def test_broker_exits_when_the_harness_dies(fake_ptxas):
    ptxas, tmp = fake_ptxas
    r = _script("""
        import os
        from kbox_harness import tool_broker
        b = tool_broker.Broker(%r, roots=[%r]).start()
        print(b.pid, flush=True)
        os._exit(0)
        """ % (ptxas, tmp))
    pid = int(r.stdout)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("broker %d outlived the harness" % pid)


def test_build_requests_are_checked(tmp_path):
    tmp = str(tmp_path)
    ok = {"name": "__triton_launcher", "src": os.path.join(tmp, "main.c"), "srcdir": tmp,
          "library_dirs": ["/usr/lib/x86_64-linux-gnu"], "include_dirs": ["/opt/x", None],
          "libraries": ["cuda"]}
    assert tool_broker.check_build(ok, [tmp]) is None
    for change in ({"name": "../x"}, {"src": "/etc/main.c"}, {"src": os.path.join(tmp, "a.so")},
                   {"srcdir": "/"}, {"include_dirs": ["-fplugin=x"]},
                   {"libraries": ["cuda -fplugin=/tmp/p.so"]}, {"library_dirs": "/usr/lib"}):
        assert tool_broker.check_build(dict(ok, **change), [tmp]) is not None, change


# -- the shim Triton's modules see instead of `subprocess` ---------------------------------

def test_shim_forwards_ptxas_like_subprocess(fake_ptxas):
    ptxas, tmp = fake_ptxas
    src, out = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.o")
    open(src, "w").close()
    broker = tool_broker.Broker(ptxas, roots=[tmp]).start()
    shim = triton_prep.SubprocessShim(broker)
    try:
        # Triton's make_cubin: stderr to a log file opened mode 'r', check=True.
        with tempfile.NamedTemporaryFile(mode="r", suffix=".log", dir=tmp) as flog:
            r = shim.run([ptxas, "-v", src, "-o", out], check=True, close_fds=False, stderr=flog)
            assert r.returncode == 0 and r.stdout is None
            assert open(flog.name).read() == "ptxas stderr\n"
            with pytest.raises(shim.CalledProcessError) as e:
                shim.run([ptxas, "--fail"], check=True, close_fds=False, stderr=flog)
            assert e.value.returncode == 3
            assert "asked to" in open(flog.name).read()
        # knobs.NvidiaTool.from_path: check_output with stderr merged.
        assert shim.check_output([ptxas, "--version"], stderr=shim.STDOUT) == \
            b"ptxas stdout\nptxas stderr\n"
        r = shim.run([ptxas, "-v"], capture_output=True, text=True)
        assert (r.stdout, r.stderr) == ("ptxas stdout\n", "ptxas stderr\n")
        assert shim.PIPE == subprocess.PIPE and shim.TimeoutExpired is subprocess.TimeoutExpired
        # Anything else raises a clear error instead of dying by SIGSYS.
        with pytest.raises(tool_broker.BrokerRefused):
            shim.check_call(["cc", "main.c"])
        with pytest.raises(tool_broker.BrokerRefused):
            shim.check_output(["/sbin/ldconfig", "-p"])
        with pytest.raises(tool_broker.BrokerRefused):
            shim.Popen([ptxas])
        with pytest.raises(tool_broker.BrokerRefused):
            shim.run(ptxas + " -v", shell=True)
    finally:
        broker.close()


@needs_seccomp
def test_ptxas_through_the_broker_under_the_strict_filter(bpf, fake_ptxas):
    # The whole point: after the filter, ptxas still runs (in the broker),
    # while the process itself still cannot fork.
    ptxas, tmp = fake_ptxas
    r = _script("""
        import os
        from kbox_harness import strict_filter, tool_broker, triton_prep
        b = tool_broker.Broker(%r, roots=[%r]).start()
        strict_filter.install(%r)
        shim = triton_prep.SubprocessShim(b)
        print(shim.check_output([%r, "--version"]).decode().strip(), flush=True)
        os.fork()
        print("fork got through", flush=True)
        """ % (ptxas, tmp, bpf, ptxas))
    assert r.returncode == -signal.SIGSYS, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == b"ptxas stdout\n", r.stderr


def test_libcuda_dir_from_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f01-7f02 rw-p 00000000 00:00 0 \n"
        "7f02-7f03 r-xp 00000000 08:01 2 /usr/local/nvidia/lib64/libcuda.so.550.54.15\n")
    assert triton_prep.libcuda_dir(str(maps)) == "/usr/local/nvidia/lib64"
    assert triton_prep.libcuda_dir(str(tmp_path / "none")) == ""
