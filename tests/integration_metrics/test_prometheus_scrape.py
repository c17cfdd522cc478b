"""A real Prometheus server on loopback scrapes kboxd every second, loads
kbox's alert rules, and answers a query for a kbox metric through its HTTP API."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "..", "helm", "kbox", "files", "kbox-alerts.rules.yaml")
READY_TIMEOUT_S = 60
QUERY_TIMEOUT_S = 60
PORT_TRIES = 5

CONFIG = """\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - %(rules)s
scrape_configs:
  - job_name: kboxd
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs:
      - targets: ["127.0.0.1:%(kboxd_port)d"]
"""


def free_port():
    """A port free a moment ago (Prometheus cannot listen on port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(port, path, timeout=5):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
        return json.loads(r.read().decode("utf-8"))


def poll(deadline_s, attempt, what):
    """attempt() until it returns something other than None, or fail."""
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            got = attempt()
        except (OSError, ValueError) as e:  # not up yet
            got, last = None, e
        if got is not None:
            return got
        time.sleep(0.2)
    pytest.fail("timed out waiting for %s (last error: %s)" % (what, last), pytrace=False)


class Prometheus(object):
    def __init__(self, kboxd_port):
        self.root = tempfile.mkdtemp(prefix="kbox-prometheus-")
        config = os.path.join(self.root, "prometheus.yml")
        with open(config, "w") as f:
            f.write(CONFIG % {"rules": os.path.abspath(RULES), "kboxd_port": kboxd_port})
        self.log_path = os.path.join(self.root, "prometheus.log")
        binary = shutil.which("prometheus")
        assert binary, "prometheus not found: scripts/install-deps installs Debian's prometheus"
        self.proc = None
        # A port free when probed can be taken before Prometheus binds it: retry.
        for _ in range(PORT_TRIES):
            self.port = free_port()
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    [binary, "--config.file=" + config,
                     "--storage.tsdb.path=" + os.path.join(self.root, "data"),
                     "--web.listen-address=127.0.0.1:%d" % self.port,
                     "--log.level=info"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                return
            self.stop()
            if "address already in use" not in self.log():
                break
        pytest.fail("prometheus did not become ready:\n" + self.log()[-4000:], pytrace=False)

    def _wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                            timeout=2) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def log(self):
        with open(self.log_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def query(self, promql):
        doc = get_json(self.port, "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def prometheus(kboxd):
    server = Prometheus(kboxd.port)
    yield server
    server.stop()
    shutil.rmtree(server.root, ignore_errors=True)


def test_prometheus_scrapes_kboxd(prometheus, kboxd, job_run):
    _, _, _, after = job_run
    # The target is up, and a kbox counter reads back with kboxd's own value.
    poll(QUERY_TIMEOUT_S, lambda: prometheus.query('up{job="kboxd"} == 1') or None,
         "the kboxd target to be up")
    want = after.total("kbox_jobs_total")
    assert want >= 3
    result = poll(QUERY_TIMEOUT_S,
                  lambda: [r for r in prometheus.query("sum(kbox_jobs_total)")
                           if float(r["value"][1]) == want] or None,
                  "sum(kbox_jobs_total) == %s through Prometheus" % want)
    assert len(result) == 1
    # A labelled series, as Prometheus stores it.
    rejected = prometheus.query('kbox_jobs_total{backend="cpu",status="rejected"}')
    assert [float(r["value"][1]) for r in rejected] == [1.0], rejected
    assert rejected[0]["metric"]["instance"] == "127.0.0.1:%d" % kboxd.port


def test_alert_rules_load_and_evaluate(prometheus, kboxd):
    def evaluated():
        groups = get_json(prometheus.port, "/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if len(rules) == 5 and all(r.get("lastEvaluation", "").startswith("20") and
                                   r["health"] == "ok" for r in rules):
            return rules
        return None
    rules = poll(QUERY_TIMEOUT_S, evaluated, "kbox's 5 alert rules to evaluate")
    assert {r["name"] for r in rules} == {"KboxWorkersCrashing", "KboxGpuQuarantined",
                                          "KboxInfraErrorRate", "KboxQueueSaturated",
                                          "KboxInsecureMode"}
    # A healthy, sandboxed kboxd fires none of them.
    assert all(r["state"] == "inactive" for r in rules), rules
