"""SIGKILL fault injection for scripts/kbox-load: at random points, kill one of
kboxd's worker processes from outside, as a crashed host process or an
operator's stray kill would, and remember which job it hit.

Targets (each found under kboxd's process tree in /proc):
  launcher   kbox-sandbox, the stage process kboxd waits on
  harness    kbox_stage.py: a compile stage, or a run stage's judge
  candidate  the candidate's process of a run stage (kbox_stage.py's child)
  compiler   cc1plus (or as/ld) under a compile stage
  zygote     kbox_zygote.py, a pre-forked run-stage parent (kboxd's default)

Needs permission to signal the sandbox's uid (root, or the same uid).
"""
import os
import random
import re
import signal
import threading
import time

_JOB_ID = re.compile(r"([0-9a-f]{8}-\d+)(?:-retry\d+)?(?:-(?:compile|run))?")
_COMPILERS = ("cc1plus", "cc1", "as", "ld", "collect2")


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def _processes():
    """{pid: (ppid, argv list)} of every process visible now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = _read("/proc/%s/stat" % name).decode("utf-8", "replace")
        close = stat.rfind(")")
        if close < 0:
            continue
        fields = stat[close + 2:].split()
        argv = [a.decode("utf-8", "replace") for a in _read("/proc/%s/cmdline" % name).split(b"\0") if a]
        out[int(name)] = (int(fields[1]), argv, stat[stat.find("(") + 1:close])
    return out


def _descendants(procs, root):
    children = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    seen, stack = [], [root]
    while stack:
        pid = stack.pop()
        for child in children.get(pid, []):
            seen.append(child)
            stack.append(child)
    return seen


def _job_of(procs, pid):
    """The job id in the command line of `pid` or its nearest ancestor (the
    stage's spec path holds it), or None (a zygote between jobs)."""
    for _ in range(16):
        if pid not in procs:
            return None
        ppid, argv, _ = procs[pid]
        try:
            cwd = os.readlink("/proc/%d/cwd" % pid)  # a stage's cwd is its job's home
        except OSError:
            cwd = ""
        for arg in argv + [cwd]:
            if "/jobs/" in arg or arg.endswith(".pb"):
                m = _JOB_ID.search(os.path.basename(arg) if arg.endswith(".pb") else arg.split("/jobs/")[1])
                if m:
                    return m.group(1)
        pid = ppid
    return None


def classify(procs, pid):
    """The target kind of `pid`, or None when it is no worker process."""
    ppid, argv, comm = procs[pid]
    text = " ".join(argv)
    if comm in _COMPILERS:
        return "compiler"
    if "kbox_zygote.py" in text:
        # The zygote itself; what it forked (the stage: its sandbox's init,
        # the judge, the candidate's process) runs the same command line.
        parent_text = " ".join(procs.get(ppid, (0, [], ""))[1])
        return "zygote" if "kbox_zygote.py" not in parent_text else "preforked-stage"
    if argv and os.path.basename(argv[0]) == "kbox-sandbox":
        return "launcher"
    if "kbox_stage.py" in text:
        parent_text = " ".join(procs.get(ppid, (0, [], ""))[1])
        return "candidate" if "kbox_stage.py" in parent_text else "harness"
    return None


class Killer(object):
    """Every `every_s` seconds (uniformly 0.5x..1.5x), SIGKILLs one random
    worker process of `kboxd_pid`, preferring kinds in turn so each kind is
    hit. `kills` lists what it did: dicts of time, kind, pid, job."""

    KINDS = ("harness", "candidate", "compiler", "launcher", "zygote", "preforked-stage")

    def __init__(self, kboxd_pid, every_s, seed=0, kinds=KINDS):
        self.kboxd_pid = kboxd_pid
        self.every_s = every_s
        self.rng = random.Random(seed)
        self.kinds = list(kinds)
        self.kills = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._turn = 0

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()

    def kill_one(self, kind=None, spare=()):
        """Kills one process of `kind` (or of the next kind that has one),
        none of a job in `spare`; the kill's record, or None when no worker
        process ran."""
        procs = _processes()
        found = {}
        for pid in _descendants(procs, self.kboxd_pid):
            if pid in procs:
                k = classify(procs, pid)
                if k:
                    found.setdefault(k, []).append(pid)
        order = [kind] if kind else self.kinds[self._turn:] + self.kinds[:self._turn]
        for k in order:
            if not found.get(k):
                continue
            pids = [p for p in found[k] if _job_of(procs, p) not in spare]
            if not pids:
                continue
            pid = self.rng.choice(pids)
            job = _job_of(procs, pid)
            if k == "zygote":
                # The job in the stage it forked, if one runs now.
                jobs = [_job_of(procs, c) for c in _descendants(procs, pid)]
                job = next((j for j in jobs if j), None)
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
            self._turn = (self.kinds.index(k) + 1) % len(self.kinds)
            record = {"t": time.time(), "kind": k, "pid": pid, "job": job}
            self.kills.append(record)
            return record
        return None

    def _loop(self):
        if self.every_s <= 0:
            return self._script()
        while not self._stop.wait(self.every_s * self.rng.uniform(0.5, 1.5)):
            self.kill_one()

    def _script(self):
        """every_s <= 0: kill one process of each kind of `kinds`, in order,
        each as soon as one appears (polling /proc), so a short run hits
        every kind it has."""
        for kind in self.kinds:
            while not self._stop.is_set():
                # Each kill a job of its own: the next kind's process of the
                # job just hit would die with it anyway.
                if self.kill_one(kind, spare={k["job"] for k in self.kills if k["job"]}):
                    break
                self._stop.wait(0.05)
