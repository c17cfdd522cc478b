#!/usr/bin/env python3
"""Cold compile time: plain `load_inline` against kbox's compile path.

Each build imports one candidate file (its top-level load_inline/load calls
build the extension) in a fresh Python process with a fresh, empty
TORCH_EXTENSIONS_DIR, so nothing is reused between builds:

  plain  the candidate's calls as written (KernelBench's own evaluation);
  light  the same calls through the compile stage's ExtensionHook with the
         light <torch/extension.h> first (docs/compile-speed.md);
  kbox   light, and a build's CUDA sources against per-operator ATen headers
         (the compile stage's default; the same as light without CUDA);
  pch    (with --pch) kbox plus the light header's GCC precompiled header,
         built once before the rounds by kbox_pch.py's code (its cost is
         printed apart: kboxd pays it once at start-up, not per build).

Prints one line per candidate: the median wall seconds of each, their ratio,
the same for CPU seconds (user + system of the build's whole process tree:
steadier than wall time on a shared machine) and what the light path did
(used / fell_back; "cuda:" what the per-operator headers did). Modes
alternate within each round, so drifting machine load hits each alike; with
--jobs N, N builds run at once (for a machine with cores to spare: each build
runs at most two compiler processes, MAX_JOBS=2).

  scripts/compile_bench.py --few-shot ../shared/datasets/kernelbench/few_shot
  scripts/compile_bench.py --cpu-bench 3 --corpus ../shared/corpus -n 2
  scripts/compile_bench.py --corpus ../shared/corpus --pch
  scripts/compile_bench.py path/to/candidate.py ...

Only the environment decides the GPU arch list and the compiler, the same for
both modes (export TORCH_CUDA_ARCH_LIST to build for one arch).
"""
import argparse
import concurrent.futures
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(REPO, "worker", "harness")


def _child(mode, path, build_dir, pch_dir=""):
    """Runs in the fresh process: import the candidate, print one JSON line."""
    import importlib.util
    import torch  # noqa: F401  (imported before timing, as in both real paths)
    hook = None
    if mode in ("light", "kbox", "pch"):
        sys.path.insert(0, HARNESS)
        from kbox_harness import extension_hook
        hook = extension_hook.ExtensionHook(build_dir, build=True, light=True,
                                            pch_dir=pch_dir if mode == "pch" else "",
                                            per_operator=mode != "light").install()
    spec = importlib.util.spec_from_file_location("kbox_bench_candidate", path)
    module = importlib.util.module_from_spec(spec)
    # This process's CPU before the build: the interpreter and torch's import.
    before = resource.getrusage(resource.RUSAGE_SELF)
    cpu_before_build = before.ru_utime + before.ru_stime
    t0 = time.perf_counter()
    error = ""
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # report it; the parent decides
        error = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    seconds = time.perf_counter() - t0
    light = hook.light_summary() if hook is not None else ""
    if hook is not None and hook.pch_state:
        light += "+pch:" + hook.pch_state
    if hook is not None and hook.per_operator_summary():
        light += "+cuda:" + hook.per_operator_summary()
    if hook is not None and hook.failure is not None and not error:
        error = "build failed"
    print(json.dumps({"seconds": seconds, "light": light, "error": error,
                      "cpu_before_build": cpu_before_build}))


def _build_once(mode, path, python, pch_dir="", profile=None):
    """One cold build. profile: (directory, tag) to keep where its time went
    (nvcc's --time table and ninja's log, PROFILE below)."""
    with tempfile.TemporaryDirectory(prefix="kbox-compile-bench-") as build_dir:
        env = dict(os.environ, TORCH_EXTENSIONS_DIR=build_dir, MAX_JOBS="2")
        if profile:
            # nvcc appends one row per phase of each of its runs.
            env["NVCC_APPEND_FLAGS"] = (env.get("NVCC_APPEND_FLAGS", "") + " --time " +
                                        os.path.join(profile[0], profile[1] + ".nvcc.csv")).strip()
        out_path, err_path = os.path.join(build_dir, "out.txt"), os.path.join(build_dir, "err.txt")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen([python, os.path.abspath(__file__), "--child", mode, path,
                                     build_dir, pch_dir],
                                    env=env, cwd=build_dir, stdout=out, stderr=err)
            # wait4: this build's own CPU time (its process tree), also when
            # other builds run at once (--jobs).
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        with open(out_path) as f:
            stdout = f.read()
        with open(err_path) as f:
            stderr = f.read()
        if profile:
            for log in glob.glob(os.path.join(build_dir, "**", ".ninja_log"), recursive=True):
                shutil.copy(log, os.path.join(profile[0], profile[1] + ".ninja_log"))
    cpu = usage.ru_utime + usage.ru_stime
    lines = [l for l in stdout.splitlines() if l.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"seconds": float("nan"), "cpu": cpu, "light": "", "error": "exit %d: %s" % (
            proc.returncode, stderr.strip().splitlines()[-1:] or "")}
    result = json.loads(lines[-1])
    result["cpu"] = cpu  # the whole child process, torch's import included
    return result


PROFILE_HEAD = "%-40s %-5s %6s %6s  %s" % ("candidate", "mode", "cpu", "import", "steps (s)")


def _profile_line(name, mode, result, directory, tag):
    """Where one build's time went: the process tree's CPU, the part spent
    before the build (interpreter and torch), ninja's targets (wall of each
    compiler run: single-threaded, so about its CPU) and nvcc's phases summed
    over its runs."""
    steps = []
    log = os.path.join(directory, tag + ".ninja_log")
    if os.path.exists(log):
        with open(log) as f:
            for line in f:
                parts = line.split("\t")
                if len(parts) >= 4 and not line.startswith("#"):
                    steps.append("%s %.1f" % (os.path.basename(parts[3]), (int(parts[1]) - int(parts[0])) / 1e3))
    phases = {}
    table = os.path.join(directory, tag + ".nvcc.csv")
    if os.path.exists(table):
        with open(table) as f:
            for row in f:
                cells = [c.strip() for c in row.split(",")]
                if len(cells) >= 8 and cells[7] == "ms":
                    phases[cells[1]] = phases.get(cells[1], 0.0) + float(cells[6]) / 1e3
    nvcc = ", ".join("%s %.1f" % (k, v) for k, v in sorted(phases.items(), key=lambda kv: -kv[1]))
    return "%-40s %-5s %6.1f %6.1f  ninja: %s | nvcc: %s" % (
        name[-40:], mode, result["cpu"], result.get("cpu_before_build", float("nan")),
        "; ".join(steps) or "-", nvcc or "-")


def _bench_candidates(count, backend, shared, out_dir):
    """The first `count` candidates of scripts/kbox_bench_candidates.py for
    backend: level 1 for cpu, levels 1 and 2 for cuda (kbox-bench's mix)."""
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    import kbox_bench_candidates
    levels = (1,) if backend == "cpu" else (1, 2)
    paths = []
    for c in kbox_bench_candidates.generate(count, backend, shared, levels=levels):
        path = os.path.join(out_dir, c["id"].replace("-", "_") + ".py")
        with open(path, "w") as f:
            f.write(c["candidate_source"])
        paths.append(path)
    return paths


def _build_pch(python, root):
    """kbox_pch.py into root, as kboxd runs it; prints what it cost."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([python, "-s", "-B", os.path.join(HARNESS, "kbox_pch.py"), "--root", root],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    answer = json.loads((proc.stdout.strip().splitlines() or ["{}"])[-1])
    if proc.returncode != 0 or "dir" not in answer:
        sys.exit("kbox_pch.py failed: %s %s" % (proc.stdout, proc.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print("# precompiled header built once: %.1f s wall, %.1f CPU-s: %s" % (
        time.perf_counter() - t0, cpu, answer["dir"]), flush=True)
    return answer["dir"]


def _throughput(mode, paths, python, pch_dir, jobs, profile_dir=None):
    """Every candidate built once in mode, jobs at once: what the machine's
    cores give when they do nothing but these builds. Prints one line per
    build (with profile_dir, where its time went) and a summary; returns the
    exit status."""
    print("# throughput: %d build(s), mode %s, %d at once, %d CPU(s) here" % (
        len(paths), mode, jobs, os.cpu_count() or 0), flush=True)
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        tags = ["%s-%s" % (os.path.splitext(os.path.basename(path))[0], mode) for path in paths]
        futures = [pool.submit(_build_once, mode, path, python, pch_dir,
                               (profile_dir, tag) if profile_dir else None)
                   for path, tag in zip(paths, tags)]
        results = [f.result() for f in futures]
    wall = time.perf_counter() - t0
    failed = 0
    for path, r in zip(paths, results):
        failed += bool(r["error"])
        print("%-44s %7.1f s %7.1f CPU-s (import %4.1f)  %s%s" % (
            os.path.basename(path)[-44:], r["seconds"], r["cpu"], r.get("cpu_before_build", float("nan")),
            r["light"] or "-", ("  ERROR " + r["error"]) if r["error"] else ""), flush=True)
    if profile_dir:
        print(PROFILE_HEAD)
        for path, tag, r in zip(paths, tags, results):
            print(_profile_line(os.path.basename(path), mode, r, profile_dir, tag))
    cpu = statistics.mean(r["cpu"] for r in results)
    before = statistics.mean(r.get("cpu_before_build", 0.0) for r in results)
    cores = os.cpu_count() or 1
    print("# %d builds in %.1f s wall: %.0f builds per hour (%d failed); CPU-s per build: "
          "%.1f mean, of it %.1f before the build (interpreter, torch import)" % (
              len(paths), wall, len(paths) * 3600.0 / wall, failed, cpu, before))
    print("# ceiling of %d CPUs at full use: %.0f builds per hour; without the import "
          "(compile zygotes): %.0f" % (cores, cores * 3600.0 / cpu, cores * 3600.0 / max(cpu - before, 1e-9)))
    return 1 if failed else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(*sys.argv[2:6])
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("candidates", nargs="*", help="candidate .py files (ModelNew + load_inline)")
    p.add_argument("--few-shot", metavar="DIR",
                   help="KernelBench few_shot directory: its model_new_ex_*.py files")
    p.add_argument("--corpus", metavar="DIR",
                   help="kbox corpus: its legit/*_cpu/candidate.py files")
    p.add_argument("--cpu-bench", type=int, default=0, metavar="N",
                   help="the first N CPU candidates of scripts/kbox_bench_candidates.py")
    p.add_argument("--cuda-bench", type=int, default=0, metavar="N",
                   help="the first N CUDA candidates of scripts/kbox_bench_candidates.py "
                        "(levels 1 and 2, as kbox-bench sends them)")
    p.add_argument("--shared", default=os.path.join(os.path.dirname(REPO), "shared"),
                   help="shared directory holding datasets/kernelbench (for --cpu/cuda-bench)")
    p.add_argument("-n", "--rounds", type=int, default=1, help="cold builds per mode and candidate")
    p.add_argument("--python", default=sys.executable, help="interpreter with torch")
    p.add_argument("-j", "--jobs", type=int, default=1,
                   help="builds at once (default 1; each runs at most 2 compiler processes)")
    p.add_argument("--pch", action="store_true",
                   help="a third mode: kbox with the light header's precompiled header")
    p.add_argument("--modes", help="comma-separated subset of plain,light,kbox,pch to build "
                                   "(plain is always built: the ratios are against it)")
    p.add_argument("--throughput", metavar="MODE",
                   help="build every candidate once in MODE only (no plain), --jobs at once, "
                        "and print builds per hour: the machine's ceiling for that compile path")
    p.add_argument("--profile", metavar="DIR",
                   help="keep each build's nvcc --time table and ninja log in DIR and print "
                        "where each build's time went")
    args = p.parse_args()

    paths = list(args.candidates)
    if args.few_shot:
        paths += sorted(glob.glob(os.path.join(args.few_shot, "model_new_ex_*.py")))
    if args.corpus:
        paths += sorted(glob.glob(os.path.join(args.corpus, "legit", "*_cpu", "candidate.py")))
    generated = tempfile.mkdtemp(prefix="kbox-compile-bench-src-")
    if args.cpu_bench:
        paths += _bench_candidates(args.cpu_bench, "cpu", args.shared, generated)
    if args.cuda_bench:
        paths += _bench_candidates(args.cuda_bench, "cuda", args.shared, generated)
    paths = [os.path.abspath(path) for path in paths]  # builds run in their own directory
    if not paths:
        p.error("no candidates: pass files, --few-shot, --corpus, --cpu-bench or --cuda-bench")

    if args.throughput and args.throughput not in ("plain", "light", "kbox", "pch"):
        p.error("--throughput: one of plain, light, kbox, pch")
    modes = ["plain", "light", "kbox"] + (["pch"] if args.pch else [])
    if args.modes:
        asked = args.modes.split(",")
        if "pch" in asked and not args.pch:
            p.error("--modes pch needs --pch")
        modes = ["plain"] + [m for m in modes[1:] if m in asked]
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    pch_dir = ""
    if args.pch or args.throughput == "pch":
        pch_dir = _build_pch(args.python, tempfile.mkdtemp(prefix="kbox-compile-bench-pch-"))
    try:
        if args.throughput:
            return _throughput(args.throughput, paths, args.python, pch_dir, args.jobs, args.profile)
        return _compare(args, paths, modes, pch_dir)
    finally:
        if pch_dir:
            shutil.rmtree(os.path.dirname(pch_dir), ignore_errors=True)  # ~760 MB


def _compare(args, paths, modes, pch_dir):
    """Each candidate in every mode, plain first: one line per candidate with
    the medians and ratios, then their geometric means."""
    print("# %d candidate(s), %d cold build(s) per mode; seconds, median; ratio = plain/mode" %
          (len(paths), args.rounds), flush=True)
    head = "%-40s" % "candidate"
    for mode in modes:
        head += " %8s %8s" % (mode + "_s", mode + "_cpu")
    for mode in modes[1:]:
        head += " %7s %7s" % (mode + "_r", mode + "_cr")
    print(head + "  light")
    ratios = {mode: ([], []) for mode in modes[1:]}  # (wall, cpu) per mode
    # Every build, in the order one at a time would run them: per candidate,
    # round after round, the modes alternating.
    order = [(path, mode) for path in paths for _ in range(args.rounds) for mode in modes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        tags = ["%s-%s-%d" % (os.path.basename(os.path.dirname(path)) + "_" +
                              os.path.splitext(os.path.basename(path))[0], mode, k)
                for k, (path, mode) in enumerate(order)]
        futures = [pool.submit(_build_once, mode, path, args.python, pch_dir,
                               (args.profile, tag) if args.profile else None)
                   for (path, mode), tag in zip(order, tags)]
        results = {}
        for (path, mode), future in zip(order, futures):
            results.setdefault(path, []).append((mode, future))
    for path in paths:
        times = {mode: [] for mode in modes}
        cpus = {mode: [] for mode in modes}
        light, errors = set(), []
        for mode, future in results[path]:
            r = future.result()
            times[mode].append(r["seconds"])
            cpus[mode].append(r["cpu"])
            if r["light"]:
                light.add(r["light"])
            if r["error"]:
                errors.append("%s: %s" % (mode, r["error"]))
        wall = {mode: statistics.median(times[mode]) for mode in modes}
        cpu = {mode: statistics.median(cpus[mode]) for mode in modes}
        name = os.path.relpath(path, os.path.dirname(os.path.dirname(path)))
        line = "%-40s" % name[-40:]
        for mode in modes:
            line += " %8.1f %8.1f" % (wall[mode], cpu[mode])
        for mode in modes[1:]:
            r_wall = wall["plain"] / wall[mode] if wall[mode] > 0 else float("nan")
            r_cpu = cpu["plain"] / cpu[mode] if cpu[mode] > 0 else float("nan")
            line += " %7.2f %7.2f" % (r_wall, r_cpu)
            if not errors:
                ratios[mode][0].append(r_wall)
                ratios[mode][1].append(r_cpu)
        print(line + "  %s%s" % (",".join(sorted(light)) or "-",
                                 ("  ERRORS " + "; ".join(errors)) if errors else ""), flush=True)
    if args.profile:
        print("# where each build's time went (CPU-s of the process tree; import: before the build)")
        print(PROFILE_HEAD)
        for (path, mode), tag, future in zip(order, tags, futures):
            print(_profile_line(os.path.relpath(path, os.path.dirname(os.path.dirname(path))), mode,
                                future.result(), args.profile, tag))
    for mode, (r_wall, r_cpu) in ratios.items():
        if r_wall:
            print("# geometric mean plain/%s over %d candidate(s): wall %.2f, cpu %.2f" % (
                mode, len(r_wall), statistics.geometric_mean(r_wall),
                statistics.geometric_mean(r_cpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
