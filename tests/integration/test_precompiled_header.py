"""The light header's precompiled header end to end (docs/compile-speed.md),
against a kboxd of its own that builds it at start-up: one CPU job compiles
in the sandbox with it, while its candidate tries to replace it.

One PCH build (~45 CPU-s), one C++ build and one g++ -H of its main.cpp. Run alone with
  KBOX_BIN_DIR=$PWD/build/bin python3 -m pytest -q tests/integration/test_precompiled_header.py
"""
import glob
import os
import re
import subprocess
import time

import pytest

import kbox_it as it
from kbox_it import describe

START_TIMEOUT_S = 120
PCH_TIMEOUT_S = 600  # two g++ runs of ~20 CPU-s each on a loaded 2-core host
JOB_TIMEOUT_S = 600
CONFIG = it.SMALL_JOBS_CONFIG + "build_cache_max_bytes: 1073741824\n"
READY = re.compile(r"^kboxd: precompiled header ready in .*: (\S+)$", re.MULTILINE)
FAILED = "kboxd: precompiled header not built"

# Prepended to the candidate: every way the compile stage's code could try
# to replace or add to kboxd's PCH. Each must fail; the job goes on.
TAMPER = '''
import os as _kbox_os
_KBOX_PCH = {pch!r}
for _kbox_path in (_KBOX_PCH + "/torch/extension.h", _KBOX_PCH + "/planted.h",
                   _KBOX_PCH + "/torch/extension.h.gch/O2.gch"):
    try:
        with open(_kbox_path, "w") as _kbox_f:
            _kbox_f.write("// planted\\n")
    except OSError:
        pass
for _kbox_op in (lambda: _kbox_os.rename(_KBOX_PCH, _KBOX_PCH + ".moved"),
                 lambda: _kbox_os.unlink(_KBOX_PCH + "/manifest.json")):
    try:
        _kbox_op()
    except OSError:
        pass
'''


@pytest.fixture(scope="module")
def jobs():
    """Replaces the session's job board (conftest.py): this module submits
    its own job to its own daemon."""
    yield None


def _wait_for_pch(root, proc):
    """The directory kboxd's start-up build reports, once its log line is there."""
    path = os.path.join(root, "kboxd.stderr")
    deadline = time.monotonic() + PCH_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        with open(path, errors="replace") as f:
            text = f.read()
        found = READY.search(text)
        if found:
            return found.group(1)
        assert FAILED not in text, text[-4000:]
        time.sleep(0.5)  # polling a log file: there is nothing to block on
    pytest.fail("no precompiled header after %d s" % PCH_TIMEOUT_S)


def _snapshot(pch):
    out = {}
    for dirpath, _, files in os.walk(pch):
        for name in files:
            st = os.stat(os.path.join(dirpath, name))
            out[os.path.relpath(os.path.join(dirpath, name), pch)] = (st.st_size, st.st_mtime_ns)
    return out


def test_compile_stage_uses_the_pch_and_cannot_replace_it():
    with it.own_kboxd("kbox-it-pch-", CONFIG, [], START_TIMEOUT_S,
                      precompiled_header=True) as (proc, port, root):
        pch = _wait_for_pch(root, proc)
        assert os.path.dirname(pch) == os.path.join(root, "work", "pch")
        before = _snapshot(pch)
        assert "manifest.json" in before and "torch/extension.h.gch/O2.gch" in before
        source = TAMPER.format(pch=pch) + it.read(it.case_path("cand_clamp_scale_ok.py"))
        reply = it.post_json(port, {
            "reference_source": it.read(it.case_path("ref_clamp_scale.py")),
            "candidate_source": source, "backend": "BACKEND_CPU", "seed": it.HONEST_SEED,
            "correctness_trials": 3, "measure_performance": False,
            # The static checks would reject the file access before any
            # stage ran: this tests the sandbox, as test_escapes.py does.
            "anticheat_profile": "off"}, timeout=JOB_TIMEOUT_S)
        assert reply.status == 200, reply
        result = reply.json()
        assert result["status"] == "CORRECT", describe(result)
        # Nothing the candidate tried changed the PCH directory.
        assert _snapshot(pch) == before
        assert not os.path.exists(pch + ".moved")

        # The compile stage built with the PCH's directory as its light
        # include (the harness checked the directory inside the sandbox): the
        # build cache's copy of the build directory has its build.ninja.
        builds = glob.glob(os.path.join(root, "work", "build-cache", "*", "tree",
                                        "kbox_it_clamp_scale_ok"))
        assert len(builds) == 1, builds
        command = subprocess.run(["ninja", "-t", "commands", "main.o"], cwd=builds[0],
                                 stdout=subprocess.PIPE, text=True, check=True).stdout
        command = command.strip().splitlines()[-1]
        assert "-I" + pch in command
        # ...and GCC loads the PCH for that exact command (on the cached
        # copy of main.cpp: the job's directory is gone).
        job_dir = re.search(r"(\S+)/main\.cpp", command).group(1)
        command = command.replace(job_dir + "/", builds[0] + "/")
        probe = subprocess.run(command + " -H -Winvalid-pch -fsyntax-only", shell=True,
                               cwd=builds[0], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        assert probe.returncode == 0, probe.stderr[-3000:]
        assert "! " + os.path.join(pch, "torch", "extension.h.gch", "O2.gch") in \
            probe.stderr.splitlines(), probe.stderr[-3000:]
