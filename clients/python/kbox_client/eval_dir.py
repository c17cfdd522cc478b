"""kbox eval-dir: a whole KernelBench-style run evaluated and summarised.

    kbox-eval-dir --server http://kbox:8080 --problems level1/ --candidates run/ \\
                  --backend cuda --out results/

Evaluates every PROBLEMS/<name>.py (a reference) against CANDIDATES/<name>.py
(KernelBench's run layout), all through evaluate_many, and writes to OUT:
results.jsonl (one line per problem as it finishes; a second run resumes
from it), summary.json (compiled, correct, fast_0, fast_1, fast_2 as
fractions, geomean_speedup, counts by status), results.csv and
speedup.png (a histogram of the correct candidates' speedups). It prints
KernelBench's fast_p table. Problems without a candidate count as not
compiled. kbox's own failures (INFRA_ERROR, REFERENCE_ERROR) are counted by
status and left out of every fraction. Standard library only.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import struct
import sys
import zlib
from typing import Dict, List, Optional

from .client import Client
from .messages import make_request

NOT_OURS = ("INFRA_ERROR", "REFERENCE_ERROR", "CANCELLED")
NOT_COMPILED = ("COMPILE_ERROR", "MISSING")


def load_done(path: str) -> Dict[str, dict]:
    """Results already in results.jsonl, by problem (a torn last line is skipped)."""
    done = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                    done[record["problem"]] = record["result"]
                except (ValueError, KeyError):
                    continue
    return done


def correct_speedups(results) -> List[float]:
    """The speedups of the correct, rewardable and timed results."""
    return [float(r["speedup"]) for r in results
            if r.get("status") == "CORRECT" and r.get("rewardable") and float(r.get("speedup") or 0) > 0]


def summarize(results: Dict[str, dict]) -> dict:
    """KernelBench's figures over the problems whose outcome is the candidate's."""
    counts: Dict[str, int] = {}
    for result in results.values():
        counts[result.get("status", "?")] = counts.get(result.get("status", "?"), 0) + 1
    judged = [r for r in results.values() if r.get("status") not in NOT_OURS]
    n = len(judged)
    correct = [r for r in judged if r.get("status") == "CORRECT" and r.get("rewardable")]
    speedups = correct_speedups(correct)

    def frac(k):
        return k / n if n else 0.0

    return {"problems": len(results), "judged": n,
            "compiled": frac(sum(1 for r in judged if r.get("status") not in NOT_COMPILED)),
            "correct": frac(len(correct)),
            "fast_0": frac(len(correct)),
            "fast_1": frac(sum(1 for s in speedups if s > 1.0)),
            "fast_2": frac(sum(1 for s in speedups if s > 2.0)),
            "geomean_speedup": math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None,
            "by_status": dict(sorted(counts.items()))}


def table(summary: dict) -> str:
    rows = [("compiled", summary["compiled"]), ("correct (fast_0)", summary["fast_0"]),
            ("fast_1", summary["fast_1"]), ("fast_2", summary["fast_2"])]
    lines = ["fast_p over %d judged problems (of %d):" % (summary["judged"], summary["problems"]),
             "| metric | value |", "|---|---|"]
    lines += ["| %s | %.3f |" % (name, value) for name, value in rows]
    geo = summary["geomean_speedup"]
    lines.append("| geomean speedup (correct) | %s |" % ("%.3f" % geo if geo else "-"))
    lines.append("by status: " + ", ".join("%s %d" % kv for kv in summary["by_status"].items()))
    return "\n".join(lines)


def write_csv(path: str, results: Dict[str, dict]) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["problem", "status", "rewardable", "speedup", "candidate_ms", "reference_ms", "message"])
        for name in sorted(results):
            r = results[name]
            out.writerow([name, r.get("status"), bool(r.get("rewardable")), r.get("speedup", ""),
                          (r.get("candidate_timing") or {}).get("lower_quartile_ms", ""),
                          (r.get("reference_timing") or {}).get("lower_quartile_ms", ""),
                          (r.get("message") or "")[:200]])


def write_png(path: str, speedups: List[float], width: int = 480, height: int = 240) -> None:
    """A histogram of speedups on log2 bins from 1/16 to 16 (outside: the
    end bins), bars dark, the 1x line red; an 8-bit RGB PNG by hand."""
    bins = 16
    counts = [0] * bins
    for s in speedups:
        x = (math.log2(max(s, 1e-9)) + 4.0) / 8.0
        counts[min(bins - 1, max(0, int(x * bins)))] += 1
    top = max(counts) or 1
    pixels = [[(255, 255, 255)] * width for _ in range(height)]
    margin, bar_w = 10, (width - 20) // bins
    for b, c in enumerate(counts):
        h = int((height - 2 * margin) * c / top)
        for x in range(margin + b * bar_w + 1, margin + (b + 1) * bar_w - 1):
            for y in range(height - margin - h, height - margin):
                pixels[y][x] = (40, 60, 120)
    one = margin + bins // 2 * bar_w
    for y in range(margin, height - margin):
        pixels[y][one] = (200, 30, 30)
    for x in range(margin, width - margin):
        pixels[height - margin][x] = (0, 0, 0)
    raw = b"".join(b"\x00" + bytes(v for px in row for v in px) for row in pixels)

    def chunk(tag, data):
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xffffffff)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def run(client, problems: str, candidates: str, backend: str, out: str,
        fields: Optional[dict] = None, progress=sys.stderr) -> dict:
    os.makedirs(out, exist_ok=True)
    journal = os.path.join(out, "results.jsonl")
    results = load_done(journal)
    names = sorted(f[:-3] for f in os.listdir(problems) if f.endswith(".py"))
    if not names:
        raise SystemExit("kbox eval-dir: no *.py problems in %s" % problems)
    todo, requests = [], []
    for name in names:
        if name in results:
            continue
        cand = os.path.join(candidates, name + ".py")
        if not os.path.exists(cand):
            results[name] = {"status": "MISSING", "message": "no candidate " + cand}
            continue
        with open(os.path.join(problems, name + ".py")) as f:
            reference = f.read()
        with open(cand) as f:
            requests.append(make_request(reference, f.read(), backend, **(fields or {})))
        todo.append(name)
    finished = len(names) - len(todo)
    with open(journal, "a") as log:
        for index, outcome in client.evaluate_many(requests, return_exceptions=True):
            result = outcome if isinstance(outcome, dict) else \
                {"status": "INFRA_ERROR", "message": "client: %s" % outcome}
            results[todo[index]] = result
            log.write(json.dumps({"problem": todo[index], "result": result}) + "\n")
            log.flush()
            finished += 1
            if progress:
                filled = int(30 * finished / len(names))
                progress.write("\r[%s%s] %d/%d" % ("#" * filled, "." * (30 - filled), finished, len(names)))
                progress.flush()
    if progress:
        progress.write("\n")
    results = {name: results[name] for name in names}
    summary = summarize(results)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    write_csv(os.path.join(out, "results.csv"), results)
    write_png(os.path.join(out, "speedup.png"), correct_speedups(results.values()))
    return summary


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="kbox eval-dir", description=__doc__.split("\n")[0])
    parser.add_argument("--server", help="kboxd URL(s), comma-separated (default $KBOX_URL)")
    parser.add_argument("--problems", required=True, help="directory of <problem>.py references")
    parser.add_argument("--candidates", required=True, help="directory of <problem>.py candidates")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "triton", "cpu"])
    parser.add_argument("--out", required=True, help="directory for results, summary, CSV and plot")
    parser.add_argument("--anticheat-profile", default=None)
    parser.add_argument("--no-timing", action="store_true", help="correctness only")
    args = parser.parse_args(argv)
    fields = {}
    if args.anticheat_profile:
        fields["anticheat_profile"] = args.anticheat_profile
    if args.no_timing:
        fields["measure_performance"] = False
    client = Client(args.server.split(",") if args.server else None)
    summary = run(client, args.problems, args.candidates, args.backend, args.out, fields)
    print(table(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
