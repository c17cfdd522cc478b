"""Session fixtures: one kboxd for the whole run, and every evaluation job
submitted at session start so that the slow C++ compiles overlap.

Each test then waits on the future of its own job (JobBoard.result).
"""
import concurrent.futures
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import kbox_it as it

START_TIMEOUT_S = 120
# Every job must be done this long after submission (the CTest limit is 1500 s).
JOBS_DEADLINE_S = 1200
STOP_TIMEOUT_S = 30  # SIGTERM is sent once every job is done

DAEMON_CONFIG = """\
default_time_limit_s: 60
max_time_limit_s: 120
max_body_bytes: 1048576
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
"""
# The shared escape cases run with this run-stage limit (one never returns).
# The memory bomb must reach the job's memory limit (3 GiB) before it: on the
# CI machine of 2026-11-27 its writes committed ~200 MB/s (0.7 to 1.8 GB in
# 7 s, read from its cgroup), so 15 s ended it as TIMEOUT, not as the
# SANDBOX_VIOLATION the corpus expects.
ESCAPE_TIME_LIMIT_S = 45

SPIN_TIME_LIMIT_S = it.SPIN_TIME_LIMIT_S
# Jobs whose leftover processes are looked for as soon as their reply arrives.
SCAN_AFTER_REPLY = {"spins_forever"}
HONEST_SEED = it.HONEST_SEED
WRONG_SEED = it.WRONG_SEED


class Daemon(object):
    def __init__(self, proc, url, port, work_dir, stderr_path):
        self.proc = proc
        self.url = url
        self.port = port
        self.work_dir = work_dir
        self.stderr_path = stderr_path

    @property
    def pid(self):
        return self.proc.pid

    def stderr(self):
        try:
            with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError as e:
            return "<cannot read kboxd stderr: %s>" % e


@pytest.fixture(scope="session")
def daemon():
    kboxd = os.path.join(it.bin_dir(), "kboxd")
    if not os.access(kboxd, os.X_OK):
        pytest.fail("kboxd not found at %s: build it (cmake --build build) or set KBOX_BIN_DIR"
                    % kboxd, pytrace=False)
    # Our own temp dir, not pytest's numbered ones, which a pytest session
    # running beside this one (ctest --parallel) may prune.
    root = tempfile.mkdtemp(prefix="kbox-it-")  # 0700: kbox must not need more
    work_dir = os.path.join(root, "work")
    config = os.path.join(root, "kbox.textproto")
    with open(config, "w") as f:
        f.write(it.sectioned(DAEMON_CONFIG))
    stderr_path = os.path.join(root, "kboxd.stderr")
    # A secret only kboxd's own environment holds: no job may ever show it.
    env = dict(os.environ, KBOX_IT_DAEMON_SECRET=it.DAEMON_SECRET)
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            env=env, args=
            [kboxd, "--listen", "127.0.0.1:0", "--work-dir", work_dir, "--cpu-run-slots", "2",
             "--config", config] + it.NO_PCH,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
    d = Daemon(proc, None, None, work_dir, stderr_path)
    line, seen = it.read_ready_line(proc, START_TIMEOUT_S)
    if line is None:
        exited = proc.poll() is not None
        if not exited:
            proc.kill()
        proc.wait()
        why = ("exited with status %s before it was ready" % proc.returncode if exited
               else "was not ready within %d s (killed)" % START_TIMEOUT_S)
        stderr = d.stderr()
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail("kboxd %s\ncommand: %s\nstdout:\n%s\nstderr:\n%s"
                    % (why, " ".join(proc.args), "\n".join(seen), stderr), pytrace=False)
    d.url = line.split(" listening on ", 1)[1].strip()
    d.port = int(d.url.rsplit(":", 1)[1])
    yield d

    # Teardown (the `jobs` fixture has waited for every job, so kboxd is idle):
    # SIGTERM must make it exit 0 promptly and remove its jobs folder.
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        rc = proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        strays = _kill_strays(work_dir)
        pytest.fail("idle kboxd did not exit within %d s of SIGTERM (killed it and %d stray job "
                    "processes)\nstderr:\n%s" % (STOP_TIMEOUT_S, strays, d.stderr()[-8000:]),
                    pytrace=False)
    strays = _kill_strays(work_dir)
    assert rc == 0, "kboxd exited with %s after SIGTERM\nstderr:\n%s" % (rc, d.stderr()[-8000:])
    assert strays == 0, "%d job processes outlived kboxd" % strays
    jobs_dir = os.path.join(work_dir, "jobs")
    assert not os.path.isdir(jobs_dir) or not os.listdir(jobs_dir), \
        "job directories left after shutdown: %s" % os.listdir(jobs_dir)
    shutil.rmtree(root, ignore_errors=True)


def _kill_strays(work_dir):
    """SIGKILLs, by pid, the processes of this session's jobs that are still
    alive (argv or cwd inside our private work dir); returns how many."""
    strays = it.processes_mentioning(work_dir, exclude_pids=(os.getpid(),))
    for pid, _ in strays:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return len(strays)


# -- traps the escape cases must not spring ----------------------------------------

@pytest.fixture(scope="session")
def escape_traps():
    """Set up before any job is submitted: a listener on the port the network
    case connects to, a service token file with a unique marker, and a marker
    directory at the host's root. Removed at the end of the session."""
    traps = it.EscapeTraps()
    traps.start()
    yield traps
    traps.stop()


# -- the jobs -----------------------------------------------------------------------

def _evaluate(port, payload):
    return it.post_json(port, payload, timeout=JOBS_DEADLINE_S)


def _evaluate_then_scan(daemon, payload):
    """Like _evaluate, then right after the reply looks for live processes of
    the job (argv or cwd in its directory), retrying for up to 2 s so the
    kernel can finish reaping: reply.leftover_processes."""
    reply = _evaluate(daemon.port, payload)
    reply.leftover_processes = None
    try:
        job_id = reply.json()["job_id"]
    except (ValueError, KeyError):
        return reply
    job_dir = os.path.join(daemon.work_dir, "jobs", job_id)
    deadline = time.monotonic() + 2.0
    while True:
        left = it.processes_mentioning(job_dir, exclude_pids=(daemon.pid, os.getpid()))
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    reply.leftover_processes = left
    return reply


def _cli_eval_example(daemon):
    """The bundled example through the CLI (binary protobuf on the wire); the
    server comes from KBOX_SERVER here."""
    env = dict(os.environ, KBOX_SERVER=daemon.url)
    cmd = [os.path.join(it.bin_dir(), "kbox"), "eval", "--json",
           "--reference", os.path.join(it.EXAMPLE_DIR, "reference.py"),
           "--candidate", os.path.join(it.EXAMPLE_DIR, "candidate.py"),
           "--backend", "cpu", "--trials", "3", "--seed", "99", "--no-perf",
           "--id", "it-cli-example"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=JOBS_DEADLINE_S)
    return p, time.monotonic() - t0


def job_table():
    """name -> request payload. Jobs without a C++ build come first: the compile
    stage queue is FIFO, so they are not stuck behind the 20 s builds."""
    ref = it.read(it.case_path("ref_clamp_scale.py"))
    cand = lambda name: it.read(it.case_path(name))  # noqa: E731
    jobs = {}

    def add(name, reference, candidate, **fields):
        payload = {"reference_source": reference, "candidate_source": candidate,
                   "backend": "BACKEND_CPU", "client_request_id": "it-" + name}
        payload.update(fields)
        jobs[name] = payload

    # No compile.
    # The next three candidates build no kernel on purpose (they test the time
    # limit, a raising candidate and a broken reference); the strict anti-cheat
    # profile would reject them before they run (kernel.none, py.concurrency),
    # so they run with the checks off.
    add("spins_forever", ref, cand("cand_spins_forever.py"), time_limit_s=SPIN_TIME_LIMIT_S,
        measure_performance=False, anticheat_profile="off")
    add("raises", ref, cand("cand_raises.py"), measure_performance=False,
        anticheat_profile="off")
    add("reference_error", it.read(it.case_path("ref_raises_in_get_inputs.py")),
        cand("cand_identity_python.py"), measure_performance=False, anticheat_profile="off")
    add("plants_kbox_names", ref, cand("cand_plants_kbox_names.py"), measure_performance=False,
        anticheat_profile="off", seed=HONEST_SEED)
    # Candidate code writing kbox's result channel in the compile stage.
    add("forges_compile_report", ref, cand("cand_forges_compile_report.py"),
        measure_performance=False, anticheat_profile="off")
    add("announces_harness_and_crashes", ref, cand("cand_announces_harness_and_crashes.py"),
        measure_performance=False, anticheat_profile="off")
    add("forges_compiler_kill", ref, cand("cand_forges_compiler_kill.py"),
        measure_performance=False, anticheat_profile="off")
    # Static anti-cheat checks (tests/integration/test_static_check.py).
    matmul_ref = it.read(it.case_path("ref_matmul_relu.py"))
    add("static_rejected", matmul_ref, cand("cand_matmul_operator.py"),
        measure_performance=False)
    add("static_off", matmul_ref, cand("cand_matmul_python.py"), measure_performance=False,
        anticheat_profile="off", seed=HONEST_SEED)
    # One C++ build each.
    add("honest", ref, cand("cand_clamp_scale_ok.py"), seed=HONEST_SEED, correctness_trials=5,
        measure_performance=True)
    add("cpp_syntax_error", ref, cand("cand_cpp_syntax_error.py"))
    add("reads_judge_memory", ref, cand("cand_reads_judge_memory.py"), measure_performance=False,
        anticheat_profile="off", seed=HONEST_SEED)
    add("off_by_one", ref, cand("cand_clamp_scale_off_by_one.py"), seed=WRONG_SEED,
        measure_performance=False)
    add("static_override", matmul_ref, cand("cand_matmul_operator.py"),
        measure_performance=False, seed=HONEST_SEED,
        anticheat_overrides={"py.matmul-operator": "suspicious", "run.library-compute": "suspicious"})
    # C++ the static checks cannot read as text (through a helper's
    # parameter): checked on what the compile stage reports (test_static_check.py).
    add("static_deferred_honest", ref, cand("cand_clamp_scale_helper.py"), seed=HONEST_SEED,
        measure_performance=False)
    add("static_deferred_aten", ref, cand("cand_clamp_scale_helper_aten.py"),
        measure_performance=False)
    for case in it.corpus_cpu_cases():
        d = os.path.join(it.corpus_legit_dir(), case)
        add("corpus:" + case, it.read(os.path.join(d, "reference.py")),
            it.read(os.path.join(d, "candidate.py")), measure_performance=False)
    # Reward hacks and false-positive traps under the default (strict)
    # profile: most end at the static check; traps and the hacks only the run
    # can show compile and run (tests/integration/test_corpus.py).
    for case in it.corpus_reward_hack_cases():
        d = it.case_dir("reward-hacks", case)
        add("hack:" + case, it.read(os.path.join(d, "reference.py")),
            it.read(os.path.join(d, "candidate.py")), measure_performance=False)
    # corpus-new's cases again with every static rule off and every run.*
    # rule at reject, timed: the run stage's own defences must stop each
    # (tests/integration/test_dynamic_checks.py).
    run_rules = {rule: "reject" for rule in it.run_stage_rules()}
    for case in it.dynamic_corpus_new_cases():
        d = it.case_dir("reward-hacks", case)
        add("dynamic:" + case, it.read(os.path.join(d, "reference.py")),
            it.read(os.path.join(d, "candidate.py")), anticheat_profile="off",
            anticheat_overrides=run_rules, performance_trials=10)
    # A timer patch with the static rules that see it switched off: the run
    # stage's dynamic checks must catch it (tests/integration/test_dynamic_checks.py).
    d = os.path.join(it.shared_dir(), "corpus", "reward-hacks", "h12_perf_counter_patch_cpu")
    add("dynamic_timer_patch", it.read(os.path.join(d, "reference.py")),
        it.read(os.path.join(d, "candidate.py")),
        anticheat_overrides={"py.patch-library": "off", "py.cross-call-cache": "off"})
    # Sandbox escapes and resource abuse (tests/integration/test_escapes.py).
    # These jobs exist to prove the SANDBOX holds: the static anti-cheat checks
    # would reject most of them before they ran, so they run with the checks
    # off (test_escapes.py checks separately that strict rejects them).
    for case in it.corpus_escape_cases():
        d = it.case_dir("escapes", case)
        add("escape:" + case, it.read(os.path.join(d, "reference.py")),
            it.read(os.path.join(d, "candidate.py")), measure_performance=False,
            time_limit_s=ESCAPE_TIME_LIMIT_S, anticheat_profile="off")
    return _selected(jobs)


def _selected(jobs):
    """KBOX_IT_JOBS (comma-separated fnmatch patterns of job names, e.g.
    "static_*"): submit only those, for a quick run of a few tests with -k.
    Unset: every job."""
    import fnmatch
    patterns = [p.strip() for p in os.environ.get("KBOX_IT_JOBS", "").split(",") if p.strip()]
    if not patterns:
        return jobs
    return {name: payload for name, payload in jobs.items()
            if any(fnmatch.fnmatchcase(name, p) for p in patterns)}


class JobBoard(object):
    """Futures of every job of the session, keyed by name."""

    def __init__(self, daemon, payloads):
        self.daemon = daemon
        self.payloads = payloads
        self.submitted_at = time.monotonic()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(payloads) + 1,
                                                           thread_name_prefix="kbox-it-job")
        self.futures = {}
        for name, payload in payloads.items():
            if name in SCAN_AFTER_REPLY:
                self.futures[name] = self._pool.submit(_evaluate_then_scan, daemon, payload)
            else:
                self.futures[name] = self._pool.submit(_evaluate, daemon.port, payload)
            time.sleep(0.05)  # keep the arrival order (the compile queue is FIFO)
        if _selected({"cli_example": None}):
            self.futures["cli_example"] = self._pool.submit(_cli_eval_example, daemon)

    def _wait(self, name, raise_on_timeout=True):
        left = max(1.0, self.submitted_at + JOBS_DEADLINE_S - time.monotonic())
        try:
            return self.futures[name].result(timeout=left)
        except concurrent.futures.TimeoutError:
            if not raise_on_timeout:
                return None
            pytest.fail("job %s did not finish within %d s of submission\nkboxd stderr:\n%s"
                        % (name, JOBS_DEADLINE_S, self.daemon.stderr()[-8000:]), pytrace=False)

    def reply(self, name):
        return self._wait(name)

    def result(self, name):
        """The EvaluateResult (proto3 JSON as a dict) of an HTTP job; fails unless 200."""
        reply = self._wait(name)
        assert reply.status == 200, "job %s: HTTP %d: %s" % (name, reply.status, reply.text)
        assert reply.headers.get("content-type", "").startswith("application/json")
        return reply.json()

    def cli(self):
        return self._wait("cli_example")

    def wait_all(self, raise_on_timeout=True):
        for name in self.futures:
            if raise_on_timeout:
                self._wait(name)
            else:
                concurrent.futures.wait([self.futures[name]], timeout=max(
                    1.0, self.submitted_at + JOBS_DEADLINE_S - time.monotonic()))

    def http_job_names(self):
        return list(self.payloads)

    def close(self):
        self._pool.shutdown(wait=False)


@pytest.fixture(scope="session", autouse=True)
def jobs(daemon, escape_traps):
    board = JobBoard(daemon, job_table())
    yield board
    # Also when only some tests were selected: let every job finish, so kboxd
    # is idle when it gets SIGTERM (it does not abandon running jobs).
    board.wait_all(raise_on_timeout=False)
    board.close()



# Tests that do not wait for a job run first, while the jobs compile (so they
# also check that kboxd answers under load); /metrics runs after everything.
_MODULE_ORDER = {"test_http_errors": 0, "test_cli": 1, "test_static_check": 1, "test_evaluate": 2,
                 "test_corpus": 3, "test_dynamic_checks": 3, "test_metrics": 9}


def pytest_collection_modifyitems(session, config, items):
    def key(item):
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""
        waits = 1 if item.get_closest_marker("waits_for_jobs") else 0
        return (_MODULE_ORDER.get(module, 5), waits)
    items.sort(key=key)  # stable: file order is kept within a group


def pytest_configure(config):
    config.addinivalue_line("markers", "waits_for_jobs: the test waits for a submitted job; "
                            "run it after the tests of its module that do not")
