"""Prepares Triton to work under the run stage's strict filter (no fork, no exec).

Triton starts processes in three places: `ldconfig -p` to find libcuda
(driver.py, once), the C compiler for its utility module and for each kernel's
launcher (runtime/build.py), and `ptxas` at each kernel's first launch
(backends/nvidia/compiler.py; `ptxas --version` in knobs.py / compiler.py).
Before the filter, warm() points Triton at the libcuda CUDA already loaded and
builds the utility module; install() routes ptxas and the launcher builds
through the tool broker by replacing the `subprocess` attribute of Triton's
modules with a shim that forwards ptxas and refuses anything else, and by
setting knobs.build.impl where Triton has it.
"""
import io
import os
import subprocess as _subprocess
import sys

from .tool_broker import BrokerRefused

# Modules whose `subprocess` attribute is replaced (those that exist).
SHIMMED_MODULES = ("triton.backends.nvidia.compiler", "triton.knobs", "triton.runtime.build",
                   "triton.backends.nvidia.driver", "triton.common.backend",
                   "triton.compiler.compiler")


def libcuda_dir(maps_path="/proc/self/maps"):
    """Directory of the libcuda.so.1 this process has mapped ('' if none)."""
    try:
        with open(maps_path, "r") as f:
            for line in f:
                parts = line.rstrip("\n").split(None, 5)
                path = parts[5].strip() if len(parts) == 6 else ""
                if path.startswith("/") and os.path.basename(path).startswith("libcuda.so"):
                    return os.path.dirname(path)
    except OSError:
        pass
    return ""


def warm():
    """Before the filter: everything of Triton's that runs a process once per job."""
    if not os.environ.get("TRITON_LIBCUDA_PATH"):
        d = libcuda_dir()
        if d:
            os.environ["TRITON_LIBCUDA_PATH"] = d  # no `ldconfig -p`
    import triton  # noqa: F401
    from triton.runtime import driver
    active = driver.active
    active.get_current_target()
    getattr(active, "utils", None)  # builds (or loads from the cache) cuda_utils


def _argv(args):
    if isinstance(args, (str, bytes, os.PathLike)):
        return [os.fsdecode(args)]
    return [os.fsdecode(a) for a in args]


class SubprocessShim(object):
    """Stands in for the `subprocess` module inside Triton's modules."""

    def __init__(self, broker, real=_subprocess):
        self._broker = broker
        self._real = real

    def __getattr__(self, name):
        # Constants and exception classes (PIPE, STDOUT, DEVNULL, CalledProcessError,
        # TimeoutExpired, CompletedProcess, ...) are the real module's.
        if name in ("Popen", "call", "getoutput", "getstatusoutput"):
            return self._refuse_fn(name)
        return getattr(self._real, name)

    def _refuse_fn(self, name):
        def refused(args, *a, **kw):
            raise BrokerRefused("kbox: %s(%s) cannot start a process under the run stage's "
                                "seccomp filter" % (name, _argv(args)[:1]))
        return refused

    def run(self, args, *, input=None, capture_output=False, timeout=None, check=False,
            stdin=None, stdout=None, stderr=None, cwd=None, shell=False, text=None,
            universal_newlines=None, encoding=None, errors=None, **ignored):
        argv = _argv(args)
        if shell or not argv or not self._broker.is_ptxas(argv[0]):
            raise BrokerRefused("kbox: only ptxas may run under the run stage's seccomp "
                                "filter, not %s" % (argv[:1] if not shell else "a shell"))
        if input is not None or stdin not in (None, self._real.DEVNULL):
            raise BrokerRefused("kbox: ptxas gets no standard input through the broker")
        if capture_output:
            stdout = stderr = self._real.PIPE
        rc, out, err = self._broker.run_ptxas(argv, cwd=cwd, timeout=timeout)
        if stderr == self._real.STDOUT:
            out, err = out + err, b""
            stderr = self._real.PIPE if stdout == self._real.PIPE else None
        captured_out = self._deliver(out, stdout, 1)
        captured_err = self._deliver(err, stderr, 2)
        if text or universal_newlines or encoding or errors:
            enc, errs = encoding or "utf-8", errors or "strict"
            captured_out = captured_out.decode(enc, errs) if captured_out is not None else None
            captured_err = captured_err.decode(enc, errs) if captured_err is not None else None
        if check and rc != 0:
            raise self._real.CalledProcessError(rc, args, captured_out, captured_err)
        return self._real.CompletedProcess(args, rc, captured_out, captured_err)

    def _deliver(self, data, target, default_fd):
        """Returns the bytes for PIPE; otherwise writes them where the child would have."""
        real = self._real
        if target == real.PIPE:
            return data
        if target == real.DEVNULL or not data:
            return None
        if target is None:
            fd = default_fd
        elif isinstance(target, int):
            fd = target
        else:
            try:
                target.flush()
            except (AttributeError, OSError, ValueError):
                pass
            try:
                fd = target.fileno()
            except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
                target.write(data if "b" in getattr(target, "mode", "b") else
                             data.decode("utf-8", "replace"))
                return None
        while data:
            data = data[os.write(fd, data):]
        return None

    def check_output(self, args, **kw):
        kw.setdefault("stdout", self._real.PIPE)
        return self.run(args, check=True, **kw).stdout

    def check_call(self, args, **kw):
        self.run(args, check=True, **kw)
        return 0


def install(broker):
    """Routes Triton's ptxas calls and launcher builds through `broker`.
    Returns the names of the modules patched (empty: global fallback used)."""
    shim = SubprocessShim(broker)
    patched = []
    for name in SHIMMED_MODULES:
        try:
            __import__(name)
        except Exception:
            continue
        module = sys.modules.get(name)
        if module is not None and getattr(module, "subprocess", None) is _subprocess:
            module.subprocess = shim
            patched.append(name)
    try:
        from triton import knobs
        if hasattr(knobs, "build") and hasattr(type(knobs.build), "impl"):
            knobs.build.impl = broker.triton_build
    except Exception:
        pass
    if "triton.backends.nvidia.compiler" not in patched:
        _install_global(broker, shim)
    return patched


def _install_global(broker, shim):
    """Unknown Triton layout: forward ptxas calls made through subprocess.run /
    check_output anywhere; everything else goes to the real functions."""
    for name in ("run", "check_output", "check_call"):
        original = getattr(_subprocess, name)

        def forward(args, *a, _original=original, _name=name, **kw):
            try:
                argv = _argv(args)
            except TypeError:
                argv = []
            if argv and not kw.get("shell") and broker.is_ptxas(argv[0]):
                return getattr(shim, _name)(args, *a, **kw)
            return _original(args, *a, **kw)

        setattr(_subprocess, name, forward)
