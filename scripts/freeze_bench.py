#!/usr/bin/env python3
"""How long the judge's freeze of the candidate's cgroup takes
(boundary.CandidateCgroup.freeze, docs/judge-boundary.md): a process of nine
idle threads in a cgroup2 group of this script's own, frozen and thawed N
times with a short pause between, as the judge does around every timed call.
Prints one line: p50, p90, max and the total.

Needs root. On a cgroup v1 host it mounts a private cgroup2 hierarchy
(freezing needs no controller); on a v2 host it uses a child of its own group.

Usage: sudo python3 scripts/freeze_bench.py [--rounds 200]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker", "harness"))
from kbox_harness import boundary, protocol  # noqa: E402

_IDLE_CHILD = ("import sys, threading, time\n"
               "[threading.Thread(target=time.sleep, args=(600,), daemon=True).start() for _ in range(8)]\n"
               "print('ready', flush=True)\n"
               "sys.stdin.read()\n")


def _group_dir(scratch):
    """(a new cgroup2 directory, the private mount to undo or None)."""
    name = "kbox-freeze-bench-%d" % os.getpid()
    if os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        own = open("/proc/self/cgroup").read().split("0::", 1)[1].strip()
        return os.path.join("/sys/fs/cgroup" + own, name), None
    mount = os.path.join(scratch, "cgroup2")
    os.mkdir(mount)
    subprocess.run(["mount", "-t", "cgroup2", "none", mount], check=True)
    return os.path.join(mount, name), mount


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        group, mount = _group_dir(scratch)
        os.mkdir(group)
        child = subprocess.Popen([sys.executable, "-c", _IDLE_CHILD], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE)
        try:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(child.pid))
            child.stdout.readline()
            opened = lambda name, mode: os.open(os.path.join(group, name), mode)  # noqa: E731
            cgroup = boundary.CandidateCgroup(protocol.CandidateCgroup({
                "version": 2, "procs_fds": [], "freeze_fd": opened("cgroup.freeze", os.O_WRONLY),
                "state_fd": opened("cgroup.events", os.O_RDONLY), "cpu_fd": opened("cpu.stat", os.O_RDONLY),
                "threads_fd": opened("cgroup.threads", os.O_RDONLY)}))
            ms = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                cgroup.freeze()
                ms.append((time.perf_counter() - t0) * 1e3)
                cgroup.thaw()
                time.sleep(0.001)
            cgroup.close()
            ms.sort()
            print("freeze of a 9-thread idle process, %d rounds: p50 %.3f ms, p90 %.3f ms, max %.3f ms, "
                  "total %.0f ms" % (len(ms), ms[len(ms) // 2], ms[int(len(ms) * 0.9)], ms[-1], sum(ms)))
        finally:
            child.kill()
            child.wait()
            for _ in range(100):
                try:
                    os.rmdir(group)
                    break
                except OSError:
                    time.sleep(0.02)
            if mount:
                subprocess.run(["umount", "-l", mount])


if __name__ == "__main__":
    main()
