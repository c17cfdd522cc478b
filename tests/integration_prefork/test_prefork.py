"""Pre-forked run stages (docs/prefork.md) end to end: a real kboxd with its
defaults (single-use zygotes), the bundled example and two shared escape cases
through its zygotes, then the same example through a kboxd with
`preforked_run_stage: false` (sharing the build cache, so nothing compiles
twice) to print both run-stage figures.

Its own session and daemons: tests/integration's autouse job table would
submit dozens of unrelated jobs."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration_metrics"))
import kbox_it as it  # noqa: E402
import metrics_text  # noqa: E402

START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 600
CONFIG = it.SMALL_JOBS_CONFIG + """\
cpu_run_slots: 1
build_cache_dir: "%s"
"""
# (case, what it must end as): kill_parent kills the judge (its parent) —
# in prefork mode the zygote is far outside its pid namespace; ptrace_parent
# must still be named a sandbox violation (as in tests/integration).
# stdout_flood and infinite_loop pin the output-flood kill and the wall-clock
# limit for a zygote's child.
ESCAPES = {"esc_ptrace_parent_cpu": {"SANDBOX_VIOLATION"},
           "esc_kill_parent_cpu": {"RUNTIME_ERROR", "SANDBOX_VIOLATION"},
           "esc_stdout_flood_cpu": {"RUNTIME_ERROR"},
           "esc_infinite_loop_cpu": {"TIMEOUT"}}


class Kboxd(object):
    def __init__(self, root, name, flags, extra_config=""):
        self.work_dir = os.path.join(root, name)
        os.makedirs(self.work_dir)
        config = os.path.join(self.work_dir, "kbox.textproto")
        with open(config, "w") as f:
            f.write(it.sectioned(CONFIG % os.path.join(root, "build-cache") + extra_config))
        self.stderr_path = os.path.join(self.work_dir, "kboxd.stderr")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [os.path.join(it.bin_dir(), "kboxd"), "--listen", "127.0.0.1:0",
                 "--work-dir", os.path.join(self.work_dir, "work"), "--config", config] + flags +
                it.NO_PCH,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        line, _ = it.read_ready_line(self.proc, START_TIMEOUT_S)
        self.port = int(line.rsplit(":", 1)[1]) if line else None
        if self.port is None:
            self.stop()
            pytest.fail("kboxd did not start:\n" + self.stderr(), pytrace=False)

    def stderr(self):
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def evaluate(self, name, reference, candidate, **fields):
        payload = {"reference_source": it.read(reference), "candidate_source": it.read(candidate),
                   "backend": "BACKEND_CPU", "client_request_id": "prefork-" + name}
        payload.update(fields)
        reply = it.post_json(self.port, payload, timeout=JOB_TIMEOUT_S)
        assert reply.status == 200, reply.text
        return reply.json()

    @staticmethod
    def wait_until(predicate, timeout_s, what):
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                pytest.fail("timed out waiting for " + what, pytrace=False)
            time.sleep(0.05)

    def metrics(self):
        reply = it.request(self.port, "GET", "/metrics")
        assert reply.status == 200, reply
        return metrics_text.parse(reply.text)

    def zygotes(self):
        """Pids of this kboxd's zygote children."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % pid) as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if ppid == self.proc.pid and b"kbox_zygote.py" in cmdline:
                found.append(int(pid))
        return found

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def exited(pid):
    """True once `pid` is a zombie or gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def example(name):
    return os.path.join(it.EXAMPLE_DIR, name)


def escape(case, name):
    return os.path.join(it.shared_dir(), "corpus", "escapes", case, name)


@pytest.fixture(scope="module")
def runs():
    """Every job of the module, in order: prefork daemon first, then the plain one."""
    root = tempfile.mkdtemp(prefix="kbox-prefork-it-")
    out = {}
    try:
        pre = Kboxd(root, "prefork", [])
        # The first job builds the example and starts its lane's zygote.
        out["example_first"] = pre.evaluate("example-1", example("reference.py"),
                                            example("candidate.py"), measure_performance=False)
        zygotes_after_first = pre.zygotes()
        for case in ESCAPES:
            out[case] = pre.evaluate(case, escape(case, "reference.py"), escape(case, "candidate.py"),
                                     measure_performance=False, time_limit_s=15,
                                     anticheat_profile="off")
        # Built already (the build cache): this run stage is the prefork figure.
        out["example_prefork"] = pre.evaluate("example-2", example("reference.py"),
                                              example("candidate.py"), measure_performance=False)
        out["zygotes"] = (zygotes_after_first, pre.zygotes())
        # A zygote killed between jobs is replaced at the next run stage, and
        # counted (kbox_worker_crashes_total, kbox_zygote_restarts_total).
        out["metrics_before_kill"] = pre.metrics()
        for pid in out["zygotes"][1]:
            os.kill(pid, signal.SIGKILL)
        # A zombie (waitable, so kboxd sees it died) before the next job
        # arrives: a zygote still exiting while a job asks it to fork costs
        # that job instead (an INFRA_ERROR, as docs/prefork.md says).
        pre.wait_until(lambda: all(exited(pid) for pid in out["zygotes"][1]), 30,
                       "the killed zygote to become a zombie")
        out["after_kill"] = pre.evaluate("example-after-kill", example("reference.py"),
                                         example("candidate.py"), measure_performance=False)
        out["metrics_after_kill"] = pre.metrics()
        out["zygotes_after_kill"] = pre.zygotes()
        out["prefork_rc"] = pre.stop()
        out["prefork_log"] = pre.stderr()
        plain = Kboxd(root, "plain", [], "preforked_run_stage: false\n")
        out["example_exec"] = plain.evaluate("example-3", example("reference.py"),
                                             example("candidate.py"), measure_performance=False)
        out["exec_rc"] = plain.stop()
        yield out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_example_is_correct_through_the_zygote(runs):
    for key in ("example_first", "example_prefork"):
        r = runs[key]
        assert r["status"] == "CORRECT" and r["rewardable"] is True, it.describe(r)
    log = runs["prefork_log"]
    assert "run stages start from single-use pre-forked zygotes" in log, log
    assert "fall back to fork+exec" not in log, log
    assert runs["prefork_rc"] == 0


def test_every_job_had_a_zygote_of_its_own(runs):
    # Jobs one after another use the CPU slot's first lane. After each, the
    # zygote that forked it is gone and one successor waits: no zygote ever
    # forks two jobs (docs/prefork.md, "single use").
    first, last = runs["zygotes"]
    assert len(first) == 1 and len(last) == 1, runs["zygotes"]
    assert first != last, "one zygote forked several jobs: %s" % (runs["zygotes"],)


def test_killed_zygote_is_restarted_and_counted(runs):
    r = runs["after_kill"]
    assert r["status"] == "CORRECT", it.describe(r)
    killed, now = runs["zygotes"][1], runs["zygotes_after_kill"]
    assert len(now) == 1 and now != killed, (killed, now)
    before, after = runs["metrics_before_kill"], runs["metrics_after_kill"]
    assert before.value("kbox_worker_crashes_total", worker="zygote") == 0
    assert after.value("kbox_worker_crashes_total", worker="zygote") == 1
    assert before.value("kbox_zygote_restarts_total", device="cpu") == 0
    assert after.value("kbox_zygote_restarts_total", device="cpu") == 1
    assert after.total("kbox_zygote_start_failures_total") == 0
    # Killed between jobs: no job lost to it.
    assert after.total("kbox_infra_errors_total") == 0


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_escape_gets_its_expected_result_through_the_zygote(runs, case):
    r = runs[case]
    assert r["rewardable"] is False, it.describe(r)
    assert r["status"] in ESCAPES[case], it.describe(r)
    if case == "esc_ptrace_parent_cpu":
        assert "import of ctypes.util" in r["message"] and "sandbox forbids" in r["message"], \
            it.describe(r)


def test_prints_run_stage_figures_against_fork_exec(runs):
    pre = runs["example_prefork"]
    ex = runs["example_exec"]
    assert ex["status"] == "CORRECT", it.describe(ex)
    assert runs["exec_rc"] == 0
    # Figures only (timings vary with the host's load): the bundled example,
    # built already, 3-trial default, no performance measurement.
    print("\nrun stage of docs/examples/bias_relu (CPU): fork+exec %.0f ms, prefork %.0f ms "
          "(first prefork job %.0f ms; its zygote started just before, outside run_ms)"
          % (ex["durations"]["run_ms"], pre["durations"]["run_ms"],
             runs["example_first"]["durations"]["run_ms"]))
    assert pre["durations"]["run_ms"] > 0 and ex["durations"]["run_ms"] > 0


def test_compile_stages_fork_from_a_zygote_per_compile_worker():
    # --preforked-compile-stage: each compile worker slot gets a zygote
    # ("compileN") that serves all its builds. An honest build is judged as
    # through fork+exec, and the compile-time escape that echoes a host file
    # through the compiler's diagnostics leaks nothing through the zygote's
    # child either (the same sandbox, entered in the child).
    root = tempfile.mkdtemp(prefix="kbox-prefork-compile-it-")
    try:
        k = Kboxd(root, "compile", ["--preforked-compile-stage"])
        try:
            honest = k.evaluate("compile-example", example("reference.py"), example("candidate.py"),
                                measure_performance=False)
            case = "esc_compile_include_passwd_cpu"
            leak = k.evaluate(case, escape(case, "reference.py"), escape(case, "candidate.py"),
                              measure_performance=False, anticheat_profile="off")
            zygotes = k.zygotes()
            metrics = k.metrics()
            info = it.request(k.port, "GET", "/v1/info").json()
        finally:
            rc = k.stop()
            log = k.stderr()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert honest["status"] == "CORRECT" and honest["rewardable"] is True, it.describe(honest)
    assert leak["status"] == "COMPILE_ERROR" and leak["rewardable"] is False, it.describe(leak)
    with open("/etc/passwd") as f:
        first_line = f.readline().strip()
    assert first_line and first_line not in json.dumps(leak), "host /etc/passwd leaked"
    assert "compile stages start from a pre-forked zygote" in log, log
    assert "fall back to fork+exec" not in log, log
    # A zygote per compile worker, started with kboxd, and the run lane's
    # successor of the two jobs' zygotes.
    assert len(zygotes) == info["compile_workers"] + 1, (zygotes, info)
    assert metrics.total("kbox_zygote_start_failures_total") == 0
    assert metrics.value("kbox_zygote_restarts_total", device="compile") == 0
    assert rc == 0
    print("\ncompile stage of docs/examples/bias_relu (CPU) through a zygote: %.0f ms"
          % honest["durations"]["compile_ms"])
