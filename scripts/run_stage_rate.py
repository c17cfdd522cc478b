#!/usr/bin/env python3
"""How many run stages per device-hour, and how steady their timings: one
honest kbox-bench candidate sent --jobs times (the first one builds it, the
rest restore the build from the cache), --concurrency at once, each timing its
reference live (fresh_reference_timing). Nothing compiles after the first job,
so the rate is the run stage's own bound; run it with and without
--kboxd-arg=--run-stages-ahead=0 to see what preparing ahead gives
(docs/run-stages-ahead.md) and whether the timings stay as steady.

Prints one line per setting: jobs per device-hour (first result to last),
run_ms and queue p50, the candidate's and the reference's lower quartile
(median and coefficient of variation over the jobs), and the speedup's.

Usage: scripts/run_stage_rate.py --backend cuda --python PY [--shared DIR]
       [--jobs 40] [--concurrency 8] [--gpu-scale 16] [--kboxd-arg=FLAG ...]
"""
import argparse
import concurrent.futures
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import kbox_bench  # noqa: E402
import kbox_bench_candidates as candidates  # noqa: E402


def cv(values):
    return statistics.pstdev(values) / statistics.mean(values) if len(values) > 1 else 0.0


def p50(values):
    return statistics.median(values) if values else float("nan")


def measure(args, server):
    job = candidates.generate(1, args.backend, args.shared, args.scale, (1,))[0]
    request = {"reference_source": job["reference_source"], "candidate_source": job["candidate_source"],
               "backend": "BACKEND_" + args.backend.upper(), "correctness_trials": 5,
               "fresh_reference_timing": True}
    run_id = "%d-%d" % (os.getpid(), int(time.time() * 1000))
    # The first job builds; the rest find the build cached.
    first, _, _ = kbox_bench.run_job(server, run_id + "-build", request)
    if first.get("status") != "CORRECT":
        raise SystemExit("the first job ended %s: %s" % (first.get("status"), first.get("message")))
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        done = list(pool.map(lambda i: kbox_bench.run_job(server, "%s-%d" % (run_id, i), request),
                             range(args.jobs)))
    results = [r for r, _, _ in done]
    bad = [r for r in results if r.get("status") != "CORRECT"]
    ends = sorted(t for _, _, t in done)
    hours = (ends[-1] - ends[0]) / 3600.0
    cand = [r["candidate_timing"]["lower_quartile_ms"] for r in results if r.get("candidate_timing")]
    ref = [r["reference_timing"]["lower_quartile_ms"] for r in results if r.get("reference_timing")]
    speedup = [r["speedup"] for r in results if r.get("speedup")]
    return {
        "problem": job["problem"], "jobs": len(results), "not_correct": len(bad),
        "per_hour": (len(results) - 1) / hours if hours > 0 else float("nan"),
        "run_ms_p50": p50([r["durations"]["run_ms"] for r in results]),
        "queue_ms_p50": p50([r["durations"].get("queue_wait_ms", 0.0) for r in results]),
        "candidate_ms": p50(cand), "candidate_cv": cv(cand),
        "reference_ms": p50(ref), "reference_cv": cv(ref),
        "speedup": p50(speedup), "speedup_cv": cv(speedup),
        "phases": phase_p50(results),
    }


def phase_p50(results):
    """p50 of each run-stage phase (durations.run_phases_ms) over the jobs."""
    seen = {}
    for r in results:
        for name, ms in ((r.get("durations") or {}).get("run_phases_ms") or {}).items():
            seen.setdefault(name, []).append(ms)
    return {name: p50(values) for name, values in sorted(seen.items())}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared"))
    p.add_argument("--jobs", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--scale", type=int, default=16, help="divide the problem's sizes by this")
    p.add_argument("--kboxd-arg", action="append", default=[])
    args = p.parse_args()
    log_path = os.path.join(tempfile.gettempdir(), "run-stage-rate-kboxd-%d.log" % os.getpid())
    daemon, server, work_dir, log = kbox_bench.start_daemon(args.python, log_path, args.kboxd_arg)
    try:
        s = measure(args, server)
    finally:
        kbox_bench.stop_daemon(daemon, work_dir, log)
    print("run-stage-rate flags=[%s] %s: %d jobs (%d not CORRECT), %.0f per device-hour, run_ms p50 %.0f, "
          "queue p50 %.0f ms; candidate %.4f ms (cv %.1f%%), reference %.4f ms (cv %.1f%%), "
          "speedup %.3f (cv %.1f%%)" % (
              " ".join(args.kboxd_arg), s["problem"], s["jobs"], s["not_correct"], s["per_hour"],
              s["run_ms_p50"], s["queue_ms_p50"], s["candidate_ms"], 100 * s["candidate_cv"],
              s["reference_ms"], 100 * s["reference_cv"], s["speedup"], 100 * s["speedup_cv"]),
          flush=True)
    print("  run phases p50 (ms): " + ", ".join("%s %.1f" % kv for kv in s["phases"].items()), flush=True)
    return 0 if s["not_correct"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
