"""kbox_harness.audit: the audit hook that refuses dangerous events to candidate code.

An audit hook cannot be removed, so every scenario runs in a fresh interpreter:
a driver script (harness code, outside every root) installs the hook with a
candidate file from tmp_path, imports the candidate as the harness does, calls
its run(ctx) and then runs harness-side code of its own; it prints JSON.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(REPO, "worker", "harness")
PYTHON = sys.executable

sys.path.insert(0, HARNESS)
from kbox_harness import audit  # noqa: E402  (only _make_realpath is used in-process)

DRIVER = r'''
import importlib.util, json, os, sys, traceback
sys.path.insert(0, {harness!r})
for _m in {preload!r}:
    __import__(_m)
from kbox_harness import audit

CTX = {ctx!r}
REPORTS = []
def report(text):
    REPORTS.append(text)
{report_extra}
out = {{"reports": REPORTS, "pid": os.getpid()}}
audit.install(CTX["candidate_files"], CTX["read_roots"], CTX["write_roots"], report, **{kw!r})
try:
    spec = importlib.util.spec_from_file_location("kbox_candidate", CTX["candidate"])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kbox_candidate"] = mod
    spec.loader.exec_module(mod)
    out["result"] = mod.run(CTX) if hasattr(mod, "run") else None
    out["ok"] = True
except BaseException as e:
    out["ok"] = False
    out["exc"] = type(e).__name__
    out["msg"] = str(e)
out["n_reports_after_candidate"] = len(REPORTS)
# Harness code after the candidate: not candidate code.
def harness_side():
{after}
try:
    out["after"] = harness_side()
except BaseException as e:
    out["after"] = "%s: %s" % (type(e).__name__, e)
print("AUDIT-RESULT " + json.dumps(out, default=repr))
'''


class Box(object):
    """tmp_path laid out as: cand/ (the candidate), ro/ (read root), rw/ (write
    root), outside/ (neither), driver.py at the top (harness code)."""

    def __init__(self, tmp_path):
        self.root = os.path.realpath(str(tmp_path))
        for d in ("cand", "ro", "rw", "outside"):
            os.makedirs(os.path.join(self.root, d))
        self.cand = os.path.join(self.root, "cand", "candidate.py")
        self.ro = os.path.join(self.root, "ro")
        self.rw = os.path.join(self.root, "rw")
        self.outside = os.path.join(self.root, "outside")
        with open(os.path.join(self.ro, "data.txt"), "w") as f:
            f.write("readable")
        with open(os.path.join(self.outside, "secret.txt"), "w") as f:
            f.write("secret")

    def run(self, candidate, after="return None", preload=(), report_extra="", **kw):
        with open(self.cand, "w") as f:
            f.write(textwrap.dedent(candidate))
        # The interpreter's own files are readable (lazy imports read them).
        py_roots = sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, HARNESS})
        ctx = {
            "candidate": self.cand, "candidate_files": [self.cand],
            "read_roots": [self.ro, os.path.dirname(self.cand)] + py_roots,
            "write_roots": [self.rw], "ro": self.ro, "rw": self.rw,
            "outside": self.outside,
        }
        script = DRIVER.format(harness=HARNESS, preload=list(preload), ctx=ctx, kw=kw,
                               report_extra=textwrap.dedent(report_extra),
                               after=textwrap.indent(textwrap.dedent(after), "    "))
        path = os.path.join(self.root, "driver.py")
        with open(path, "w") as f:
            f.write(script)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        env.pop("PYTHONPATH", None)
        p = subprocess.run([PYTHON, "-S", path], cwd=self.root, env=env, capture_output=True,
                           text=True, timeout=120)
        for line in p.stdout.splitlines():
            if line.startswith("AUDIT-RESULT "):
                out = json.loads(line[len("AUDIT-RESULT "):])
                out["stderr"] = p.stderr
                return out
        raise AssertionError("driver failed (rc %d):\n%s\n%s" % (p.returncode, p.stdout, p.stderr))


@pytest.fixture
def box(tmp_path):
    return Box(tmp_path)


def _denied(out, report):
    """run() caught one PermissionError per attempt and returned the messages."""
    assert out["ok"], out
    assert report in out["reports"], out
    return out


def test_import_subprocess_denied_for_candidate_allowed_for_harness(box):
    out = box.run("""
        def run(ctx):
            try:
                import subprocess
            except PermissionError as e:
                return str(e)
            return "imported"
    """, after="""
        import subprocess
        return subprocess.__name__
    """)
    assert out["result"] == "kbox: import of subprocess is not allowed in candidate code"
    assert out["reports"] == ["import of subprocess"]
    assert out["after"] == "subprocess"


def test_denied_import_in_module_body_fails_the_import(box):
    out = box.run("import socket\n")
    assert not out["ok"] and out["exc"] == "PermissionError"
    assert out["msg"].startswith("kbox: import of socket")
    assert out["reports"] == ["import of socket"]


def test_submodules_of_denied_packages(box):
    out = box.run("""
        def run(ctx):
            try:
                import multiprocessing.pool
            except PermissionError as e:
                return str(e)
    """)
    assert out["reports"] == ["import of multiprocessing.pool"]


def test_ctypes_cdll_denied(box):
    out = box.run("""
        import ctypes  # already loaded by the harness: no import event
        def run(ctx):
            try:
                ctypes.CDLL(None)
            except PermissionError as e:
                return str(e)
            return "loaded"
    """, preload=["ctypes"])
    assert out["result"].startswith("kbox: ctypes.dlopen")
    assert len(out["reports"]) == 1 and out["reports"][0].startswith("ctypes.dlopen")


def test_os_system_denied_and_catchable(box):
    out = box.run("""
        import os
        def run(ctx):
            try:
                return os.system("true")
            except PermissionError as e:
                return "caught: " + str(e)
    """)
    assert out["ok"]
    assert out["result"] == "caught: kbox: os.system(b'true') is not allowed in candidate code"
    assert out["reports"] == ["os.system(b'true')"]


def test_socket_denied(box):
    out = box.run("""
        import socket
        def run(ctx):
            socket.socket()
    """, preload=["socket"], after="""
        import socket
        s = socket.socket()
        s.close()
        return "harness socket ok"
    """)
    assert not out["ok"] and out["exc"] == "PermissionError"
    assert out["reports"][0].startswith("socket.__new__")
    assert out["after"] == "harness socket ok"


def test_gc_get_objects_denied(box):
    out = _denied(box.run("""
        import gc
        def run(ctx):
            try:
                gc.get_objects()
            except PermissionError as e:
                return str(e)
    """), "gc.get_objects(-1)")
    assert out["result"].startswith("kbox: gc.get_objects")


def test_read_outside_roots_denied_inside_allowed(box):
    out = box.run("""
        import os
        def run(ctx):
            res = {}
            res["ro"] = open(os.path.join(ctx["ro"], "data.txt")).read()
            for name, path in (("etc", "/etc/hostname"),
                               ("outside", os.path.join(ctx["outside"], "secret.txt"))):
                try:
                    open(path).read()
                    res[name] = "read"
                except PermissionError as e:
                    res[name] = str(e)
            return res
    """, after="""
        with open(os.path.join(CTX["outside"], "secret.txt")) as f:
            return f.read()
    """)
    assert out["result"]["ro"] == "readable"
    assert out["result"]["etc"] == "kbox: open('/etc/hostname', 'r') is not allowed in candidate code"
    assert out["result"]["outside"].startswith("kbox: open(")
    assert out["reports"][0] == "open('/etc/hostname', 'r')"
    assert len(out["reports"]) == 2
    assert out["after"] == "secret"  # the harness is not restricted


def test_write_inside_write_roots_allowed_outside_denied(box):
    out = box.run("""
        import os
        def run(ctx):
            res = {}
            p = os.path.join(ctx["rw"], "out.txt")
            with open(p, "w") as f:
                f.write("x")
            res["rw"] = open(p).read()  # write roots are readable
            os.remove(p)
            for name, fn in (
                    ("ro_write", lambda: open(os.path.join(ctx["ro"], "data.txt"), "a")),
                    ("os_open", lambda: os.open(os.path.join(ctx["outside"], "n"),
                                                os.O_WRONLY | os.O_CREAT)),
                    ("remove", lambda: os.remove(os.path.join(ctx["outside"], "secret.txt"))),
                    ("mkdir", lambda: os.mkdir(os.path.join(ctx["ro"], "d")))):
                try:
                    fn()
                    res[name] = "done"
                except PermissionError as e:
                    res[name] = str(e)
            return res
    """)
    res = out["result"]
    assert res["rw"] == "x"
    for name in ("ro_write", "os_open", "remove", "mkdir"):
        assert res[name].startswith("kbox: "), res
    assert "flags=" in res["os_open"]
    assert len(out["reports"]) == 4
    assert os.path.exists(os.path.join(box.outside, "secret.txt"))
    assert not os.path.exists(os.path.join(box.outside, "n"))


def test_symlink_out_of_write_root_is_followed(box):
    out = box.run("""
        import os
        def run(ctx):
            link = os.path.join(ctx["rw"], "link")
            os.symlink(os.path.join(ctx["outside"], "secret.txt"), link)
            try:
                return open(link).read()
            except PermissionError as e:
                return str(e)
    """)
    assert out["result"].startswith("kbox: open(")
    assert len(out["reports"]) == 1


def test_report_is_called_before_raising_and_its_errors_are_swallowed(box):
    out = box.run("""
        import os
        def run(ctx):
            try:
                os.kill(os.getpid(), 0)
            except PermissionError as e:
                return str(e)
    """, report_extra="""
        def report(text):
            REPORTS.append(text)
            raise ValueError("report broke")
    """)
    assert out["result"] == "kbox: os.kill(%d, 0) is not allowed in candidate code" % out["pid"]
    assert out["reports"] == ["os.kill(%d, 0)" % out["pid"]]


def test_report_may_itself_do_denied_things_without_recursion(box):
    # report() runs while the candidate's frame is on the stack; its own open
    # outside the roots must not be refused (nor report again).
    out = box.run("""
        import os
        def run(ctx):
            try:
                os.system("true")
            except PermissionError as e:
                return str(e)
    """, report_extra="""
        def report(text):
            REPORTS.append(text)
            with open(os.path.join(CTX["outside"], "log.txt"), "a") as f:
                f.write(text + "\\n")
    """)
    assert out["result"].startswith("kbox: os.system")
    assert out["reports"] == ["os.system(b'true')"]
    with open(os.path.join(box.outside, "log.txt")) as f:
        assert f.read() == "os.system(b'true')\n"


def test_second_install_raises(box):
    out = box.run("def run(ctx):\n    return 1\n", after="""
        try:
            audit.install([], [], [], print)
        except RuntimeError as e:
            return str(e)
    """)
    assert out["after"] == "kbox: the audit hook is already installed"


def test_tampering_with_module_globals_changes_nothing(box):
    out = box.run("""
        import builtins, os, posixpath, sys
        audit = sys.modules["kbox_harness.audit"]
        for name in list(vars(audit)):
            v = getattr(audit, name)
            if isinstance(v, (frozenset, dict)):
                setattr(audit, name, type(v)())
            elif callable(v) and not name.startswith("__"):
                setattr(audit, name, lambda *a, **k: None)
        audit._installed = []
        audit._REPORT_MAX = 0
        os.path.realpath = lambda p, **k: ctx_ro
        posixpath.abspath = lambda p: ctx_ro
        posixpath.realpath = lambda p, **k: ctx_ro
        ctx_ro = None

        def run(ctx):
            global ctx_ro
            ctx_ro = os.path.join(ctx["ro"], "data.txt")
            res = []
            for fn in (lambda: open("/etc/hostname").read(),
                       lambda: os.system("true"),
                       lambda: __import__("subprocess")):
                try:
                    fn()
                    res.append("allowed")
                except PermissionError as e:
                    res.append(str(e))
            return res
    """)
    assert out["ok"], out
    assert [r.split("(")[0].split(" of ")[0] for r in out["result"]] == [
        "kbox: open", "kbox: os.system", "kbox: import"], out
    assert len(out["reports"]) == 3


def test_the_hook_frame_is_out_of_reach(box):
    # The caught PermissionError's traceback ends in the hook's frame; its
    # tb_frame is refused to the candidate (own frames are fine).
    out = box.run("""
        import os
        def run(ctx):
            try:
                os.system("true")
            except PermissionError as e:
                tb = e.__traceback__
            mine = tb.tb_frame.f_code.co_name
            while tb.tb_next is not None:
                tb = tb.tb_next
            try:
                tb.tb_frame
                return "reached the hook"
            except PermissionError as e:
                return [mine, str(e)]
    """)
    assert out["result"] == [
        "run", "kbox: access to the audit hook's frame is not allowed in candidate code"]
    assert out["reports"][-1] == "access to the audit hook's frame"


def test_path_objects_are_not_asked_for_their_path(box):
    # open() and os.open() convert path objects before raising the event, but
    # an event can carry any object (sys.audit from the candidate, or a future
    # event): the hook never calls __fspath__ (that would run candidate code
    # inside the hook); pathlib's own classes are read, anything else refused.
    out = box.run("""
        import os, pathlib, sys
        CALLS = []
        class Sneaky(object):
            def __fspath__(self):
                CALLS.append(1)
                return "/etc/hostname"
        def run(ctx):
            res = [pathlib.Path(ctx["ro"], "data.txt").read_text()]
            sys.audit("open", pathlib.Path(ctx["ro"], "data.txt"), "r", 0)  # allowed
            for fn in (lambda: sys.audit("open", Sneaky(), "r", 0),
                       lambda: os.open(Sneaky(), os.O_RDONLY)):
                try:
                    fn()
                except PermissionError as e:
                    res.append(str(e))
            res.append(len(CALLS))
            return res
    """, preload=["pathlib"])
    res = out["result"]
    assert res[:2] == ["readable", "kbox: open(<Sneaky>, 'r') is not allowed in candidate code"]
    assert res[2].startswith("kbox: open('/etc/hostname', flags="), res
    assert res[3] == 1, res  # only os.open's own conversion


def test_code_with_forged_file_names_stays_candidate_code(box):
    # Functions the candidate compiled under a torch-like name (or renamed with
    # code.replace) and handed over are still its own when the harness calls them.
    out = box.run("""
        import types
        HAND_BACK = []
        ns = {}
        exec(compile("import os\\ndef f():\\n    return os.system('true')\\n",
                     "/usr/lib/python3/dist-packages/torch/fake.py", "exec"), ns)
        HAND_BACK.append(ns["f"])
        g = lambda: __import__("os").system("true")
        HAND_BACK.append(types.FunctionType(g.__code__.replace(co_filename="/usr/lib/other.py"),
                                            globals()))
    """, after="""
        res = []
        for f in sys.modules["kbox_candidate"].HAND_BACK:
            try:
                f()
                res.append("allowed")
            except PermissionError as e:
                res.append(str(e))
        return res
    """)
    assert out["after"] == ["kbox: os.system(b'true') is not allowed in candidate code"] * 2, out


def test_code_written_by_the_candidate_is_candidate_code(box):
    out = box.run("""
        import os, sys
        def run(ctx):
            with open(os.path.join(ctx["rw"], "helper.py"), "w") as f:
                f.write("import os\\ndef f():\\n    return os.system('true')\\n")
            sys.path.insert(0, ctx["rw"])
            import helper
            return None
    """, after="""
        try:
            sys.modules["helper"].f()
            return "allowed"
        except PermissionError as e:
            return str(e)
    """)
    assert out["ok"], out
    assert out["after"] == "kbox: os.system(b'true') is not allowed in candidate code"


@pytest.mark.parametrize("untrusted", [True, False])
def test_threads_started_after_install(box, untrusted):
    out = box.run("""
        import threading
        R = []
        def run(ctx):
            t = threading.Thread(target=exec, args=(
                "import os\\ntry:\\n    os.kill(os.getpid(), 0); R.append('ran')\\n"
                "except PermissionError as e:\\n    R.append(str(e))\\n", {"R": R}))
            t.start()
            t.join()
            return R
    """, new_threads_are_candidate=untrusted)
    if untrusted:
        assert out["result"][0].startswith("kbox: os.kill("), out
    else:
        # exec's compile ran with no candidate frame on that thread's stack.
        assert out["result"] == ["ran"], out


def test_harness_code_is_unaffected(box):
    out = box.run("def run(ctx):\n    return 'fine'\n", preload=["ctypes"], after="""
        import ctypes, gc, subprocess
        gc.get_objects()
        ctypes.CDLL(None)
        with open(os.path.join(CTX["outside"], "w.txt"), "w") as f:
            f.write("ok")
        return subprocess.run(["true"]).returncode
    """)
    assert out["result"] == "fine" and out["after"] == 0 and out["reports"] == []


def test_own_realpath_matches_os_path_realpath(tmp_path):
    root = os.path.realpath(str(tmp_path))
    os.makedirs(os.path.join(root, "a", "b"))
    os.symlink(os.path.join(root, "a", "b"), os.path.join(root, "abs"))
    os.symlink("a/b", os.path.join(root, "rel"))
    os.symlink("../..", os.path.join(root, "a", "b", "up"))
    os.symlink("loop2", os.path.join(root, "loop1"))
    os.symlink("loop1", os.path.join(root, "loop2"))
    realpath = audit._make_realpath(os.getcwd, os.lstat, os.readlink,
                                    sys.getfilesystemencoding())
    cases = ["abs/x", "rel/x", "rel/up/a", "a/b/../b/./x", "missing/../a", "abs/up/rel",
             "rel/..", "/", "//", "/a/../../", ""]
    old = os.getcwd()
    os.chdir(root)
    try:
        for c in cases:
            for p in (c, os.path.join(root, c) if c and not c.startswith("/") else c):
                assert realpath(p) == os.path.realpath(p), p
                assert realpath(os.fsencode(p)) == os.path.realpath(p), p
        assert realpath("loop1").startswith(root)  # no hang on a symlink loop
    finally:
        os.chdir(old)


def test_dir_fd_relative_paths_resolve_against_the_directory(box):
    # shutil.rmtree and TemporaryDirectory remove through dir_fd; a path
    # relative to a dir_fd is not relative to the cwd.
    out = box.run("""
        import os, shutil, tempfile
        def run(ctx):
            os.chdir(ctx["rw"])
            with tempfile.TemporaryDirectory(dir=ctx["rw"]) as t:
                os.makedirs(os.path.join(t, "a", "b"))
                open(os.path.join(t, "a", "b", "f"), "w").close()
            open(os.path.join(ctx["rw"], "data.txt"), "w").close()
            fd = os.open(ctx["ro"], os.O_RDONLY)
            try:
                os.remove("data.txt", dir_fd=fd)
                return "removed"
            except PermissionError as e:
                return str(e)
    """)
    assert out["result"] == "kbox: os.remove('data.txt', %d) is not allowed in candidate code" % (
        int(out["reports"][0].split(", ")[1].rstrip(")")),), out
    assert len(out["reports"]) == 1
    assert os.path.exists(os.path.join(box.ro, "data.txt"))


def test_a_library_may_import_a_refused_module_lazily_but_not_use_it_for_the_candidate(box):
    # torch's cpp_extension imports ctypes.wintypes through setuptools when a
    # candidate first imports it: that import is the library's. Using the
    # module from candidate code is still refused.
    with open(os.path.join(box.ro, "lazylib.py"), "w") as f:
        f.write("def load():\n    import pty\n    return pty\n")
    out = box.run("""
        import sys
        def run(ctx):
            sys.path.insert(0, ctx["ro"])
            import lazylib
            pty = lazylib.load()
            try:
                pty.spawn(["true"])
            except PermissionError as e:
                return str(e)
            return "spawned"
    """)
    assert out["ok"], out
    assert out["result"] == "kbox: pty.spawn(['true']) is not allowed in candidate code", out
    assert "import of pty" not in out["reports"]
