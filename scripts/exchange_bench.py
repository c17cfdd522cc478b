#!/usr/bin/env python3
"""Times one output crossing from a forked process to this one, through a
file (exchange.save/load) and through the arena (save_to_arena/
load_from_arena), on the GPU when there is one (docs/exchange-arena.md).

    python3 scripts/exchange_bench.py [--mib 4 32 100] [--rounds 5]

Prints one line per size and way: the writer's (a separate process, as the
candidate's is) and the reader's time, p50 over the rounds after the first
(which faults in and pins the arena's pages; reported apart).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker", "harness"))

import torch  # noqa: E402

from kbox_harness import exchange  # noqa: E402


def _child(argv):
    """The writer, a fresh process (CUDA cannot start in a forked one whose
    parent has started it): the arena's descriptor is inherited."""
    way, fd, path, mib, rounds = argv[0], int(argv[1]), argv[2], int(argv[3]), int(argv[4])
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    arena = exchange.Arena(fd, 1 << 30) if way == "arena" else None
    x = torch.randn(mib << 18, device=device)  # mib MiB of float32
    for _ in range(rounds):
        sys.stdin.buffer.read(1)
        t0 = time.perf_counter()
        if way == "arena":
            n = exchange.save_to_arena(arena, {"out": x})
        else:
            exchange.save(path, {"out": x})
            n = 0
        if device.type == "cuda":
            torch.cuda.synchronize()
        sys.stdout.write("%d %.3f\n" % (n, (time.perf_counter() - t0) * 1e3))
        sys.stdout.flush()


def measure(way, device, mib, rounds, tmp):
    arena = exchange.Arena.create(1 << 30, "kbox-exchange-bench") if way == "arena" else None
    path = os.path.join(tmp, "out.kbt")
    fd = arena.fd if arena is not None else -1
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", way, str(fd), path,
                              str(mib), str(rounds)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             pass_fds=(fd,) if arena is not None else ())
    writes, reads = [], []
    for _ in range(rounds):
        child.stdin.write(b"g")
        child.stdin.flush()
        n, write_ms = child.stdout.readline().split()
        t0 = time.perf_counter()
        if way == "arena":
            out = exchange.load_from_arena(arena, int(n), device=device)
        else:
            out = exchange.load(path, device=device)
            os.unlink(path)
        if device.type == "cuda":
            torch.cuda.synchronize()
        reads.append((time.perf_counter() - t0) * 1e3)
        writes.append(float(write_ms))
        assert out["out"].numel() == mib << 18
    child.stdin.close()
    child.wait()
    if arena is not None:
        os.close(arena.fd)
    return writes, reads


def main():
    if sys.argv[1:2] == ["--child"]:
        return _child(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, nargs="+", default=[4, 32, 100])
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    print("device %s, torch %s" % (torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                                   torch.__version__))
    with tempfile.TemporaryDirectory(prefix="kbox-exchange-bench-") as tmp:
        for mib in args.mib:
            for way in ("file", "arena"):
                writes, reads = measure(way, device, mib, args.rounds, tmp)
                print("%4d MiB %-5s  write p50 %7.2f ms  read p50 %7.2f ms  (first: write %7.2f, read %7.2f)"
                      % (mib, way, statistics.median(writes[1:]), statistics.median(reads[1:]),
                         writes[0], reads[0]))


if __name__ == "__main__":
    main()
