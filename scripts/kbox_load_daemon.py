"""A kboxd for scripts/kbox-load: started with a config and a tokens file in a
scratch directory (sandboxed, as the integration tests run it), or an address
given with --server. Standard library only."""
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

from kbox_config_text import sectioned

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Server(object):
    """Where kboxd answers, and (when this process started it) its pid."""

    def __init__(self, host, port, pid=None, https=False):
        self.host, self.port, self.pid, self.https = host, port, pid, https

    def connection(self, timeout):
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, token=None, timeout=120):
        """(status, headers dict lower-case, body bytes) on a fresh connection."""
        conn = self.connection(timeout)
        headers = {}
        if body is not None:
            headers["Content-Type"] = "application/json"
            body = json.dumps(body).encode("utf-8")
        if token:
            headers["Authorization"] = "Bearer " + token
        try:
            conn.request(method, path, body=body, headers=headers)
            res = conn.getresponse()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
        finally:
            conn.close()

    def metrics(self, token=None):
        """{series: value} of GET /metrics (one sample per line)."""
        status, _, body = self.request("GET", "/metrics", token=token)
        out = {}
        if status != 200:
            return out
        for line in body.decode("utf-8", "replace").splitlines():
            if line and not line.startswith("#"):
                series, _, value = line.rpartition(" ")
                try:
                    out[series] = float(value)
                except ValueError:
                    pass
        return out

    def rss_kib(self):
        """(VmRSS, VmHWM) of kboxd in KiB, when it runs here."""
        if not self.pid:
            return None, None
        try:
            with open("/proc/%d/status" % self.pid) as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
        except (OSError, KeyError, ValueError):
            return None, None


def parse_server(url):
    u = urllib.parse.urlparse(url)
    return Server(u.hostname, u.port or (443 if u.scheme == "https" else 80), https=u.scheme == "https")


class Daemon(object):
    """kboxd started from `bin_dir`, with `tokens` ({name: (secret, limit)})."""

    def __init__(self, bin_dir, tokens, config_text, flags=(), keep=False):
        self.dir = tempfile.mkdtemp(prefix="kbox-load-")
        self.keep = keep
        config = os.path.join(self.dir, "kbox.textproto")
        with open(config, "w") as f:
            f.write(sectioned(config_text))
        tokens_path = os.path.join(self.dir, "tokens")
        with open(tokens_path, "w") as f:
            for name, (secret, limit) in tokens.items():
                f.write("%s %s %s\n" % (name, secret, limit or ""))
        os.chmod(tokens_path, 0o600)
        self.stderr_path = os.path.join(self.dir, "kboxd.stderr")
        args = [os.path.join(bin_dir, "kboxd"), "--listen", "127.0.0.1:0",
                "--work-dir", os.path.join(self.dir, "work"), "--config", config,
                "--api-tokens-file", tokens_path] + list(flags)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                         stderr=err)
        port = self._ready_port(180)
        if port is None:
            self.stop()
            raise RuntimeError("kboxd did not start:\n" + self.stderr()[-4000:])
        self.server = Server("127.0.0.1", port, pid=self.proc.pid)

    def _ready_port(self, timeout):
        lines = queue.Queue()

        def reader():
            for line in iter(self.proc.stdout.readline, b""):
                lines.put(line)
            lines.put(None)

        threading.Thread(target=reader, daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                return None
            if line is None:
                return None
            text = line.decode("utf-8", "replace").strip()
            if "listening on" in text:
                return int(text.rsplit(":", 1)[1].strip("/"))
        return None

    def stderr(self):
        if getattr(self, "log", None) is not None:
            return self.log  # read before the directory went
        with open(self.stderr_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.keep:
            self.log = self.stderr()
            shutil.rmtree(self.dir, ignore_errors=True)
        return self.proc.returncode
