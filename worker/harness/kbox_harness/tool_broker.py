"""Runs Triton's ptxas for the candidate's process, which may not exec.

The run stage's strict seccomp filter forbids fork and exec, but Triton runs
`ptxas` as a subprocess when a kernel is first launched. Before the filter is
installed (and before any client code runs) the harness forks this broker: a
child process, not bound by the strict filter, that owns one end of an
AF_UNIX socket pair and serves requests from the harness process:

  {"op": "ptxas", "argv": [...], "cwd": str|null, "timeout": float|null}
      runs ptxas; argv[0] must be the configured ptxas (same realpath); every
      other argument must be an option (starting with "-") or a path inside
      $TRITON_CACHE_DIR, $TMPDIR or /tmp. Reply: returncode, stdout, stderr.
  {"op": "triton_build", ...}
      builds Triton's launcher / utility module (C source Triton generated,
      under the same directories) with Triton's own compiler command line,
      whose flags the request cannot choose. Reply: path of the built library.

Anything else is refused. The candidate can reach the socket (it shares the
process), so the checks here, in a process the candidate cannot patch, are the
boundary; the shim installed in Triton's modules is only plumbing. The broker
exits when the socket closes (the harness exited) or its parent dies.

Wire format: each message is a 4-byte big-endian length and a UTF-8 JSON
object; bytes (stdout, stderr) travel as base64.
"""
import base64
import ctypes
import json
import os
import re
import signal
import socket
import struct
import subprocess
import threading

MAX_REQUEST_BYTES = 1 << 20
MAX_OUTPUT_BYTES = 16 << 20
DEFAULT_TIMEOUT_S = 300.0
_PR_SET_PDEATHSIG = 1


class BrokerRefused(PermissionError):
    """The broker refused a request (not ptxas, or a path outside the job's dirs)."""


class BrokerError(OSError):
    """The broker is gone or answered nonsense: kbox's fault."""


def allowed_roots(env=None):
    """Realpaths of the directories request paths may name."""
    env = os.environ if env is None else env
    roots = []
    for d in (env.get("TRITON_CACHE_DIR"), env.get("TMPDIR"), "/tmp"):
        if d:
            real = os.path.realpath(d)
            if real not in roots and real != "/":
                roots.append(real)
    return roots


def _inside(path, roots):
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _resolve(arg, cwd):
    return os.path.realpath(os.path.join(cwd, arg) if cwd else arg)


# ptxas options that read further arguments from a file: refused, so that
# every argument ptxas sees is one checked here.
_REFUSED_OPTIONS = ("--options-file", "-optf")


def check_ptxas(argv, cwd, ptxas_real, roots):
    """None if the request may run, else why not (one line)."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "argv must be a non-empty list of strings"
    if "\0" in "".join(argv):
        return "argv holds a NUL byte"
    if os.path.realpath(argv[0]) != ptxas_real:
        return "only ptxas may run, not %s" % argv[0]
    if cwd is not None:
        if not isinstance(cwd, str) or not _inside(os.path.realpath(cwd), roots):
            return "working directory %r is outside the job's directories" % (cwd,)
    for arg in argv[1:]:
        if arg.startswith("-"):
            name, eq, value = arg.partition("=")
            if name in _REFUSED_OPTIONS:
                return "option %s is not allowed" % name
            if eq and "/" in value and not _inside(_resolve(value, cwd), roots):
                return "option %s names a path outside the job's directories" % name
            continue
        if not _inside(_resolve(arg, cwd), roots):
            return "argument %r is outside the job's directories" % arg
    return None


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_LIB = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+:-]{0,127}$")


def check_build(req, roots):
    """None if a triton_build request may run, else why not. Triton's _build
    makes the compiler's command line itself (fixed flags; each directory is a
    single -I/-L argument), so only the names and the source's place matter."""
    name, src, srcdir = req.get("name"), req.get("src"), req.get("srcdir")
    if not isinstance(name, str) or not _NAME.match(name):
        return "bad module name"
    for what, path in (("source", src), ("source directory", srcdir)):
        if not isinstance(path, str) or "\0" in path or \
                not _inside(os.path.realpath(path), roots):
            return "%s %r is outside the job's directories" % (what, path)
    if not src.endswith(".c"):
        return "source must be a .c file"
    for key in ("library_dirs", "include_dirs"):
        dirs = req.get(key)
        if not isinstance(dirs, list):
            return "%s must be a list" % key
        for d in dirs:
            if d is None and key == "include_dirs":
                continue
            if not isinstance(d, str) or not d.startswith("/") or "\0" in d:
                return "%s entry %r is not an absolute path" % (key, d)
    libraries = req.get("libraries")
    if not isinstance(libraries, list):
        return "libraries must be a list"
    for lib in libraries:
        # Each becomes the single argument -l<lib>: a name, never an option or a path.
        if not isinstance(lib, str) or not _LIB.match(lib):
            return "library %r is not allowed" % (lib,)
    return None


# -- wire format ------------------------------------------------------------------

def _recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _send(sock, obj):
    data = json.dumps(obj).encode("utf-8")
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv(sock, limit):
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > limit:
        raise ValueError("message of %d bytes" % n)
    data = _recv_exact(sock, n)
    if data is None:
        return None
    return json.loads(data.decode("utf-8"))


def _b64(data):
    return base64.b64encode(data[:MAX_OUTPUT_BYTES]).decode("ascii")


# -- the broker process --------------------------------------------------------------

class _Server(object):
    def __init__(self, sock, ptxas_real, roots):
        self.sock = sock
        self.ptxas_real = ptxas_real
        self.roots = roots

    def serve(self):
        while True:
            try:
                req = _recv(self.sock, MAX_REQUEST_BYTES)
            except (ValueError, OSError):
                return
            if req is None:
                return
            try:
                reply = self.handle(req)
            except Exception as e:  # never die on a bad request
                reply = {"error": "broker failed: %s: %s" % (type(e).__name__, e)}
            try:
                _send(self.sock, reply)
            except OSError:
                return

    def handle(self, req):
        if not isinstance(req, dict):
            return {"refused": "request must be an object"}
        op = req.get("op")
        timeout = req.get("timeout")
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or \
                not 0 < timeout <= DEFAULT_TIMEOUT_S:
            timeout = DEFAULT_TIMEOUT_S
        if op == "ptxas":
            argv, cwd = req.get("argv"), req.get("cwd")
            why = check_ptxas(argv, cwd, self.ptxas_real, self.roots)
            if why:
                return {"refused": why}
            try:
                r = subprocess.run([self.ptxas_real] + argv[1:], cwd=cwd,
                                   stdin=subprocess.DEVNULL, capture_output=True,
                                   timeout=timeout, close_fds=True)
            except subprocess.TimeoutExpired:
                return {"timeout": timeout}
            except OSError as e:
                return {"error": "cannot run ptxas: %s" % e}
            return {"returncode": r.returncode, "stdout": _b64(r.stdout),
                    "stderr": _b64(r.stderr)}
        if op == "triton_build":
            why = check_build(req, self.roots)
            if why:
                return {"refused": why}
            return self.triton_build(req)
        return {"refused": "unknown operation %r" % (op,)}

    def triton_build(self, req):
        import inspect
        from triton import knobs
        from triton.runtime import build
        knobs.build.impl = None  # this process's copy: build for real
        args = [req["name"], req["src"], req["srcdir"], list(req["library_dirs"]),
                list(req["include_dirs"]), list(req["libraries"])]
        if "ccflags" in inspect.signature(build._build).parameters:
            args.append([])
        try:
            return {"path": build._build(*args)}
        except subprocess.CalledProcessError as e:
            return {"returncode": e.returncode, "stdout": _b64(e.output or b""),
                    "stderr": _b64(e.stderr or b"")}


def _child_main(sock, ptxas_real, roots):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL),
                   ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    except Exception:
        pass
    keep = sock.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    _Server(sock, ptxas_real, roots).serve()


class Broker(object):
    """The harness's side: start() forks the broker; requests go one at a time."""

    def __init__(self, ptxas_path, roots=None):
        self.ptxas_path = ptxas_path
        self.ptxas_real = os.path.realpath(ptxas_path)
        self.roots = allowed_roots() if roots is None else roots
        self.pid = None
        self._sock = None
        self._lock = threading.Lock()

    def start(self):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                parent.close()
                _child_main(child, self.ptxas_real, self.roots)
            except BaseException:
                code = 1
            os._exit(code)
        child.close()
        parent.set_inheritable(False)
        self.pid = pid
        self._sock = parent
        return self

    def is_ptxas(self, path):
        try:
            return os.path.realpath(os.fspath(path)) == self.ptxas_real
        except (TypeError, ValueError):
            return False

    def request(self, req):
        with self._lock:
            try:
                _send(self._sock, req)
                reply = _recv(self._sock, 4 * MAX_OUTPUT_BYTES)
            except (OSError, ValueError) as e:
                raise BrokerError("kbox tool broker failed: %s" % e)
        if not isinstance(reply, dict):
            raise BrokerError("kbox tool broker is gone")
        if "refused" in reply:
            raise BrokerRefused("kbox tool broker refused: %s" % reply["refused"])
        if "error" in reply:
            raise BrokerError("kbox tool broker: %s" % reply["error"])
        return reply

    def run_ptxas(self, argv, cwd=None, timeout=None):
        """(returncode, stdout bytes, stderr bytes); raises subprocess.TimeoutExpired."""
        reply = self.request({"op": "ptxas", "argv": [os.fspath(a) for a in argv],
                              "cwd": os.fspath(cwd) if cwd is not None else None,
                              "timeout": timeout})
        if "timeout" in reply:
            raise subprocess.TimeoutExpired(list(argv), reply["timeout"])
        return (int(reply["returncode"]), base64.b64decode(reply["stdout"]),
                base64.b64decode(reply["stderr"]))

    def triton_build(self, name, src, srcdir, library_dirs, include_dirs, libraries):
        """Triton's knobs.build.impl: builds in the broker; the library's path."""
        reply = self.request({"op": "triton_build", "name": name, "src": src, "srcdir": srcdir,
                              "library_dirs": list(library_dirs),
                              "include_dirs": list(include_dirs), "libraries": list(libraries)})
        if "path" in reply:
            return reply["path"]
        raise subprocess.CalledProcessError(
            int(reply.get("returncode", 1)), ["cc", src],
            base64.b64decode(reply.get("stdout", "")), base64.b64decode(reply.get("stderr", "")))

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self.pid:
            try:
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.pid = None
