"""The judge's side of the boundary (docs/judge-boundary.md): freezing the
candidate's cgroup, reading its CPU time and threads, and the evidence checks
that need no sandbox (a model that keeps copies of its outputs).

The freezer tests make a cgroup of their own (v2, or v1's freezer and cpuacct
hierarchies) and need root; they are skipped where neither can be made."""
import os
import subprocess
import sys
import time
import types

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "harness"))
from kbox_harness import boundary, dynamic_checks, protocol  # noqa: E402

_SPIN = """
import threading, time, sys
def spin():
    while True:
        pass
for _ in range(2):
    threading.Thread(target=spin, daemon=True).start()
sys.stdout.write("ready\\n"); sys.stdout.flush()
time.sleep(60)
"""


class _Group(object):
    """A cgroup of this test's own, as kboxd would give the judge: its
    control files opened, the candidate's group's layout."""

    def __init__(self, v2_root=None):
        name = "kbox-test-boundary-%d" % os.getpid()
        self.dirs = []
        if v2_root or os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            if v2_root:
                d = os.path.join(v2_root, name)
            else:
                own = open("/proc/self/cgroup").read().split("0::", 1)[1].strip()
                d = os.path.join("/sys/fs/cgroup" + own, name)
            os.mkdir(d)
            self.dirs = [d]
            self.version, self.procs = 2, [os.path.join(d, "cgroup.procs")]
            files = ("cgroup.freeze", "cgroup.events", "cpu.stat", "cgroup.threads")
            self.paths = [os.path.join(d, f) for f in files]
        else:
            freezer = "/sys/fs/cgroup/freezer/" + name
            cpuacct = "/sys/fs/cgroup/cpuacct/" + name
            os.mkdir(freezer)
            self.dirs.append(freezer)
            os.mkdir(cpuacct)
            self.dirs.append(cpuacct)
            self.version = 1
            self.procs = [os.path.join(freezer, "cgroup.procs"), os.path.join(cpuacct, "cgroup.procs")]
            self.paths = [os.path.join(freezer, "freezer.state"), os.path.join(freezer, "freezer.state"),
                          os.path.join(cpuacct, "cpuacct.usage"), os.path.join(freezer, "tasks")]

    def spec(self):
        fds = [os.open(p, os.O_WRONLY) for p in self.procs]
        freeze = os.open(self.paths[0], os.O_WRONLY)
        rest = [os.open(p, os.O_RDONLY) for p in self.paths[1:]]
        return protocol.CandidateCgroup({"version": self.version, "procs_fds": fds, "freeze_fd": freeze,
                                         "state_fd": rest[0], "cpu_fd": rest[1], "threads_fd": rest[2]})

    def join(self, pid):
        for p in self.procs:
            with open(p, "w") as f:
                f.write(str(pid))

    def remove(self):
        for d in reversed(self.dirs):
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except OSError:
                    time.sleep(0.02)


@pytest.fixture(params=["host", "cgroup2"])
def group(request, tmp_path):
    # "host": the host's own hierarchy (v1 here, v2 on the GPU machine);
    # "cgroup2": a cgroup2 mount of the test's own, so that the v2 files
    # (cgroup.freeze, cgroup.events' notification, cpu.stat) are exercised on
    # a v1 host too (freezing, cpu.stat and cgroup.threads need no controller).
    mounted = None
    if request.param == "cgroup2":
        if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            pytest.skip("the host's hierarchy is cgroup2 already")
        mounted = str(tmp_path / "cgroup2")
        os.mkdir(mounted)
        if subprocess.run(["mount", "-t", "cgroup2", "none", mounted],
                          stderr=subprocess.DEVNULL).returncode != 0:
            pytest.skip("cannot mount cgroup2 here")
    try:
        g = _Group(mounted)
    except OSError as e:
        if mounted:
            subprocess.run(["umount", "-l", mounted])  # lazily: the spec's descriptors may be open
        pytest.skip("cannot make a cgroup here: %s" % e)
    yield g
    g.remove()
    if mounted:
        subprocess.run(["umount", "-l", mounted])  # lazily: the spec's descriptors may be open


def _busy(cgroup, seconds):
    c0 = cgroup.cpu_ns()
    time.sleep(seconds)
    return (cgroup.cpu_ns() - c0) / 1e9


def test_a_frozen_candidate_uses_no_cpu_and_its_threads_are_counted(group):
    child = subprocess.Popen([sys.executable, "-c", _SPIN], stdout=subprocess.PIPE)
    try:
        group.join(child.pid)
        assert child.stdout.readline() == b"ready\n"
        cgroup = boundary.CandidateCgroup(group.spec())
        assert cgroup.threads() >= 3  # the main thread and its two spinners
        # Spinning: a tenth of a core at least, even on a loaded 2-core CI
        # host where the suites run side by side (it got 0.4 of one there).
        assert _busy(cgroup, 0.5) > 0.05
        cgroup.freeze()
        assert cgroup.frozen and cgroup.freezes == 1
        # Native or Python, no thread of it runs while the judge works.
        assert _busy(cgroup, 0.5) < 0.005
        cgroup.thaw()
        assert _busy(cgroup, 0.5) > 0.05
        cgroup.close()
    finally:
        child.kill()
        child.wait()


def test_freezing_a_frozen_group_again_costs_nothing(group):
    child = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE)
    try:
        group.join(child.pid)
        assert child.stdout.readline() == b"ready\n"
        cgroup = boundary.CandidateCgroup(group.spec())
        cgroup.freeze()
        cgroup.freeze()
        assert cgroup.freezes == 1
        cgroup.thaw()
        cgroup.thaw()
        assert not cgroup.frozen
    finally:
        child.kill()
        child.wait()


def test_a_group_without_its_freezer_is_refused():
    with pytest.raises(boundary.BoundaryError):
        boundary.CandidateCgroup(protocol.CandidateCgroup({"version": 2}))


def test_the_judge_drops_to_kill_alone_only_when_it_split():
    # No candidate id (the insecure mode, these tests): nothing to drop.
    boundary.settle_judge(None)
    boundary.settle_judge(types.SimpleNamespace(uid=0))


class _Workspace(torch.nn.Module):
    """An honest model with a scratch buffer it overwrites on every call."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scratch", torch.zeros(64, 32))
        self.weight = torch.nn.Parameter(torch.randn(32, 32))

    def forward(self, x):
        torch.mm(x, self.weight, out=self.scratch)
        return self.scratch.relu() * 2


class _Replay(torch.nn.Module):
    """Keeps every output it returns in a buffer, to replay later."""

    def __init__(self):
        super().__init__()
        self.register_buffer("kept", torch.zeros(4, 64 * 32))
        self.slots = [torch.zeros(64 * 32)]
        self.calls = 0

    def forward(self, x):
        out = x.repeat(1, 1) * 3 + 1
        self.kept[self.calls % 4].copy_(out.reshape(-1))
        self.calls += 1
        return out


def test_a_model_that_keeps_its_outputs_is_found():
    x = torch.randn(64, 32)
    m = _Replay()
    out = m(x)
    assert dynamic_checks.output_copies(m, out) == ["kept"]
    # Nothing kept: the honest model's scratch is an intermediate, not its output.
    h = _Workspace()
    with torch.no_grad():  # as the run stage calls forward
        assert dynamic_checks.output_copies(h, h(x)) == []


def test_an_output_that_is_the_models_own_buffer_is_not_a_copy():
    # Returning a buffer (it shares its storage) keeps nothing for later:
    # the next call overwrites it.
    class ReturnsBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("out", torch.zeros(64, 32))

        def forward(self, x):
            self.out.copy_(x * 2)
            return self.out
    m = ReturnsBuffer()
    assert dynamic_checks.output_copies(m, m(torch.randn(64, 32))) == []


def test_a_copy_in_a_large_tensor_is_found_as_one_block():
    class Big(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.store = torch.zeros(5 << 20)

        def forward(self, x):
            out = x + 1
            self.store[12345:12345 + out.numel()] = out.reshape(-1)
            return out
    m = Big()
    assert dynamic_checks.output_copies(m, m(torch.randn(64, 32))) == ["store"]


def test_in_place_and_out_variants_count_as_their_base_op():
    assert dynamic_checks.library_ops({"addmm_": 1, "add_": 2, "mul": 1}) == ["addmm"]
    assert dynamic_checks.library_ops({"baddbmm": 1, "view": 1, "copy_": 1}) == ["baddbmm"]
    # Deny by default: an op not on the glue list is library compute.
    assert dynamic_checks.library_ops({"some_new_op": 1}) == ["some_new_op"]
