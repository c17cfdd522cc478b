#!/usr/bin/env python3
"""What built extensions import, and whether kbox's run stage would allow it.

Reads every ELF shared object given (or found under a directory given) the way
the judge does (worker/harness/kbox_harness/native_imports.py) and prints, per
library, its DT_NEEDED libraries and every undefined symbol, demangled, with
its category. Lines of imports that are not allowed start with "!" so that
`grep '^!'` lists exactly them; a summary line per library and a total close
the output. Use it on real builds (a GPU host's CUDA candidates) to check the
allowlists before the judge enforces them.

Usage: scripts/native_imports.py [--flagged] [--allow-static-libstdcxx] [--max-bytes N] PATH_OR_DIR...
Exit status: 0 when everything is allowed, 1 when anything is not (or a library
cannot be read), 2 on bad usage.
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "worker", "harness"))
from kbox_harness import native_imports as ni  # noqa: E402


def _libraries(paths, max_bytes):
    """(path, error) for every library to read, in the order given."""
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            try:
                scan = ni.find_libraries(path, max_bytes=max_bytes * 64)
            except ni.NativeImportError as e:
                yield path, str(e)
                continue
            for link, target in scan.symlinks:
                print("  symlink %s -> %s (not followed)" % (link, target))
            for skipped, reason in scan.skipped:
                if "not a shared object" not in reason:
                    print("  skipped %s: %s" % (skipped, reason))
            for lib in scan.libraries:
                yield lib, None
        else:
            yield path, None


def _report(path, args, totals):
    """Prints one library's imports; returns whether all are allowed."""
    try:
        info = ni.undefined_symbols(path, max_bytes=args.max_bytes)
        verdicts = ni.classify_symbols(info, args.allow_static_libstdcxx)
    except ni.NativeImportError as e:
        print("! unreadable  %s: %s" % (path, e))
        totals["unreadable"] += 1
        return False
    counts = collections.Counter(v.category for v in verdicts)
    print("== %s (%s, %d needed, %d undefined, %d interposable%s)" % (
        path, info.machine, len(info.needed), len(info.undefined), len(info.interposable),
        ", constructors" if info.constructors else ""))
    if not any(n.startswith("libstdc++") for n in info.needed) and info.libstdcxx_objects:
        print("   note: libstdc++ is linked into this library (no DT_NEEDED libstdc++.so.6); its own "
              "imports are %s" % ("allowed (--allow-static-libstdcxx)" if args.allow_static_libstdcxx
                                 else "judged like the candidate's"))
    width = max(len(c) for c in ni.CATEGORIES)
    for v in sorted(verdicts, key=lambda v: (v.category == ni.ALLOWED, v.kind, v.readable)):
        if v.category == ni.ALLOWED and (args.flagged or v.kind == "interposable"):
            continue
        mark = " " if v.category == ni.ALLOWED else "!"
        print("%s %-*s %-12s %s  [%s]" % (mark, width, v.category, v.kind, v.readable, v.detail))
    totals.update(counts)
    totals["libraries"] += 1
    print("   summary: " + ", ".join("%s %d" % (c, counts.get(c, 0)) for c in ni.CATEGORIES))
    return all(v.category == ni.ALLOWED for v in verdicts)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", metavar="PATH_OR_DIR")
    parser.add_argument("--flagged", action="store_true", help="print only imports that are not allowed")
    parser.add_argument("--allow-static-libstdcxx", action="store_true",
                        help="allow the libc imports of a libstdc++ linked into the library (weaker)")
    parser.add_argument("--max-bytes", type=int, default=ni.DEFAULT_MAX_BYTES,
                        help="largest library read (default %(default)d)")
    args = parser.parse_args(argv)
    totals = collections.Counter()
    clean = True
    for path, error in _libraries(args.paths, args.max_bytes):
        if error is not None:
            print("! unreadable  %s: %s" % (path, error))
            totals["unreadable"] += 1
            clean = False
            continue
        clean = _report(path, args, totals) and clean
    print("total: %d libraries, %d unreadable; " % (totals["libraries"], totals["unreadable"]) +
          ", ".join("%s %d" % (c, totals.get(c, 0)) for c in ni.CATEGORIES))
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
