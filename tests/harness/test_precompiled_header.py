"""The light header's GCC precompiled header (docs/compile-speed.md).

Real builds: kbox_pch.py builds the PCH (two variants in parallel, ~45 CPU-s)
once for the module, then three compile stages run two at a time: with the
PCH, with a truncated .gch (the harness's check refuses it) and with a .gch of
the right size whose contents end early (the check passes; GCC fails on it,
which must not turn into a failed candidate).
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys

import pytest

from test_stages import PYTHON, REPO, Job, _check

sys.path.insert(0, os.path.join(REPO, "worker", "harness"))
from kbox_harness import precompiled_header  # noqa: E402

EXT = "kbox_test_relu_scale"  # cand_relu_scale_cpp.py's extension, built with -O2


@pytest.fixture(scope="module")
def pch_dir(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pch"))
    proc = subprocess.run([PYTHON, "-s", "-B", os.path.join(REPO, "worker", "harness", "kbox_pch.py"),
                           "--root", root], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    built = json.loads(proc.stdout.splitlines()[-1])["dir"]
    assert os.path.dirname(built) == root
    assert precompiled_header.check(built) == ""
    return built


def _damaged_copy(pch_dir, dest, damage):
    """dest with pch_dir's manifest and header, its O0.gch linked and its
    O2.gch (the variant an -O2 build takes) damaged."""
    shutil.copytree(pch_dir, dest, ignore=shutil.ignore_patterns("*.gch"))
    gch = os.path.join(dest, "torch", "extension.h.gch")
    os.mkdir(gch)
    os.symlink(os.path.join(pch_dir, "torch", "extension.h.gch", "O0.gch"),
               os.path.join(gch, "O0.gch"))
    damage(os.path.join(pch_dir, "torch", "extension.h.gch", "O2.gch"),
           os.path.join(gch, "O2.gch"))
    return dest


def _truncate(src, dst):
    with open(src, "rb") as f, open(dst, "wb") as out:
        out.write(f.read(1 << 20))  # GCC reads this and fails, not parses


def _zeroed_tail_of_same_size(src, dst):
    """A valid PCH header, then zeros (sparse): passes the size check, and
    GCC accepts the header and fails reading the rest."""
    _truncate(src, dst)
    with open(dst, "r+b") as out:
        out.truncate(os.path.getsize(src))


@pytest.fixture(scope="module")
def builds(pch_dir, tmp_path_factory):
    dirs = {
        "pch": pch_dir,
        "truncated": _damaged_copy(pch_dir, str(tmp_path_factory.mktemp("t") / "pch"), _truncate),
        "zeroed": _damaged_copy(pch_dir, str(tmp_path_factory.mktemp("z") / "pch"),
                                _zeroed_tail_of_same_size),
    }
    jobs = {name: Job(tmp_path_factory.mktemp(name), "cand_relu_scale_cpp.py") for name in dirs}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(jobs[name].run, "STAGE_COMPILE", light_headers=True,
                                     pch_dir=dirs[name]) for name in dirs}
        return {name: (jobs[name], dirs[name], f.result()) for name, f in futures.items()}


def _compile_command(job):
    """main.cpp's compile command as ninja runs it (build.ninja's variables expanded)."""
    out = subprocess.run(["ninja", "-t", "commands", "main.o"], cwd=os.path.join(job.root, "build", EXT),
                         stdout=subprocess.PIPE, text=True, check=True).stdout
    return out.strip().splitlines()[-1]


def test_build_uses_the_precompiled_header_and_runs(builds):
    job, pch, compiled = builds["pch"]
    report = _check(compiled, "OK")
    assert report["light_headers"] == "used"
    assert report["precompiled_header"] == "offered"
    command = _compile_command(job)
    assert "-I" + pch in command
    # The same command with -H: GCC prints "! <file>" for a PCH it loads and
    # "x <file>" for one it rejects, then the headers it parses instead.
    probe = subprocess.run(command + " -H -Winvalid-pch -fsyntax-only", shell=True,
                           cwd=os.path.join(job.root, "build", EXT),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert probe.returncode == 0, probe.stderr[-3000:]
    loaded = os.path.join(pch, "torch", "extension.h.gch", "O2.gch")
    assert "! " + loaded in probe.stderr.splitlines()
    assert "invalid" not in probe.stderr and "x " + loaded not in probe.stderr
    # Same module behaviour: the run stage checks it against the reference.
    assert _check(job.run("STAGE_RUN"), "OK")["message"] == "correct on 3 trials"


def test_truncated_gch_is_refused_and_the_light_header_parsed(builds):
    job, pch, compiled = builds["truncated"]
    report = _check(compiled, "OK")
    assert report["precompiled_header"] == "invalid"
    assert report["light_headers"] == "used"
    assert "-I" + pch not in _compile_command(job)
    assert _check(job.run("STAGE_RUN"), "OK")["message"] == "correct on 3 trials"


def test_corrupt_gch_of_the_right_size_only_costs_time(builds):
    job, pch, compiled = builds["zeroed"]
    report = _check(compiled, "OK")
    assert report["precompiled_header"] == "offered"
    # GCC fails the light try ("while reading precompiled header"); the
    # build as asked follows, and the candidate builds and runs.
    assert report["light_headers"] == "fell_back"
    assert "-I" + pch not in _compile_command(job)
    assert _check(job.run("STAGE_RUN"), "OK")["message"] == "correct on 3 trials"


def test_check_names_what_is_wrong(pch_dir, tmp_path):
    assert precompiled_header.check("") == "none"
    assert "FileNotFoundError" in precompiled_header.check(str(tmp_path))
    other = shutil.copytree(pch_dir, str(tmp_path / "other"), ignore=shutil.ignore_patterns("*.gch"))
    with open(os.path.join(other, "torch", "extension.h"), "a") as f:
        f.write("// edited\n")
    assert precompiled_header.check(other) == "its extension.h is not the light header"
