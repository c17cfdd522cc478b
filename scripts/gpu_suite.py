#!/usr/bin/env python3
"""The GPU verification suite: starts kboxd on this machine's GPU and runs
every GPU case through it, printing one line per case.

Cases: the five KernelBench few-shot pairs (cuda; mnist2, which keeps its conv
and linear layers in PyTorch, under the lenient anti-cheat profile), every
CUDA case of the shared corpus and of corpus-new (its expect.json decides),
CUDA hacks again with the static layer off so that only the run stage's checks
can catch them (run-layer/*), the bundled CUDA example, a
Triton candidate for the `add` problem, an honest row-sum kernel, a candidate
with an nvcc error, and a
kernel with an out-of-bounds write, one that never ends, one that exhausts the
GPU's memory and one that holds it all, each followed by the five honest
few-shot pairs on the same GPU (kboxd probes the GPU after each fault), and
last the out-of-bounds kernel again with eight honest jobs queued behind it at
once. kboxd runs with its full sandbox and default settings.

Usage: scripts/gpu-suite [--shared DIR] [--out DIR]
Needs build/bin/kboxd (built on Debian 12 and carried to the GPU machine;
see docs/gpu-verification.md).
"""
import argparse
import concurrent.futures
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_CASES = os.path.join(REPO, "tests", "gpu", "cases")
FEW_SHOT = ["add", "fuse_gelu", "tiled_matmul", "mnist2", "flash_attn"]


def start_daemon(work_dir, python, stderr=None, extra_args=(), cpus=None):
    """Starts kboxd; returns (process, URL). stderr: where kboxd's log goes
    (default this process's stderr); extra_args: more kboxd flags; cpus: the
    CPUs it and every process it starts may run on (default: this one's)."""
    bin_dir = os.environ.get("KBOX_BIN_DIR") or os.path.join(REPO, "build", "bin")
    cmd = [os.path.join(bin_dir, "kboxd"), "--listen", "127.0.0.1:0",
           "--work-dir", work_dir, "--python", python] + list(extra_args)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sys.stderr if stderr is None else stderr,
                            text=True, preexec_fn=pin)
    line = proc.stdout.readline()
    if "listening on " not in line:
        proc.kill()
        sys.exit("kboxd did not start: %r" % line)
    return proc, line.strip().split("listening on ")[1]


def evaluate(server, reference, candidate, backend, **extra):
    body = {"reference_source": open(reference).read(),
            "candidate_source": open(candidate).read(),
            "backend": "BACKEND_" + backend.upper()}
    body.update(extra)
    req = urllib.request.Request(server + "/v1/evaluate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=1800) as resp:
        return json.load(resp)


def gpu_of(result):
    """The index of the GPU whose run stage served `result`, from its
    fingerprint (proto3's JSON leaves out index 0), or None: a CPU job, or
    one that ended before its run stage."""
    fingerprint = result.get("fingerprint")
    if fingerprint is None or fingerprint.get("device_name", "cpu") == "cpu":
        return None
    if not (result.get("durations") or {}).get("run_ms"):
        return None
    return int(fingerprint.get("device_index", 0))


def describe(result):
    d = result.get("durations", {})
    speed = result.get("speedup", 0)
    rejects = sorted({v["rule_id"] for v in result.get("verdicts", []) if v.get("severity") == "REJECT"})
    gpu = (" gpu%d" % gpu_of(result)) if gpu_of(result) is not None else ""
    return "%s rewardable=%s%s speedup=%s static=%.2fms compile=%.1fs queue=%.1fs run=%.1fs%s | %s" % (
        result.get("status"), str(result.get("rewardable")).lower(), gpu,
        ("%.2fx" % speed) if speed else "-", d.get("static_ms", 0), d.get("compile_ms", 0) / 1000,
        d.get("queue_wait_ms", 0) / 1000, d.get("run_ms", 0) / 1000,
        (" rejects=" + ",".join(rejects)) if rejects else "", result.get("message", "")[:100])


def expect_correct(result):
    return result.get("status") == "CORRECT" and result.get("rewardable") is True


def expect_rewardable(expected):
    # kbox's own failure is no verdict on the candidate: a reward hack that
    # ends INFRA_ERROR was not caught (and is retried elsewhere).
    return lambda r: (r.get("rewardable") is expected and r.get("status") != "INFRA_ERROR" and
                      (not expected or r.get("status") == "CORRECT"))


def expect_nvcc_error(result):
    log = result.get("compile_log", {})
    return (result.get("status") == "COMPILE_ERROR" and "candidate.py:14" in log.get("text", "")
            and "undeclared_offset" in log.get("text", "") and log.get("first_error_line") == 14)


def expect_runtime_error(result):
    return result.get("status") == "RUNTIME_ERROR" and result.get("rewardable") is False


def expect_timeout(result):
    return result.get("status") == "TIMEOUT" and result.get("durations", {}).get("run_ms", 0) < 40000


def print_speedup_spread(results):
    """One line per few-shot pair: its speedups over the repeats and their
    coefficient of variation (issue 5's stability target: <= 2 % for kernels
    of 100 us or more)."""
    by_pair = {}
    for name, r in results.items():
        pair = name.split("#")[0]
        if r.get("status") == "CORRECT" and r.get("speedup"):
            by_pair.setdefault(pair, []).append(
                (r["speedup"], r["candidate_timing"]["median_ms"], r["reference_timing"]["median_ms"]))
    for pair in sorted(by_pair):
        rows = by_pair[pair]
        speedups = [x[0] for x in rows]
        mean = sum(speedups) / len(speedups)
        std = (sum((x - mean) ** 2 for x in speedups) / len(speedups)) ** 0.5
        cand_ms = sorted(x[1] for x in rows)[len(rows) // 2]
        print("SPREAD %-24s n=%d speedup mean %.3fx min %.3fx max %.3fx cv %.1f%% (candidate median %.4f ms)"
              % (pair, len(rows), mean, min(speedups), max(speedups), 100 * std / mean if mean else 0,
                 cand_ms), flush=True)


def expect_rejected_by(rule):
    return lambda r: (r.get("status") == "REJECTED" and r.get("rewardable") is False and
                      any(v.get("rule_id") == rule and v.get("severity") == "REJECT"
                          for v in r.get("verdicts", [])))


def expect_honest_slowdown(result):
    # Correct, but timed with the clock stopped after a device-wide sync: the
    # unjoined side stream's kernel counts (a naive checker reports 1.48x).
    return (result.get("status") == "CORRECT" and 0 < result.get("speedup", 0) < 1.0 and
            not any(v.get("rule_id") == "run.timing-mismatch" for v in result.get("verdicts", [])))


def expect_not_correct(result):
    return result.get("rewardable") is False and result.get("status") in ("INCORRECT", "RUNTIME_ERROR")


def dynamic_layer_cases(shared):
    """CUDA hacks with the static layer off (profile "off"), each with only the
    run-stage rule under test set to reject: what the run stage alone catches."""
    hacks = os.path.join(shared, "corpus", "reward-hacks")
    table = [
        ("h7_side_stream_cuda", {}, expect_honest_slowdown),
        ("h2_decoy_branch_cuda", {"run.kernel-not-launched": "reject"},
         expect_rejected_by("run.kernel-not-launched")),
        ("h1_matmul_operator_cuda", {"run.library-compute": "reject"},
         expect_rejected_by("run.library-compute")),
        ("h12_event_elapsed_patch_cuda", {"run.harness-tampering": "reject"},
         expect_rejected_by("run.harness-tampering")),
        ("h5_stale_memory_cuda", {}, expect_not_correct),
    ]
    cases = [("run-layer/thread_launch", os.path.join(shared, "datasets", "kernelbench", "few_shot",
                                                   "model_ex_add.py"),
              os.path.join(GPU_CASES, "thread_launch", "candidate.py"), "cuda",
              expect_rejected_by("run.thread-started"),
              {"anticheat_profile": "off", "anticheat_overrides": {"run.thread-started": "reject"}})]
    for name, overrides, check in table:
        case_dir = os.path.join(hacks, name)
        if not os.path.isdir(case_dir):
            continue
        cases.append(("run-layer/" + name, os.path.join(case_dir, "reference.py"),
                      os.path.join(case_dir, "candidate.py"), "cuda", check,
                      {"anticheat_profile": "off", "anticheat_overrides": overrides}))
    # corpus-new's CUDA hacks with every run.* rule at reject: the run stage
    # alone must stop each, but an fp16 computation of an fp32 task, which
    # only the static rules can see (cpp.precision-downgrade).
    run_rules = {rule: "reject" for rule in RUN_RULES}
    for case_dir in sorted(glob.glob(os.path.join(shared, "corpus-new", "reward-hacks", "*_cuda"))):
        name = os.path.basename(case_dir)
        if name in STATIC_ONLY:
            continue
        cases.append(("run-layer/" + name, os.path.join(case_dir, "reference.py"),
                      os.path.join(case_dir, "candidate.py"), "cuda", expect_rejected_at_run_time,
                      {"anticheat_profile": "off", "anticheat_overrides": run_rules}))
    return cases


# The run stage's rules that reject under strict (every run.* rule but the
# reported-only run.below-physical-floor, run.degenerate-problem and run.rounding-allowance).
RUN_RULES = ("run.background-work", "run.forbidden-call", "run.harness-tampering", "run.input-mutation",
             "run.kernel-not-launched", "run.library-compute", "run.native-dispatcher",
             "run.native-forbidden-call", "run.native-library-compute", "run.native-thread",
             "run.native-unreadable", "run.nondeterministic", "run.output-contract", "run.output-kept",
             "run.thread-started", "run.timed-output-mismatch", "run.timing-mismatch")
STATIC_ONLY = {"h15_half_alias_wmma_cuda"}


def expect_rejected_at_run_time(result):
    return (result.get("status") == "REJECTED" and result.get("rewardable") is False and
            any(v.get("rule_id", "").startswith("run.") and v.get("severity") == "REJECT"
                for v in result.get("verdicts", [])))


def build_cases(shared):
    few = os.path.join(shared, "datasets", "kernelbench", "few_shot")
    add_ref = os.path.join(few, "model_ex_add.py")
    cases = []
    for name in FEW_SHOT:
        # mnist2 replaces only max-pool; strict rejects its PyTorch conv/linear layers.
        extra = {"anticheat_profile": "lenient"} if name == "mnist2" else {}
        cases.append(("few_shot/" + name, os.path.join(few, "model_ex_%s.py" % name),
                      os.path.join(few, "model_new_ex_%s.py" % name), "cuda", expect_correct, extra))
    for corpus in ("corpus", "corpus-new"):
        for case_dir in sorted(glob.glob(os.path.join(shared, corpus, "*", "*_cuda"))):
            with open(os.path.join(case_dir, "expect.json")) as f:
                expected = json.load(f)["rewardable"]
            cases.append((corpus + "/" + os.path.basename(case_dir), os.path.join(case_dir, "reference.py"),
                          os.path.join(case_dir, "candidate.py"), "cuda", expect_rewardable(expected), {}))
    cases += dynamic_layer_cases(shared)
    examples = os.path.join(REPO, "docs", "examples")
    cases.append(("example/bias_relu_cuda", os.path.join(examples, "bias_relu", "reference.py"),
                  os.path.join(examples, "bias_relu_cuda", "candidate.py"), "cuda", expect_correct, {}))
    row_sum = os.path.join(GPU_CASES, "row_sum")
    cases.append(("row_sum", os.path.join(row_sum, "reference.py"), os.path.join(row_sum, "candidate.py"),
                  "cuda", expect_correct, {}))
    cases.append(("triton_add", add_ref, os.path.join(GPU_CASES, "triton_add", "candidate.py"),
                  "triton", expect_correct, {}))
    cases.append(("nvcc_error", add_ref, os.path.join(GPU_CASES, "nvcc_error", "candidate.py"),
                  "cuda", expect_nvcc_error, {}))
    return cases, add_ref, os.path.join(few, "model_new_ex_add.py")


def expect_not_rewardable(result):
    return result.get("rewardable") is False and result.get("status") not in ("CORRECT", "INFRA_ERROR")


# (case, check, extra request fields): candidates that may leave the GPU
# broken. kboxd probes the GPU after each (kbox_device_probes_total) before its
# next job, or quarantines it.
FAULT_CASES = (("oob_write", expect_runtime_error, {}),
               ("infinite_kernel", expect_timeout, {"time_limit_s": 20}),
               ("gpu_oom_raise", expect_runtime_error, {}),
               ("gpu_memory_hog", expect_not_rewardable, {}))


def device_metrics(server):
    """The device probe and quarantine series of kboxd's /metrics."""
    text = urllib.request.urlopen(server + "/metrics", timeout=30).read().decode()
    return [line for line in text.splitlines()
            if line.startswith(("kbox_device_probes_total", "kbox_device_quarantines_total",
                                "kbox_device_healthy"))]


def run_fault_cases(server, honest, add_ref, wanted, report):
    faults = [f for f in FAULT_CASES if not wanted or any(w in f[0] for w in wanted)]
    # Builds first, all at once (the compile pool is parallel, the GPU runs
    # one job at a time): the sequence below then hits the build cache, so a
    # fault and the honest jobs after it are each other's GPU neighbours.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(honest) + len(faults)) as pool:
        warm = [pool.submit(evaluate, server, ref, cand, backend, measure_performance=False,
                            correctness_trials=1, **extra)
                for _, ref, cand, backend, _, extra in honest]
        warm += [pool.submit(evaluate, server, add_ref, os.path.join(GPU_CASES, name, "candidate.py"),
                             "cuda", measure_performance=False, correctness_trials=1, **extra)
                 for name, _, extra in faults]
        for future in warm:
            future.result()
    for name, check, extra in faults:
        started = time.time()
        bad = evaluate(server, add_ref, os.path.join(GPU_CASES, name, "candidate.py"), "cuda", **extra)
        report(name, "cuda", bad, check(bad))
        print("     %s: result after %.1f s; %s" % (name, time.time() - started,
                                                     "; ".join(device_metrics(server))), flush=True)
        # Correctness only: what a broken device would spoil; the timing of
        # these pairs is the rest of the suite's business.
        for pair, ref, cand, backend, _, pair_extra in honest:
            after = evaluate(server, ref, cand, backend, measure_performance=False, **pair_extra)
            report("after_%s/%s" % (name, pair), backend, after, expect_correct(after))


def run_fault_with_queue(server, honest, add_ref, report):
    """A faulting kernel with honest jobs queued and set up ahead behind it
    (run_stages_ahead at its default): the fault is the candidate's
    RUNTIME_ERROR, the GPU is probed and stays in service, and every honest
    job ends CORRECT, none lost or run twice."""
    def submit(ref, cand, backend, extra):
        try:
            return evaluate(server, ref, cand, backend, measure_performance=False, **extra)
        except Exception as exc:  # A transport failure is a failed case.
            return {"status": "CLIENT_ERROR", "message": repr(exc)}

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(honest) + 1) as pool:
        # Built first (cache hits where the suite built them already), so
        # that all of them are queued at the GPU, not at the compilers.
        for future in [pool.submit(submit, ref, cand, backend, dict(extra, correctness_trials=1))
                       for _, ref, cand, backend, _, extra in honest]:
            future.result()
    probes_before = device_metrics(server)
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(honest) + 1) as pool:
        fault = pool.submit(submit, add_ref, os.path.join(GPU_CASES, "oob_write", "candidate.py"), "cuda", {})
        time.sleep(1.0)  # first in line; the honest jobs queue behind it
        behind = [(name, backend, pool.submit(submit, ref, cand, backend, extra))
                  for name, ref, cand, backend, _, extra in honest]
        bad = fault.result()
        report("queue_behind_fault/oob_write", "cuda", bad, expect_runtime_error(bad))
        ids = []
        for name, backend, future in behind:
            result = future.result()
            ids.append(result.get("job_id"))
            report("queue_behind_fault/" + name, backend, result, expect_correct(result))
    distinct = len(set(ids)) == len(ids)
    print("     queue_behind_fault: %d honest jobs, %d distinct ids; before: %s; after: %s" % (
        len(ids), len(set(ids)), "; ".join(probes_before), "; ".join(device_metrics(server))), flush=True)
    report("queue_behind_fault/distinct_results", "cuda", {"status": "CORRECT" if distinct else "DUPLICATED"},
           distinct)


def save_results(out, results):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "gpu-suite-results.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def run_eval_dir(server, shared, out, report):
    """`kbox eval-dir` over every KernelBench level-1 problem, with a
    generated candidate for each problem kbox-bench covers (the rest count as
    missing, as in a model's run): every candidate there must be CORRECT, and
    the summary, CSV and plot land in <out>/eval_dir."""
    import kbox_bench_candidates  # beside this script; only this part needs it
    level1 = os.path.join(shared, "datasets", "kernelbench", "level1")
    run = tempfile.mkdtemp(prefix="kbox-eval-dir-")
    names = kbox_bench_candidates.write_run(os.path.join(run, "candidates"), "cuda", shared)
    dest = os.path.join(out or run, "eval_dir")
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python"))
    started = time.time()
    done = subprocess.run([sys.executable, "-m", "kbox_client.eval_dir", "--server", server,
                           "--problems", level1, "--candidates", os.path.join(run, "candidates"),
                           "--backend", "cuda", "--out", dest], env=env, capture_output=True,
                          text=True, timeout=1800)
    print(done.stdout, end="", flush=True)
    journal = os.path.join(dest, "results.jsonl")
    evaluated = {}  # problem -> result, for those with a candidate
    if os.path.exists(journal):
        with open(journal) as f:
            for line in f:
                row = json.loads(line)
                evaluated[row["problem"] + ".py"] = row["result"]
    correct = sum(1 for name in names if evaluated.get(name, {}).get("status") == "CORRECT")
    ok = done.returncode == 0 and correct == len(names)
    summary = {"status": "CORRECT" if ok else "FAILED",
               "message": "eval-dir: %d candidates, %d CORRECT, rc %d, %.0f s%s" % (
                   len(names), correct, done.returncode, time.time() - started,
                   "" if done.returncode == 0 else "; " + done.stderr[-400:])}
    report("eval_dir/kernelbench_level1", "cuda", summary, ok)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    parser.add_argument("--out", default="", help="directory for full JSON results")
    parser.add_argument("--python", default=shutil.which("python3") or "/usr/bin/python3")
    parser.add_argument("--only", default="", help="comma-separated substrings of case names")
    parser.add_argument("--repeat", type=int, default=0,
                        help="instead of the suite: evaluate each few-shot pair N times and print "
                             "the coefficient of variation of its speedup")
    parser.add_argument("--part", choices=("all", "cases", "eval-dir", "faults"), default="all",
                        help="cases: every single-job case; eval-dir: `kbox eval-dir` over "
                             "KernelBench level 1; faults: the fault cases (with the honest jobs "
                             "they need); all: the three in that order")
    parser.add_argument("--kboxd-arg", action="append", default=[],
                        help="a flag for kboxd (repeatable), e.g. --kboxd-arg=--run-stages-ahead=2")
    args = parser.parse_args()

    work_dir = "/tmp/kbox-gpu-suite-%d" % os.getpid()
    daemon, server = start_daemon(work_dir, args.python, extra_args=args.kboxd_arg)
    print("kboxd at %s; info: %s" % (server, urllib.request.urlopen(server + "/v1/info").read().decode().strip()))
    metrics = urllib.request.urlopen(server + "/metrics").read().decode()
    print("\n".join(line for line in metrics.splitlines() if line.startswith("kbox_gpu_info")), flush=True)
    cases, add_ref, _ = build_cases(args.shared)
    honest = [c for c in cases if c[0].startswith("few_shot/")]  # run after each fault case
    # Eight honest jobs to queue behind a fault: the few-shot pairs and three more.
    queued_behind = honest + [c for c in cases if c[0] in ("row_sum", "triton_add", "example/bias_relu_cuda")]
    if args.repeat:
        cases = [("%s#%d" % (name, k), ref, cand, backend, check, extra)
                 for k in range(args.repeat)
                 for name, ref, cand, backend, check, extra in cases if name.startswith("few_shot/")]
    wanted = [w for w in args.only.split(",") if w]
    if wanted:
        cases = [c for c in cases if any(w in c[0] for w in wanted)]
    if args.part in ("faults", "eval-dir"):
        cases = []
    results, failures = {}, 0
    started = time.time()

    def report(name, backend, result, ok):
        nonlocal failures
        failures += 0 if ok else 1
        results[name] = result
        if args.out:  # after every case: a suite cut short still leaves what it saw
            save_results(args.out, results)
        print("%s %-40s %-6s %s" % ("PASS" if ok else "FAIL", name, backend, describe(result)), flush=True)
        for v in result.get("verdicts", []):  # run-stage findings in full: the evidence of a verdict
            if v.get("phase") == "PHASE_RUN":
                print("     %s %s: %s" % (v.get("severity"), v.get("rule_id"), v.get("message", "")[:400]), flush=True)

    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(cases) + 1) as pool:
            futures = {pool.submit(evaluate, server, ref, cand, backend, **extra): (name, backend, check)
                       for name, ref, cand, backend, check, extra in cases}
            for future in concurrent.futures.as_completed(futures):
                name, backend, check = futures[future]
                try:
                    result = future.result()
                except Exception as exc:  # A transport failure is a failed case.
                    result = {"status": "CLIENT_ERROR", "message": repr(exc)}
                report(name, backend, result, check(result))
        if args.repeat:
            print_speedup_spread(results)
        if not args.repeat and not wanted and args.part in ("all", "eval-dir"):
            run_eval_dir(server, args.shared, args.out, report)
        # Last, with the GPU otherwise idle: kernels that fault, never end or
        # exhaust the GPU's memory, each followed by the five honest few-shot
        # pairs, which are the next jobs that GPU runs (issue 8).
        if not args.repeat and args.part in ("all", "faults"):
            run_fault_cases(server, honest, add_ref, wanted, report)
            if not wanted or any(w in "queue_behind_fault/" for w in wanted):
                run_fault_with_queue(server, queued_behind, add_ref, report)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=120)
    total = len(results)
    print("gpu-suite: %d passed, %d failed in %.0f s" % (total - failures, failures, time.time() - started))
    if args.out:
        save_results(args.out, results)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
