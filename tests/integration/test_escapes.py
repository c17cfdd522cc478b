"""Every CPU case of ../shared/corpus/escapes, through the real daemon and its
sandbox: none may be rewarded, each must end with the outcome its kind calls
for, none of the host-side effects named in its expect.json may happen, and
kboxd keeps serving (an honest job afterwards is CORRECT).

The escape jobs run with anticheat_profile "off" (conftest.py): the static
checks would reject most of them before they ran, and these tests are about
the sandbox. test_strict_profile_rejects_every_escape checks the other layer."""
import json
import os
import time

import pytest

import kbox_it as it

CASES = it.corpus_escape_cases()

# What each kind of escape must end as (several are acceptable where the
# sandbox may stop it at more than one layer).
EXPECTED_STATUS = {
    "esc_infinite_loop_cpu": {"TIMEOUT"},
    "esc_memory_bomb_cpu": {"SANDBOX_VIOLATION"},
    "esc_compile_include_passwd_cpu": {"COMPILE_ERROR"},
    "esc_stdout_flood_cpu": {"RUNTIME_ERROR"},
    "esc_disk_fill_cpu": {"SANDBOX_VIOLATION", "RUNTIME_ERROR"},
    "esc_fork_bomb_cpu": {"SANDBOX_VIOLATION", "RUNTIME_ERROR"},
    "esc_ptrace_parent_cpu": {"SANDBOX_VIOLATION"},
    # corpus-new: what the candidate does to itself or to the judge is its
    # own fault, never kbox's (docs/judge-boundary.md). Its signal cannot
    # reach the judge, which is of another uid (and hidden from its /proc);
    # its alarm storm then only starves its own process.
    "esc_signal_judge_cpu": {"INCORRECT", "TIMEOUT", "RUNTIME_ERROR", "SANDBOX_VIOLATION"},
    # Lowering its own limits is killed by the strict filter.
    "esc_rlimit_self_kill_cpu": {"SANDBOX_VIOLATION"},
    # The library it planted is never loaded: the judge's extensions
    # directory is its own, empty, and the run stage builds nothing.
    "esc_judge_loads_planted_ext_cpu": {"REFERENCE_ERROR"},
}
# A job's output kept in a result: process_runner's tail (8 KiB) plus the
# compile stage's, sanitised.
MAX_OUTPUT_TAIL = 2 * 8192 * 3


def expect_of(case):
    with open(os.path.join(it.case_dir("escapes", case), "expect.json")) as f:
        return json.load(f)


def text_of(result):
    """Everything of a result a client would see, as one string."""
    return json.dumps(result)


# Resource abuse no static rule can tell from honest code: only the sandbox
# and the stage limits stop it. The checker's own corpus test lists the same
# cases as dynamic-only (tests/unit/policy/static_check_corpus_test.cc).
NOT_STATICALLY_VISIBLE = {
    # A busy loop in the extension's C++: whether code halts cannot be read
    # from its text; the run stage's time limit ends it.
    "esc_infinite_loop_cpu",
    # Writes 1 GiB with sys.stdout.write; printing is honest, the amount only
    # shows at run time (max_output_bytes kills it).
    "esc_stdout_flood_cpu",
    # Allocates until the cgroup's memory limit; allocation is honest too.
    # (Strict happens to reject it today, for its cross-call list.)
    "esc_memory_bomb_cpu",
}


def test_strict_profile_rejects_every_escape(daemon):
    """Under the default (strict) profile, POST /v1/check rejects every escape
    case: defence in depth in front of the sandbox."""
    not_rejected = {}
    for case in CASES:
        d = it.case_dir("escapes", case)
        payload = {"candidate_source": it.read(os.path.join(d, "candidate.py")),
                   "reference_source": it.read(os.path.join(d, "reference.py")),
                   "backend": "BACKEND_CPU", "client_request_id": "it-check-" + case}
        reply = it.post_json(daemon.port, payload, path="/v1/check")
        assert reply.status == 200, (case, reply)
        r = reply.json()
        assert r["anticheat_profile"] == "strict", r
        if not r["rejected"]:
            not_rejected[case] = r["verdicts"]
        else:
            assert any(v["severity"] == "REJECT" for v in r["verdicts"]), (case, r)
    assert set(not_rejected) <= NOT_STATICALLY_VISIBLE, not_rejected


@pytest.fixture(scope="module")
def escape_results(jobs):
    return {case: jobs.result("escape:" + case) for case in CASES}


def test_escape_corpus_is_present():
    assert len(CASES) >= 16, "escape corpus not found under %s" % it.shared_dir()


@pytest.mark.waits_for_jobs
@pytest.mark.parametrize("case", CASES)
def test_escape_is_not_rewarded(escape_results, case):
    r = escape_results[case]
    assert r["settings"]["anticheat_profile"] == "off", it.describe(r)  # the sandbox's test
    assert expect_of(case)["rewardable"] is False
    assert r["rewardable"] is False, it.describe(r)
    assert r["status"] not in ("CORRECT", "INFRA_ERROR"), it.describe(r)
    if case in EXPECTED_STATUS:
        assert r["status"] in EXPECTED_STATUS[case], it.describe(r)
    assert len(r.get("output_tail", "").encode()) <= MAX_OUTPUT_TAIL


@pytest.mark.waits_for_jobs
def test_sandbox_violation_says_what_was_stopped(escape_results):
    # This case imports ctypes.util at the top of candidate.py: the run
    # stage's audit hook refuses the import, and the result names it. (Past
    # that layer, ctypes.util.find_library runs a program, which the strict
    # filter kills; a call stopped by the first filter would be named
    # "forbids: ptrace".)
    r = escape_results["esc_ptrace_parent_cpu"]
    assert r["status"] == "SANDBOX_VIOLATION", it.describe(r)
    assert "import of ctypes.util" in r["message"] and "sandbox forbids" in r["message"], \
        it.describe(r)


@pytest.mark.waits_for_jobs
def test_no_escape_left_a_file_on_the_host(escape_results):
    leftovers = [p for p in ("/tmp/kbox_canary_esc_canary_file_cpu_import",
                             "/tmp/kbox_canary_esc_canary_file_cpu_forward",
                             "/tmp/kbox_daemon_esc_daemonize_cpu.pid")
                 if os.path.exists(p)]
    assert not leftovers, leftovers


@pytest.mark.waits_for_jobs
def test_no_escape_left_a_process(daemon, escape_results):
    # Daemonised and forked children die with their sandbox; allow the
    # kernel a moment to reap them.
    # Only the escape jobs' own processes count: other jobs of the session
    # may still be running. Each carries its job id in its command line.
    job_dirs = []
    for r in escape_results.values():
        job_dirs.append(os.path.join(daemon.work_dir, "jobs", r["job_id"]))
        job_dirs.append(os.path.join(daemon.work_dir, "sandbox-specs", r["job_id"] + "-"))
    deadline = time.monotonic() + 5
    while True:
        alive = [p for d in job_dirs
                 for p in it.processes_mentioning(d, exclude_pids=(os.getpid(), daemon.pid))]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not alive, alive


@pytest.mark.waits_for_jobs
def test_network_escape_reached_nothing(escape_traps, escape_results):
    assert escape_traps.connections == 0


@pytest.mark.waits_for_jobs
def test_no_host_secret_leaked(escape_traps, escape_results):
    secrets = [escape_traps.marker, it.DAEMON_SECRET]
    for path in ("/etc/shadow", "/etc/passwd", it.TOKEN_FILE):
        secrets += it.host_secret_lines(path)
    for case, r in escape_results.items():
        text = text_of(r)
        leaked = [s for s in secrets if s in text]
        assert not leaked, "%s leaked %s:\n%s" % (case, leaked[:3], it.describe(r))


@pytest.mark.waits_for_jobs
def test_daemon_still_serves_after_the_escapes(daemon, jobs, escape_results):
    assert it.request(daemon.port, "GET", "/healthz").status == 200
    # The next honest job after all of them: the bundled example, through
    # the same daemon.
    payload = {"reference_source": it.read(os.path.join(it.EXAMPLE_DIR, "reference.py")),
               "candidate_source": it.read(os.path.join(it.EXAMPLE_DIR, "candidate.py")),
               "backend": "BACKEND_CPU", "measure_performance": False,
               "client_request_id": "it-after-escapes"}
    reply = it.post_json(daemon.port, payload, timeout=600)
    assert reply.status == 200, reply.text
    r = reply.json()
    assert r["status"] == "CORRECT" and r["rewardable"] is True, it.describe(r)


@pytest.mark.waits_for_jobs
def test_no_escape_was_blamed_on_kbox_or_retried(daemon, escape_results):
    # What a candidate does to itself or to its judge is its fault: no
    # INFRA_ERROR, and kboxd never ran one of them again as its own failure.
    log = daemon.stderr()
    for case, r in escape_results.items():
        assert r["status"] != "INFRA_ERROR", it.describe(r)
        assert "job %s ended INFRA_ERROR" % r["job_id"] not in log, (case, log[-4000:])


@pytest.mark.waits_for_jobs
def test_the_judge_never_loads_what_the_compile_stage_planted(escape_results):
    r = escape_results["esc_judge_loads_planted_ext_cpu"]
    assert "KBOX_PLANTED_JUDGE_CODE" not in text_of(r), it.describe(r)
    assert r["status"] == "REFERENCE_ERROR" and not r.get("speedup"), it.describe(r)
