#!/usr/bin/env python3
"""kbox-bench: kboxd's throughput on distinct honest KernelBench candidates vs the serial baseline.

Issue 6: the same jobs go through kboxd and through a plain serial loop.

1. Generates N distinct honest candidates (scripts/kbox_bench_candidates.py) for
   KernelBench level-1 (with --levels 1,2 also level-2) problems read from
   <shared>/datasets/kernelbench.
2. Starts kboxd (or uses --server) and submits them through the async API
   (POST /v1/jobs with idempotency keys, GET /v1/jobs/<id>?wait=60) with
   --concurrency jobs in flight, plus --resubmit-share exact resubmissions of
   finished candidates under new keys (build-cache hits).
3. Runs the serial baseline (scripts/kbox_bench_baseline.py: one process,
   in-process load_inline, KernelBench's trials and timing) on --baseline-jobs
   of the same jobs spread over the list, after the service run, so the two
   never share the machine.
4. Prints one summary with the targets of issue 6 beside each figure.

While jobs are outstanding a progress line is printed every --progress
seconds. At --deadline seconds after the start, or on SIGINT, it stops
submitting and waiting and prints the summary of what finished, marked
PARTIAL (no baseline then), so a time-limited run always yields figures.

Usage: scripts/kbox-bench --backend cpu|cuda [--jobs N] [--resubmit-share F]
       [--concurrency C] [--baseline-jobs K] [--server URL] [--out DIR]
       [--deadline SECONDS] [--progress SECONDS]
Stdlib only here; the baseline imports torch.
"""
import argparse
import json
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpu_suite  # noqa: E402
import kbox_bench_candidates as candidates  # noqa: E402

PHASES = ("static_ms", "compile_ms", "queue_wait_ms", "run_ms", "total_ms")
METRICS = ("kbox_build_cache_hits_total", "kbox_build_cache_misses_total")
# kbox_stage_cpu_seconds_total summed over backends, by stage.
STAGE_CPU = {"compile_cpu_s": "compile", "run_cpu_s": "run"}
# kbox_set_up_pauses_total by result, summed over devices; absent counts 0
# (the family appears at the first pause).
SET_UP_PAUSES = {"set_up_paused": "stopped", "set_up_not_paused": "not_stopped"}
# kbox_queue_depth{queue=...}: jobs waiting, shown in progress lines.
QUEUES = ("compile", "run_cpu", "run_gpu")
TARGETS = {"distinct_per_gpu_hour": 3000, "ratio": 50, "busy": 0.80, "hit_overhead_s": 0.2,
           "startup_s": 0.5}


def start_daemon(python, log_path, extra_args=(), cpus=None):
    """gpu_suite's start_daemon with kboxd's log in log_path, a fresh work dir
    and `extra_args` for kboxd, on `cpus` (default: all of this process's);
    returns (process, URL, work_dir, log). On failure nothing is left."""
    work_dir = tempfile.mkdtemp(prefix="kbox-bench-")
    log = open(log_path, "w")
    try:
        proc, server = gpu_suite.start_daemon(work_dir, python, stderr=log, extra_args=extra_args, cpus=cpus)
    except BaseException:  # includes its sys.exit when kboxd does not start
        log.close()
        shutil.rmtree(work_dir, ignore_errors=True)
        print("kboxd log: %s" % log_path, file=sys.stderr)
        raise
    return proc, server, work_dir, log


def stop_daemon(proc, work_dir, log, grace_s=300):
    """SIGTERM, then SIGKILL if it has not exited in grace_s; always reaped."""
    try:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)  # its build cache is this run's only
        log.close()


def http(server, path, body=None, timeout=90):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(server + path, data=data,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read().decode()
    return json.loads(raw) if raw.lstrip().startswith("{") else raw


# The compile tier's counters (--compile-tier): builds a compile-role kboxd
# served, and how a run-role kboxd's builds went, by outcome.
TIER_COUNTERS = {"served": "kbox_builds_served_total", "remote": "kbox_remote_builds_total"}


def split_cpus(compile_cores):
    """(the run node's CPUs, the compile node's CPUs) for --compile-tier: the
    compile node gets the last compile_cores of this process's CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if not 0 < compile_cores < len(cpus):
        sys.exit("--compile-tier %d: this machine has %d CPUs; leave the run node at least one"
                 % (compile_cores, len(cpus)))
    return cpus[:-compile_cores], cpus[-compile_cores:]


def diff_tier(before, after):
    """after - before of two scrapes' compile-tier figures: the TIER_COUNTERS
    by outcome and the compile stages' CPU-s (absent counts 0)."""
    out = {k: {o: after[k].get(o, 0.0) - before[k].get(o, 0.0) for o in after[k]} for k in TIER_COUNTERS}
    out["compile_cpu_s"] = (after["compile_cpu_s"] or 0.0) - (before["compile_cpu_s"] or 0.0)
    return out


def diff_metrics(before, after):
    return {k: (after[k] - before[k]) if after.get(k) is not None and before.get(k) is not None else None
            for k in METRICS + tuple(STAGE_CPU) + tuple(SET_UP_PAUSES)}


def scrape(server):
    """METRICS' values, the stages' CPU-s, the set-up pauses, the queue depths
    (by queue name; None where absent) and the compile tier's counters by
    outcome (TIER_COUNTERS)."""
    text = http(server, "/metrics", timeout=10)
    out = {}
    for name in METRICS:
        m = re.search(r"^%s(?:\{[^}]*\})? ([0-9.e+]+)$" % name, text, flags=re.M)
        out[name] = float(m.group(1)) if m else None
    for key, stage in STAGE_CPU.items():
        found = re.findall(r'^kbox_stage_cpu_seconds_total\{[^}]*stage="%s"[^}]*\} ([0-9.e+]+)$' % stage,
                           text, flags=re.M)
        out[key] = sum(float(v) for v in found) if found else None
    for key, result in SET_UP_PAUSES.items():
        found = re.findall(r'^kbox_set_up_pauses_total\{[^}]*result="%s"[^}]*\} ([0-9.e+]+)$' % result,
                           text, flags=re.M)
        out[key] = sum(float(v) for v in found)
    for q in QUEUES:
        m = re.search(r'^kbox_queue_depth\{[^}]*queue="%s"[^}]*\} ([0-9.e+]+)$' % q, text, flags=re.M)
        out[q] = float(m.group(1)) if m else None
    for key, name in TIER_COUNTERS.items():
        out[key] = {o: float(v) for o, v in re.findall(
            r'^%s\{[^}]*outcome="(\w+)"[^}]*\} ([0-9.e+]+)$' % name, text, flags=re.M)}
    return out


def run_job(server, key, request, on_submitted=lambda: None):
    """Submits one job under key and waits for its result; returns
    (result, submitted_at, done_at) in time.monotonic() seconds."""
    while True:
        try:
            submitted = time.monotonic()
            reply = http(server, "/v1/jobs", {"jobs": [{"idempotency_key": key, "request": request}]})
            on_submitted()
            break
        except urllib.error.HTTPError as e:
            if e.code != 429:  # no room: retry after the daemon's hint; anything else is fatal
                raise RuntimeError("submit %s: HTTP %d %s" % (key, e.code, e.read()[:300]))
            time.sleep(float(e.headers.get("Retry-After") or 1))
    job = reply["jobs"][0]
    while job.get("state") != "DONE":
        job = http(server, "/v1/jobs/%s?wait=60" % job["job_id"], timeout=120)
    return job["result"], submitted, time.monotonic()


class Stop(object):
    """When run_stream stops waiting: at a deadline (time.monotonic()
    seconds, or None) or once interrupted (SIGINT)."""

    def __init__(self, deadline=None):
        self.deadline = deadline
        self.why = None  # "deadline" or "interrupted" once stopped early

    def remaining(self):
        return None if self.deadline is None else self.deadline - time.monotonic()


def progress_line(elapsed_s, total, submitted, records, metrics):
    """One line on where a run stands: jobs submitted, build-cache lookups
    (a hit, or a miss counted as its compile begins), finished and their
    statuses, queue depths."""
    statuses = {}
    for r in records:
        statuses[r["result"].get("status")] = statuses.get(r["result"].get("status"), 0) + 1
    compiled = "?"
    if metrics and None not in (metrics.get(k) for k in METRICS):
        compiled = "%d" % sum(metrics[k] for k in METRICS)
    queues = " ".join("%s %d" % (q, metrics[q]) for q in sorted(metrics or {}) if q in QUEUES
                      and metrics[q] is not None)
    return "[%6.0f s] submitted %d/%d, compiles begun or cached %s, finished %d (%s)%s" % (
        elapsed_s, submitted, total, compiled, len(records),
        ", ".join("%s %d" % kv for kv in sorted(statuses.items(), key=lambda kv: str(kv[0]))) or "none",
        ("; queued: " + queues) if queues else "")


def run_stream(server, jobs, request_of, resubmit, concurrency, run_id, stop=None, progress_s=15.0,
               before=None):
    """Runs every job of `jobs` and, once each of the originals in `resubmit`
    is done, an exact resubmission of it under a new key. Returns records:
    all of them, or, when `stop` ended the wait early (stop.why says why),
    those finished by then. Prints a progress line every progress_s, its
    build-cache counts since `before` (scrape()'s values at the start)."""
    stop = stop or Stop()
    work, records, lock = queue.Queue(), [], threading.Lock()
    total = len(jobs) + len(resubmit)
    finished = threading.Semaphore(0)
    submitted = [0]
    started = time.monotonic()
    for i, job in enumerate(jobs):
        work.put((i, job, False))

    def count_submitted():
        with lock:
            submitted[0] += 1

    def worker():
        while True:
            item = work.get()
            if item is None:
                return
            index, job, again = item
            if stop.why:
                return
            key = "kbox-bench-%s/%d%s" % (run_id, index, "-again" if again else "")
            try:
                result, t0, t1 = run_job(server, key, request_of(job), count_submitted)
                record = {"id": job["id"], "resubmission": again, "result": result,
                          "submitted": t0, "done": t1}
            except Exception as exc:  # a transport failure is recorded, not hidden
                record = {"id": job["id"], "resubmission": again, "result": {
                    "status": "CLIENT_ERROR", "message": repr(exc)}, "submitted": 0, "done": 0}
            with lock:
                records.append(record)
            if not again and index in resubmit:
                work.put((index, job, True))  # its build is in the cache now
            finished.release()

    def print_progress():
        try:
            metrics = scrape(server)
            metrics.update(diff_metrics(before, metrics) if before else {})
        except Exception:  # progress is best effort; the run goes on
            metrics = None
        with lock:
            line = progress_line(time.monotonic() - started, total, submitted[0], records, metrics)
        print(line, flush=True)

    left = stop.remaining()
    if left is not None and left <= 0:
        stop.why = "deadline"
        print_progress()
        return []
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    done, next_progress = 0, started + progress_s
    try:
        while done < total:
            left = stop.remaining()
            if left is not None and left <= 0:
                stop.why = "deadline"
                break
            if time.monotonic() >= next_progress:  # also while results keep coming
                print_progress()
                next_progress += progress_s
            wait = max(0.0, next_progress - time.monotonic())
            if finished.acquire(timeout=min(wait, left) if left is not None else wait):
                done += 1
    except KeyboardInterrupt:
        stop.why = "interrupted"
    if stop.why:
        print_progress()  # where the run stood when it was stopped
    for _ in threads:
        work.put(None)
    with lock:
        return list(records)


def pct(values, p):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    values = sorted(values)
    return values[max(0, min(len(values) - 1, int(-(-p * len(values) // 100)) - 1))]


def evaluated(records):
    """The records kboxd evaluated: a result with durations, not a CLIENT_ERROR."""
    return [r for r in records if r["result"].get("status") != "CLIENT_ERROR"
            and isinstance(r["result"].get("durations"), dict) and r.get("done")]


def _stopped_after(result):
    """Index in PHASES of the last stage a job reached before it was stopped:
    0 for a static rejection, 1 for a compile failure, 3 otherwise."""
    if result.get("status") == "REJECTED" and any(
            v.get("phase") == "PHASE_STATIC" and v.get("severity") == "REJECT"
            for v in result.get("verdicts", [])):
        return 0
    if result.get("status") == "COMPILE_ERROR" or (result.get("runtime_error") or {}).get("phase") == "PHASE_COMPILE":
        return 1
    return 3


def reached(record, phase):
    """Whether the job reached `phase` (total_ms: every evaluated job)."""
    durations = record["result"].get("durations") or {}
    if phase not in durations:
        return False
    return phase == "total_ms" or PHASES.index(phase) <= _stopped_after(record["result"])


def phase_table(records):
    """{phase: (p50, p99)} over the jobs that reached that phase."""
    rows = {}
    for phase in PHASES:
        vals = [r["result"]["durations"][phase] for r in records if reached(r, phase)]
        rows[phase] = (pct(vals, 50), pct(vals, 99))
    return rows


def stage_phase_table(records, field):
    """{phase: (p50, p99, jobs)} of one stage's own split (durations.<field>,
    e.g. run_phases_ms), over the records that carry it."""
    values = {}
    for r in records:
        for name, ms in ((r["result"].get("durations") or {}).get(field) or {}).items():
            values.setdefault(name, []).append(float(ms))
    return {name: (pct(v, 50), pct(v, 99), len(v)) for name, v in sorted(values.items())}


def start_up_ms(record):
    """The run stage's start-up on the device: its candidate process forked
    and both processes' set-up (CUDA contexts), from the stage's own phases;
    the stage process's own start before the harness's clock is not in it.
    None when the stage did not report them."""
    phases = (record["result"].get("durations") or {}).get("run_phases_ms") or {}
    if "setup" not in phases:
        return None
    return float(phases.get("fork_candidate", 0.0)) + float(phases["setup"])


def device_held_ms(record):
    """How long the job held its device: its turn (device_turn_ms, with run
    stages ahead), else its run stage."""
    d = record["result"]["durations"]
    return float(d.get("device_turn_ms") or d.get("run_ms", 0))


def windows(records):
    """(wall_s, busy_window_s) over the evaluated records: first submission to
    last result, and first run start (its result's done time less its run_ms,
    or its device turn where that is longer) to last result."""
    done = evaluated(records)
    if not done:
        return 0.0, 0.0
    last = max(r["done"] for r in done)
    wall = last - min(r["submitted"] for r in done)
    # A job's device turn can start before its run stage's process (the first
    # job's turn waits on its lane's zygote): the window starts at the earlier.
    ran = [r["done"] - max(r["result"]["durations"].get("run_ms", 0), device_held_ms(r)) / 1000.0
           for r in done if reached(r, "run_ms") and r["result"]["durations"].get("run_ms", 0) > 0]
    return wall, (last - min(ran)) if ran else 0.0


def baseline_sample(jobs, n):
    """n jobs spread over the list (every step-th), not the first n."""
    if n <= 0 or not jobs:
        return []
    step = max(1, len(jobs) // n)
    return jobs[::step][:n]


def run_baseline(python, jobs, device):
    """Runs the serial baseline on jobs; returns its per-job JSON records."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{k: j[k] for k in ("id", "reference_source", "candidate_source")} for j in jobs], f)
    proc = subprocess.run([python, os.path.join(HERE, "kbox_bench_baseline.py"), f.name, device],
                          stdout=subprocess.PIPE, text=True)
    os.unlink(f.name)
    if proc.returncode != 0:  # keep the service's figures; say the baseline is missing
        print("serial baseline FAILED (exit %d); its jobs so far are kept" % proc.returncode)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def verdict(value, target, higher_is_better=True):
    if value is None:
        return "not measured"
    met = value >= target if higher_is_better else value <= target
    return "met" if met else "NOT met"


def jobs_by_gpu(done):
    """{gpu index: jobs whose run stage that GPU served} (gpu_suite.gpu_of).
    Cache hits count too: the run stage runs again on every job."""
    counts = {}
    for r in done:
        index = gpu_suite.gpu_of(r["result"])
        if index is not None:
            counts[index] = counts.get(index, 0) + 1
    return counts


def speedup_half_width(result):
    """The half-width of a result's speedup interval over its speedup, or
    None without one."""
    speedup, low, high = (result.get(k) or 0.0 for k in ("speedup", "speedup_ci_low", "speedup_ci_high"))
    return (high - low) / (2.0 * speedup) if speedup > 0 and high > 0 else None


def summarise(args, info, records, metrics, baseline, scale_note, baseline_asked):
    """The summary dict. Rates count only evaluated jobs (not CLIENT_ERROR);
    the ratio needs a baseline that finished all baseline_asked jobs correctly."""
    gpus = len(info.get("gpus") or []) if args.backend in ("cuda", "triton") else 0
    devices = gpus or 1  # the CPU backend: the whole machine counts as one device
    done = evaluated(records)
    cold = [r for r in done if not r["resubmission"]]
    hits = [r for r in done if r["result"].get("build_cache_hit")]
    again = [r for r in done if r["resubmission"]]
    statuses = {}
    for r in records:
        statuses[r["result"].get("status")] = statuses.get(r["result"].get("status"), 0) + 1
    good = [r for r in records if r["result"].get("status") == "CORRECT" and r["result"].get("rewardable")]
    window_s, busy_window_s = windows(records)
    hours = window_s / 3600.0
    per_hour = lambda n: n / hours if hours > 0 else None  # noqa: E731
    # The device's busy time: each job's turn on it (device_turn_ms: turns do
    # not overlap), or its run stage where kboxd reports no turn (no stages ahead).
    held_s = [device_held_ms(r) / 1000 for r in done if reached(r, "run_ms")]
    slots = gpus or info.get("cpu_run_slots", 1) or 1
    busy = sum(held_s) / (busy_window_s * slots) if busy_window_s > 0 else None
    # With stages ahead the set-up runs before the job's turn, beside another
    # job's: what the device itself waits for is the turn's start (turn_start).
    # A device free with no stage ready waits for the set-up of the first in
    # line (kboxd's turn_set_up_wait_ms; absent means none): the device's own
    # share of a job's start is that wait plus turn_start.
    starts = [(float(r["result"]["durations"]["run_phases_ms"]["turn_start"]),
               float(r["result"]["durations"].get("turn_set_up_wait_ms") or 0.0)) for r in done
              if "turn_start" in (r["result"]["durations"].get("run_phases_ms") or {})]
    turn_starts = [t for t, _ in starts]
    set_up_waits = [w for _, w in starts]
    device_starts = [t + w for t, w in starts]
    waited = [w for w in set_up_waits if w > 0]
    turn_ms = [r["result"]["durations"]["device_turn_ms"] for r in cold
               if r["result"]["durations"].get("device_turn_ms")]
    d = lambda r, k: r["result"]["durations"].get(k, 0) / 1000  # noqa: E731
    hit_overhead = [d(r, "total_ms") - d(r, "run_ms") for r in hits]
    # The same without the wait for a free run slot, which is load, not the cache.
    hit_unqueued = [d(r, "total_ms") - d(r, "run_ms") - d(r, "queue_wait_ms") for r in hits]
    # How long the timing ran and how precisely it knew the speedup when it
    # stopped (the rounds end at the job's speedup_precision, or their cap).
    rounds = [r["result"]["candidate_timing"]["count"] for r in cold
              if (r["result"].get("candidate_timing") or {}).get("count")]
    widths = [speedup_half_width(r["result"]) for r in cold]
    widths = [w for w in widths if w is not None]
    distinct_per_hour = per_hour(len(cold))
    s = {
        "backend": args.backend, "gpus": gpus, "devices_counted": devices,
        "cpu_run_slots": info.get("cpu_run_slots"), "compile_workers": info.get("compile_workers"),
        "scale": scale_note, "jobs": len(records), "evaluated": len(done),
        "distinct": sum(1 for r in records if not r["resubmission"]),
        "resubmissions": sum(1 for r in records if r["resubmission"]),
        "concurrency": args.concurrency, "wall_s": window_s, "busy_window_s": busy_window_s,
        "evals_per_hour": per_hour(len(done)), "distinct_per_hour": distinct_per_hour,
        "distinct_per_device_hour": distinct_per_hour / devices if distinct_per_hour is not None else None,
        "statuses": statuses, "correct_rewardable": len(good),
        "jobs_by_gpu": jobs_by_gpu(done) if gpus else {},
        "not_correct": [(r["id"] + (" (resubmission)" if r["resubmission"] else ""),
                         r["result"].get("status"), (r["result"].get("message") or "")[:300])
                        for r in records if r not in good],
        "phases_cold": phase_table(cold), "phases_resubmitted": phase_table(again),
        "run_phases_cold": stage_phase_table(cold, "run_phases_ms"),
        "compile_phases_cold": stage_phase_table(cold, "compile_phases_ms"),
        "start_up_p50_ms": pct([v for v in map(start_up_ms, done) if v is not None], 50),
        "start_up_p99_ms": pct([v for v in map(start_up_ms, done) if v is not None], 99),
        "turn_start_ms": (pct(turn_starts, 50), pct(turn_starts, 99)) if turn_starts else None,
        "device_start_ms": (pct(device_starts, 50), pct(device_starts, 99)) if device_starts else None,
        "turns_waiting_on_set_up": (len(waited), len(set_up_waits)) if set_up_waits else None,
        "turn_set_up_wait_ms": (pct(waited, 50), pct(waited, 99)) if waited else None,
        "timed_rounds": (pct(rounds, 50), pct(rounds, 99), max(rounds)) if rounds else None,
        "speedup_half_width": (pct(widths, 50), pct(widths, 90)) if widths else None,
        "busy_fraction": busy, "busy_slots": slots,
        "device_turn_ms_cold": (pct(turn_ms, 50), pct(turn_ms, 99)) if turn_ms else None,
        "cache_hits": len(hits), "cache_hit_rate_all": len(hits) / len(done) if done else None,
        "cache_hit_rate_resubmitted": (sum(1 for r in again if r["result"].get("build_cache_hit")) /
                                       len(again)) if again else None,
        "hit_overhead_p50_s": pct(hit_overhead, 50), "hit_overhead_p99_s": pct(hit_overhead, 99),
        "hit_unqueued_p50_s": pct(hit_unqueued, 50), "hit_unqueued_p99_s": pct(hit_unqueued, 99),
        "metrics": metrics,
    }
    s["baseline"] = baseline
    s["baseline_asked"] = baseline_asked
    wrong = [b["id"] for b in baseline if not b.get("correct")]
    if not baseline_asked:
        s["ratio_withheld"] = "the baseline was not run (--baseline-jobs 0)"
    elif len(baseline) != baseline_asked:
        s["ratio_withheld"] = "the baseline finished %d of %d jobs" % (len(baseline), baseline_asked)
    elif wrong:  # a wrong job would not be a fair cost
        s["ratio_withheld"] = "baseline job(s) not correct: %s" % ", ".join(wrong)
    elif s["distinct_per_device_hour"] is None:
        s["ratio_withheld"] = "no job was evaluated by the service"
    else:
        per_job = sum(b["total_s"] for b in baseline) / len(baseline)
        s["baseline_per_job_s"] = per_job
        s["baseline_per_hour"] = 3600.0 / per_job if per_job > 0 else None
        if s["baseline_per_hour"]:
            s["ratio"] = s["distinct_per_device_hour"] / s["baseline_per_hour"]
        else:
            s["ratio_withheld"] = "the baseline took no measurable time"
    return s


def print_summary(s):
    f = lambda v, fmt="%.1f": "n/a" if v is None else fmt % v  # noqa: E731
    unit = "GPU-hour" if s["gpus"] else "device-hour (CPU backend: the machine = 1 device)"
    print("\n===== kbox-bench summary (%s backend)%s =====" % (
        s["backend"], " PARTIAL (%s): only the jobs finished by then" % s["partial"] if s.get("partial") else ""))
    print("reference sizes: %s" % s["scale"])
    print("jobs %d = %d distinct + %d exact resubmissions; concurrency %d; compile workers %s; %s"
          % (s["jobs"], s["distinct"], s["resubmissions"], s["concurrency"], s["compile_workers"],
             ("%d GPU(s)" % s["gpus"]) if s["gpus"] else ("%s CPU run slots" % s["cpu_run_slots"])))
    print("wall %.1f s (first submit to last result); %d of %d jobs evaluated (rates count only these)"
          % (s["wall_s"], s["evaluated"], s["jobs"]))
    print("statuses %s; CORRECT+rewardable %d of %d" % (s["statuses"], s["correct_rewardable"], s["jobs"]))
    if s["jobs_by_gpu"]:
        print("jobs run by GPU: %s" % ", ".join("gpu%s %d" % kv for kv in sorted(s["jobs_by_gpu"].items())))
    for row in s["not_correct"]:
        print("  NOT CORRECT: %s %s %s" % row)
    print("evaluations per hour (all) %s; distinct per hour %s" % (f(s["evals_per_hour"]),
                                                                  f(s["distinct_per_hour"])))
    target = TARGETS["distinct_per_gpu_hour"]
    print("distinct evaluations per %s: %s   [target >= %d: %s]" % (
        unit, f(s["distinct_per_device_hour"]), target, verdict(s["distinct_per_device_hour"], target)))
    print("per-phase p50 / p99 (ms), jobs that reached the phase, cold distinct jobs | resubmissions:")
    for phase in PHASES:
        c, a = s["phases_cold"][phase], s["phases_resubmitted"][phase]
        print("  %-14s %10s / %-10s | %10s / %-10s" % (phase, f(c[0]), f(c[1]), f(a[0]), f(a[1])))
    if s.get("device_turn_ms_cold"):
        print("  %-14s %10s / %-10s   (the job's turn on its device, cold distinct jobs)" % (
            "device_turn_ms", f(s["device_turn_ms_cold"][0]), f(s["device_turn_ms_cold"][1])))
    print("device busy from first run start (sum of device turns, else run_ms / %.1f s from first run start to last result"
          " / %d slot(s)): %s   [target >= 80 %% while queued: %s]" % (
              s["busy_window_s"], s["busy_slots"],
              f(None if s["busy_fraction"] is None else 100 * s["busy_fraction"], "%.1f %%"),
              verdict(s["busy_fraction"], TARGETS["busy"])))
    for label, key in (("compile stage", "compile_phases_cold"), ("run stage", "run_phases_cold")):
        if s.get(key):
            print("%s's own phases, cold distinct jobs, p50 / p99 (ms) [jobs]:" % label)
            for name, (p50, p99, n) in s[key].items():
                print("  %-26s %10s / %-10s [%d]" % (name, f(p50), f(p99), n))
    if s.get("start_up_p50_ms") is None:
        print("per-job start-up on the device: not measured (no run stage reported its phases)"
              "   [target <= 0.5 s: not measured]")
    else:
        up = s["start_up_p50_ms"] / 1000.0
        print("per-job start-up on the device (run stage's fork_candidate + setup, not the stage "
              "process's own start): p50 %.3f s, p99 %.3f s   [target <= 0.5 s: %s]" % (
                  up, s["start_up_p99_ms"] / 1000.0, verdict(up, TARGETS["startup_s"], higher_is_better=False)))
    if s.get("device_start_ms"):
        up = s["device_start_ms"][0] / 1000.0
        print("  of a job's start, on its device's turn (the turn waiting for the stage's set-up, then "
              "turn_start: to the first trial): p50 %.3f s, p99 %.3f s   [target <= 0.5 s: %s]" % (
                  up, s["device_start_ms"][1] / 1000.0,
                  verdict(up, TARGETS["startup_s"], higher_is_better=False)))
        n, of = s["turns_waiting_on_set_up"]
        waits = s.get("turn_set_up_wait_ms")
        print("  turns the device waited for, free, while their stage set up: %d of %d%s; "
              "turn_start alone p50 %.3f s" % (
            n, of, " (waited p50 %.0f ms, p99 %.0f ms)" % waits if waits else "",
            s["turn_start_ms"][0] / 1000.0))
    if s.get("timed_rounds"):
        width = s.get("speedup_half_width")
        print("timed rounds per job p50 %s, p99 %s, max %s; the speedup's interval, half-width over it, "
              "p50 %s, p90 %s" % (f(s["timed_rounds"][0], "%.0f"), f(s["timed_rounds"][1], "%.0f"),
                                 s["timed_rounds"][2], f(width and 100 * width[0], "%.1f %%"),
                                 f(width and 100 * width[1], "%.1f %%")))
    pc = lambda v: f(None if v is None else 100 * v, "%.0f %%")  # noqa: E731
    print("build cache: %d hits; hit rate %s of evaluated jobs, %s of resubmissions; metrics %s" % (
        s["cache_hits"], pc(s["cache_hit_rate_all"]), pc(s["cache_hit_rate_resubmitted"]), s["metrics"]))
    cpu = s["metrics"] or {}
    compiles, runs = cpu.get("kbox_build_cache_misses_total"), s["evaluated"]
    if s.get("compile_tier") and cpu.get("run_cpu_s") is not None and runs:
        print("CPU of the run node's stages (kbox_stage_cpu_seconds_total): %.1f CPU-s per run stage (%d)"
              % (cpu["run_cpu_s"] / runs, runs))
    elif cpu.get("compile_cpu_s") is not None and cpu.get("run_cpu_s") is not None and compiles and runs:
        print("CPU of the stages' processes (kbox_stage_cpu_seconds_total): %.1f CPU-s per compile (%d), "
              "%.1f CPU-s per run stage (%d); %.1f cores busy on average over the wall" % (
                  cpu["compile_cpu_s"] / compiles, compiles, cpu["run_cpu_s"] / runs, runs,
                  (cpu["compile_cpu_s"] + cpu["run_cpu_s"]) / s["wall_s"]))
    t = s.get("compile_tier")
    if t:
        served = t["served"]
        print("compile tier: a compile-role kboxd on %d CPUs served %d builds (%d built, %d from its cache, "
              "%d failed, %d refused), %.1f CPU-s per build; the run node, on %d CPUs, took %d from it and "
              "built %d itself (%.0f CPU-s)" % (
                  t["cores"], sum(served.values()), served.get("built", 0), served.get("cached", 0),
                  served.get("failed", 0), served.get("refused", 0),
                  t["compile_cpu_s"] / served["built"] if served.get("built") else 0.0, t["run_node_cores"],
                  t["run_node_builds"].get("built", 0), t["run_node_builds"].get("fallback", 0),
                  t["run_node_compile_cpu_s"]))
    if cpu.get("set_up_paused") is not None:
        print("stages setting up paused for another job's timing (kbox_set_up_pauses_total): %d stopped, "
              "%d not stopped (waited for)" % (cpu["set_up_paused"], cpu.get("set_up_not_paused") or 0))
    print("hit latency without the run (total - run): p50 %s s, p99 %s s   [target <= 0.2 s: %s]" % (
        f(s["hit_overhead_p50_s"], "%.3f"), f(s["hit_overhead_p99_s"], "%.3f"),
        verdict(s["hit_overhead_p99_s"], TARGETS["hit_overhead_s"], higher_is_better=False)))
    print("hit latency without the run and the queue wait: p50 %s s, p99 %s s" % (
        f(s["hit_unqueued_p50_s"], "%.3f"), f(s["hit_unqueued_p99_s"], "%.3f")))
    for b in s["baseline"]:
        print("  baseline %s: correct=%s compile %.1f s, total %.1f s, candidate %.4f ms, "
              "reference %.4f ms (means)%s" % (b["id"], b["correct"], b["compile_s"], b["total_s"],
                                               b["candidate_ms"], b["reference_ms"],
                                               ("; " + b["error"][:200]) if b.get("error") else ""))
    if "ratio" in s:
        print("serial baseline: %.1f s per job -> %.1f evaluations per hour" % (
            s["baseline_per_job_s"], s["baseline_per_hour"]))
        print("ratio service / baseline: %.2fx   [target >= %d: %s]" % (
            s["ratio"], TARGETS["ratio"], verdict(s["ratio"], TARGETS["ratio"])))
    else:
        print("serial baseline: no ratio (%s)" % s["ratio_withheld"])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("cpu", "cuda"), required=True)
    p.add_argument("--jobs", type=int, default=20, help="distinct candidates")
    p.add_argument("--resubmit-share", type=float, default=0.2,
                   help="exact resubmissions, as a share of --jobs, sent once the original is done")
    p.add_argument("--concurrency", type=int, default=32, help="jobs in flight")
    p.add_argument("--baseline-jobs", type=int, default=3, help="jobs the serial baseline runs (0: none)")
    p.add_argument("--server", default="", help="use this kboxd instead of starting one")
    p.add_argument("--python", default=sys.executable, help="interpreter of kboxd's workers and the baseline")
    p.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    p.add_argument("--cpu-scale", type=int, default=64,
                   help="cpu backend: divide each problem's batch_size, dim, in_features and out_features "
                        "by this (1: full size; the summary says when sizes were shrunk)")
    p.add_argument("--gpu-scale", type=int, default=1, help="cuda backend: the same for GPU memory")
    p.add_argument("--levels", default="1",
                   help="KernelBench levels to draw problems from: 1 (activations), 2 (linear + epilogue; "
                        "naive kernels, slow at full size on a GPU), or 1,2")
    p.add_argument("--seed", type=int, default=1, help="picks which candidates are resubmitted")
    p.add_argument("--out", default="", help="directory for summary.json and results.json")
    p.add_argument("--kboxd-arg", action="append", default=[],
                   help="a flag for the kboxd it starts (repeatable), e.g. --kboxd-arg=--run-stages-ahead=2")
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds from the start: stop submitting and waiting then and print the summary "
                        "of what finished, marked PARTIAL, without the baseline (0: none)")
    p.add_argument("--progress", type=float, default=15, help="seconds between progress lines")
    p.add_argument("--compile-tier", type=int, default=0, metavar="CORES",
                   help="build on a compile-role kboxd pinned to the last CORES CPUs "
                        "(--compile-workers CORES) and run on a run-role kboxd pinned to the others, "
                        "its --compile-endpoint (docs/compile-tier.md); 0: one kboxd of role all")
    args = p.parse_args()
    if args.compile_tier and args.server:
        sys.exit("--compile-tier starts its own two kboxds; it does not go with --server")
    stop = Stop(time.monotonic() + args.deadline if args.deadline > 0 else None)

    scale = args.cpu_scale if args.backend == "cpu" else args.gpu_scale
    levels = tuple(int(x) for x in args.levels.split(","))
    jobs = candidates.generate(args.jobs, args.backend, args.shared, scale, levels)
    scale_note = "as in KernelBench (full size)"
    if scale > 1:
        changes = sorted({"%s %d->%d" % (k, o, n) for j in jobs for k, (o, n) in j["scaled"].items()})
        scale_note = "SHRUNK by --%s-scale %d (%s)" % (args.backend, scale, ", ".join(changes))
    print("kbox-bench: %d distinct %s candidates over %d problems; reference sizes %s" % (
        len(jobs), args.backend, len({j["problem"] for j in jobs}), scale_note), flush=True)
    n_again = int(round(args.jobs * args.resubmit_share))
    resubmit = set(random.Random(args.seed).sample(range(len(jobs)), min(n_again, len(jobs))))

    daemon = None
    tier = None  # (process, URL, work_dir, log, CPUs) of the compile-role kboxd
    server = args.server
    if not server:
        kboxd_args, run_cpus = list(args.kboxd_arg), None
        if args.compile_tier:
            run_cpus, tier_cpus = split_cpus(args.compile_tier)
            tier_log = os.path.join(tempfile.gettempdir(), "kbox-bench-compile-kboxd-%d.log" % os.getpid())
            tier = start_daemon(args.python, tier_log, ["--role=compile",
                                                        "--compile-workers=%d" % len(tier_cpus)], tier_cpus)
            tier += (tier_cpus,)
            print("compile-role kboxd at %s on CPUs %d-%d (log %s)" % (tier[1], tier_cpus[0], tier_cpus[-1],
                                                                     tier_log), flush=True)
            # The run node builds only when the tier cannot, on its own CPUs.
            kboxd_args = ["--role=run", "--compile-endpoint=%s" % tier[1],
                          "--compile-workers=%d" % len(run_cpus)] + kboxd_args
        log_path = os.path.join(tempfile.gettempdir(), "kbox-bench-kboxd-%d.log" % os.getpid())
        daemon, server, work_dir, log = start_daemon(args.python, log_path, kboxd_args, run_cpus)
        print("kboxd at %s (log %s; flags %s%s)" % (
            server, log_path, " ".join(kboxd_args) or "none",
            "; CPUs %d-%d" % (run_cpus[0], run_cpus[-1]) if run_cpus else ""), flush=True)
    try:
        info = http(server, "/v1/info")
        before = scrape(server)
        tier_before = scrape(tier[1]) if tier else None
        request_of = lambda job: {"reference_source": job["reference_source"],  # noqa: E731
                                  "candidate_source": job["candidate_source"],
                                  "backend": "BACKEND_" + args.backend.upper(), "correctness_trials": 5}
        records = run_stream(server, jobs, request_of, resubmit, args.concurrency,
                             "%d-%d" % (os.getpid(), int(time.time())), stop, args.progress, before)
        try:
            after = scrape(server)
        except Exception:  # a stopped run still reports what finished
            after = {k: None for k in METRICS}
        tier_figures = None
        if tier:
            built = diff_tier(tier_before, scrape(tier[1]))
            # A run node whose last scrape failed is counted as having made nothing.
            ran = diff_tier(before, after if "remote" in after else before)
            tier_figures = {"cores": len(tier[4]), "run_node_cores": len(run_cpus), "served": built["served"],
                            "compile_cpu_s": built["compile_cpu_s"], "run_node_builds": ran["remote"],
                            "run_node_compile_cpu_s": ran["compile_cpu_s"]}
        if stop.why:
            # Printed before kboxd is stopped: stopping it waits for the
            # jobs still in flight.
            summary = summarise(args, info, records, diff_metrics(before, after), [], scale_note, 0)
            summary["partial"] = stop.why
            summary["compile_tier"] = tier_figures
            print_summary(summary)
    finally:
        if daemon:
            stop_daemon(daemon, work_dir, log, grace_s=10 if stop.why else 300)
        if tier:
            stop_daemon(tier[0], tier[2], tier[3], grace_s=10 if stop.why else 300)
    if not stop.why:
        baseline = []
        sample = baseline_sample(jobs, args.baseline_jobs)
        if sample:
            print("serial baseline on %d of the same jobs (spread over the list)..." % len(sample), flush=True)
            baseline = run_baseline(args.python, sample, args.backend)
        summary = summarise(args, info, records, diff_metrics(before, after), baseline, scale_note, len(sample))
        summary["compile_tier"] = tier_figures
        print_summary(summary)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(records, f, indent=1, sort_keys=True)
    if summary.get("partial"):
        return 2
    return 0 if summary["correct_rewardable"] == summary["jobs"] else 1


if __name__ == "__main__":
    sys.exit(main())
