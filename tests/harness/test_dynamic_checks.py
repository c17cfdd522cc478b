"""The run stage's dynamic anti-cheat checks (run.* rules), each caught by a
small pure-Python candidate (no extension build), as kboxd runs the stage."""
import os
import sys

from test_stages import Job, _check


def _rules(report):
    return {v["rule_id"] for v in report.get("verdicts", [])}


def _run(tmp_path, candidate, reference="ref_relu_scale.py", **overrides):
    return Job(tmp_path, candidate, reference).run("STAGE_RUN", **overrides)


def test_honest_candidate_draws_no_finding(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_honest.py"), "OK")
    assert _rules(report) == set()
    assert report["phase_ms"]["dynamic_checks"] > 0


def test_tensor_subclass_output_breaks_the_contract(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_subclass.py"), "INCORRECT")
    assert "run.output-contract" in _rules(report)
    assert "Deferred" in report["trials"][0]["failure"]


def test_input_mutation_fails_the_trial(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_mutates.py"), "INCORRECT")
    assert "run.input-mutation" in _rules(report)
    assert "changed its inputs" in report["trials"][0]["failure"]


def test_memoising_candidate_is_caught_in_the_timed_calls(tmp_path):
    # Right on every correctness trial; replays its last answer afterwards.
    report = _check(_run(tmp_path, "cand_dyn_memo.py"), "OK")
    assert "run.timed-output-mismatch" in _rules(report)


def test_work_skipped_only_in_the_late_timed_rounds_is_caught(tmp_path):
    # Honest through the trials and the first ~100 timed rounds, then wrong
    # and fast: the spot checks go on to the last round (capped at 24, they
    # had run out by then, and this candidate passed every check).
    # Without a precision to stop at, the rounds run to their cap (200).
    report = _check(_run(tmp_path, "cand_dyn_late_skip.py", performance_trials=20, speedup_precision=0), "OK")
    assert report["candidate_timing"]["count"] > 110
    assert "run.timed-output-mismatch" in _rules(report)


def test_patched_timer_is_a_finding_and_does_not_change_the_measurement(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_timer.py"), "OK")
    assert "run.harness-tampering" in _rules(report)
    assert "perf_counter" in next(v["message"] for v in report["verdicts"]
                                  if v["rule_id"] == "run.harness-tampering")
    # Measured with the harness's own clock: far above the fake 1 us a call.
    assert report["candidate_timing"]["median_ms"] > 0.002


def test_thread_left_running_is_a_finding(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_thread.py", measure_performance=False), "OK")
    assert "run.thread-started" in _rules(report)


def test_library_compute_shows_in_the_op_trace(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_library.py", measure_performance=False), "OK")
    assert "run.library-compute" in _rules(report)
    assert "relu" in next(v["message"] for v in report["verdicts"] if v["rule_id"] == "run.library-compute")


def test_different_answer_for_the_same_input_is_nondeterminism(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_flaky.py", measure_performance=False), "OK")
    assert "run.nondeterministic" in _rules(report)


def test_uninitialised_output_never_inherits_the_reference_result(tmp_path):
    # The reference's output is poisoned before it is freed.
    report = _check(_run(tmp_path, "cand_dyn_stale.py", measure_performance=False), "INCORRECT")
    assert not any(t["passed"] for t in report["trials"])


def test_degenerate_problem_is_judged_at_a_tightened_tolerance(tmp_path):
    # 1/32768 everywhere passes atol = 1e-4 on a wide softmax; not at 1 % of its RMS.
    report = _check(_run(tmp_path, "cand_dyn_constant.py", "ref_wide_softmax.py",
                         measure_performance=False), "INCORRECT")
    assert "run.degenerate-problem" in _rules(report)


def test_degenerate_problem_does_not_fail_an_honest_candidate(tmp_path):
    job = Job(tmp_path, "cand_dyn_constant.py", "ref_wide_softmax.py")
    with open(os.path.join(job.root, "candidate.py"), "w") as f:
        f.write("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                "    def forward(self, x):\n"
                "        e = (x - x.amax(-1, keepdim=True)).exp()\n"
                "        return e / e.sum(-1, keepdim=True)\n")
    report = _check(job.run("STAGE_RUN", measure_performance=False), "OK")
    assert "run.degenerate-problem" in _rules(report)


# -- the judge and the candidate's process ------------------------------------------

def test_candidate_never_sees_the_seed(tmp_path):
    # The run stage gets its seed through a secret file that the judge deletes
    # after forking the candidate's process; the spec it can read has none.
    job = Job(tmp_path, "cand_dyn_seed_hunter.py")
    secret = os.path.join(job.root, "home", "kbox_secret.json")
    with open(secret, "w") as f:
        f.write('{"seed": "987654321"}')
    result = job.run("STAGE_RUN", seed=None, secret_path=secret, measure_performance=False)
    report = _check(result, "OK")
    hunt = [l for l in result.stdout.decode().splitlines() if l.startswith("SEED-HUNT ")]
    assert hunt, result.stdout
    assert "987654321" not in hunt[0]
    assert not os.path.exists(secret)
    # The trials were drawn from the secret seed all the same.
    assert {t["seed"] for t in report["trials"]} == {
        _trial_seed(987654321, i) for i in range(len(report["trials"]))}


def _trial_seed(seed, i):
    import hashlib
    digest = hashlib.blake2b(("kbox:%d:%s" % (seed, i)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def test_a_clock_faked_once_per_call_disagrees_with_the_judges_clock(tmp_path):
    # The stand-in restores itself before the guard looks, so only the
    # judge's outside measurement can tell.
    report = _check(_run(tmp_path, "cand_dyn_oneshot_clock.py", performance_trials=8), "OK")
    assert "run.timing-mismatch" in _rules(report), report.get("verdicts")
    # Confirmed on rounds of its own before it became a finding.
    assert "confirmed on" in next(v["message"] for v in report["verdicts"] if v["rule_id"] == "run.timing-mismatch")
    timing = report["candidate_timing"]
    assert timing["outside_median_ms"] > 16.0
    assert timing["median_ms"] < timing["outside_median_ms"] - 12.0


def test_honest_candidate_agrees_with_the_judges_clock(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_honest.py"), "OK")
    timing = report["candidate_timing"]
    assert timing["outside_median_ms"] >= timing["median_ms"]
    assert "run.timing-mismatch" not in _rules(report)


def test_process_creation_is_denied_and_reported(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_forbidden.py", measure_performance=False), "OK")
    assert "run.forbidden-call" in _rules(report)
    assert "os.system" in next(v["message"] for v in report["verdicts"] if v["rule_id"] == "run.forbidden-call")


def test_trials_mix_input_distributions(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_honest.py", correctness_trials=4,
                         measure_performance=False), "OK")
    assert [t["distribution"] for t in report["trials"]] == [
        "as-drawn", "scaled", "heavy-tailed", "range-uniform"]


def test_a_shortcut_valid_only_near_the_drawn_distribution_fails(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_range.py", correctness_trials=4,
                         measure_performance=False), "INCORRECT")
    passed = {t["distribution"]: t["passed"] for t in report["trials"]}
    assert passed["as-drawn"] and not passed["heavy-tailed"]


def test_a_candidate_that_kills_its_own_process_is_the_candidates_failure(tmp_path):
    job = Job(tmp_path, "cand_dyn_honest.py")
    with open(os.path.join(job.root, "candidate.py"), "a") as f:
        f.write("\n\nimport os as _os\n_orig = ModelNew.forward\n"
                "def _die(self, x):\n    _os._exit(7)\nModelNew.forward = _die\n")
    report = _check(job.run("STAGE_RUN", measure_performance=False), "CANDIDATE_FAILED")
    assert "died (exit code 7)" in report["message"]


def test_a_forged_reply_breaks_the_protocol_instead_of_passing(tmp_path):
    report = _check(_run(tmp_path, "cand_dyn_forge_reply.py", measure_performance=False),
                    "CANDIDATE_FAILED")
    assert "protocol" in report["message"]


def test_guard_sees_a_replaced_method_of_a_harness_class():
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "worker", "harness"))
    from kbox_harness import dynamic_checks, timing
    guard = dynamic_checks.Guard([timing])
    original = timing.Clock.time
    timing.Clock.time = lambda self, fn: (0.001, fn())
    try:
        assert "Clock.time" in guard.check()
        assert timing.Clock.time is original  # put back
    finally:
        timing.Clock.time = original


def test_preloaded_dispatch_tracing_imports_nothing_at_first_use():
    # kbox_zygote.py preloads what the op trace's first use imports
    # (torch._dynamo in PyTorch 2.x: ~6 s per job on the GPU host otherwise).
    import subprocess
    import sys
    harness = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "worker", "harness")
    code = (
        "import sys, torch\n"
        "from kbox_harness import dynamic_checks\n"
        "dynamic_checks.preload_dispatch_tracing()\n"
        "before = set(sys.modules)\n"
        "result, ops = dynamic_checks.trace_ops(lambda: (torch.ones(4) + 1).sum())\n"
        "assert ops['add'] == 1 and ops['sum'] == 1, ops\n"
        "print(sorted(set(sys.modules) - before))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=harness, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=harness))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_candidate_scribbling_on_the_exchange_arena_fails_its_trials_not_kbox(tmp_path):
    # The arena is shared with the candidate's process, which can write it
    # while the judge reads: the judge copies the bytes it checks, so the
    # worst a scribbler gets is outputs that do not parse or do not match.
    # (The overwrite races the judge's read: no cgroup here, so the process
    # is not frozen while the judge reads; 48 trials, so that the chance of
    # every read beating the scribbler is nil. In a sandboxed stage the
    # freeze leaves it only the time before its reply.)
    report = _check(_run(tmp_path, "cand_dyn_arena_scribbler.py", measure_performance=False,
                         correctness_trials=48), "INCORRECT")
    # Outputs that could not be read came through the arena (a sealed memfd
    # cannot be written once sent); when the scribbler beat every read, the
    # report counts no output received through it.
    assert any("could not be read" in t.get("failure", "") for t in report["trials"]), report["trials"]


def test_a_candidate_scribbling_on_its_inputs_arena_fails_itself(tmp_path):
    # The inputs' arena is read by the candidate's process alone: spoiling it
    # spoils the candidate's own inputs (a malformed file: its failure).
    job = Job(tmp_path, "cand_dyn_arena_scribbler.py")
    path = os.path.join(job.root, "candidate.py")
    with open(path) as f:
        text = f.read().replace('TARGET = "kbox-exchange-outputs"', 'TARGET = "kbox-exchange-inputs"')
    with open(path, "w") as f:
        f.write(text)
    # (Racing the candidate's own reads: 48 trials, so that some read is
    # spoilt; the trials before it may pass.)
    report = job.run("STAGE_RUN", measure_performance=False, correctness_trials=48).report
    if report["outcome"] == "CANDIDATE_FAILED":
        assert "CrossingError" in report["message"], report  # it could not read its own inputs
    else:
        assert report["outcome"] == "INCORRECT", report
        assert not all(t["passed"] for t in report["trials"]), report


def test_the_op_trace_does_not_import_dynamo():
    # PyTorch 2.x's TorchDispatchMode wraps __torch_dispatch__ in a lazy
    # torch._disable_dynamo, whose first call imported torch._dynamo (4.5-6.3 s
    # of every run stage's set-up on the GPU host). On 1.13 there is no dynamo.
    import subprocess
    import sys
    harness = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "worker", "harness")
    code = ("import sys, torch\nfrom kbox_harness import dynamic_checks\n"
            "_, ops = dynamic_checks.trace_ops(lambda: torch.ones(2).mul(3))\n"
            "print(sorted(ops), 'torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=harness, capture_output=True, text=True, check=True)
    assert out.stdout.split()[-1] == "False", out.stdout + out.stderr
    assert "'mul'" in out.stdout, out.stdout


class _ScriptedGroup(object):
    """A candidate cgroup whose CPU time grows by the next scripted
    milliseconds over each idle window (boundary.CandidateCgroup's cpu_ns,
    threads)."""

    def __init__(self, busy_ms):
        self._busy_ms = list(busy_ms)
        self._ns = 0
        self._in_window = False

    def cpu_ns(self):
        if self._in_window:
            self._ns += int(self._busy_ms.pop(0) * 1e6)
        self._in_window = not self._in_window
        return self._ns

    def threads(self):
        return 3


def _idle_checks(busy_ms):
    """The findings of RunStage._idle_check after calls whose windows saw
    busy_ms of the process's CPU each."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "worker", "harness"))
    from kbox_harness import dynamic_checks, run_stage
    judge = run_stage.RunStage.__new__(run_stage.RunStage)
    judge.cgroup, judge.phase_ms = _ScriptedGroup(busy_ms), {}
    judge.findings = dynamic_checks.Findings()
    judge._idle_suspect, judge._idle_confirmations_left = None, 0
    for _ in busy_ms:
        judge._idle_check()
    return [v["message"] for v in judge.findings.verdicts() if v["rule_id"] == "run.background-work"]


def test_one_busy_idle_window_is_confirmed_on_the_next_calls_before_it_is_a_finding():
    # A core busy over one window (an honest process's garbage collection or
    # its reply's end delayed by a loaded host), idle after the next two
    # calls: no finding. Busy again within those two: the finding, with both.
    assert _idle_checks([3.0, 0.0, 0.0]) == []
    assert _idle_checks([3.0]) == []
    found = _idle_checks([3.0, 0.0, 2.9])
    assert len(found) == 1 and "and after a later call" in found[0] and "3 threads" in found[0]
    # A suspicion not confirmed is forgotten: a later single busy window
    # starts over.
    assert _idle_checks([3.0, 0.0, 0.0, 3.0, 0.0, 0.0]) == []
    assert len(_idle_checks([0.0, 3.0, 3.0])) == 1
