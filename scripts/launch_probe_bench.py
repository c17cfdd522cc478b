#!/usr/bin/env python3
"""What the run stage's kernel-launch probe costs, and what it sees, on a GPU:
torch.profiler with CUDA activities (the old probe) against
libkbox_launch_probe.so (CUPTI's callback API), each in a fresh process as
a run stage's candidate process is.

  python3 scripts/launch_probe_bench.py --library build/bin/libkbox_launch_probe.so [--repeat 3]

Prints one line per process: the probe's first and second start-to-stop
times around one forward (an ATen add, a jiterator kernel launched through
the driver API, a Triton kernel and a CUDA graph replay), the names it saw
for each, and the cost of 2,000 small launches before and after the probe.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "worker", "harness"))


# What each workload's kernel name contains. The graph replay's kernel is an
# ATen add like aten_add's: the callback probe counts it in graph_launches.
_NAME_PARTS = {"aten_add": "elementwise", "jiterator": "kbox_jit_mul", "triton": "kbox_triton_scale"}


def _child(mode, library):
    import torch
    t_import = time.perf_counter()
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    kernels = {}
    jit = torch.cuda.jiterator._create_jit_fn("template <typename T> T kbox_jit_mul(T x) { return x * 3; }")
    kernels["jiterator"] = lambda: jit(x)
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def kbox_triton_scale(p, n, BLOCK: tl.constexpr):
            i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(p + i, tl.load(p + i, mask=i < n) * 2.0, mask=i < n)

        kernels["triton"] = lambda: kbox_triton_scale[(x.numel() // 1024,)](x, x.numel(), BLOCK=1024)
    except Exception as e:  # pragma: no cover
        sys.stderr.write("no triton: %s\n" % e)
    y = torch.zeros(1 << 10, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y.mul_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y.add_(1.0)
    kernels["graph"] = graph.replay
    kernels["aten_add"] = lambda: x + 1
    for f in kernels.values():  # compiled and warm
        f()
    torch.cuda.synchronize()

    def forward():
        for f in kernels.values():
            f()
        torch.cuda.synchronize()

    def small_launches():
        z = torch.zeros(16, device="cuda")
        torch.cuda.synchronize()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                z.add_(1.0)
            torch.cuda.synchronize()
            best.append((time.perf_counter() - t0) * 1e3)
        return sorted(best)[len(best) // 2]

    before = small_launches()
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        if mode == "profiler":
            from torch.profiler import profile, ProfilerActivity
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                forward()
            names = sorted({str(e.name) for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))})
            extra = {}
        else:
            from kbox_harness.launch_probe import LaunchProbe, cupti_path
            probe = LaunchProbe(library, cupti_path())
            probe.start()
            forward()
            probe.stop()
            r = probe.result()
            names, extra = r["kernels"], {"launches": r["launches"], "graph_launches": r["graph_launches"]}
        ms = (time.perf_counter() - t0) * 1e3
        seen = {k: [n[:90] for n in names if part in n][:2] for k, part in _NAME_PARTS.items() if k in kernels}
        runs.append({"ms": round(ms, 1), "names": len(names), "seen": seen, **extra})
    after = small_launches()
    print(json.dumps({"mode": mode, "import_to_ready_s": round(time.perf_counter() - t_import, 2),
                      "runs": runs, "2000_launches_ms_before": round(before, 2),
                      "2000_launches_ms_after": round(after, 2)}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--library", default=os.path.join(HERE, "..", "build", "bin", "libkbox_launch_probe.so"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", choices=["profiler", "cupti"])
    a = ap.parse_args()
    if a.child:
        return _child(a.child, os.path.abspath(a.library))
    for k in range(a.repeat):
        for mode in ("cupti", "profiler"):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode,
                                "--library", a.library], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, timeout=300)
            line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            print("rep %d %-8s rc %d wall %.1f s %s" % (k, mode, p.returncode, time.perf_counter() - t0, line))
            if p.returncode:
                print(p.stderr[-2000:])
            sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
