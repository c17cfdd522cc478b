"""The compile stage's report of the sources its load_inline/load calls
received (StageSpec.report_extension_sources -> StageReport.extension_sources),
which kboxd checks when its static pass could not read a call's C++ as text."""
import os
import sys

import pytest

from test_stages import FIXTURES, REPO, Job, _check, marker_line

sys.path.insert(0, os.path.join(REPO, "worker", "harness"))

from kbox_harness import extension_hook  # noqa: E402

HELPER = "cand_relu_scale_helper_cpp.py"


def _fixture_cpp_source():
    """The fixture's _cpp_src, as Python evaluates the raw literal."""
    with open(os.path.join(FIXTURES, HELPER)) as f:
        text = f.read()
    start = text.index('_cpp_src = r"""') + len('_cpp_src = r"""')
    return text[start:text.index('"""', start)]


@pytest.fixture(scope="module")
def helper_job(tmp_path_factory):
    job = Job(tmp_path_factory.mktemp("helper"), HELPER)
    asked = job.run("STAGE_COMPILE", report_extension_sources=True)
    # The same job again, not asked: the build is there already (no rebuild).
    not_asked = job.run("STAGE_COMPILE")
    return job, asked, not_asked


def test_reports_the_strings_a_helpers_parameter_carried(helper_job):
    _, asked, _ = helper_job
    report = _check(asked, "OK")  # also checks the report against harness.proto
    calls = report["extension_sources"]
    assert len(calls) == 1, calls
    call = calls[0]
    assert call["kind"] == "load_inline"
    assert call["name"] == "kbox_test_relu_scale_helper"
    # The call inside the helper, where the static pass deferred it.
    assert call["line"] == marker_line(HELPER, "KBOX_TEST_LOAD_INLINE")
    assert call["cpp_sources"] == [_fixture_cpp_source()]
    assert call["cuda_sources"] == []
    assert call["flags"] == ["extra_cflags=-O2"]
    assert call["unread_files"] == [] and not call.get("truncated")


def test_reports_nothing_when_not_asked(helper_job):
    _, _, not_asked = helper_job
    report = _check(not_asked, "OK")
    assert "extension_sources" not in report, report
    assert report["message"] == "built kbox_test_relu_scale_helper"


def test_the_report_is_run_with_the_build(helper_job):
    # What was reported is what was built: the run stage loads and runs it.
    job, _, _ = helper_job
    report = _check(job.run("STAGE_RUN", measure_performance=False), "OK")
    assert report["message"] == "correct on 3 trials"


# -- the hook's recording, without a build ----------------------------------------------

class _Shifty(list):
    """Shows one text to whoever iterates it; torch's join reads the storage."""

    def __iter__(self):
        return iter(["// honest\n"])


class _Str(str):
    pass


def test_the_call_goes_on_with_exactly_the_strings_reported():
    hook = extension_hook.ExtensionHook(build=True, report_sources=True)
    args = {"name": _Str("e"), "cpp_sources": _Shifty(["at::matmul(a, b);"]),
            "cuda_sources": _Str("__global__ void k() {}"), "extra_cflags": ("-O3",)}
    entry = hook._record("load_inline", args, None)
    assert entry["name"] == "e" and entry["line"] == 0
    assert entry["cpp_sources"] == ["at::matmul(a, b);"]       # the storage, not __iter__
    assert entry["cuda_sources"] == ["__global__ void k() {}"]
    assert entry["flags"] == ["extra_cflags=-O3"]
    # The build gets plain copies of those very strings.
    assert type(args["cpp_sources"]) is list and args["cpp_sources"] == ["at::matmul(a, b);"]
    assert type(args["cuda_sources"]) is str and type(args["extra_cflags"]) is tuple


def test_load_files_are_read_inside_the_job_only(tmp_path):
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "k.cu").write_text("__global__ void k() {}\n")
    (job_dir / "host.cpp").write_text("int host() { return 0; }\n")
    (job_dir / "latin1.cpp").write_bytes(b"// caf\xe9\n")
    os.mkfifo(str(job_dir / "fifo.cpp"))
    outside = tmp_path / "outside.cpp"
    outside.write_text("int secret;\n")
    hook = extension_hook.ExtensionHook(build=True, report_sources=True, read_roots=[str(job_dir)])
    args = {"name": "e", "sources": [str(job_dir / "k.cu"), job_dir / "host.cpp",
                                     str(outside), str(job_dir / "latin1.cpp"),
                                     str(job_dir / "missing.cpp"), str(job_dir / "fifo.cpp")]}
    entry = hook._record("load", args, None)
    assert entry["cuda_sources"] == ["__global__ void k() {}\n"]
    assert entry["cpp_sources"] == ["int host() { return 0; }\n"]   # a PathLike, read too
    assert entry["unread_files"] == ["outside.cpp (outside the job's directories)",
                                     "latin1.cpp (not UTF-8 text)",
                                     "missing.cpp (cannot be read: No such file or directory)",
                                     "fifo.cpp (not a regular file)"]
    # The build reads the files under the names read here.
    assert all(type(p) is str for p in args["sources"])


def test_the_report_is_bounded():
    hook = extension_hook.ExtensionHook(build=True, report_sources=True)
    big = "x" * (extension_hook.MAX_REPORTED_SOURCE_BYTES // 2 + 1)
    first = hook._record("load_inline", {"name": "a", "cpp_sources": [big]}, None)
    second = hook._record("load_inline", {"name": "b", "cpp_sources": [big, "int small;"]}, None)
    assert first["cpp_sources"] == [big] and not first.get("truncated")
    assert second["truncated"] is True and second["cpp_sources"] == ["int small;"]


def test_the_original_loader_is_out_of_reach():
    import torch.utils.cpp_extension as ce
    hook = extension_hook.ExtensionHook(build=True, report_sources=True)
    originals = (ce.load_inline, ce.load)
    hook.install()
    try:
        assert not hasattr(ce.load_inline, "__wrapped__")
        assert not hasattr(ce.load, "__wrapped__")
    finally:
        ce.load_inline, ce.load = originals
