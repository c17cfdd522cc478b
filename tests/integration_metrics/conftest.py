"""One kboxd for the metrics tests (its own session: tests/integration's
autouse job table would submit dozens of slow jobs), and the cheap jobs whose
traces the tests look for in /metrics: a static check, a static reject, a
correct pure-PyTorch candidate and one the sandbox stops (no C++ build: each
load_inline compile costs ~20 s)."""
import concurrent.futures
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import kbox_it as it  # noqa: E402
import metrics_text  # noqa: E402

START_TIMEOUT_S = 120
JOB_TIMEOUT_S = 300
STOP_TIMEOUT_S = 60
MAX_IN_FLIGHT = 7
CONFIG = """\
default_time_limit_s: 60
max_time_limit_s: 120
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
cpu_run_slots: 2
max_in_flight_jobs: %d
""" % MAX_IN_FLIGHT

HERE = os.path.dirname(os.path.abspath(__file__))


class Kboxd(object):
    """A kboxd on 127.0.0.1:<free port> with its own work dir."""

    def __init__(self, root):
        self.root = root
        config = os.path.join(root, "kbox.textproto")
        with open(config, "w") as f:
            f.write(it.sectioned(CONFIG))
        self.stderr_path = os.path.join(root, "kboxd.stderr")
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [os.path.join(it.bin_dir(), "kboxd"), "--listen", "127.0.0.1:0",
                 "--work-dir", os.path.join(root, "work"), "--config", config] + it.NO_PCH,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        line, seen = it.read_ready_line(self.proc, START_TIMEOUT_S)
        if line is None:
            self.stop()
            pytest.fail("kboxd did not start:\n%s\n%s" % ("\n".join(seen), self.stderr()),
                        pytrace=False)
        self.port = int(line.rsplit(":", 1)[1])

    def stderr(self):
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def metrics(self):
        reply = it.request(self.port, "GET", "/metrics")
        assert reply.status == 200, reply
        return reply.text

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def kboxd():
    root = tempfile.mkdtemp(prefix="kbox-metrics-it-")
    daemon = Kboxd(root)
    yield daemon
    rc = daemon.stop()
    stderr = daemon.stderr()
    shutil.rmtree(root, ignore_errors=True)
    assert rc == 0, "kboxd exited with %s\n%s" % (rc, stderr[-4000:])


def case(name):
    return it.read(it.case_path(name))


def own_case(name):
    return it.read(os.path.join(HERE, "cases", name))


def cheap_jobs():
    """name -> (path, payload): each ends in well under a minute on the CPU."""
    clamp_ref = case("ref_clamp_scale.py")
    return {
        "check_reject": ("/v1/check", {
            "reference_source": case("ref_matmul_relu.py"),
            "candidate_source": case("cand_matmul_operator.py"), "backend": "BACKEND_CPU"}),
        "static_reject": ("/v1/evaluate", {
            "reference_source": case("ref_matmul_relu.py"),
            "candidate_source": case("cand_matmul_operator.py"), "backend": "BACKEND_CPU"}),
        # Profile "off": a plain PyTorch candidate builds nothing and runs.
        "correct_python": ("/v1/evaluate", {
            "reference_source": clamp_ref, "candidate_source": own_case("cand_clamp_scale_python.py"),
            "backend": "BACKEND_CPU", "anticheat_profile": "off", "measure_performance": False,
            "seed": it.HONEST_SEED}),
        "forks_in_forward": ("/v1/evaluate", {
            "reference_source": clamp_ref, "candidate_source": own_case("cand_forks_in_forward.py"),
            "backend": "BACKEND_CPU", "anticheat_profile": "off", "measure_performance": False}),
    }


@pytest.fixture(scope="session")
def job_run(kboxd):
    """The /metrics text before the cheap jobs, their replies, and the text after."""
    before = metrics_text.parse(kboxd.metrics())
    jobs = cheap_jobs()
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = {name: pool.submit(it.post_json, kboxd.port, payload, JOB_TIMEOUT_S, path)
                   for name, (path, payload) in jobs.items()}
        replies = {name: f.result() for name, f in futures.items()}
    after_text = kboxd.metrics()
    return before, replies, after_text, metrics_text.parse(after_text)
