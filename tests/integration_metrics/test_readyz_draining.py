"""GET /readyz turns 503 once kboxd starts draining (SIGTERM), on a connection
opened before, while a job still runs."""
import http.client
import json
import shutil
import signal
import tempfile
import threading
import time

import conftest
import kbox_it as it

SPIN_LIMIT_S = 10


def wait_until(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def test_readyz_reports_draining():
    root = tempfile.mkdtemp(prefix="kbox-metrics-drain-")
    daemon = conftest.Kboxd(root)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
        conn.request("GET", "/readyz")
        res = conn.getresponse()
        assert (res.status, json.loads(res.read())) == (200, {"ready": True})

        payload = {"reference_source": conftest.case("ref_clamp_scale.py"),
                   "candidate_source": conftest.case("cand_spins_forever.py"),
                   "backend": "BACKEND_CPU", "anticheat_profile": "off",
                   "time_limit_s": SPIN_LIMIT_S}
        replies = []
        job = threading.Thread(
            target=lambda: replies.append(it.post_json(daemon.port, payload, timeout=180)))
        job.start()
        # Started, not only admitted: a job the drain finds not yet begun is
        # held back for the restart (INFRA_ERROR "did not start"), which on a
        # loaded host could happen to a job merely admitted.
        wait_until(lambda: 'kbox_run_slots{device="cpu",state="busy"} 1' in daemon.metrics(), 120,
                   "the job's run stage to start")
        daemon.proc.send_signal(signal.SIGTERM)
        # The listener closes at once; this connection stays until the drain ends.
        def draining():
            conn.request("GET", "/readyz")
            r = conn.getresponse()
            body = r.read()
            if r.status == 200:
                return False
            assert r.status == 503, (r.status, body)
            doc = json.loads(body)
            assert doc["ready"] is False and doc["reason"].startswith("draining"), doc
            return True
        wait_until(draining, 30, "/readyz to report draining")
        conn.close()
        job.join(timeout=180)
        assert replies and replies[0].status == 200, replies
        assert replies[0].json()["status"] == "TIMEOUT", it.describe(replies[0].json())
        assert daemon.proc.wait(timeout=60) == 0
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)
