#!/usr/bin/env python3
"""Cold compile time: plain `load_inline` against kbox's compile path.

Each build imports one candidate file (its top-level load_inline/load calls
build the extension) in a fresh Python process with a fresh, empty
TORCH_EXTENSIONS_DIR, so nothing is reused between builds:

  plain  the candidate's calls as written (KernelBench's own evaluation);
  kbox   the same calls through the compile stage's ExtensionHook with the
         light <torch/extension.h> first (docs/compile-speed.md).

Prints one line per candidate: the median wall seconds of each, their ratio,
the same for CPU seconds (user + system of the build's whole process tree:
steadier than wall time on a shared machine) and what the light path did
(used / fell_back). Modes alternate within each round, so drifting machine
load hits both alike.

  scripts/compile_bench.py --few-shot ../shared/datasets/kernelbench/few_shot
  scripts/compile_bench.py --cpu-bench 3 --corpus ../shared/corpus -n 2
  scripts/compile_bench.py path/to/candidate.py ...

Only the environment decides the GPU arch list and the compiler, the same for
both modes (export TORCH_CUDA_ARCH_LIST to build for one arch).
"""
import argparse
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(REPO, "worker", "harness")


def _child(mode, path, build_dir):
    """Runs in the fresh process: import the candidate, print one JSON line."""
    import importlib.util
    import torch  # noqa: F401  (imported before timing, as in both real paths)
    hook = None
    if mode == "kbox":
        sys.path.insert(0, HARNESS)
        from kbox_harness import extension_hook
        hook = extension_hook.ExtensionHook(build_dir, build=True, light=True).install()
    spec = importlib.util.spec_from_file_location("kbox_bench_candidate", path)
    module = importlib.util.module_from_spec(spec)
    t0 = time.perf_counter()
    error = ""
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # report it; the parent decides
        error = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    seconds = time.perf_counter() - t0
    light = hook.light_summary() if hook is not None else ""
    if hook is not None and hook.failure is not None and not error:
        error = "build failed"
    print(json.dumps({"seconds": seconds, "light": light, "error": error}))


def _build_once(mode, path, python):
    with tempfile.TemporaryDirectory(prefix="kbox-compile-bench-") as build_dir:
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=build_dir)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([python, os.path.abspath(__file__), "--child", mode, path, build_dir],
                              env=env, cwd=build_dir, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"seconds": float("nan"), "cpu": cpu, "light": "", "error": "exit %d: %s" % (
            proc.returncode, proc.stderr.strip().splitlines()[-1:] or "")}
    result = json.loads(lines[-1])
    result["cpu"] = cpu  # the whole child process, torch's import included
    return result


def _cpu_bench_candidates(count, shared, out_dir):
    """The first `count` CPU candidates of scripts/kbox_bench_candidates.py."""
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    import kbox_bench_candidates
    paths = []
    for c in kbox_bench_candidates.generate(count, "cpu", shared):
        path = os.path.join(out_dir, c["id"].replace("-", "_") + ".py")
        with open(path, "w") as f:
            f.write(c["candidate_source"])
        paths.append(path)
    return paths


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:5])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("candidates", nargs="*", help="candidate .py files (ModelNew + load_inline)")
    p.add_argument("--few-shot", metavar="DIR",
                   help="KernelBench few_shot directory: its model_new_ex_*.py files")
    p.add_argument("--corpus", metavar="DIR",
                   help="kbox corpus: its legit/*_cpu/candidate.py files")
    p.add_argument("--cpu-bench", type=int, default=0, metavar="N",
                   help="the first N CPU candidates of scripts/kbox_bench_candidates.py")
    p.add_argument("--shared", default=os.path.join(os.path.dirname(REPO), "shared"),
                   help="shared directory holding datasets/kernelbench (for --cpu-bench)")
    p.add_argument("-n", "--rounds", type=int, default=1, help="cold builds per mode and candidate")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch")
    args = p.parse_args()

    paths = list(args.candidates)
    if args.few_shot:
        paths += sorted(glob.glob(os.path.join(args.few_shot, "model_new_ex_*.py")))
    if args.corpus:
        paths += sorted(glob.glob(os.path.join(args.corpus, "legit", "*_cpu", "candidate.py")))
    generated = tempfile.mkdtemp(prefix="kbox-compile-bench-src-")
    if args.cpu_bench:
        paths += _cpu_bench_candidates(args.cpu_bench, args.shared, generated)
    paths = [os.path.abspath(path) for path in paths]  # builds run in their own directory
    if not paths:
        p.error("no candidates: pass files, --few-shot, --corpus or --cpu-bench")

    print("# %d candidate(s), %d cold build(s) per mode; wall seconds, median" %
          (len(paths), args.rounds), flush=True)
    print("%-40s %8s %8s %6s %10s %10s %6s  %s" % (
        "candidate", "plain_s", "kbox_s", "ratio", "plain_cpu", "kbox_cpu", "ratio", "light"))
    ratios, cpu_ratios = [], []
    for path in paths:
        times = {"plain": [], "kbox": []}
        cpus = {"plain": [], "kbox": []}
        light, errors = set(), []
        for _ in range(args.rounds):
            for mode in ("plain", "kbox"):
                r = _build_once(mode, path, args.python)
                times[mode].append(r["seconds"])
                cpus[mode].append(r["cpu"])
                if r["light"]:
                    light.add(r["light"])
                if r["error"]:
                    errors.append("%s: %s" % (mode, r["error"]))
        plain, kbox = statistics.median(times["plain"]), statistics.median(times["kbox"])
        ratio = plain / kbox if kbox > 0 else float("nan")
        plain_cpu, kbox_cpu = statistics.median(cpus["plain"]), statistics.median(cpus["kbox"])
        cpu_ratio = plain_cpu / kbox_cpu if kbox_cpu > 0 else float("nan")
        if not errors:
            ratios.append(ratio)
            cpu_ratios.append(cpu_ratio)
        name = os.path.relpath(path, os.path.dirname(os.path.dirname(path)))
        print("%-40s %8.1f %8.1f %6.2f %10.1f %10.1f %6.2f  %s%s" % (
            name[-40:], plain, kbox, ratio, plain_cpu, kbox_cpu, cpu_ratio,
            ",".join(sorted(light)) or "-",
            ("  ERRORS " + "; ".join(errors)) if errors else ""), flush=True)
    if ratios:
        print("# geometric mean plain/kbox over %d candidate(s): wall %.2f, cpu %.2f" % (
            len(ratios), statistics.geometric_mean(ratios),
            statistics.geometric_mean(cpu_ratios)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
