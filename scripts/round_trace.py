#!/usr/bin/env python3
"""Where a timed round's milliseconds go (docs/performance.md, "The device turn").

Runs one run stage of the harness's own fixtures as kboxd runs it (a spec
file, the result pipe) but without kboxd and its sandbox, with the judge's
per-round trace (KBOX_TIMING_TRACE, judge_timing._RoundTrace) on, and prints
the stage's phases and, per step of a timed round, p50 / mean milliseconds.
With --profile the judge runs once more under cProfile and the functions
with the most time are printed. Needs no build: a pure-PyTorch candidate.

Usage: scripts/round_trace.py [--candidate cand_dyn_honest.py] [--reference ref_relu_scale.py]
       [--backend BACKEND_CUDA] [--device 0] [--runs 2] [--profile]
"""
import argparse
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "harness", "fixtures")
STAGE = os.path.join(REPO, "worker", "harness", "kbox_stage.py")
# The judge under cProfile: kbox_stage's main ends in os._exit, so the
# profile is written there, by the judge only (the candidate's process is a
# fork of it).
PROFILED_STAGE = r'''
import cProfile, os, sys
sys.path.insert(0, %(harness)r)
from kbox_harness import stage
judge, profile, real_exit = os.getpid(), cProfile.Profile(), os._exit
def exit_(code):
    if os.getpid() == judge:
        profile.disable()
        profile.dump_stats(%(out)r)
    real_exit(code)
os._exit = exit_
sys.argv = [%(stage)r] + sys.argv[1:]
profile.enable()
stage.main()
'''


def job_dir(candidate, reference):
    root = tempfile.mkdtemp(prefix="kbox-round-trace-")
    for d in ("build", "home", "tmp", "triton"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(os.path.join(FIXTURES, candidate), os.path.join(root, "candidate.py"))
    shutil.copy(os.path.join(FIXTURES, reference), os.path.join(root, "reference.py"))
    return root


def run_stage(root, backend, device, trace, profile_out=None):
    """The stage's report, and the trace's rows."""
    spec = {"stage": "STAGE_RUN", "reference_path": os.path.join(root, "reference.py"),
            "candidate_path": os.path.join(root, "candidate.py"), "build_dir": os.path.join(root, "build"),
            "backend": backend, "precision": "PRECISION_FP32", "seed": "1234", "atol": 1e-4, "rtol": 1e-4,
            "correctness_trials": 5, "measure_performance": True, "performance_trials": 20,
            "speedup_precision": 0.05, "warmup_calls": 3, "max_log_bytes": 16384,
            "exchange_arena_bytes": str(1 << 30)}
    spec_path = os.path.join(root, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=os.path.join(root, "build"),
               TRITON_CACHE_DIR=os.path.join(root, "triton"), HOME=os.path.join(root, "home"),
               TMPDIR=os.path.join(root, "tmp"), CUDA_VISIBLE_DEVICES=device, PYTHONUNBUFFERED="1",
               KBOX_TIMING_TRACE=trace)
    if os.path.exists(trace):
        os.remove(trace)
    if profile_out:
        code = PROFILED_STAGE % {"harness": os.path.dirname(STAGE), "out": profile_out, "stage": STAGE}
        argv = [sys.executable, "-s", "-B", "-c", code]
    else:
        argv = [sys.executable, "-s", "-B", STAGE]
    r, w = os.pipe()
    proc = subprocess.Popen(argv + ["--spec", spec_path, "--result-fd", str(w)], pass_fds=(w,), env=env,
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, err = proc.communicate(timeout=600)
    events = [json.loads(line) for line in data.decode().split("\n") if line]
    report = events[-1].get("report") if events else None
    if not report:
        sys.exit("the stage wrote no report (exit %s): %s" % (proc.returncode, err.decode()[-2000:]))
    rows = []
    if os.path.exists(trace):
        with open(trace) as f:
            rows = [json.loads(line) for line in f]
    return report, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidate", default="cand_dyn_honest.py", help="a fixture of tests/harness/fixtures")
    p.add_argument("--reference", default="ref_relu_scale.py", help="a fixture of tests/harness/fixtures")
    p.add_argument("--backend", default="BACKEND_CUDA")
    p.add_argument("--device", default="0", help="CUDA_VISIBLE_DEVICES ('' for the CPU)")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--profile", action="store_true", help="one more run with the judge under cProfile")
    args = p.parse_args()
    root = job_dir(args.candidate, args.reference)
    trace = os.path.join(root, "rounds.jsonl")
    for n in range(args.runs):
        report, rows = run_stage(root, args.backend, args.device, trace)
        phases = report.get("phase_ms", {})
        print("run %d: %s; phases (ms): %s" % (n, report.get("outcome"), ", ".join(
            "%s %.1f" % (k, phases[k]) for k in sorted(phases))))
        steps = sorted({k for row in rows for k in row["steps_ms"]})
        print("  %d timed rounds; per step, ms p50 / mean (rounds): %s" % (len(rows), ", ".join(
            "%s %.2f / %.2f (%d)" % (k, statistics.median(v), statistics.mean(v), len(v))
            for k, v in ((k, [row["steps_ms"][k] for row in rows if k in row["steps_ms"]]) for k in steps))))
        if rows:
            print("  p50 ms: reference %.4f, candidate by its clock %.4f, candidate seen from the judge %.4f" % tuple(
                statistics.median(row[k] for row in rows) for k in ("ref_ms", "cand_ms", "outside_ms")))
    if args.profile:
        out = os.path.join(root, "judge.prof")
        run_stage(root, args.backend, args.device, trace, profile_out=out)
        pstats.Stats(out).sort_stats("cumulative").print_stats("kbox_harness", 30)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
