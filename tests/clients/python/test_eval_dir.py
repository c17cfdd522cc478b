"""kbox eval-dir over CPU cases of the shared corpus laid out as a KernelBench
run (problems/<name>.py, candidates/<name>.py): the summary, CSV and plot are
written, the fast_p table printed, a problem without a candidate counted, and
a second run resumes instead of evaluating again. Correctness only (--no-timing:
the speedup figures are the GPU suite's to show); three C++ builds."""
import csv
import json
import os
import shutil
import subprocess

import kbox_it as it

CASES = {"legit_row_softmax_cpu": "legit", "legit_swish_bias_cpu": "legit",
         "h1_torch_matmul_cpu": "reward-hacks", "fp_variable_named_F_cpu": "reward-hacks"}


def lay_out(root):
    problems, candidates = os.path.join(root, "problems"), os.path.join(root, "candidates")
    os.makedirs(problems)
    os.makedirs(candidates)
    for name, group in CASES.items():
        src = os.path.join(it.shared_dir(), "corpus", group, name)
        shutil.copy(os.path.join(src, "reference.py"), os.path.join(problems, name + ".py"))
        shutil.copy(os.path.join(src, "candidate.py"), os.path.join(candidates, name + ".py"))
    shutil.copy(os.path.join(problems, "legit_row_softmax_cpu.py"), os.path.join(problems, "no_candidate.py"))
    return problems, candidates


def eval_dir(kboxd, problems, candidates, out):
    return subprocess.run([os.path.join(it.bin_dir(), "kbox"), "eval-dir", "--server", kboxd.url,
                           "--problems", problems, "--candidates", candidates, "--backend", "cpu",
                           "--out", out, "--no-timing"], capture_output=True, text=True, timeout=900)


def test_eval_dir_writes_summary_csv_plot_and_resumes(kboxd, tmp_path):
    problems, candidates = lay_out(str(tmp_path))
    out = str(tmp_path / "out")
    first = eval_dir(kboxd, problems, candidates, out)
    assert first.returncode == 0, first.stderr
    assert "fast_p over 5 judged problems" in first.stdout and "| fast_1 |" in first.stdout, first.stdout
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    expected = {name: json.load(open(os.path.join(it.shared_dir(), "corpus", group, name, "expect.json")))
                for name, group in CASES.items()}
    rewardable = sum(1 for e in expected.values() if e["rewardable"])
    assert summary["problems"] == 5 and summary["judged"] == 5
    assert summary["by_status"]["MISSING"] == 1
    assert abs(summary["correct"] - rewardable / 5) < 1e-9, summary
    assert 0 <= summary["fast_2"] <= summary["fast_1"] <= summary["fast_0"] == summary["correct"]
    assert summary["compiled"] >= summary["correct"]
    with open(os.path.join(out, "results.csv")) as f:
        rows = {row["problem"]: row for row in csv.DictReader(f)}
    assert set(rows) == set(CASES) | {"no_candidate"}
    for name, e in expected.items():
        assert (rows[name]["status"] == "CORRECT") == e["rewardable"], (name, rows[name])
    with open(os.path.join(out, "speedup.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(os.path.join(out, "results.jsonl")) as f:
        evaluated = f.read().count("\n")
    assert evaluated == len(CASES)
    again = eval_dir(kboxd, problems, candidates, out)
    assert again.returncode == 0, again.stderr
    with open(os.path.join(out, "results.jsonl")) as f:
        assert f.read().count("\n") == evaluated  # resumed: nothing evaluated twice
    with open(os.path.join(out, "summary.json")) as f:
        assert json.load(f) == summary
