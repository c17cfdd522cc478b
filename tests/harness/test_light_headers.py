"""The compile stage's light <torch/extension.h> path (docs/compile-speed.md).

Real builds (g++ on PyTorch's headers, ~15-25 s each on 2 cores): the four
compile stages run two at a time in one module fixture and the tests share them.
"""
import concurrent.futures
import os
import shutil
import subprocess
import sys
import types

import pytest

from test_stages import Job, _check, marker_line

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness"))
from kbox_harness import light_headers  # noqa: E402

# (job name, fixture, light_headers in the spec)
_BUILDS = {
    "light_ok": ("cand_relu_scale_cpp.py", True),
    "needs_full": ("cand_needs_full_headers.py", True),
    "error_light": ("cand_cpp_error.py", True),
    "error_off": ("cand_cpp_error.py", False),
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    jobs = {name: Job(tmp_path_factory.mktemp(name), fixture)
            for name, (fixture, _) in _BUILDS.items()}
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(jobs[name].run, "STAGE_COMPILE", light_headers=light)
                   for name, (_, light) in _BUILDS.items()}
        return {name: (jobs[name], f.result()) for name, f in futures.items()}


def _build_ninja(job, ext_name):
    with open(os.path.join(job.root, "build", ext_name, "build.ninja")) as f:
        return f.read()


def test_light_build_is_used_and_runs(builds):
    job, compiled = builds["light_ok"]
    report = _check(compiled, "OK")
    assert report["light_headers"] == "used"
    assert "light_headers_failed_build" not in report["phase_ms"]
    # The build really compiled against the shadow header.
    assert "-I" + light_headers.LIGHT_INCLUDE in _build_ninja(job, "kbox_test_relu_scale")
    # The run stage finds and loads the library under the candidate's own name.
    result = _check(job.run("STAGE_RUN"), "OK")
    assert result["message"] == "correct on 3 trials"


def test_full_headers_candidate_falls_back_builds_and_runs(builds):
    job, compiled = builds["needs_full"]
    report = _check(compiled, "OK")
    assert report["light_headers"] == "fell_back"
    assert 0 < report["phase_ms"]["light_headers_failed_build"] <= \
        report["phase_ms"]["import_candidate"]
    ext = "kbox_test_needs_full_headers"
    assert light_headers.LIGHT_INCLUDE not in _build_ninja(job, ext)
    # Nothing the failed light try left is stale: every output is up to date
    # with the full build's command lines (ninja would rebuild an object whose
    # recorded command differs).
    ninja = shutil.which("ninja")
    if ninja:
        dry = subprocess.run([ninja, "-n", "-C", os.path.join(job.root, "build", ext)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert "no work to do" in dry.stdout, dry.stdout
    # Versioned as the candidate's call (no `_v1`): the run stage loads it.
    assert os.path.isfile(os.path.join(job.root, "build", ext, ext + ".so"))
    result = _check(job.run("STAGE_RUN"), "OK")
    assert result["message"] == "correct on 3 trials"


def test_compile_error_reads_the_same_with_the_path_on_and_off(builds):
    _, with_light = builds["error_light"]
    _, without = builds["error_off"]
    on = _check(with_light, "COMPILE_FAILED")
    off = _check(without, "COMPILE_FAILED")
    assert on["light_headers"] == "fell_back" and off["light_headers"] == "off"
    assert on["message"] == off["message"]
    assert on["compile_log"] == off["compile_log"]
    line = marker_line("cand_cpp_error.py", "CPP-ERROR")
    assert on["compile_log"]["first_error_line"] == line
    assert light_headers.LIGHT_INCLUDE not in on["compile_log"]["text"]


def test_versioner_counts_a_light_build_as_the_call_asked():
    """torch's own versioner: the light include path is not a change of build
    conditions, and undo() forgets a failed try."""
    from torch.utils._cpp_extension_versioner import ExtensionVersioner

    def bump(v, paths):
        return v.bump_version_if_changed(
            "ext", [], build_arguments=[["-O2"], None, None, paths], build_directory="/b",
            with_cuda=False, is_python_module=True, is_standalone=False)

    plain = ExtensionVersioner()
    assert bump(plain, None) == 0
    ce = types.SimpleNamespace(JIT_EXTENSION_VERSIONER=ExtensionVersioner())
    with light_headers.versioned_as_asked(ce, "ext"):
        assert bump(ce.JIT_EXTENSION_VERSIONER, [light_headers.LIGHT_INCLUDE]) == 0
    assert ce.JIT_EXTENSION_VERSIONER.entries == plain.entries
    # Outside the wrapper the versioner is torch's again.
    assert "bump_version_if_changed" not in vars(ce.JIT_EXTENSION_VERSIONER)
    # A failed try is undone: the fallback build starts from the same state.
    with light_headers.versioned_as_asked(ce, "other") as undo:
        ce.JIT_EXTENSION_VERSIONER.bump_version_if_changed(
            "other", [], build_arguments=[[light_headers.LIGHT_INCLUDE]], build_directory="/b",
            with_cuda=False, is_python_module=True, is_standalone=False)
        undo()
    assert "other" not in ce.JIT_EXTENSION_VERSIONER.entries


def test_applicable_only_to_calls_it_can_extend():
    params = {"extra_include_paths": None, "use_pch": None}
    assert light_headers.applicable({}, params)
    assert light_headers.applicable({"extra_include_paths": ["/x"]}, params)
    assert not light_headers.applicable({"extra_include_paths": "/x"}, params)
    assert not light_headers.applicable({"use_pch": True}, params)
    assert not light_headers.applicable({}, {"sources": None})
    assert light_headers.with_light_include({"extra_include_paths": ["/x"]}) == {
        "extra_include_paths": ["/x", light_headers.LIGHT_INCLUDE]}
