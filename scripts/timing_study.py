#!/usr/bin/env python3
"""Compares ways of timing one call on the GPU, for the few-shot pairs.

Each session is a fresh process (so process-level state such as CPU
placement and clocks varies as it does between kbox jobs); it times the
reference and the candidate interleaved with several methods and prints
their medians. The parent prints, per pair and method, the coefficient of
variation over sessions of the speedup. Not a test: a measurement that
chose kbox's timing method (docs/gpu-verification.md).

Usage: scripts/timing_study.py --shared DIR [--sessions 6] [--calls 300]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "worker", "harness"))
PAIRS = ["add", "fuse_gelu", "tiled_matmul", "mnist2", "flash_attn"]
METHODS = ["devicewide", "stream", "covered", "covered_dw", "clock"]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def session(few, pair, calls):
    import torch
    from kbox_harness import timing
    dev = torch.device("cuda")
    ref = load(os.path.join(few, "model_ex_%s.py" % pair), "ref_" + pair)
    cand = load(os.path.join(few, "model_new_ex_%s.py" % pair), "cand_" + pair)
    torch.manual_seed(0)
    rm = ref.Model(*ref.get_init_inputs()).to(dev)
    torch.manual_seed(0)
    cm = cand.ModelNew(*ref.get_init_inputs()).to(dev)
    pool = [[t.to(dev) if torch.is_tensor(t) else t for t in ref.get_inputs()] for _ in range(4)]
    flush = timing.L2Flush(dev)
    latency = timing.sync_latency(dev, flush)
    # cycles per ms of torch.cuda._sleep
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); torch.cuda._sleep(1000000); e.record(); torch.cuda.synchronize()
    cycles_per_ms = 1000000 / s.elapsed_time(e)

    def host_ms(model, x):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad():
            model(*x)
        h = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        return h

    for _ in range(10):
        for m in (rm, cm):
            host_ms(m, pool[0])
    hosts = {id(m): sorted(host_ms(m, pool[k % 4]) for k in range(20)) for m in (rm, cm)}
    cover_ms = max(0.05, 3 * max(h[len(h) // 2] for h in hosts.values()))

    clocks = {}
    for m in (rm, cm):
        c = timing.Clock(dev)
        def warm(m=m):
            with torch.no_grad():
                return m(*pool[0])
        c.fit(warm)
        clocks[id(m)] = c

    def call(method, model, x):
        def fn():
            with torch.no_grad():
                return model(*x)
        if method == "clock":
            return clocks[id(model)].time(fn)[0]
        if method == "devicewide":
            return timing.timed_call(fn, dev, flush, latency)[0]
        flush()
        torch.cuda.synchronize()
        if method.startswith("covered"):
            torch.cuda._sleep(int(cover_ms * cycles_per_ms))
        start, end, after = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        after.record()
        torch.cuda.synchronize()
        st = start.elapsed_time(end)
        if method == "covered_dw":
            return timing.device_counted(st, start.elapsed_time(after), latency)
        return st

    out = {"clock": {"cover": [clocks[id(rm)].cover_ms, clocks[id(cm)].cover_ms],
                     "floor": [clocks[id(rm)].host_floor_ms, clocks[id(cm)].host_floor_ms]},
           "cover_ms": cover_ms, "latency_ms": latency,
           "host_ms": {"ref": hosts[id(rm)][10], "cand": hosts[id(cm)][10]}}
    for method in METHODS:
        for _ in range(5):
            call(method, rm, pool[0]); call(method, cm, pool[0])
        r, c = [], []
        for k in range(calls):
            r.append(call(method, rm, pool[k % 4]))
            c.append(call(method, cm, pool[k % 4]))
        r.sort(); c.sort()
        if method == "clock":
            out["clock"].update(ref=r[len(r) // 2], cand=c[len(c) // 2])
            continue
        out[method] = {"ref": r[len(r) // 2], "cand": c[len(c) // 2],
                       "ref_ci": timing.relative_ci(r), "cand_ci": timing.relative_ci(c)}
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shared", required=True)
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--pairs", default=",".join(PAIRS))
    p.add_argument("--pin", default="", help="taskset CPU list for sessions, e.g. 3")
    p.add_argument("--session", default="")
    args = p.parse_args()
    few = os.path.join(args.shared, "datasets", "kernelbench", "few_shot")
    if args.session:
        print("RESULT " + json.dumps(session(few, args.session, args.calls)), flush=True)
        return
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", tempfile.mkdtemp(prefix="kbox-study-ext-"))
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    pairs = args.pairs.split(",")
    t0 = time.time()
    # compile all candidates in parallel first (one process each)
    procs = [subprocess.Popen([sys.executable, "-c", "import importlib.util,sys;s=importlib.util.spec_from_file_location('m',sys.argv[1]);m=importlib.util.module_from_spec(s);s.loader.exec_module(m)",
                               os.path.join(few, "model_new_ex_%s.py" % q)]) for q in pairs]
    for pr in procs:
        pr.wait()
    print("compiled in %.0f s" % (time.time() - t0), flush=True)
    res = {q: [] for q in pairs}
    for s in range(args.sessions):
        for q in pairs:
            cmd = [sys.executable, os.path.abspath(__file__), "--shared", args.shared, "--session", q,
                   "--calls", str(args.calls)]
            if args.pin and s % 2 == 1:
                cmd = ["taskset", "-c", args.pin] + cmd
            o = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
            line = [l for l in o.splitlines() if l.startswith("RESULT ")]
            if not line:
                print("FAIL", q, o[-800:], flush=True)
                continue
            r = json.loads(line[0][7:])
            res[q].append(r)
            print("SESSION %d %-12s pinned=%s cover %.3f lat %.3f host ref %.3f cand %.3f | " % (
                s, q, bool(args.pin and s % 2), r["cover_ms"], r["latency_ms"], r["host_ms"]["ref"],
                r["host_ms"]["cand"]) + " ".join(
                "%s %.4f/%.4f" % (m, r[m]["ref"], r[m]["cand"]) for m in METHODS) + " " + json.dumps(r["clock"]), flush=True)
    for q in pairs:
        for m in METHODS:
            sp = [r[m]["ref"] / r[m]["cand"] for r in res[q]]
            cm = [r[m]["cand"] for r in res[q]]
            rm = [r[m]["ref"] for r in res[q]]
            if not sp:
                continue
            def cv(v):
                mu = sum(v) / len(v)
                return 100 * (sum((a - mu) ** 2 for a in v) / len(v)) ** 0.5 / mu
            print("CV %-12s %-10s speedup %.3fx cv %.2f%% | ref %.4f ms cv %.2f%% | cand %.4f ms cv %.2f%%" % (
                q, m, sum(sp) / len(sp), cv(sp), sum(rm) / len(rm), cv(rm), sum(cm) / len(cm), cv(cm)),
                flush=True)
    print("study: %.0f s" % (time.time() - t0))


if __name__ == "__main__":
    main()
