"""CI-sized load and fault test (docs/reliability.md): one kboxd, ~1,000 jobs
(mostly rejected by the static checks, plus real CPU jobs of one candidate
that compiles once and then comes from the build cache) from 64 concurrent
clients over three tokens, while one process of each kind is SIGKILLed from
outside as soon as it runs: a compiler under the compile stage, the compile
stage's harness, a run stage's candidate process and judge, and a stage's
kbox-sandbox launcher.

Asserts what scripts/kbox-load checks (exactly one result per accepted job,
each job's true verdict or, for a job a kill hit, INFRA_ERROR; Retry-After on
every 429; kboxd's own job count equal to the accepted jobs), plus: every
kind was hit, the counters say so, and real jobs after the last kill still
end CORRECT (the pool recovered)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import kbox_load  # noqa: E402

# In this order: the compiler during the warm-up job's compile (its retry
# compiles again and fills the build cache), then run-stage processes only.
# The run stages are fork+exec'd here (`preforked_run_stage: false`), so that
# each of their processes has a kind of its own and names its job; kboxd's
# default forks them from single-use zygotes, whose kills zygote_test
# (a zygote killed mid-job) and integration_prefork (between jobs) cover.
KINDS = ["compiler", "candidate", "harness", "launcher"]


def test_load_with_sigkills(tmp_path):
    out = tmp_path / "summary.json"
    bin_dir = os.environ.get("KBOX_BIN_DIR") or os.path.join(kbox_load.mix.REPO, "build", "bin")
    code = kbox_load.main([
        "--bin-dir", bin_dir, "--jobs", "1000", "--clients", "64", "--tokens", "3",
        "--token-limit", "24", "--max-in-flight", "48", "--real-share", "0.03",
        "--check-share", "0.05", "--real-candidates", "cand_clamp_scale_ok.py",
        "--kill-script", "--kill-kinds", ",".join(KINDS), "--fork-exec-run-stage",
        "--json-out", str(out)])
    import json
    summary = json.loads(out.read_text())
    assert code == 0, summary["failures"]
    assert summary["failures"] == []
    assert summary["jobs"] == 1000
    assert sum(summary["statuses"].values()) == 1000
    # Every kind was killed once, each while it worked for some job.
    kills = summary["kill_log"]
    assert [k["kind"] for k in kills] == KINDS, kills
    assert all(k["job"] for k in kills), kills
    # The killed jobs: INFRA_ERROR or, retried, their true verdict; never a
    # candidate verdict they did not earn (evaluate() checked each).
    assert summary["jobs_hit_by_kills"] >= 1
    assert set(summary["jobs_hit_by_kills_status"]) <= {"INFRA_ERROR", "CORRECT"}
    # The counters say what happened: each kill is a retried attempt (or,
    # past infra_retries, an INFRA_ERROR) under a named cause.
    causes = dict(summary["infra_retries"])
    for cause, n in summary["infra_errors"].items():
        causes[cause] = causes.get(cause, 0) + n
    assert set(causes) <= {"stage_killed", "compiler_killed"}, causes
    # One INFRA attempt per kill, or a set-up run again: a candidate's or
    # judge's process killed while its stage was prepared ahead of the
    # device turn (before any candidate code ran) is recovered by running
    # the stage again (docs/run-stages-ahead.md). One kill may land on a
    # process already ending its stage normally (then its job simply
    # finishes).
    assert sum(causes.values()) + summary["set_up_again"] >= len(kills) - 1, (causes, summary, kills)
    assert summary["worker_crashes"].get("harness", 0) >= 1
    # The pool recovered: real jobs went on to end CORRECT.
    assert summary["statuses"].get("CORRECT", 0) >= 10
    assert summary["statuses"].get("REJECTED", 0) >= 900
