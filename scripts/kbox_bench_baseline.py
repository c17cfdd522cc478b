"""The plain serial baseline of scripts/kbox_bench.py: one Python process that
evaluates jobs one after another the way KernelBench's eval_kernel_against_ref
does (commit 423217d; ../shared/research/anchors-mission.md, section a.4):

- the reference is exec'd into a dict, the candidate exec'd into the same dict
  (its load_inline builds in-process; TORCH_EXTENSIONS_DIR is a fresh directory
  per job, so nothing is cached: every job is a cold compile);
- 5 correctness trials: seeded inputs, reference then candidate, torch.allclose
  with KernelBench's tolerance for fp32 (atol = rtol = 1e-4);
- when correct, timing: 3 warm-up calls, then 100 timed calls of the candidate
  and of the reference (CUDA events around each call on GPU after writing
  256 MB to flush L2, time.perf_counter on CPU), synchronising before each call;
  the figure is the MEAN of the timed calls, as KernelBench's `runtime`.

One difference, in KernelBench's disfavour: this is one warm process for all
jobs (torch imported once), where KernelBench's default driver starts fresh
processes, so the serial baseline here is faster and the service/baseline
ratio conservative.

A job that fails (build error, exception) gives a record with correct=False
and "error"; its extension directory is removed either way.

Usage: python3 kbox_bench_baseline.py JOBS.json DEVICE   (DEVICE: cpu or cuda)
JOBS.json is a list of {"id", "reference_source", "candidate_source"}; prints
one JSON line per job ({"id", "correct", "compile_s", "total_s", ...}).
"""
import json
import os
import shutil
import sys
import tempfile
import time

import torch

TRIALS = 5
TOLERANCE = 1e-4  # KernelBench's get_tolerance_for_precision("fp32")
WARMUP = 3
PERF_TRIALS = 100


def set_seed(seed):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def time_calls(model, inputs, device):
    """Mean ms of PERF_TRIALS calls after WARMUP, as KernelBench's `runtime`
    (timing.py get_timing_stats: the mean of the timed trials)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(WARMUP):
        model(*inputs)
        sync()
    if device == "cuda":
        torch.cuda.empty_cache()
    times = []
    for _ in range(PERF_TRIALS):
        sync()
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            # KernelBench's clear_l2_cache: 256 MB written before each timed call.
            torch.empty(int(256e6 // 8), dtype=torch.int64, device="cuda").fill_(42)
            start.record()
            model(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - t0) * 1000)
    return sum(times) / len(times)


def evaluate(job, device):
    """One job; never raises for the candidate's faults: a failure is a record
    with correct=False and its error."""
    started = time.perf_counter()
    ext_dir = tempfile.mkdtemp(prefix="kbench-baseline-ext-")
    os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir  # cold: nothing built before
    record = {"id": job["id"], "correct": False, "compile_s": 0.0, "candidate_ms": 0.0, "reference_ms": 0.0}
    try:
        context = {}
        exec(compile(job["reference_source"], "reference.py", "exec"), context)
        init_inputs = context["get_init_inputs"]()
        set_seed(42)
        reference = context["Model"](*init_inputs).to(device)
        t0 = time.perf_counter()
        try:
            exec(compile(job["candidate_source"], "candidate.py", "exec"), context)  # load_inline builds here
        finally:
            record["compile_s"] = time.perf_counter() - t0
        set_seed(42)
        candidate = context["ModelNew"](*init_inputs).to(device)
        correct = True
        with torch.no_grad():
            set_seed(42)
            seeds = [torch.randint(0, 2 ** 32 - 1, (1,)).item() for _ in range(TRIALS)]
            for seed in seeds:
                set_seed(seed)
                inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in context["get_inputs"]()]
                expected = reference(*inputs)
                got = candidate(*inputs)
                if device == "cuda":
                    torch.cuda.synchronize()
                if got.shape != expected.shape or not torch.allclose(expected, got, atol=TOLERANCE,
                                                                     rtol=TOLERANCE):
                    correct = False
                    record["error"] = "output differs from the reference (seed %d)" % seed
                    break
            if correct:
                record["candidate_ms"] = time_calls(candidate, inputs, device)
                record["reference_ms"] = time_calls(reference, inputs, device)
        record["correct"] = correct
    except Exception as exc:  # the candidate's fault, or the baseline's: recorded, not fatal
        record["correct"] = False
        record["error"] = ("%s: %s" % (type(exc).__name__, exc))[:500]
    finally:
        shutil.rmtree(ext_dir, ignore_errors=True)
    record["total_s"] = time.perf_counter() - started
    return record


def main():
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    device = sys.argv[2]
    for job in jobs:
        print(json.dumps(evaluate(job, device)), flush=True)


if __name__ == "__main__":
    main()
