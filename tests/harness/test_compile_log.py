"""compile_log without compiling: a fake build dir and crafted compiler output."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "worker", "harness"))

from kbox_harness import compile_log, sanitize  # noqa: E402

CPP_SRC = """
#include <torch/extension.h>

torch::Tensor f(torch::Tensor x) {
    return x bad;
}
"""
DECL = "torch::Tensor g(torch::Tensor x);"
CUDA_SRC = """
__global__ void k(float* y) {
    y[0] = undefined_name;
}
"""

CANDIDATE = '''import torch
from torch.utils.cpp_extension import load_inline

cpp = r"""%s"""

cuda = r"""%s"""

ext = load_inline(name="ext", cpp_sources=[cpp, "%s"], cuda_sources=cuda)
''' % (CPP_SRC, CUDA_SRC, DECL)


def _line_of(text, needle):
    return text[:text.index(needle)].count("\n") + 1


def _fake_build(tmp_path, prologue="#include <torch/extension.h>\n"):
    job = tmp_path / "job"
    ext_dir = job / "build" / "ext"
    ext_dir.mkdir(parents=True)
    (job / "candidate.py").write_text(CANDIDATE)
    main = prologue + CPP_SRC + "\n" + DECL + "\nPYBIND11_MODULE(ext, m) {\n  m.def(\"f\", f);\n}\n"
    (ext_dir / "main.cpp").write_text(main)
    cuda = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + CUDA_SRC
    (ext_dir / "cuda.cu").write_text(cuda)
    calls = [{"kind": "load_inline", "name": "ext", "ext_dir": str(ext_dir),
              "sources": {"cpp_sources": [CPP_SRC, DECL], "cuda_sources": [CUDA_SRC]}}]
    return job, ext_dir, main, cuda, calls


def _log(job, calls, output, max_bytes=65536):
    scrubber = sanitize.PathScrubber(str(job / "candidate.py"), "", str(job / "build"))
    return compile_log.build_failure_log(output, calls, str(job / "candidate.py"), CANDIDATE,
                                         str(job / "build"), scrubber, max_bytes)


def test_gcc_and_nvcc_diagnostics_map_to_candidate_lines(tmp_path):
    job, ext_dir, main, cuda, calls = _fake_build(tmp_path)
    gen_bad = _line_of(main, "x bad")
    gen_cuda = _line_of(cuda, "undefined_name")
    gen_pybind = _line_of(main, "m.def")
    cmd = "c++ -MMD -MF main.o.d -DTORCH_EXTENSION_NAME=ext -I/usr/include " * 8
    output = "\n".join([
        "[1/3] %s -c %s/main.cpp -o main.o" % (cmd, ext_dir),
        "FAILED: main.o ",
        "%s -c %s/main.cpp -o main.o" % (cmd, ext_dir),
        "%s/main.cpp: In function 'at::Tensor f(at::Tensor)':" % ext_dir,
        "\x1b[01;31m%s/main.cpp:%d:14: error:\x1b[m expected ';' before 'bad'" % (ext_dir, gen_bad),
        "    %d |     return x bad;" % gen_bad,
        "%s/main.cpp:%d:5: error: 'f' in pybind" % (ext_dir, gen_pybind),
        "%s/cuda.cu(%d): error: identifier \"undefined_name\" is undefined" % (ext_dir, gen_cuda),
        "/usr/include/c++/12/vector:10:3: note: in a header\x07",
        "ninja: build stopped: subcommand failed.",
    ])
    log, headline = _log(job, calls, output)
    text = log["text"]
    cand_bad = _line_of(CANDIDATE, "x bad")
    cand_cuda = _line_of(CANDIDATE, "undefined_name")
    assert "candidate.py:%d:14: error: expected ';'" % cand_bad in text
    assert "    %d |     return x bad;" % cand_bad in text  # gcc's excerpt gutter too
    assert "candidate.py:%d: error: identifier" % cand_cuda in text
    # The generated binding code is not the candidate's: shown as main.cpp.
    assert "main.cpp:%d:5: error: 'f' in pybind" % gen_pybind in text
    assert "main.cpp: In function" in text
    assert "/usr/include/c++/12/vector:10:3" in text  # system headers left alone
    assert log["first_error_line"] == cand_bad
    assert headline.startswith("candidate.py:%d:14: error" % cand_bad)
    assert str(tmp_path) not in text and "\x1b" not in text and "\x07" not in text
    assert "-DTORCH_EXTENSION_NAME" not in text
    assert "[1/3] c++ [command omitted] -o main.o" in text
    assert not log["truncated"]


def test_layout_independent_of_prologue(tmp_path):
    # A different torch version may prepend more lines: mapping must follow.
    job, ext_dir, main, _, calls = _fake_build(tmp_path, prologue="// a\n// b\n// c\n#include <x>\n")
    output = "%s/main.cpp:%d:14: error: boom" % (ext_dir, _line_of(main, "x bad"))
    log, _ = _log(job, calls, output)
    assert log["text"] == "candidate.py:%d:14: error: boom" % _line_of(CANDIDATE, "x bad")


def test_source_not_verbatim_falls_back_to_unique_line(tmp_path):
    job, ext_dir, main, _, calls = _fake_build(tmp_path)
    # The recorded string differs from the file text (built at run time), but
    # the failing line itself is unique in candidate.py.
    built = CPP_SRC.replace("#include <torch/extension.h>", "#include <torch/extension.h> ")
    main2 = main.replace(CPP_SRC, built)
    (ext_dir / "main.cpp").write_text(main2)
    calls[0]["sources"]["cpp_sources"] = [built, DECL]
    output = "%s/main.cpp:%d:14: error: boom" % (ext_dir, _line_of(main2, "x bad"))
    log, _ = _log(job, calls, output)
    assert log["first_error_line"] == _line_of(CANDIDATE, "x bad")


def test_truncation_keeps_head_and_valid_utf8(tmp_path):
    job, ext_dir, main, _, calls = _fake_build(tmp_path)
    first = "%s/main.cpp:%d:14: error: boom" % (ext_dir, _line_of(main, "x bad"))
    output = first + "\n" + ("\u00e9\u4e2d" * 5000) + "\xff\x00tail"
    log, _ = _log(job, calls, output, max_bytes=101)
    assert log["truncated"] and len(log["text"].encode("utf-8")) <= 101
    assert log["text"].startswith("candidate.py:")
    log["text"].encode("utf-8")  # valid UTF-8, no lone surrogates


def test_bytes_with_invalid_utf8(tmp_path):
    job, ext_dir, _, _, calls = _fake_build(tmp_path)
    log, _ = _log(job, calls, b"error: bad byte \xff\xfe here\r\n\x1b[1mbold\x1b[0m")
    assert log["text"] == "error: bad byte \ufffd\ufffd here\nbold"


def test_sanitize_paths_are_whole():
    scrubber = sanitize.PathScrubber("/jobs/abc/candidate.py", "/jobs/abc/reference.py",
                                     "/jobs/abc/build")
    text = scrubber.scrub("/jobs/abc/build/x/main.cpp /jobs/abc/candidate.py /jobs/abcdef/y")
    assert text == "<build>/x/main.cpp candidate.py /jobs/abcdef/y"
