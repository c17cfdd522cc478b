"""Real kboxd daemons for the Python client's tests, and the jobs that need a
C++ build, submitted at session start so that they compile while the other
tests run.

Daemons (all started at once, so their start-up probes overlap):
  main     2 CPU run slots; 4 compile workers, so that the jobs that build
           nothing are not queued behind the two C++ builds.
  single   --max-in-flight-jobs 1: refusals with Retry-After, and the
           INFRA_ERROR test (which breaks its jobs directory for a moment).
  doomed   stopped by the failover test while it still holds a job.
  sixteen  --max-in-flight-jobs 16: evaluate_many splitting 500 jobs to fit.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "clients", "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import kbox_it as it  # noqa: E402
from kbox_client import Client  # noqa: E402

START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 90
DAEMON_CONFIG = """\
default_time_limit_s: 60
max_time_limit_s: 120
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
"""
# Keys of the session's C++ jobs (one build that succeeds, one that fails).
EXAMPLE_KEY = "pyclient-example"
# The example is timed. On a loaded 2-core CI machine the judge's outside
# clock can disagree with the candidate's by more than run.timing-mismatch
# allows (docs/anticheat.md, "The outside clock"), which would reject the
# honest example and fail tests about the client. The rule still runs and
# reports; it just does not reject here.
TIMING_OVERRIDES = {"run.timing-mismatch": "suspicious"}
SYNTAX_ERROR_KEY = "pyclient-cpp-syntax-error"


class Daemon(object):
    def __init__(self, name, proc, root):
        self.name = name
        self.proc = proc
        self.root = root
        self.work_dir = os.path.join(root, "work")
        self.url = None

    def stderr(self):
        try:
            with open(os.path.join(self.root, "kboxd.stderr"), errors="replace") as f:
                return f.read()[-6000:]
        except OSError as e:
            return "<no stderr: %s>" % e

    def stop(self):
        """SIGTERM, then wait for it to drain and exit; returns its status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _launch(name, extra_args):
    kboxd = os.path.join(it.bin_dir(), "kboxd")
    if not os.access(kboxd, os.X_OK):
        pytest.fail("kboxd not found at %s: build it or set KBOX_BIN_DIR" % kboxd, pytrace=False)
    root = tempfile.mkdtemp(prefix="kbox-pyclient-%s-" % name)
    config = os.path.join(root, "kbox.textproto")
    with open(config, "w") as f:
        f.write(it.sectioned(DAEMON_CONFIG))
    with open(os.path.join(root, "kboxd.stderr"), "wb") as err:
        proc = subprocess.Popen([kboxd, "--listen", "127.0.0.1:0", "--work-dir",
                                 os.path.join(root, "work"), "--config", config] + extra_args +
                                it.NO_PCH,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
    return Daemon(name, proc, root)


def _await_ready(daemon):
    line, seen = it.read_ready_line(daemon.proc, START_TIMEOUT_S)
    if line is None:
        daemon.stop()
        pytest.fail("kboxd %s did not start\nstdout:\n%s\nstderr:\n%s"
                    % (daemon.name, "\n".join(seen), daemon.stderr()), pytrace=False)
    daemon.url = line.split(" listening on ", 1)[1].strip()


@pytest.fixture(scope="session")
def daemons():
    started = {"main": _launch("main", ["--cpu-run-slots", "2", "--compile-workers", "4"]),
               "single": _launch("single", ["--cpu-run-slots", "1", "--max-in-flight-jobs", "1"]),
               "doomed": _launch("doomed", ["--cpu-run-slots", "1"]),
               "sixteen": _launch("sixteen", ["--cpu-run-slots", "2", "--max-in-flight-jobs", "16"])}
    try:
        for d in started.values():
            _await_ready(d)
        yield started
    finally:
        for d in started.values():
            d.stop()
            shutil.rmtree(d.root, ignore_errors=True)


@pytest.fixture(scope="session")
def kboxd(daemons):
    return daemons["main"]


@pytest.fixture(scope="session")
def kboxd_single(daemons):
    return daemons["single"]


@pytest.fixture(scope="session")
def kboxd_doomed(daemons):
    return daemons["doomed"]


@pytest.fixture(scope="session")
def kboxd_sixteen(daemons):
    return daemons["sixteen"]


def case(name):
    """Source of a test case: ours (cases/) or the integration tests'."""
    ours = os.path.join(HERE, "cases", name)
    return it.read(ours if os.path.exists(ours) else it.case_path(name))


def example_sources():
    return (it.read(os.path.join(it.EXAMPLE_DIR, "reference.py")),
            it.read(os.path.join(it.EXAMPLE_DIR, "candidate.py")))


def python_job(candidate="cand_matmul_python.py", **fields):
    """A request that builds nothing (plain PyTorch, checks off): seconds."""
    request = {"reference_source": case("ref_matmul_relu.py"), "candidate_source": case(candidate),
               "backend": "BACKEND_CPU", "anticheat_profile": "off", "measure_performance": False,
               "correctness_trials": 2}
    request.update(fields)
    return request


def rejected_job():
    """A request the strict static checks reject before anything runs: milliseconds."""
    return {"reference_source": case("ref_matmul_relu.py"),
            "candidate_source": case("cand_matmul_operator.py"), "backend": "BACKEND_CPU"}


class BuildJobs(object):
    """The session's two C++ jobs, submitted at once, results on demand."""

    def __init__(self, client):
        self.client = client
        ref, cand = example_sources()
        self.jobs = dict(zip(
            ("example", "syntax_error"),
            client.submit_batch(
                [{"reference_source": ref, "candidate_source": cand, "backend": "BACKEND_CPU",
                  "correctness_trials": 3, "measure_performance": True, "performance_trials": 5,
                  "anticheat_overrides": TIMING_OVERRIDES},
                 {"reference_source": case("ref_clamp_scale.py"),
                  "candidate_source": case("cand_cpp_syntax_error.py"), "backend": "BACKEND_CPU",
                  "measure_performance": False}],
                [EXAMPLE_KEY, SYNTAX_ERROR_KEY])))
        self.results = {}

    def result(self, name):
        if name not in self.results:
            self.results[name] = self.client.wait(self.jobs[name], timeout_s=900)
        return self.results[name]


@pytest.fixture(scope="session")
def build_jobs(kboxd):
    return BuildJobs(Client(kboxd.url))


@pytest.fixture(scope="session", autouse=True)
def _submit_builds_first(request):
    # Tests that need no daemon (test_pure_functions.py) must not start any.
    if any("kboxd" in item.fixturenames or "build_jobs" in item.fixturenames
           for item in request.session.items):
        request.getfixturevalue("build_jobs")


def pytest_collection_modifyitems(session, config, items):
    # Tests that wait on the C++ builds go last, so the rest runs meanwhile.
    items.sort(key=lambda item: 1 if "build_jobs" in item.fixturenames else 0)
