"""kbox harness stage entry point.

Usage: python3 -s -B kbox_stage.py --spec SPEC.json --result-fd N
Runs the STAGE_COMPILE or STAGE_RUN named in the kbox.v1.StageSpec and writes
kbox.v1.HarnessEvent lines to fd N (see proto/kbox/v1/harness.proto).
"""
import os
import sys

# -s drops user site-packages; our own package lives next to this file.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from kbox_harness import stage  # noqa: E402

if __name__ == "__main__":
    stage.main()
