"""An audit hook (PEP 578) that refuses dangerous operations to candidate code.

The harness calls install() in the candidate's process once everything is set
up, just before it imports the candidate module:

    audit.install(candidate_files, read_roots, write_roots, report)

From then on every audit event passes through one hook, which cannot be
removed. Events of interest are refused (PermissionError "kbox: ...", after
report(text) has been called once with a one-line description) when candidate
code is running, i.e. when a Python frame of the current thread comes from
candidate code:

  - its co_filename is one of `candidate_files` (also compared after realpath);
  - or it was named by a `compile()` / `code.__new__` (code.replace, CodeType)
    event raised while candidate code was running (exec of a string, compile
    under a forged file name, a code object renamed to look like torch's;
    importlib compiling a module's source is exempt). Once "<string>" is
    tainted so, every "<string>" frame (namedtuple, dataclass methods) counts;
  - or (written_code_is_candidate) it lies under a write root: a module the
    candidate wrote and imported. Names like "<frozen ...>" are never files;
  - or (new_threads_are_candidate) the thread did not exist at install time:
    Thread(target=os.system, ...) started by the candidate has no candidate
    frame of its own (nor would a harness thread started later).

Harness, torch and Triton code running without such a frame is unaffected.

Refused events (names checked against CPython 3.11's libpython/_ctypes; all
exist in 3.12 too):

  import of ctypes, _ctypes, subprocess, _posixsubprocess, socket, _socket, ssl,
      _ssl, multiprocessing, _multiprocessing, _posixshmem, pty,
      asyncio.subprocess, urllib.request, http.client (and ctypes.*,
      multiprocessing.*). The "import" event fires only for modules not yet in
      sys.modules; importing an already loaded module is the static checker's
      (py.process, py.network), and using it is caught by the events below.
  processes: subprocess.Popen, os.system, os.exec, os.posix_spawn, os.fork,
      os.forkpty, pty.spawn (os.spawn*/popen go through fork/exec/Popen).
  signals: os.kill, os.killpg, signal.pthread_kill.
  native code: every "ctypes." event (dlopen, dlsym, dlsym/handle, call_function,
      addressof, cdata, cdata/buffer, string_at, wstring_at, PyObj_FromPtr,
      create_string_buffer, get_errno, set_errno, ...).
  network: every "socket." event (__new__, bind, connect, getaddrinfo,
      gethostbyname, sendto, sendmsg, ...). Sockets created before install (the
      tool broker's) keep working: send/recv raise no event.
  evaluator state: gc.get_objects, gc.get_referrers, gc.get_referents,
      sys._current_frames, sys._current_exceptions (other threads' frames and
      the harness's locals), sys.settrace, sys.setprofile (a tracer sees every
      harness frame), sys.addaudithook (a second hook would see every harness
      event and its arguments), and reading `tb_frame` of a traceback whose
      frame is this hook's (the caught PermissionError's traceback is the only
      way to reach the hook's frame and closure; f_back is not audited, tb_frame
      and f_code are).
  files: "open" (builtin open, io.open_code, os.open) reading outside
      read_roots + write_roots or writing (mode with w/a/x/+, or O_WRONLY/O_RDWR/
      O_CREAT/O_TRUNC/O_APPEND) outside write_roots; os.listdir, os.scandir,
      os.getxattr, os.listxattr outside the readable roots; os.remove,
      os.rename, os.rmdir, os.mkdir, os.symlink (the link), os.link (both),
      os.chmod, os.chown, os.truncate, os.utime, os.setxattr, os.removexattr,
      shutil.rmtree, shutil.move, shutil.chown, tempfile.mkstemp,
      tempfile.mkdtemp, the destination of shutil.copyfile/copymode/copystat/
      copytree/unpack_archive/make_archive outside write_roots (their sources
      must be readable). Integer paths (file descriptors) are allowed. Paths
      are resolved like the kernel does, relative to the current directory,
      following symlinks (a realpath of our own, see _make_realpath). Path
      objects other than str, bytes and pathlib's own classes are refused
      without being looked at (their __fspath__ could answer differently when
      open() asks again).

read_roots must hold everything torch/Triton read lazily while called from
candidate code (the Python prefix and site-packages, the job directory, the
Triton and extension caches); set sys.dont_write_bytecode (or make
__pycache__ writable) or a lazy import under a candidate frame reports a
refused .pyc write (importlib swallows the error).

Tamper resistance: everything the hook uses (sys._getframe, os.lstat, the
frozensets, report, even builtins such as type) is bound in install()'s closure,
so rebinding module attributes afterwards (audit._DENIED_IMPORTS = ...,
os.path.realpath = ..., builtins.isinstance = ...) changes nothing. The hook
never runs candidate-controlled code (no repr/__fspath__/__eq__ on objects
whose exact type is not a builtin str/bytes/int/tuple/list), since code run
inside the hook could otherwise hide behind its re-entrancy rule: a nested
event is allowed only if the hook's own frame is reached before any candidate
frame when walking the stack (so report() may open files, without recursion).

Known gaps (defence in depth; seccomp/landlock and the static checker are the
boundaries): os.open(..., dir_fd=) is resolved against the cwd (the "open"
event carries no dir_fd; the os.remove/rename/mkdir/... events do, and are
resolved against /proc/self/fd/N); a symlink swapped by another thread between
the check and the open (TOCTOU); code objects from marshal.loads, or made by
driving importlib's loaders by hand, keep whatever file name they carry; a
builtin registered as a callback (atexit.register(os.system, ...),
weakref.finalize) runs later with no candidate frame on the stack.

Overhead (measured by hand: id(x) in a timeit loop, with and without the hook):
an event that is not of interest costs ~135 ns with this hook against ~65 ns
for a no-op Python hook (/usr/bin/python3 3.11, dev box), and ~270 ns, the
same as a no-op hook, on the GPU host (venv Python 3.12). An event of interest
with no candidate frame costs ~1-3 us plus ~0.5 us per stack frame (each
f_code read raises a nested event that returns at once). With torch 2.11 on
an H100, CUDA ops, nn modules and a Triton kernel compiled through
triton_prep's broker from candidate code drew no report.
"""
import os
import sys
import threading

_installed = []  # one entry once install() has run


def _make_realpath(getcwd, lstat, readlink, fsencoding):
    """A realpath for str/bytes paths built only from the given C functions.

    Resolves like the kernel: relative to getcwd(), component by component,
    following symlinks (at most 40); components that do not exist are kept as
    they are and a later '..' removes them. Returns an absolute str."""
    decode = bytes.decode
    str_type = str
    type_ = type
    reversed_ = reversed
    S_IFMT, S_IFLNK = 0o170000, 0o120000

    def realpath(path):
        if type_(path) is not str_type:
            path = decode(path, fsencoding, "surrogateescape")
        if not path.startswith("/"):
            path = getcwd() + "/" + path
        pending = path.split("/")
        pending.reverse()
        resolved = []
        links = 0
        while pending:
            name = pending.pop()
            if not name or name == ".":
                continue
            if name == "..":
                if resolved:
                    resolved.pop()
                continue
            here = "/" + "/".join(resolved + [name])
            try:
                mode = lstat(here).st_mode
            except (OSError, ValueError):
                mode = 0
            if (mode & S_IFMT) != S_IFLNK or links >= 40:
                resolved.append(name)
                continue
            links += 1
            target = readlink(here)
            if target.startswith("/"):
                resolved = []
            pending.extend(reversed_(target.split("/")))
        return "/" + "/".join(resolved)

    return realpath


# Module names whose first import is refused (exact names, and below the packages).
_DENIED_IMPORTS = frozenset((
    "ctypes", "_ctypes",                              # native calls, raw memory
    "subprocess", "_posixsubprocess", "pty",          # processes
    "multiprocessing", "_multiprocessing", "_posixshmem",
    "asyncio.subprocess",
    "socket", "_socket", "ssl", "_ssl",               # network
    "urllib.request", "http.client",
))
_DENIED_PACKAGES = frozenset(("ctypes", "multiprocessing"))

# Events refused outright.
_DENIED_EVENTS = frozenset((
    # processes (os.spawn*, os.popen, posix_spawnp go through these)
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.fork",
    "os.forkpty", "pty.spawn",
    # signals to the harness, kboxd's worker or anything else
    "os.kill", "os.killpg", "signal.pthread_kill",
    # the evaluator's state: every object, other threads' frames, tracers, hooks
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "sys._current_frames", "sys._current_exceptions",
    "sys.settrace", "sys.setprofile", "sys.addaudithook",
))
# Event name prefixes refused outright (both 7 characters: one slice, one lookup).
_DENIED_PREFIXES = frozenset(("ctypes.", "socket."))

# File events: event -> ((index of a path, "r" or "w", index of its dir_fd or
# -1), ...). "r": must lie under a read or write root; "w": under a write root.
# Arguments as CPython 3.11/3.12 raise them.
_FILE_EVENTS = {
    "os.listdir": ((0, "r", -1),),
    "os.scandir": ((0, "r", -1),),
    "os.getxattr": ((0, "r", -1),),
    "os.listxattr": ((0, "r", -1),),
    "os.remove": ((0, "w", 1),),                      # path, dir_fd
    "os.rename": ((0, "w", 2), (1, "w", 3)),          # src, dst, src_dir_fd, dst_dir_fd
    "os.rmdir": ((0, "w", 1),),                       # path, dir_fd
    "os.mkdir": ((0, "w", 2),),                       # path, mode, dir_fd
    "os.symlink": ((1, "w", 2),),                     # src, dst, dir_fd
    "os.link": ((0, "w", 2), (1, "w", 3)),            # a hard link would carry an outside file in
    "os.chmod": ((0, "w", 2),),                       # path, mode, dir_fd
    "os.chown": ((0, "w", 3),),                       # path, uid, gid, dir_fd
    "os.truncate": ((0, "w", -1),),
    "os.utime": ((0, "w", 3),),                       # path, times, ns, dir_fd
    "os.setxattr": ((0, "w", -1),),
    "os.removexattr": ((0, "w", -1),),
    "shutil.rmtree": ((0, "w", 1),),                  # path, dir_fd
    "shutil.move": ((0, "w", -1), (1, "w", -1)),
    "shutil.chown": ((0, "w", -1),),
    "shutil.copyfile": ((0, "r", -1), (1, "w", -1)),
    "shutil.copymode": ((0, "r", -1), (1, "w", -1)),
    "shutil.copystat": ((0, "r", -1), (1, "w", -1)),
    "shutil.copytree": ((0, "r", -1), (1, "w", -1)),
    "shutil.make_archive": ((0, "w", -1), (2, "r", -1)),  # base_name, format, root_dir
    "shutil.unpack_archive": ((0, "r", -1), (1, "w", -1)),
    "tempfile.mkstemp": ((0, "w", -1),),
    "tempfile.mkdtemp": ((0, "w", -1),),
}

# Events whose file name marks new code as the candidate's.
_TAINT_EVENTS = frozenset(("compile", "code.__new__"))

_REPORT_MAX = 200


def install(candidate_files, read_roots, write_roots, report, *,
            new_threads_are_candidate=True, written_code_is_candidate=True):
    """Adds the audit hook (once per process; a second call raises RuntimeError).

    candidate_files: absolute paths of the candidate's source files.
    read_roots, write_roots: directories; write roots are readable too.
    report(text): called once per refused event, before PermissionError is
    raised; its exceptions are swallowed.
    """
    if _installed:
        raise RuntimeError("kbox: the audit hook is already installed")
    if not callable(report):
        raise TypeError("report must be callable")

    # Everything below is bound now, in this closure.
    type_ = type
    str_, bytes_, int_, tuple_, list_ = str, bytes, int, tuple, list
    len_ = len
    join = str.join
    str_repr, bytes_repr, int_repr = str.__repr__, bytes.__repr__, int.__repr__
    type_name = type.__dict__["__name__"].__get__
    getframe = sys._getframe
    get_ident = threading.get_ident
    Exception_, BaseException_ = Exception, BaseException
    PermissionError_ = PermissionError
    decode = bytes.decode
    fsencoding = sys.getfilesystemencoding()
    readlink = os.readlink
    realpath = _make_realpath(os.getcwd, os.lstat, readlink, fsencoding)
    report_max = _REPORT_MAX
    write_flags = (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND)

    def norm_roots(roots):
        out = []
        for r in roots:
            r = realpath(os.fspath(r))
            out.append(r if r.endswith("/") else r + "/")
        return tuple_(out)

    w_roots = norm_roots(write_roots)
    r_roots = norm_roots(read_roots) + w_roots
    cand = set()
    for p in candidate_files:
        p = os.fspath(p)
        cand.add(p)
        cand.add(realpath(p))
    cand = frozenset(cand)
    denied_imports = _DENIED_IMPORTS
    denied_packages = _DENIED_PACKAGES
    denied_events = _DENIED_EVENTS
    denied_prefixes = _DENIED_PREFIXES
    file_events = dict(_FILE_EVENTS)  # values are tuples of tuples: immutable
    taint_events = _TAINT_EVENTS
    interest = frozenset(denied_events | frozenset(file_events) | taint_events
                         | {"import", "open", "object.__getattr__"})
    initial_threads = frozenset([get_ident()] + [t.ident for t in threading.enumerate()])
    check_threads = bool(new_threads_are_candidate)
    check_written = bool(written_code_is_candidate)
    tainted = set()    # file names of code made while candidate code ran
    written = {}       # co_filename -> lies under a write root (cache)

    path_types = {}    # exact pathlib class -> (its __fspath__, its __str__) at install
    try:
        import pathlib
        for cls in (pathlib.PurePath, pathlib.PurePosixPath, pathlib.Path, pathlib.PosixPath):
            path_types[cls] = (cls.__fspath__, cls.__str__)
    except Exception_:
        pass

    # importlib's compile() of a source file it is importing (no .pyc): not
    # code the candidate named. (A candidate driving a loader by hand can still
    # give code any file's name: see the gaps above.)
    import importlib
    import_machinery = frozenset([importlib.__file__])
    import_compile = source_to_code = None
    try:
        bs = sys.modules["_frozen_importlib"]
        bse = sys.modules["_frozen_importlib_external"]
        import_compile = bs._call_with_frames_removed.__code__
        source_to_code = bse.SourceLoader.source_to_code.__code__
    except Exception_:
        pass

    CLEAN, CANDIDATE, INSIDE = 0, 1, 2

    def under_write_root(fn):
        r = written.get(fn)
        if r is None:
            r = not fn.startswith("<") and (realpath(fn) + "/").startswith(w_roots)
            if len_(written) < 65536:
                written[fn] = r
        return r

    def who(f):
        """Walks from frame f outwards: INSIDE if this hook's frame comes
        before any candidate frame, CANDIDATE if a candidate frame does."""
        while f is not None:
            c = f.f_code  # raises object.__getattr__ (name f_code): returns at once
            if c is hook_code:
                return INSIDE
            fn = c.co_filename
            if type_(fn) is not str_ or fn in cand or fn in tainted:
                return CANDIDATE
            if check_written and under_write_root(fn):
                return CANDIDATE
            f = f.f_back
        if check_threads and get_ident() not in initial_threads:
            return CANDIDATE
        return CLEAN

    def importer(f):
        """CANDIDATE when the first frame outside the import machinery
        (importlib's bootstrap, importlib.import_module) is candidate code."""
        while f is not None:
            c = f.f_code
            fn = c.co_filename
            if type_(fn) is str_ and (fn.startswith("<frozen importlib") or fn in import_machinery):
                f = f.f_back
                continue
            if c is hook_code:
                f = f.f_back
                continue
            if type_(fn) is not str_ or fn in cand or fn in tainted:
                return CANDIDATE
            if check_written and under_write_root(fn):
                return CANDIDATE
            return CLEAN
        return CLEAN

    def show(x, depth=0):
        """repr of a str/bytes/int/None/True/False or a short list/tuple of
        them; the type's name for anything else (never runs its code)."""
        t = type_(x)
        if t is str_:
            return str_repr(x[:120])
        if t is bytes_:
            return bytes_repr(x[:120])
        if t is int_:
            return int_repr(x)
        if x is None or x is True or x is False:
            return ("None", "True", "False")[0 if x is None else (1 if x is True else 2)]
        if (t is tuple_ or t is list_) and depth == 0:
            return "[" + join(", ", [show(e, 1) for e in x[:6]]) + (", ...]" if len_(x) > 6 else "]")
        return "<" + type_name(t) + ">"

    def as_path(p, dir_fd=None):
        """The resolved path for p (relative to the directory open as dir_fd if
        that is an fd, else to the cwd); None for a file descriptor; False if
        p is not something we may look at."""
        t = type_(p)
        if t is int_:
            return None
        if t is not str_ and t is not bytes_:
            m = path_types.get(t)
            if m is None or t.__fspath__ is not m[0] or t.__str__ is not m[1]:
                return False
            p = m[0](p)  # caches the text in p: open() asks again, gets the same
            if type_(p) is not str_:
                return False
        if type_(p) is bytes_:
            p = decode(p, fsencoding, "surrogateescape")
        if type_(dir_fd) is int_ and dir_fd >= 0 and not p.startswith("/"):
            try:
                d = readlink("/proc/self/fd/" + int_repr(dir_fd))
            except (OSError, ValueError):
                return False
            if not d.startswith("/") or d.endswith(" (deleted)"):
                return False
            p = d + "/" + p
        return realpath(p)

    def inside(path, roots):
        return (path + "/").startswith(roots)

    def check_open(args):
        path, mode = args[0], args[1]
        flags = args[2] if len_(args) > 2 else 0
        rp = as_path(path)
        if rp is None:
            return None
        writing = (type_(flags) is not int_ or (flags & write_flags) != 0
                   or (mode is not None and (type_(mode) is not str_
                                             or "w" in mode or "a" in mode
                                             or "x" in mode or "+" in mode)))
        if rp is not False and inside(rp, w_roots if writing else r_roots):
            return None
        if mode is None:
            return "open(%s, flags=%s)" % (show(path), show(flags))
        return "open(%s, %s)" % (show(path), show(mode))

    def check_file_event(event, args):
        n = len_(args)
        for i, kind, fd_i in file_events[event]:
            if i >= n:
                continue
            p = args[i]
            rp = as_path("." if p is None else p, args[fd_i] if 0 <= fd_i < n else None)
            if rp is None:
                continue
            if rp is False or not inside(rp, w_roots if kind == "w" else r_roots):
                return "%s(%s)" % (event, join(", ", [show(a) for a in args[:2]]))
        return None

    def verdict(event, args, frame):
        """None to allow, else the report text."""
        if event == "import":
            name = args[0]
            if type_(name) is not str_:
                return "import of %s" % show(name)
            if name in denied_imports or name.partition(".")[0] in denied_packages:
                # Only when the candidate's own code asked for it: a library
                # the candidate calls may import these lazily (torch's
                # cpp_extension pulls in ctypes.wintypes through setuptools).
                # Using them from candidate code is refused by the events
                # below whoever imported them.
                if importer(frame) == CANDIDATE:
                    return "import of " + name[:150]
            return None
        if event == "open":
            return check_open(args)
        if event in file_events:
            return check_file_event(event, args)
        if event in taint_events:
            if event == "compile" and frame is not None and frame.f_code is import_compile:
                up = frame.f_back
                if up is not None and up.f_code is source_to_code:
                    return None  # importlib compiling a module's source file
            fn = args[1] if len_(args) > 1 else None
            if type_(fn) is bytes_:
                fn = decode(fn, fsencoding, "surrogateescape")
            if type_(fn) is not str_:
                return "%s with a file name of type %s" % (event, show(fn))
            tainted.add(fn)
            return None
        if event == "object.__getattr__":
            tb = args[0]
            try:
                frame = tb.tb_frame  # a real traceback (checked by the caller)
                if frame is not None and frame.f_code is hook_code:
                    return "access to the audit hook's frame"
            except Exception_:
                pass
            return None
        if len_(args):
            return "%s(%s)" % (event, join(", ", [show(a) for a in args[:2]]))
        return event

    traceback_type = None
    try:
        raise ValueError
    except ValueError as e:
        traceback_type = type_(e.__traceback__)

    def hook(event, args):
        if event not in interest:
            # "ctypes." and "socket." both have their dot at [6]: a 1-character
            # slice (a cached str) first, the 7-character one only then.
            if event[6:7] != "." or event[:7] not in denied_prefixes:
                return
        if event == "object.__getattr__":
            # Only tb_frame of a real traceback can lead to this hook's frame.
            if (len_(args) != 2 or type_(args[1]) is not str_ or args[1] != "tb_frame"
                    or type_(args[0]) is not traceback_type):
                return
        frame = getframe(1)
        if who(frame) != CANDIDATE:
            return
        try:
            text = verdict(event, args, frame)
        except Exception_ as e:  # fail closed: candidate code is running
            text = "%s (check failed: %s)" % (event, type_name(type_(e)))
        if text is None:
            return
        if len_(text) > report_max:
            text = text[:report_max - 3] + "..."
        try:
            report(text)
        except BaseException_:
            pass
        raise PermissionError_("kbox: %s is not allowed in candidate code" % text)

    hook_code = hook.__code__
    _installed.append(True)
    sys.addaudithook(hook)
