"""Bearer-token access control end to end (docs/api.md, "Authentication"):
real kboxd daemons with a tokens file, real sockets.

Cheap requests only: /v1/check, jobs the strict static checks reject before
anything is compiled, and a candidate that sleeps in forward (no build) to
hold a job in flight until its run-stage limit.

Its own session and daemons: tests/integration's autouse job table would
submit dozens of unrelated jobs.
"""
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
import kbox_it as it  # noqa: E402

START_TIMEOUT_S = 120
RELOAD_TIMEOUT_S = 30
# The held jobs' run-stage limit: they sleep in forward until it kills them,
# so each stays in flight at least this long after submission. The
# assertions made while they are held take milliseconds. The limit also
# covers the stage's own start (a fresh interpreter importing torch): at 8 s,
# a fresh-clone CI run (2 cores, the whole suite beside it) once saw that
# start outlast it, and the job ended INFRA_ERROR, killed in kbox's harness,
# instead of TIMEOUT in the candidate's forward.
HOLD_TIME_LIMIT_S = 20
JOB_WAIT_S = 60  # the long-poll bound of GET /v1/jobs/<id>

ALICE = "alice-secret-%d-0123456789" % os.getpid()
BOB = "bob-secret-%d-abcdefghijk" % os.getpid()
CAROL = "carol-secret-%d-zyxwvutsrq" % os.getpid()
WRONG = "wrong-secret-%d-000000000" % os.getpid()
BROKEN_RELOAD_SECRET = "broken-secret-%d-never-logged" % os.getpid()
# Every secret this module ever shows kboxd: none may reach its log.
ALL_SECRETS = (ALICE, BOB, CAROL, WRONG, BROKEN_RELOAD_SECRET)

CONFIG = """\
default_time_limit_s: 30
max_time_limit_s: 60
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
cpu_run_slots: 2
max_in_flight_jobs: 2
"""
# alice may hold one job at a time; bob has no per-token limit.
TOKENS = """\
# kbox integration test tokens
alice %s 1
bob   %s
""" % (ALICE, BOB)

SLEEPS_IN_FORWARD = '''\
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, *inputs):
        while True:
            time.sleep(3600)
'''


def auth(secret):
    return {"Authorization": "Bearer " + secret}


def static_reject(request_id):
    """An evaluation the strict profile rejects before compiling: ends at once."""
    return {"reference_source": it.read(it.case_path("ref_matmul_relu.py")),
            "candidate_source": it.read(it.case_path("cand_matmul_operator.py")),
            "backend": "BACKEND_CPU", "client_request_id": request_id,
            "measure_performance": False}


def held_job(request_id):
    """An evaluation that stays in flight until HOLD_TIME_LIMIT_S kills it."""
    return {"reference_source": it.read(it.case_path("ref_clamp_scale.py")),
            "candidate_source": SLEEPS_IN_FORWARD, "backend": "BACKEND_CPU",
            "client_request_id": request_id, "measure_performance": False,
            "anticheat_profile": "off", "time_limit_s": HOLD_TIME_LIMIT_S}


class Kboxd(object):
    def __init__(self, root, name, config=CONFIG, tokens=TOKENS, flags=()):
        self.dir = os.path.join(root, name)
        os.makedirs(self.dir)
        self.config_path = os.path.join(self.dir, "kbox.textproto")
        self.tokens_path = os.path.join(self.dir, "tokens")
        with open(self.config_path, "w") as f:
            f.write(it.sectioned(config))
        self.write_tokens(tokens)
        self.stderr_path = os.path.join(self.dir, "kboxd.stderr")
        self.args = [os.path.join(it.bin_dir(), "kboxd"), "--listen", "127.0.0.1:0",
                     "--work-dir", os.path.join(self.dir, "work"), "--config", self.config_path,
                     "--api-tokens-file", self.tokens_path] + list(flags) + it.NO_PCH
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=err)
        self.line, self.seen = it.read_ready_line(self.proc, START_TIMEOUT_S)
        self.port = int(self.line.rsplit(":", 1)[1]) if self.line else None

    def write_tokens(self, text):
        # Replaced in one rename, as a Kubernetes Secret volume does.
        tmp = self.tokens_path + ".new"
        with open(tmp, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.tokens_path)

    def stderr(self):
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def get(self, path, secret=None, headers=None, timeout=60):
        hdrs = dict(headers or {})
        if secret is not None:
            hdrs.update(auth(secret))
        return it.request(self.port, "GET", path, headers=hdrs, timeout=timeout)

    def post(self, path, payload, secret=None, headers=None):
        hdrs = dict(headers or {})
        if secret is not None:
            hdrs.update(auth(secret))
        return it.request(self.port, "POST", path, json.dumps(payload).encode(), "application/json",
                          headers=hdrs)

    def submit(self, secret, payload, key=""):
        return self.post("/v1/jobs", {"jobs": [{"idempotency_key": key, "request": payload}]},
                         secret)

    def wait_done(self, secret, job_id):
        """The job's final JobStatus, by long poll (no sleeps)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            reply = self.get("/v1/jobs/%s?wait=%d" % (job_id, JOB_WAIT_S), secret,
                             timeout=JOB_WAIT_S + 30)
            assert reply.status == 200, reply
            status = reply.json()
            if status["state"] == "DONE":
                return status
        pytest.fail("job %s not done within %d s" % (job_id, START_TIMEOUT_S))

    def token_info(self, secret):
        reply = self.get("/v1/info", secret)
        assert reply.status == 200, reply
        return reply.json()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@pytest.fixture(scope="module")
def root():
    path = tempfile.mkdtemp(prefix="kbox-auth-it-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def kboxd(root):
    d = Kboxd(root, "main")
    if d.port is None:
        d.stop()
        pytest.fail("kboxd did not start:\n%s\n%s" % ("\n".join(d.seen), d.stderr()),
                    pytrace=False)
    yield d
    assert d.stop() == 0, d.stderr()[-4000:]


def assert_error(reply, status, code):
    assert reply.status == status, reply
    body = reply.json()
    assert body["code"] == status, body
    assert body["error"]["code"] == code, body
    assert body["error"]["message"] == body["message"] and body["message"], body
    return body


def assert_unauthenticated(reply, www_authenticate):
    body = assert_error(reply, 401, "UNAUTHENTICATED")
    assert reply.headers.get("www-authenticate") == www_authenticate, reply.headers
    for secret in ALL_SECRETS:
        assert secret not in reply.text
    return body


def assert_retry_later(reply):
    body = assert_error(reply, 429, "RESOURCE_EXHAUSTED")
    assert int(reply.headers["retry-after"]) > 0, reply.headers
    return body


# -- who gets in ---------------------------------------------------------------------------------

def test_startup_log_names_tokens_not_secrets(kboxd):
    log = kboxd.stderr()
    assert "loaded 2 API tokens from %s: alice bob" % kboxd.tokens_path in log, log


def test_requests_without_a_token_get_401(kboxd):
    for method, path in (("GET", "/v1/info"), ("POST", "/v1/evaluate"), ("POST", "/v1/check"),
                         ("POST", "/v1/jobs"), ("GET", "/v1/jobs/some-id"), ("GET", "/nowhere")):
        reply = it.request(kboxd.port, method, path, b"{}" if method == "POST" else None,
                           "application/json" if method == "POST" else None)
        body = assert_unauthenticated(reply, "Bearer")
        assert body["field"] == "authorization", body


def test_a_wrong_or_malformed_token_gets_401(kboxd):
    assert_unauthenticated(kboxd.get("/v1/info", WRONG), 'Bearer error="invalid_token"')
    assert_unauthenticated(kboxd.get("/v1/info", ALICE[:-1]), 'Bearer error="invalid_token"')
    for header in ("Basic " + ALICE, "Bearer", ALICE, "Bearer" + ALICE):
        reply = kboxd.get("/v1/info", headers={"Authorization": header})
        assert_unauthenticated(reply, 'Bearer error="invalid_token"')


def test_a_valid_token_gets_in_and_info_names_it(kboxd):
    info = kboxd.token_info(ALICE)
    assert info["auth_enabled"] is True
    assert info["token_name"] == "alice"
    assert info["token_max_concurrent_jobs"] == 1
    assert info["token_jobs_in_flight"] == 0
    # The scheme is case-insensitive (RFC 6750).
    reply = kboxd.get("/v1/info", headers={"Authorization": "bearer " + BOB})
    assert reply.status == 200 and reply.json()["token_name"] == "bob", reply
    check = kboxd.post("/v1/check", {"candidate_source": "x = 1\n", "backend": "BACKEND_CPU"}, BOB)
    assert check.status == 200, check


def test_health_and_metrics_are_open_by_default(kboxd):
    reply = kboxd.get("/healthz")
    assert reply.status == 200 and reply.json() == {"status": "ok"}, reply
    reply = kboxd.get("/metrics")
    assert reply.status == 200 and "kbox_" in reply.text, reply


def test_health_and_metrics_closed_when_configured(root):
    d = Kboxd(root, "closed", config=CONFIG + "auth_required_for_metrics: true\n"
                                             "auth_required_for_health: true\n")
    try:
        assert d.port is not None, d.stderr()
        for path in ("/healthz", "/readyz", "/metrics"):
            assert_unauthenticated(d.get(path), "Bearer")
        assert d.get("/healthz", BOB).status == 200
        metrics = d.get("/metrics", BOB)
        assert metrics.status == 200 and "kbox_" in metrics.text, metrics
    finally:
        assert d.stop() == 0, d.stderr()[-4000:]


def test_cli_sends_the_token_from_a_file_or_the_environment(kboxd, root):
    kbox = os.path.join(it.bin_dir(), "kbox")
    token_file = os.path.join(root, "cli-token")
    with open(token_file, "w") as f:
        f.write(BOB + "\n")  # as `echo` writes it
    candidate = it.case_path("cand_matmul_operator.py")
    env = dict(os.environ, KBOX_SERVER="http://127.0.0.1:%d" % kboxd.port)
    env.pop("KBOX_TOKEN", None)

    def run(args, extra_env=None):
        return subprocess.run([kbox] + args, env=dict(env, **(extra_env or {})),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)

    without = run(["check", candidate])
    assert without.returncode == 2, without
    assert b"(401)" in without.stderr and b"needs an API token" in without.stderr, without.stderr
    with_file = run(["check", candidate, "--token-file", token_file])
    assert with_file.returncode == 1, with_file  # 1: the strict profile rejects it
    assert b"REJECTED" in with_file.stdout, with_file.stdout
    info = run(["info"], {"KBOX_TOKEN": ALICE})
    assert info.returncode == 0, info
    assert json.loads(info.stdout)["token_name"] == "alice"
    wrong = run(["info"], {"KBOX_TOKEN": WRONG})
    assert wrong.returncode == 2 and b"not valid" in wrong.stderr, wrong
    assert WRONG.encode() not in wrong.stderr
    missing = run(["info", "--token-file", token_file + ".missing"])
    assert missing.returncode == 2 and b"cannot read the token file" in missing.stderr, missing


def responses(kboxd, status_class):
    """kbox_http_responses_total for one status class ("4xx"), read without a token."""
    for line in kboxd.get("/metrics").text.splitlines():
        if line.startswith('kbox_http_responses_total{code="%s"}' % status_class):
            return float(line.split()[-1])
    return 0.0


def test_each_401_counts_once_in_the_metrics(kboxd):
    before = responses(kboxd, "4xx")
    assert kboxd.get("/healthz").status == 200  # a clean close after it is no error
    assert responses(kboxd, "4xx") == before
    assert_unauthenticated(kboxd.get("/v1/info", WRONG), 'Bearer error="invalid_token"')
    assert responses(kboxd, "4xx") == before + 1


# -- whose jobs ------------------------------------------------------------------------------------

def test_a_job_is_readable_only_with_the_token_that_submitted_it(kboxd):
    reply = kboxd.submit(ALICE, static_reject("isolation"), key="isolation")
    assert reply.status == 200, reply
    job_id = reply.json()["jobs"][0]["job_id"]
    done = kboxd.wait_done(ALICE, job_id)
    assert done["result"]["status"] == "REJECTED", done
    # bob is told exactly what an unknown id gets: ids do not leak.
    theirs = assert_error(kboxd.get("/v1/jobs/" + job_id, BOB), 404, "NOT_FOUND")
    unknown = assert_error(kboxd.get("/v1/jobs/" + job_id + "x", BOB), 404, "NOT_FOUND")
    assert theirs["message"].replace(job_id, "ID") == unknown["message"].replace(job_id + "x", "ID")
    assert_unauthenticated(kboxd.get("/v1/jobs/" + job_id), "Bearer")


def test_idempotency_keys_are_per_token(kboxd):
    a = kboxd.submit(ALICE, static_reject("key-alice"), key="shared-key")
    b = kboxd.submit(BOB, static_reject("key-bob"), key="shared-key")  # another request: no 409
    assert a.status == 200 and b.status == 200, (a, b)
    ja, jb = a.json()["jobs"][0], b.json()["jobs"][0]
    assert ja["job_id"] != jb["job_id"]
    assert not ja.get("existing") and not jb.get("existing")
    again = kboxd.submit(BOB, static_reject("key-bob"), key="shared-key")
    assert again.status == 200 and again.json()["jobs"][0]["existing"] is True, again
    assert again.json()["jobs"][0]["job_id"] == jb["job_id"]
    for secret, job in ((ALICE, ja), (BOB, jb)):
        kboxd.wait_done(secret, job["job_id"])


# -- how many jobs -----------------------------------------------------------------------------------

def test_per_token_limit_429_while_other_tokens_get_through(kboxd):
    held = kboxd.submit(ALICE, held_job("alice-held"), key="alice-held")
    assert held.status == 200, held
    alice_job = held.json()["jobs"][0]["job_id"]
    try:
        assert kboxd.token_info(ALICE)["token_jobs_in_flight"] == 1
        # alice is at her limit of 1: refused, whatever the endpoint.
        body = assert_retry_later(kboxd.post("/v1/evaluate", static_reject("alice-over"), ALICE))
        assert "token alice has no room for 1 more job (limit 1 in flight" in body["message"], body
        assert_retry_later(kboxd.submit(ALICE, static_reject("alice-over-async")))
        # Resubmitting the held job's key is that job again, not a second one.
        again = kboxd.submit(ALICE, held_job("alice-held"), key="alice-held")
        assert again.status == 200, again
        assert again.json()["jobs"][0] == dict(again.json()["jobs"][0], job_id=alice_job,
                                                existing=True)
        assert kboxd.token_info(ALICE)["token_jobs_in_flight"] == 1
        # bob has no limit of his own: he gets in, up to the daemon's bound of 2.
        reply = kboxd.post("/v1/evaluate", static_reject("bob-through"), BOB)
        assert reply.status == 200 and reply.json()["status"] == "REJECTED", reply
        bob_held = kboxd.submit(BOB, held_job("bob-held"))
        assert bob_held.status == 200, bob_held
        bob_job = bob_held.json()["jobs"][0]["job_id"]
        info = kboxd.token_info(BOB)
        assert info["jobs_in_flight"] == 2 and info["token_jobs_in_flight"] == 1, info
        body = assert_retry_later(kboxd.post("/v1/evaluate", static_reject("bob-over"), BOB))
        assert "kboxd has no room for 1 more job (limit 2 in flight)" in body["message"], body
    finally:
        alice_done = kboxd.wait_done(ALICE, alice_job)
    assert alice_done["result"]["status"] == "TIMEOUT", alice_done
    # Done means alice's place is back, at once.
    assert kboxd.token_info(ALICE)["token_jobs_in_flight"] == 0
    reply = kboxd.post("/v1/evaluate", static_reject("alice-after"), ALICE)
    assert reply.status == 200 and reply.json()["status"] == "REJECTED", reply
    kboxd.wait_done(BOB, bob_job)
    assert kboxd.token_info(BOB)["jobs_in_flight"] == 0


def test_finished_and_refused_jobs_give_their_place_back(kboxd):
    # alice's limit is 1: each of these only gets in if the one before gave
    # its place back (sync and async, rejected jobs included).
    for i in range(3):
        reply = kboxd.post("/v1/evaluate", static_reject("sync-%d" % i), ALICE)
        assert reply.status == 200, reply
        sub = kboxd.submit(ALICE, static_reject("async-%d" % i))
        assert sub.status == 200, sub
        kboxd.wait_done(ALICE, sub.json()["jobs"][0]["job_id"])
    # A batch over her limit could never fit: refused whole with 400 naming the
    # limit (not a retryable 429), and it holds nothing afterwards.
    batch = {"jobs": [{"request": static_reject("batch-a")}, {"request": static_reject("batch-b")}]}
    body = assert_error(kboxd.post("/v1/jobs", batch, ALICE), 400, "INVALID_ARGUMENT")
    assert body["field"] == "jobs" and "max_concurrent_jobs is 1" in body["message"], body
    # A batch refused for a key conflict holds nothing either.
    first = kboxd.submit(ALICE, static_reject("conflict-1"), key="conflict")
    kboxd.wait_done(ALICE, first.json()["jobs"][0]["job_id"])
    conflict = kboxd.post("/v1/jobs", {"jobs": [
        {"idempotency_key": "conflict-new", "request": static_reject("conflict-new")},
        {"idempotency_key": "conflict", "request": static_reject("conflict-2")}]}, ALICE)
    assert_error(conflict, 409, "ALREADY_EXISTS")
    assert kboxd.token_info(ALICE)["token_jobs_in_flight"] == 0
    assert kboxd.token_info(ALICE)["jobs_in_flight"] == 0


# -- reloads ---------------------------------------------------------------------------------------------

def wait_for(condition, what):
    deadline = time.monotonic() + RELOAD_TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for " + what)
        time.sleep(0.05)  # a poll interval, not a wait for time to pass


def test_sighup_reload_adds_and_revokes_tokens(kboxd):
    kboxd.write_tokens("alice %s 1\ncarol %s 2\n" % (ALICE, CAROL))
    kboxd.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: kboxd.get("/v1/info", CAROL).status == 200, "carol's token to work")
    assert kboxd.token_info(CAROL)["token_max_concurrent_jobs"] == 2
    assert_unauthenticated(kboxd.get("/v1/info", BOB), 'Bearer error="invalid_token"')
    assert kboxd.get("/v1/info", ALICE).status == 200
    assert "reloaded 2 API tokens from %s: alice carol" % kboxd.tokens_path in kboxd.stderr()


def test_a_bad_file_on_reload_keeps_the_old_tokens(kboxd):
    kboxd.write_tokens("alice %s 1\n\nbroken %s many\n" % (ALICE, BROKEN_RELOAD_SECRET))
    kboxd.proc.send_signal(signal.SIGHUP)
    expected = ("ERROR: tokens not reloaded, keeping the 2 in force: %s line 3: "
                "max_concurrent_jobs must be a whole number" % kboxd.tokens_path)
    wait_for(lambda: expected in kboxd.stderr(), "the reload error in kboxd's log")
    assert kboxd.get("/v1/info", CAROL).status == 200
    assert kboxd.get("/v1/info", ALICE).status == 200
    assert kboxd.get("/healthz").status == 200  # and kboxd is still up


def test_no_secret_ever_reaches_the_log(kboxd):
    log = kboxd.stderr()
    assert "alice" in log  # names may be logged
    for secret in ALL_SECRETS:
        assert secret not in log


def test_startup_with_a_bad_tokens_file_fails_clearly(root):
    d = Kboxd(root, "bad", tokens="alice %s 1\nbob short\n" % ALICE)
    rc = d.proc.wait(timeout=START_TIMEOUT_S)
    log = d.stderr()
    assert rc != 0 and d.port is None, log
    assert "config api_tokens_file: %s line 2: the secret must be at least 16 characters" \
        % d.tokens_path in log, log
    assert ALICE not in log and "short" not in log
