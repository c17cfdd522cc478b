"""Builds the precompiled header of the light <torch/extension.h> (docs/compile-speed.md).

Usage: python3 -s -B kbox_pch.py --root <work_dir>/pch

Run by kboxd at start-up, outside any sandbox and never in a job: the PCH is
compiler input for every later compile stage, so only trusted code writes
it. Prints one JSON line last: {"dir": "<root>/<key>"} (exit 0) or
{"error": "..."} (exit 1).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kbox_harness import precompiled_header  # noqa: E402

if __name__ == "__main__":
    sys.exit(precompiled_header.main(sys.argv[1:]))
