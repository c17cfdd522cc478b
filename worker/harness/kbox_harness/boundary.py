"""The trust boundary between the run stage's judge and the candidate's process
(docs/judge-boundary.md).

The judge forks the candidate's process before any client code runs. With a
StageSpec.candidate_boundary from a sandboxed kboxd, the child then, before
anything else:

- joins its own cgroup (which the judge freezes while it works, and whose
  threads and CPU time it reads), through descriptors kboxd opened;
- takes the candidate's uid and gid (the judge's are another pair: the
  candidate's process can neither signal the judge nor open its files) and
  drops every capability;
- shares the stage's pid namespace, whose procfs (hidepid=invisible) lists
  no process of another uid: the judge has no /proc entry it can see, and
  a uid apart no signal of its reaches the judge (not one of its own: libcuda
  names its threads through /proc/<getpid()>/task/<tid>/comm, which a nested
  namespace without a procfs of its own gets wrong, and CUDA fails to start);
- starts its own session, dies with the judge, and takes the candidate's
  environment and working directory (its HOME, TMPDIR and caches; none of
  the judge's).

The judge drops CAP_SETUID and CAP_SETGID as soon as the fork returns and
keeps CAP_KILL only, to stop a process of another uid.

Every step is checked; one that fails ends the child before it serves a
command (the judge then reports kbox's failure), never a candidate judged
without its boundary.
"""
import ctypes
import errno
import os
import select
import time

_CAP_VERSION_3 = 0x20080522
CAP_KILL = 5
CAP_SETGID = 6
CAP_SETUID = 7
_PR_SET_PDEATHSIG = 1
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4

# How long a freeze may take before the candidate's process counts as one
# that resists it (a task in an uninterruptible sleep delays a freeze).
FREEZE_TIMEOUT_S = 2.0
# How long a v2 freeze is watched by re-reading cgroup.events before it is
# waited for by its notification; most freezes end within 0.1 ms.
_FREEZE_SPIN_S = 0.005

_libc = ctypes.CDLL(None, use_errno=True)


class BoundaryError(Exception):
    """A step of the boundary failed: kbox's fault, never judged without it."""


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise BoundaryError("%s failed: %s" % (what, os.strerror(e)))


def set_capabilities(caps):
    """Effective, permitted and inheritable sets of this thread become `caps`
    (capability numbers), the ambient set empty. Only a drop is ever asked."""
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "PR_CAP_AMBIENT_CLEAR_ALL")
    low = high = 0
    for cap in caps:
        if cap < 32:
            low |= 1 << cap
        else:
            high |= 1 << (cap - 32)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)(low, low, low, high, high, high)
    _check(_libc.capset(header, data), "capset")


def held_capabilities():
    """{"CapEff": int, "CapPrm": int, "CapInh": int, "CapAmb": int} of this process."""
    out = {}
    with open("/proc/self/status", "r") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("CapEff", "CapPrm", "CapInh", "CapAmb"):
                out[name] = int(value.strip(), 16)
    return out


def _single_threaded():
    return len(os.listdir("/proc/self/task")) == 1


def _threads_named():
    """'N threads (name xK, ...)': which library's pool it is, for the report."""
    names = {}
    tasks = os.listdir("/proc/self/task")
    for tid in tasks:
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
        except OSError:
            continue
        names[name] = names.get(name, 0) + 1
    return "%d threads (%s)" % (len(tasks), ", ".join(
        "%s x%d" % (n, k) for n, k in sorted(names.items())))


def settle_judge(boundary):
    """In the judge, right after the fork: CAP_KILL alone (capabilities are
    per thread, so the judge must have no other thread yet). CAP_SETUID and
    CAP_SETGID go: the split is done."""
    if boundary is None or not boundary.uid:
        return
    if not _single_threaded():
        raise BoundaryError("the judge has %s when it drops its capabilities" % _threads_named())
    set_capabilities([CAP_KILL])
    held = held_capabilities()
    if held.get("CapEff") != 1 << CAP_KILL or held.get("CapPrm") != 1 << CAP_KILL or held.get("CapAmb"):
        raise BoundaryError("the judge still holds capabilities %r" % held)


def enter_candidate(boundary, close_fds):
    """In the forked child, before it serves any command. `close_fds`: the
    judge's descriptors (its pipe ends, the result pipe, the arenas')."""
    for fd in close_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    if boundary is None:
        return
    cgroup = boundary.cgroup
    if cgroup is not None:
        for fd in cgroup.procs_fds:
            try:
                os.write(fd, b"0")  # "0": this process (its threads follow)
            except OSError as e:
                raise BoundaryError("joining the candidate's cgroup failed: %s" % e)
        for fd in cgroup.procs_fds + [cgroup.freeze_fd, cgroup.state_fd, cgroup.cpu_fd, cgroup.threads_fd]:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
    if boundary.uid:
        if not _single_threaded():
            raise BoundaryError("the candidate's process has other threads before its uid changes")
        os.setresgid(boundary.gid, boundary.gid, boundary.gid)
        os.setresuid(boundary.uid, boundary.uid, boundary.uid)
        set_capabilities([])
        held = held_capabilities()
        if any(held.values()):
            raise BoundaryError("the candidate's process still holds capabilities %r" % held)
        if os.getresuid() != (boundary.uid,) * 3 or os.getresgid() != (boundary.gid,) * 3:
            raise BoundaryError("the candidate's process did not take the candidate's ids")
    # After the uid change, which clears it: it dies with the judge.
    _check(_libc.prctl(_PR_SET_PDEATHSIG, 9, 0, 0, 0), "PR_SET_PDEATHSIG")
    # A session and process group of its own: kill(0, ...) reaches nothing
    # of the judge's.
    try:
        os.setsid()
    except OSError:
        pass
    if boundary.env:
        os.environ.clear()
        for kv in boundary.env:
            name, _, value = kv.partition("=")
            os.environ[name] = value
        import tempfile
        tempfile.tempdir = None  # TMPDIR is read again
    if boundary.cwd:
        os.chdir(boundary.cwd)


class CandidateCgroup(object):
    """The judge's hold on the candidate's cgroup (StageSpec's CandidateCgroup):
    freezing, thawing, its CPU time and thread count."""

    def __init__(self, spec):
        self.version = spec.version
        self._freeze = spec.freeze_fd
        self._state = spec.state_fd
        self._cpu = spec.cpu_fd
        self._threads = spec.threads_fd
        self.frozen = False
        self.freeze_ms = 0.0  # time spent freezing (phase_ms "freeze")
        self.freezes = 0
        for fd in spec.procs_fds:  # the candidate's process joined through its copies
            try:
                os.close(fd)
            except OSError:
                pass
        if self.version not in (1, 2) or self._freeze < 0 or self._state < 0:
            raise BoundaryError("the candidate's cgroup came without its freezer")

    def _read(self, fd):
        chunks = []
        offset = 0
        while True:
            data = os.pread(fd, 65536, offset)
            if not data:
                break
            chunks.append(data)
            offset += len(data)
        return b"".join(chunks).decode("ascii", "replace")

    def _is_frozen(self):
        text = self._read(self._state)
        if self.version == 2:
            return "frozen 1" in text
        return text.strip() == "FROZEN"

    def freeze(self):
        """Stops every thread of the candidate's process; returns once they
        are stopped. Raises BoundaryError past FREEZE_TIMEOUT_S."""
        if self.frozen:
            return
        t0 = time.perf_counter()
        os.write(self._freeze, b"1" if self.version == 2 else b"FROZEN")
        deadline = t0 + FREEZE_TIMEOUT_S
        poller = None
        while not self._is_frozen():
            now = time.perf_counter()
            if now > deadline:
                raise BoundaryError("the candidate's process was not frozen within %.1f s"
                                    % FREEZE_TIMEOUT_S)
            if self.version == 2 and now - t0 < _FREEZE_SPIN_S:
                # Re-read, do not wait for cgroup.events' notification: the
                # kernel sends at most one per file every 10 ms
                # (cgroup_file_notify), so a freeze soon after the last thaw
                # waited ~15 ms for news of a freeze done in 0.1 ms.
                time.sleep(0.00005)
            elif self.version == 2:
                # A slow freeze (a task in an uninterruptible sleep): wait
                # for cgroup.events to notify a change (POLLPRI).
                if poller is None:
                    poller = select.poll()
                    poller.register(self._state, select.POLLPRI | select.POLLERR)
                poller.poll(max(1, min(10, int((deadline - now) * 1000))))
            else:
                # v1 freezes on each write of FROZEN until every task is.
                time.sleep(0.0001)
                os.write(self._freeze, b"FROZEN")
        self.frozen = True
        self.freezes += 1
        self.freeze_ms += (time.perf_counter() - t0) * 1e3

    def thaw(self):
        if not self.frozen:
            return
        os.write(self._freeze, b"0" if self.version == 2 else b"THAWED")
        self.frozen = False

    def cpu_ns(self):
        """CPU time the candidate's process has used, ns; None without accounting."""
        if self._cpu < 0:
            return None
        text = self._read(self._cpu)
        if self.version == 2:
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name == "usage_usec":
                    return int(value) * 1000
            return None
        return int(text.strip() or 0)

    def threads(self):
        """Threads of the candidate's process (every task in its group)."""
        if self._threads < 0:
            return None
        return len([line for line in self._read(self._threads).split() if line.strip()])

    def close(self):
        for fd in (self._freeze, self._state, self._cpu, self._threads):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._freeze = self._state = self._cpu = self._threads = -1


def candidate_cgroup(boundary):
    """The judge's CandidateCgroup, or None where kboxd gave none."""
    if boundary is None or boundary.cgroup is None:
        return None
    return CandidateCgroup(boundary.cgroup)


def no_such_process(e):
    return isinstance(e, OSError) and e.errno == errno.ESRCH
