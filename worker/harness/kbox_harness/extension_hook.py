"""Wraps torch.utils.cpp_extension.load_inline / load while the candidate loads.

The wrapper records the source strings (so a failed build's diagnostics can be
mapped back to candidate.py) and turns a failed build into ExtensionBuildFailed,
which aborts the candidate's import. The attributes are patched before the
candidate runs, so `from torch.utils.cpp_extension import load_inline` binds
the wrapper.

Compile stage (build=True): the real load_inline / load run and build.
Run stage (build=False): nothing is built. The run stage's strict seccomp
filter forbids fork and exec, and torch's loaders run ninja and the compiler
even when nothing changed, so the wrapper imports the library the compile
stage left in the extension's build directory instead; one that is not there
was not built in the compile stage (ExtensionNotBuilt).

With report_sources=True (compile stage, StageSpec.report_extension_sources),
the hook also keeps, for the compile report's extension_sources, the strings
each call received (the text of the files load() names, read from the job's
directories), the flags, and the candidate.py line the call came from, at most
MAX_REPORTED_SOURCE_BYTES of text in all. Those strings are copied into plain
str objects and the call goes on with the copies, so what is built is exactly
what is reported (a str subclass or a list subclass cannot show the hook one
text and the compiler another).

With light=True (compile stage), each build is first tried against kbox's
light <torch/extension.h> (light_headers.py); a failed try is forgotten and
the call builds exactly as the candidate asked. With a precompiled header
directory that passes its check (precompiled_header.py), that directory
replaces light_include: it holds a copy of the same header beside its .gch.
"""
import contextlib
import functools
import importlib.util
import inspect
import os
import stat
import subprocess
import sys

from . import light_headers, per_operator_headers, precompiled_header, sanitize, timing

_CUDA_FLAGS_ARG = "extra_cuda_cflags"
# Captured before any candidate code runs.
_getframe = sys._getframe
_realpath = os.path.realpath

# The compile report's bound on the text of extension_sources, in bytes.
MAX_REPORTED_SOURCE_BYTES = 1 << 20
_SOURCE_ARGS = ("cpp_sources", "cuda_sources", "sycl_sources")
_FLAG_ARGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")
_CUDA_FILES = (".cu", ".cuh")


class ExtensionBuildFailed(BaseException):
    """Private: a BaseException so that a candidate's `except Exception:`
    fallback does not swallow it (the failure is recorded anyway)."""


class ExtensionNotBuilt(ExtensionBuildFailed):
    """Run stage: the library the candidate asks for is not in the build directory."""


class InfraError(BaseException):
    """The build machinery itself is unusable (e.g. ninja missing): kbox's fault."""


def _is_str(value):
    # Not isinstance: an object can claim str as its __class__.
    return issubclass(type(value), str)


def _plain(value):
    """(value, texts): a str, or a list or tuple of them, as plain str objects
    (the argument the call goes on with) and the list of those strings.
    Anything else is left as it is (torch refuses it) with its str items."""
    if _is_str(value):
        text = str.__str__(value)
        return text, [text]
    if issubclass(type(value), (list, tuple)):
        # The storage, as torch's join reads it, not a subclass's __iter__.
        base = list if issubclass(type(value), list) else tuple
        items = [str.__str__(v) if _is_str(v) else v for v in base.__iter__(value)]
        return base(items), [v for v in items if type(v) is str]
    return value, _as_list(value)


def _plain_paths(value):
    """(value, paths) for load(sources=...): a path or a list or tuple of
    them (str or os.PathLike, turned into plain str once, so the build reads
    the files named here); other items are left as they are."""
    if issubclass(type(value), (list, tuple)):
        base = list if issubclass(type(value), list) else tuple
        items = list(base.__iter__(value))
    else:
        base, items = None, [value]
    paths = []
    for v in items:
        if isinstance(v, os.PathLike):
            try:
                v = os.fspath(v)
            except Exception:
                pass
        paths.append(str.__str__(v) if _is_str(v) else v)
    return (base(paths) if base is not None else paths[0]), paths


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    try:
        return [v for v in value if isinstance(v, str)]
    except TypeError:
        return []


class ExtensionHook(object):
    def __init__(self, build_dir="", build=True, light=False, pch_dir="", per_operator=False,
                 report_sources=False, candidate_path="", read_roots=()):
        self.build_dir = build_dir
        self.build = build    # False: load what the compile stage built, never build
        # Compile stage: keep every call's strings for the report (reported).
        self.report_sources = report_sources and build
        self.reported = []    # StageReport.extension_sources, one dict per call
        self._report_left = MAX_REPORTED_SOURCE_BYTES
        self._candidate_file = _realpath(candidate_path) if candidate_path else ""
        self._is_candidate = {}  # co_filename -> whether it is candidate.py
        # Where load(sources=[files]) may read: the job's own directories.
        self._read_roots = [_realpath(r) for r in read_roots if r]
        self.light = light and build  # try the light header first (compile stage)
        self.light_outcomes = []  # light_headers.USED / FELL_BACK, one per build
        self.light_ms = 0.0   # time spent in light builds that failed
        # Light tries of CUDA builds also use per-operator ATen headers.
        self.per_operator = self.light and per_operator
        self.per_op_outcomes = []  # per_operator_headers.USED / FELL_BACK
        # Where the light builds find <torch/extension.h>, and the compile
        # report's precompiled_header field ("" when no directory was named).
        self.light_include = light_headers.LIGHT_INCLUDE
        self.pch_state = ""
        self.pch_problem = ""  # why a named directory was not used
        if self.light and pch_dir:
            self.pch_problem = precompiled_header.check(pch_dir)
            if self.pch_problem:
                self.pch_state = precompiled_header.INVALID
            else:
                self.pch_state = precompiled_header.OFFERED
                self.light_include = pch_dir
        self.calls = []       # one dict per load/load_inline call, in order
        self.failure = None   # dict(call=..., output=str) for the first failed build
        self.not_built = None  # run stage: name of the first extension found missing
        self._module = None
        self._originals = {}
        self._versions = {}   # name -> (key of the last call, version), as torch counts

    def install(self):
        import torch.utils.cpp_extension as ce
        self._module = ce
        for name in ("load_inline", "load"):
            original = getattr(ce, name, None)
            if original is not None and not getattr(original, "_kbox_wrapped", False):
                self._originals[name] = original
                setattr(ce, name, self._wrap(original, name))
        return self

    @contextlib.contextmanager
    def _keep_unchanged_sources(self, ext_dir):
        """Compile stage only. Old torch (no _maybe_write, e.g. 1.13) rewrites
        main.cpp/cuda.cu on every load_inline, so ninja would rebuild what an
        earlier build in the same directory left. Restore the mtime of files
        whose content did not change just before ninja runs. Newer torch needs
        nothing, and the run stage never builds."""
        ce = self._module
        build = getattr(ce, "_write_ninja_file_and_build_library", None)
        if hasattr(ce, "_maybe_write") or build is None or not ext_dir or \
                not os.path.isdir(ext_dir):
            yield
            return
        before = {}
        for entry in os.listdir(ext_dir):
            path = os.path.join(ext_dir, entry)
            if entry.endswith((".cpp", ".cu")) and os.path.isfile(path):
                with open(path, "rb") as f:
                    before[path] = (f.read(), os.stat(path))

        @functools.wraps(build)
        def build_keeping_mtimes(*args, **kwargs):
            for path, (data, st) in before.items():
                try:
                    with open(path, "rb") as f:
                        if f.read() == data:
                            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
                except OSError:
                    pass
            return build(*args, **kwargs)

        ce._write_ninja_file_and_build_library = build_keeping_mtimes
        try:
            yield
        finally:
            ce._write_ninja_file_and_build_library = build

    def _ext_dir(self, name, build_directory):
        if build_directory:
            return str(build_directory)
        root = os.environ.get("TORCH_EXTENSIONS_DIR") or self.build_dir
        return os.path.join(root, name) if root and name else ""

    def _wrap(self, original, kind):
        try:
            sig = inspect.signature(original)
        except (TypeError, ValueError):
            sig = None

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            try:
                bound = sig.bind(*args, **kwargs)
            except Exception:
                if not self.build:
                    raise  # the TypeError torch would raise, without building
                return original(*args, **kwargs)  # let torch report the bad call
            a = bound.arguments
            if self.report_sources:
                try:
                    entry = self._record(kind, a, _getframe(1))
                except Exception as e:  # what the hook cannot read, kboxd does not vouch for
                    entry = {"kind": kind, "name": "", "line": 0, "cpp_sources": [],
                             "cuda_sources": [], "flags": [],
                             "unread_files": ["(arguments the hook could not read: %s)"
                                              % type(e).__name__]}
                self.reported.append(entry)
            if kind == "load_inline":
                sources = {key: _as_list(a.get(key))
                           for key in ("cpp_sources", "cuda_sources", "sycl_sources") if key in a}
            else:
                sources = {"sources": _as_list(a.get("sources"))}
            name = str(a.get("name", ""))
            call = {"kind": kind, "name": name, "sources": sources,
                    "ext_dir": self._ext_dir(name, a.get("build_directory"))}
            self.calls.append(call)
            if not self.build:
                return self._load_built(call, a, sig)
            if "verbose" in sig.parameters:
                # verbose=True sends ninja's output to fd 1 instead of the
                # exception: force capture so a failure's log can be mapped.
                a["verbose"] = False
            if self.light and light_headers.applicable(a, sig.parameters):
                built, module = self._build_light(original, bound, call, sig.parameters)
                if built:
                    return module
            try:
                with self._keep_unchanged_sources(call["ext_dir"]):
                    return original(*bound.args, **bound.kwargs)
            except subprocess.CalledProcessError as e:
                output = e.output
            except RuntimeError as e:
                text = str(e)
                if "Ninja is required" in text:
                    raise InfraError(text)
                if "Error building extension" not in text:
                    raise
                cause = e.__cause__
                output = getattr(cause, "output", None) or text
            except ImportError as e:
                # The library built but does not load (undefined symbol, ...).
                output = "%s: %s" % (type(e).__name__, e)
            if self.failure is None:
                self.failure = {"call": call, "output": sanitize.to_text(output)}
            raise ExtensionBuildFailed("extension %r failed to build" % name)

        wrapper._kbox_wrapped = True
        # functools.wraps leaves the original within reach (a build no hook
        # records); nothing of kbox's needs it.
        del wrapper.__wrapped__
        return wrapper

    # -- the compile report's extension_sources -----------------------------

    def _take(self, text, entry):
        """Whether `text` fits in what is left of the report's bound; flags
        `entry` truncated when it does not."""
        size = len(text.encode("utf-8", "replace"))
        if size > self._report_left:
            entry["truncated"] = True
            return False
        self._report_left -= size
        return True

    def _candidate_line(self, frame):
        """The line of the innermost frame of candidate.py's code, or 0."""
        while frame is not None:
            filename = frame.f_code.co_filename
            mine = self._is_candidate.get(filename)
            if mine is None:
                mine = bool(self._candidate_file) and _realpath(filename) == self._candidate_file
                self._is_candidate[filename] = mine
            if mine:
                return int(frame.f_lineno or 0)
            frame = frame.f_back
        return 0

    def _record(self, kind, a, frame):
        """One extension_sources entry; replaces the call's strings in `a` by
        plain copies, so the build gets exactly what is reported."""
        entry = {"kind": kind, "name": str.__str__(a["name"]) if _is_str(a.get("name")) else "",
                 "line": self._candidate_line(frame), "cpp_sources": [], "cuda_sources": [],
                 "flags": [], "unread_files": []}
        if kind == "load_inline":
            for key in _SOURCE_ARGS:
                if key in a:
                    a[key], texts = _plain(a[key])
                    into = entry["cuda_sources" if key == "cuda_sources" else "cpp_sources"]
                    into.extend(t for t in texts if self._take(t, entry))
        elif "sources" in a:
            a["sources"], paths = _plain_paths(a["sources"])
            for path in paths:
                text, why = self._read_file(path) if type(path) is str else (None, "not a path")
                if text is None:
                    entry["unread_files"].append("%s (%s)" % (os.path.basename(str(path)), why))
                elif self._take(text, entry):
                    cuda = path.endswith(_CUDA_FILES)
                    entry["cuda_sources" if cuda else "cpp_sources"].append(text)
        for key in _FLAG_ARGS:
            if key in a and a[key] is not None:
                a[key], flags = _plain(a[key])
                entry["flags"].extend(f for f in ("%s=%s" % (key, flag) for flag in flags)
                                      if self._take(f, entry))
        return entry

    def _read_file(self, path):
        """(text, None), or (None, why) for a file load() named that is not
        readable UTF-8 text inside the job's directories."""
        try:
            real = _realpath(path)  # relative names are the build's: from the cwd
        except (OSError, ValueError):
            return None, "not a path"
        if not any(real == root or real.startswith(root.rstrip(os.sep) + os.sep)
                   for root in self._read_roots):
            return None, "outside the job's directories"
        try:
            if not stat.S_ISREG(os.stat(real).st_mode):
                return None, "not a regular file"  # a FIFO would block the read
            with open(real, "rb") as f:
                data = f.read(self._report_left + 1)
        except OSError as e:
            return None, "cannot be read: %s" % (e.strerror or type(e).__name__)
        if len(data) > self._report_left:
            return None, "larger than kbox reads"
        try:
            return data.decode("utf-8"), None
        except UnicodeDecodeError:
            return None, "not UTF-8 text"

    def _build_light(self, original, bound, call, parameters):
        """(True, module) when the build with the light header succeeded and
        loaded; (False, None) otherwise, with torch's versioner as it was, so
        that the caller's full build is the one the candidate's call makes
        without this path. Objects a failed try left are rebuilt by ninja:
        their command lines (the -I) differ from the full build's.
        A build with CUDA sources also gets per-operator ATen headers in its
        nvcc commands (per_operator_headers.py) in the same try."""
        light_args = light_headers.with_light_include(bound.arguments, self.light_include)
        per_op = self._prepare_per_operator(call, bound.arguments, parameters)
        tails = [[self.light_include]]
        if per_op is not None:
            light_args[_CUDA_FLAGS_ARG] = list(bound.arguments.get(_CUDA_FLAGS_ARG) or []) + \
                per_op.flags
            tails.append(per_op.flags)
        t0 = timing.now_ms()
        try:
            with light_headers.versioned_as_asked(self._module, call["name"], tails) as undo:
                try:
                    with self._keep_unchanged_sources(call["ext_dir"]):
                        module = original(**light_args)
                except Exception:
                    # Any failure (compiler, link, import): the full build decides.
                    undo()
                    self.light_ms += timing.now_ms() - t0
                    self.light_outcomes.append(light_headers.FELL_BACK)
                    if per_op is not None:
                        self.per_op_outcomes.append(per_operator_headers.FELL_BACK)
                    return False, None
        finally:
            if per_op is not None:
                per_op.close()
        self.light_outcomes.append(light_headers.USED)
        if per_op is not None:
            self.per_op_outcomes.append(per_operator_headers.USED)
        return True, module

    def _prepare_per_operator(self, call, arguments, parameters):
        """per_operator_headers.Prepared for a call that builds CUDA sources and
        whose extra_cuda_cflags is a list of strings (anything else is left to
        torch), else None."""
        if not self.per_operator or _CUDA_FLAGS_ARG not in parameters:
            return None
        flags = arguments.get(_CUDA_FLAGS_ARG)
        if flags is not None and not (isinstance(flags, (list, tuple)) and
                                      all(isinstance(f, str) for f in flags)):
            return None
        texts = per_operator_headers.cuda_texts(call["sources"])
        if not texts:
            return None
        try:
            return per_operator_headers.prepare(texts)
        except OSError:
            return None  # no scratch space: the light try without it

    def per_operator_summary(self):
        """The compile report's cuda_per_operator_headers field: "" when no
        light try built CUDA sources with it."""
        if per_operator_headers.FELL_BACK in self.per_op_outcomes:
            return per_operator_headers.FELL_BACK
        return per_operator_headers.USED if self.per_op_outcomes else ""

    def light_summary(self):
        """The compile report's light_headers field: "" when nothing was built."""
        if not self.build:
            return ""
        if not self.light:
            return light_headers.OFF if self.calls else ""
        if light_headers.FELL_BACK in self.light_outcomes:
            return light_headers.FELL_BACK
        return light_headers.USED if self.light_outcomes else ""

    def _version(self, name, arguments):
        """torch's JIT_EXTENSION_VERSIONER: a second call with the same name but
        other sources or flags in one process builds `<name>_v1`, and so on."""
        key = repr(sorted((k, repr(v)) for k, v in arguments.items() if k != "verbose"))
        last = self._versions.get(name)
        version = 0 if last is None else (last[1] if last[0] == key else last[1] + 1)
        self._versions[name] = (key, version)
        return version

    def _load_built(self, call, a, sig):
        """Run stage: imports `<ext_dir>/<name>.so` as torch would after building it."""
        name = call["name"]
        defaults = {k: p.default for k, p in sig.parameters.items()}
        is_python_module = a.get("is_python_module", defaults.get("is_python_module", True))
        is_standalone = a.get("is_standalone", defaults.get("is_standalone", False))
        version = self._version(name, a)
        module_name = "%s_v%d" % (name, version) if version > 0 else name
        ext_dir = call["ext_dir"]
        if is_standalone:
            path = os.path.join(ext_dir, module_name)
        else:
            path = os.path.join(ext_dir, module_name + _lib_ext())
        if not ext_dir or not os.path.isfile(path):
            if self.not_built is None:
                self.not_built = name
            raise ExtensionNotBuilt("extension %s was not built in the compile stage" % name)
        if is_standalone:
            return path  # an executable: running it is forbidden here anyway
        try:
            return _import_library(self._module, module_name, ext_dir, path,
                                   bool(is_python_module))
        except (ImportError, OSError) as e:
            # Built, but does not load (undefined symbol, ...): as in the compile stage.
            if self.failure is None:
                self.failure = {"call": call, "output": "%s: %s" % (type(e).__name__, e)}
            raise ExtensionBuildFailed("extension %r failed to load" % name)


def _lib_ext():
    return ".pyd" if os.name == "nt" else ".so"


def _import_library(ce, module_name, ext_dir, path, is_python_module):
    """torch's own loader where it has one, importlib's machinery otherwise."""
    if not is_python_module:
        import torch
        torch.ops.load_library(path)
        return path  # what torch 2.x returns (1.13 returned None)
    loader = getattr(ce, "_import_module_from_library", None)
    if loader is not None:
        try:
            return loader(module_name, ext_dir, True)
        except TypeError:
            pass  # another signature: load it ourselves
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError("cannot load %s" % path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
