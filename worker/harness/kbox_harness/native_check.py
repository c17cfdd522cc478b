"""The judge's reading of the libraries the candidate's process may load
(the run.native-* rules of docs/anticheat.md).

Before the candidate's code loads, the judge reads every shared object the
compile stage left in the job's build directory and in the candidate's
Triton cache (native_imports.py reads them as the dynamic loader would,
memory-safe and bounded: the files are the candidate's) and reports what
each imports beyond tensor metadata, allocation, streams and errors. The
judge only reads them: it never loads code from a place the compile stage
or the candidate could write (docs/judge-boundary.md).
"""
import os

from . import errors, native_imports

# native_imports' categories -> the run-stage rules kboxd grades.
RULES = {
    native_imports.LIBRARY_COMPUTE: "run.native-library-compute",
    native_imports.DISPATCHER: "run.native-dispatcher",
    native_imports.FORBIDDEN_CALL: "run.native-forbidden-call",
    native_imports.THREAD: "run.native-thread",
}
UNREADABLE = "run.native-unreadable"

# Where the compile stage's compiler links libstdc++ into each library (the
# GPU image's g++ wrapper), the C runtime calls of libstdc++'s own objects sit
# in the library's imports: they are allowed beside those objects only
# (native_imports._STATIC_LIBSTDCXX); a shared libstdc++ keeps them refused.
_ALLOW_STATIC_LIBSTDCXX = True


def check(roots):
    """[(rule id, message)] for the libraries under `roots` (directories that
    may not exist). A library, a link or a tree kbox cannot read is
    run.native-unreadable: what kbox cannot read, it does not vouch for."""
    out = []
    for root in roots:
        if not root or not os.path.isdir(root):
            continue
        try:
            scan = native_imports.find_libraries(root)
        except native_imports.NativeImportError as e:
            out.append((UNREADABLE, "%s: %s" % (os.path.basename(root), errors.one_line(str(e)))))
            continue
        for path, target in scan.symlinks:
            out.append((UNREADABLE, "%s is a link (to %s), which kbox does not follow"
                        % (_short(path, root), errors.one_line(str(target))[:120])))
        for path in scan.libraries:
            out.extend(_library(path, root))
    return out


def _library(path, root):
    name = _short(path, root)
    try:
        info = native_imports.undefined_symbols(path)
        found = native_imports.classify_library(info, allow_static_libstdcxx=_ALLOW_STATIC_LIBSTDCXX)
    except native_imports.NativeImportError as e:
        return [(UNREADABLE, "%s: %s" % (name, errors.one_line(str(e))))]
    return [(RULES[f.category], "%s imports %s (%s)" % (
        name, ", ".join(f.examples[:4]) + (" and %d more" % (f.count - 4) if f.count > 4 else ""),
        "; ".join(f.details[:2]))) for f in found]


def _short(path, root):
    return os.path.relpath(path, root)[:200]
