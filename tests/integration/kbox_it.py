"""Shared helpers of the kboxd integration tests (stdlib only).

Paths:
  KBOX_BIN_DIR     directory holding kboxd and kbox (default <repo>/build/bin)
  KBOX_SHARED_DIR  the shared test material (default <repo>/../shared); the
                   corpus is read from its corpus/ folder and never copied.
"""
import contextlib
import glob
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import http.client
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CASES = os.path.join(HERE, "cases")
PYTHON = "/usr/bin/python3"
EXAMPLE_DIR = os.path.join(REPO, "docs", "examples", "bias_relu")

# Job parameters shared by conftest.py (which submits) and the tests (which check).
# Job limits for a suite's own kboxd (own_kboxd) on a small host; a suite
# appends its own lines.
sys.path.insert(0, os.path.join(REPO, "scripts"))
from kbox_config_text import sectioned  # noqa: E402  (kboxd's config file from name: value lines)

SMALL_JOBS_CONFIG = """\
default_time_limit_s: 60
max_time_limit_s: 120
job_memory_bytes: 3221225472
job_scratch_bytes: 1073741824
"""
SPIN_TIME_LIMIT_S = 10     # run-stage limit of the job that never returns
HONEST_SEED = "20240917"   # sent as a JSON string
# Every test kboxd but test_precompiled_header.py's skips the start-up build
# of the light header's PCH (~45 CPU-s and ~760 MB in its own work dir): a
# dozen suites start kboxd, and the PCH only changes how long a build takes.
NO_PCH = ["--no-precompiled-header"]
WRONG_SEED = 7             # sent as a JSON number


def bin_dir():
    return os.path.abspath(os.environ.get("KBOX_BIN_DIR") or os.path.join(REPO, "build", "bin"))


def shared_dir():
    return os.path.abspath(os.environ.get("KBOX_SHARED_DIR") or os.path.join(REPO, "..", "shared"))


def corpus_legit_dir():
    return os.path.join(shared_dir(), "corpus", "legit")


def corpus_cpu_cases():
    """Ids of the CPU cases in <shared>/corpus/legit, sorted."""
    return sorted(os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(corpus_legit_dir(), "*_cpu", "expect.json")))


# The corpora the suites run: <shared>/corpus, and <shared>/corpus-new (cases
# of the same layout that an earlier kbox got wrong; they join corpus once
# kbox gets them right, and the suites run both meanwhile).
CORPORA = ("corpus", "corpus-new")


def _cases(kind):
    """{case id: its folder} of the CPU cases of `kind` in every corpus."""
    out = {}
    for corpus in CORPORA:
        for p in glob.glob(os.path.join(shared_dir(), corpus, kind, "*_cpu", "expect.json")):
            out[os.path.basename(os.path.dirname(p))] = os.path.dirname(p)
    return out


def corpus_reward_hack_cases():
    """Ids of the CPU cases in the corpora's reward-hacks (hacks and false-positive traps), sorted."""
    return sorted(_cases("reward-hacks"))


def corpus_escape_cases():
    """Ids of the CPU cases in the corpora's escapes, sorted."""
    return sorted(_cases("escapes"))


def run_stage_rules():
    """The run stage's rule ids that reject under strict (kbox-policy rules
    lists the catalogue): every run.* but the reported-only ones."""
    import subprocess
    listing = subprocess.run([os.path.join(bin_dir(), "kbox-policy"), "rules"], check=True,
                             capture_output=True, text=True).stdout
    reported_only = {"run.below-physical-floor", "run.degenerate-problem", "run.rounding-allowance"}
    return sorted(line.split()[0] for line in listing.splitlines()
                  if line.startswith("run.") and line.split()[0] not in reported_only)


# corpus-new's CPU hack that no run-stage defence needs to stop: its library
# path is taken only for inputs that arrive as views at an offset, and every
# call's inputs are laid out as a trial's (fresh tensors at offset 0), so it
# computes with its own kernel on every call; the static rules reject it.
NOTHING_TO_STOP_AT_RUN_TIME = {"h11_timed_call_detect_cpu"}


def dynamic_corpus_new_cases():
    """corpus-new's CPU reward hacks that the run stage must stop by itself."""
    return [c for c in corpus_new_cases("reward-hacks") if c not in NOTHING_TO_STOP_AT_RUN_TIME]


def case_dir(kind, case):
    """The folder of case `case` of `kind` (reward-hacks, escapes) in whichever corpus holds it."""
    return _cases(kind)[case]


def corpus_new_cases(kind):
    """Ids of the CPU cases of `kind` in corpus-new alone, sorted."""
    return sorted(os.path.basename(os.path.dirname(p))
                  for p in glob.glob(os.path.join(shared_dir(), "corpus-new", kind, "*_cpu", "expect.json")))


def case_path(name):
    return os.path.join(CASES, name)


def read(path):
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


def marker_line(path, marker):
    """1-based line of the first line of `path` containing `marker`."""
    with open(path, "r", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if marker in line:
                return n
    raise AssertionError("marker %r not found in %s" % (marker, path))


# -- HTTP -----------------------------------------------------------------------

class Reply(object):
    def __init__(self, status, headers, body, wall_s):
        self.status = status
        self.headers = headers      # dict, lower-case names
        self.body = body            # bytes
        self.wall_s = wall_s

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "Reply(%d, %s)" % (self.status, self.text[:2000])


def request(port, method, path, body=None, content_type=None, timeout=60, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    hdrs = dict(headers or {})
    if content_type is not None:
        hdrs["Content-Type"] = content_type
    t0 = time.monotonic()
    try:
        conn.request(method, path, body=body, headers=hdrs)
        res = conn.getresponse()
        data = res.read()
        return Reply(res.status, {k.lower(): v for k, v in res.getheaders()}, data,
                     time.monotonic() - t0)
    finally:
        conn.close()


def post_json(port, payload, timeout=60, path="/v1/evaluate"):
    body = payload if isinstance(payload, (bytes, str)) else json.dumps(payload)
    if isinstance(body, str):
        body = body.encode("utf-8")
    return request(port, "POST", path, body, "application/json", timeout=timeout)


def raw_exchange(port, head, body_chunks=(), timeout=15):
    """Sends `head` then each chunk of `body_chunks` over one raw socket and
    returns (bytes the server sent back, the error that ended sending or None).
    The server may answer and close early; that is what these tests look for."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    send_error = None
    try:
        try:
            sock.sendall(head)
            for chunk in body_chunks:
                sock.sendall(chunk)
        except OSError as e:  # reset or broken pipe after the server gave up
            send_error = e
        received = b""
        try:
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                received += data
        except OSError:
            pass
        return received, send_error
    finally:
        sock.close()


def status_of(raw):
    """HTTP status code at the start of a raw response, or None."""
    if not raw.startswith(b"HTTP/1."):
        return None
    try:
        return int(raw.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def json_of(raw):
    return json.loads(raw.split(b"\r\n\r\n", 1)[1].decode("utf-8"))


def closed_port():
    """A local TCP port nobody listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# -- escape traps ----------------------------------------------------------------

DAEMON_SECRET = "kbox-it-daemon-secret-%d" % os.getpid()
NETWORK_PORT = 47631  # The port esc_network_connect_cpu connects to.
TOKEN_FILE = "/etc/kbox/token"


class EscapeTraps(object):
    """Host-side bait for the escape cases, and what they did to it."""

    def __init__(self):
        self.marker = "kbox-it-marker-%d-%d" % (os.getpid(), int(time.time()))
        self.marker_dir = "/" + self.marker
        self.connections = 0
        self._listener = None
        self._created_token = False
        self._stop = threading.Event()

    def start(self):
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", NETWORK_PORT))
        self._listener.listen(8)
        self._listener.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()
        os.makedirs(self.marker_dir, exist_ok=True)
        if not os.path.exists(TOKEN_FILE):
            os.makedirs(os.path.dirname(TOKEN_FILE), exist_ok=True)
            with open(TOKEN_FILE, "w") as f:
                f.write("token " + self.marker + "\n")
            self._created_token = True

    def _accept(self):
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            conn.close()

    def stop(self):
        self._stop.set()
        if self._listener:
            self._listener.close()
        shutil.rmtree(self.marker_dir, ignore_errors=True)
        if self._created_token:
            os.remove(TOKEN_FILE)
            try:
                os.rmdir(os.path.dirname(TOKEN_FILE))
            except OSError:
                pass


def host_secret_lines(path):
    """Lines of a host file worth looking for in a leak (unreadable: none)."""
    try:
        with open(path, "r", errors="replace") as f:
            return [line.strip() for line in f if len(line.strip()) > 12]
    except OSError:
        return []


# -- processes ------------------------------------------------------------------

def processes_mentioning(path, exclude_pids=()):
    """(pid, cmdline) of live processes whose argv contains `path` or whose
    working directory lies inside it. `path` must be followed by "/" or end
    an argument: job ids share prefixes (job-1 is a prefix of job-10)."""
    mention = re.compile(re.escape(path.encode()) + rb"(/|\0|$)")
    hits = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude_pids:
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        try:
            cwd = os.readlink("/proc/%s/cwd" % entry)
        except OSError:
            cwd = ""
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = b"?"
        if state == b"Z":
            continue  # a zombie has exited; its parent just has not reaped it yet
        if mention.search(cmdline) or cwd == path or cwd.startswith(path + "/"):
            hits.append((int(entry), cmdline.replace(b"\0", b" ").decode("utf-8", "replace")))
    return hits


def describe(result):
    """Compact text of an EvaluateResult dict for assertion messages."""
    keep = {k: v for k, v in result.items() if k != "fingerprint"}
    return json.dumps(keep, indent=1)[:6000]


def read_ready_line(proc, timeout):
    """kboxd's "listening on" line (http or https) from proc's stdout within timeout seconds
    (a reader thread: readline alone would block past it), and the lines
    seen; (None, seen) when it exited or the time ran out."""
    lines = queue.Queue()

    def reader():
        for line in iter(proc.stdout.readline, b""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, seen
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            return None, seen
        if line is None:
            return None, seen
        text = line.decode("utf-8", "replace").strip()
        seen.append(text)
        if " listening on http://" in text or " listening on https://" in text:
            return text, seen


@contextlib.contextmanager
def own_kboxd(prefix, config_text, extra_args=(), start_timeout=120, precompiled_header=False,
              may_be_killed=False):
    """A kboxd of the test's own: its config written to a fresh directory,
    started on port 0, its stderr kept in <root>/kboxd.stderr. Yields
    (proc, port, root); on exit SIGTERM, and kboxd must exit 0 (or have been
    killed by the test, when may_be_killed). A kboxd that does not start
    fails the test with its stderr."""
    import pytest
    kboxd = os.path.join(bin_dir(), "kboxd")
    if not os.access(kboxd, os.X_OK):
        pytest.fail("kboxd not found at %s" % kboxd, pytrace=False)
    root = tempfile.mkdtemp(prefix=prefix)
    config = os.path.join(root, "kbox.textproto")
    with open(config, "w") as f:
        f.write(sectioned(config_text))
    stderr_path = os.path.join(root, "kboxd.stderr")

    def stderr():
        with open(stderr_path, errors="replace") as f:
            return f.read()

    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [kboxd, "--listen", "127.0.0.1:0", "--work-dir", os.path.join(root, "work"),
             "--config", config] + list(extra_args) + ([] if precompiled_header else NO_PCH),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
    line, _ = read_ready_line(proc, start_timeout)
    if not line:
        proc.kill()
        proc.wait()
        text = stderr()
        shutil.rmtree(root, ignore_errors=True)
        pytest.fail("kboxd did not start:\n" + text, pytrace=False)
    try:
        yield proc, int(line.strip().rsplit(":", 1)[1]), root
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        text = stderr()
        shutil.rmtree(root, ignore_errors=True)
    assert rc == 0 or (may_be_killed and rc == -signal.SIGKILL), \
        "kboxd exited with %s\n%s" % (rc, text[-4000:])
