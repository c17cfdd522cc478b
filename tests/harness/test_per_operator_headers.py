"""Per-operator ATen headers for the light try's nvcc commands
(per_operator_headers.py, docs/compile-speed.md).

CUDA builds need a GPU host (tests/harness/test_gpu.py builds and runs one);
here: what the stand-in holds, that the macro only ever selects includes in
the installed headers, what the hook gives the light try and the fallback,
and one real host compile of the stand-in with g++.
"""
import os
import re
import shutil
import subprocess
import sys
import types

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "worker", "harness"))
from kbox_harness import extension_hook, light_headers  # noqa: E402
from kbox_harness import per_operator_headers as per_op  # noqa: E402

_INCLUDE = per_op.torch_include_dir()
needs_torch_headers = pytest.mark.skipif(not _INCLUDE, reason="torch's headers are not installed")


def test_operators_named_are_whole_identifiers_and_their_variants():
    ops = frozenset({"add", "addmm", "relu", "mm", "zeros_like", "sum"})
    text = "auto y = torch::zeros_like(x); at::relu_(y); at::mm_out(o, a, b); int addx = 0;"
    assert per_op.operators_named([text], ops) == ["mm", "relu", "zeros_like"]
    # "addx" is not "add", and a comment's words count too (a miss only costs a fallback).
    assert per_op.operators_named(["// then sum\n", "addmm(a, b, c)"], ops) == ["addmm", "sum"]
    assert per_op.operators_named([""], ops) == []


@needs_torch_headers
def test_operator_names_are_the_public_headers():
    ops = per_op.operator_names(_INCLUDE)
    assert {"add", "zeros_like", "empty_like", "relu", "matmul"} <= ops
    assert per_op.operator_names("/nonexistent") == frozenset()


@needs_torch_headers
def test_standin_replaces_only_the_aggregate_includes():
    with open(os.path.join(_INCLUDE, "ATen", "ATen.h")) as f:
        real = f.read()
    text = per_op.aten_standin(real, ["relu", "zeros_like"])
    lines = [line.strip() for line in text.splitlines()]
    assert "#include <ATen/Functions.h>" not in lines
    assert "#include <ATen/NativeFunctions.h>" not in lines
    assert lines.count("#include <ATen/ops/relu.h>") == 1
    assert lines.count("#include <ATen/ops/zeros_like.h>") == 1
    # Every other line of the installed header is there, in order.
    kept = [line.strip() for line in real.splitlines()
            if line.strip() not in ("#include <ATen/Functions.h>", "#include <ATen/NativeFunctions.h>")]
    rest = [line for line in lines if not line.startswith("#include <ATen/ops/")][2:]
    assert rest == kept


def test_standin_refuses_a_header_of_another_shape():
    assert per_op.aten_standin("#pragma once\n#include <ATen/Tensor.h>\n", ["add"]) is None
    assert per_op.aten_standin("#include <ATen/Functions.h>\n", ["add"]) is None


def _blocks(path):
    """(directive line, body lines) for each #if/#ifndef on the macro."""
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    found = []
    for i, line in enumerate(lines):
        s = line.strip()
        if not s.startswith("#") or per_op.MACRO not in s:
            continue
        depth, body = 0, []
        for inner in lines[i + 1:]:
            t = inner.strip()
            if t.startswith(("#if", "# if")):
                depth += 1
            elif t.startswith("#endif"):
                if depth == 0:
                    break
                depth -= 1
            body.append(t)
        found.append((s, body))
    return found


@needs_torch_headers
def test_the_macro_only_selects_includes_in_the_installed_headers():
    # The premise of the path: defining AT_PER_OPERATOR_HEADERS changes which
    # torch headers a translation unit includes, never what any declares.
    uses = 0
    for root, _, files in os.walk(_INCLUDE, followlinks=True):  # Debian links to /usr/include
        for name in files:
            path = os.path.join(root, name)
            try:
                with open(path, errors="replace") as f:
                    if per_op.MACRO not in f.read():
                        continue
            except OSError:
                continue
            for directive, body in _blocks(path):
                uses += 1
                code = [t for t in body if t and not t.startswith(("//", "/*", "*"))]
                if directive == "#ifndef %s" % per_op.MACRO:
                    assert all(t.startswith(("#include", "#else")) for t in code), (path, code)
                else:
                    assert re.fullmatch(r"#if defined\(%s\) && defined\(TORCH_ASSERT_ONLY_METHOD_"
                                        r"OPERATORS\)" % per_op.MACRO, directive), (path, directive)
                    assert code and code[0].startswith("#error"), (path, code)
    assert uses > 10


def _recorded(**arguments):
    """A call's sources as the hook records them (extension_hook._as_list)."""
    return {key: extension_hook._as_list(value) for key, value in arguments.items()}


def test_cuda_texts_of_each_call_shape(tmp_path):
    assert per_op.cuda_texts(_recorded(cuda_sources="k")) == ["k"]
    assert per_op.cuda_texts(_recorded(cuda_sources=["a", "b"])) == ["a", "b"]
    assert per_op.cuda_texts(_recorded(cpp_sources="c")) is None
    assert per_op.cuda_texts(_recorded(cuda_sources=[])) is None
    cu = tmp_path / "k.cu"
    cu.write_text("zeros_like")
    cpp = tmp_path / "m.cpp"
    cpp.write_text("matmul")
    assert per_op.cuda_texts(_recorded(sources=[str(cpp), str(cu)])) == ["zeros_like"]
    assert per_op.cuda_texts(_recorded(sources=[str(cpp)])) is None
    assert per_op.cuda_texts(_recorded(sources=[str(tmp_path / "gone.cu")])) is None


# -- the hook, with a stand-in for load_inline that records its calls -------------

def bump_version(versioner, name, build_arguments):
    """As torch's _jit_compile calls it (torch 2.x added with_sycl)."""
    import inspect
    extra = {"with_sycl": False} if "with_sycl" in inspect.signature(
        versioner.bump_version_if_changed).parameters else {}
    return versioner.bump_version_if_changed(
        name, [], build_arguments=build_arguments, build_directory="/b", with_cuda=True,
        is_python_module=True, is_standalone=False, **extra)


def _fake_load_inline(calls, versioner, fail_light=False):
    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                    extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                    build_directory=None, verbose=False, with_cuda=None, is_python_module=True):
        flags = list(extra_cuda_cflags or [])
        standin = ""
        for flag in flags:
            if flag.startswith("-I"):
                with open(os.path.join(flag[2:], "ATen", "ATen.h")) as f:
                    standin = f.read()
        calls.append({"flags": flags, "includes": list(extra_include_paths or []),
                      "standin": standin})
        bump_version(versioner, name, [extra_cflags, extra_cuda_cflags, extra_ldflags,
                                       extra_include_paths])
        if fail_light and light_headers.LIGHT_INCLUDE in (extra_include_paths or []):
            raise RuntimeError("Error building extension 'x'")
        return types.SimpleNamespace(name=name)
    return load_inline


def _hook(per_operator=True):
    from torch.utils._cpp_extension_versioner import ExtensionVersioner
    hook = extension_hook.ExtensionHook("", build=True, light=True, per_operator=per_operator)
    hook._module = types.SimpleNamespace(JIT_EXTENSION_VERSIONER=ExtensionVersioner())
    return hook


_CUDA = "torch::Tensor f(torch::Tensor x) { return torch::zeros_like(x); }"


@needs_torch_headers
def test_the_light_try_gives_nvcc_the_standin_and_the_fallback_does_not():
    calls = []
    hook = _hook()
    load = hook._wrap(_fake_load_inline(calls, hook._module.JIT_EXTENSION_VERSIONER), "load_inline")
    own = ["-O3"]
    load(name="x", cpp_sources="", cuda_sources=_CUDA, extra_cuda_cflags=own)
    assert own == ["-O3"]  # the candidate's list is not changed
    (light,) = calls
    assert light["flags"][:3] == ["-O3", "-DAT_PER_OPERATOR_HEADERS", "-DKBOX_CUDA_LIGHT"]
    assert "#include <ATen/ops/zeros_like.h>" in light["standin"]
    assert "#include <ATen/Functions.h>" not in light["standin"]
    assert not os.path.exists(light["flags"][3][2:])  # removed after the try
    assert hook.per_operator_summary() == per_op.USED
    assert hook.light_summary() == light_headers.USED

    calls = []
    hook = _hook()
    load = hook._wrap(_fake_load_inline(calls, hook._module.JIT_EXTENSION_VERSIONER, fail_light=True), "load_inline")
    load(name="y", cpp_sources="", cuda_sources=_CUDA, extra_cuda_cflags=None)
    light, full = calls
    assert per_op.MACRO in " ".join(light["flags"])
    assert full["flags"] == [] and full["includes"] == []  # exactly as asked
    assert hook.per_operator_summary() == per_op.FELL_BACK
    # The versioner counted the fallback as the candidate's first build.
    assert hook._module.JIT_EXTENSION_VERSIONER.entries["y"].version == 0


@needs_torch_headers
def test_no_standin_without_cuda_sources_or_when_turned_off():
    calls = []
    hook = _hook()
    hook._wrap(_fake_load_inline(calls, hook._module.JIT_EXTENSION_VERSIONER), "load_inline")(name="c", cpp_sources="int f();")
    assert calls[0]["flags"] == [] and hook.per_operator_summary() == ""
    calls = []
    hook = _hook(per_operator=False)
    hook._wrap(_fake_load_inline(calls, hook._module.JIT_EXTENSION_VERSIONER), "load_inline")(name="d", cpp_sources="", cuda_sources=_CUDA)
    assert calls[0]["flags"] == [] and hook.per_operator_summary() == ""
    # A flags value torch would not take as a list of strings is left alone.
    calls = []
    hook = _hook()
    hook._wrap(_fake_load_inline(calls, hook._module.JIT_EXTENSION_VERSIONER), "load_inline")(
        name="e", cpp_sources="", cuda_sources=_CUDA, extra_cuda_cflags="-O3")
    assert calls[0]["flags"] == list("-O3") and hook.per_operator_summary() == ""


@needs_torch_headers
@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++")
def test_a_translation_unit_builds_against_the_standin(tmp_path):
    # The host side of what nvcc compiles, with g++: torch/types.h (what
    # load_inline puts first in a CUDA source) and the tensor API a kernel's
    # wrapper uses, against the stand-in <ATen/ATen.h> and the macro.
    source = r"""
#include <torch/types.h>
torch::Tensor f(torch::Tensor x) {
  TORCH_CHECK(x.dim() == 1, "1-D");
  auto y = torch::zeros_like(x);
  at::relu_(y);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "f", [&] { y.add_(x.sum()); });
  return y.to(torch::kFloat32);
}
"""
    prepared = per_op.prepare([source], _INCLUDE, str(tmp_path))
    assert {"relu", "sum", "zeros_like"} <= set(prepared.operators)
    path = tmp_path / "k.cpp"
    path.write_text(source)
    cmd = (["g++", "-fsyntax-only", "-std=c++17"] + prepared.flags +
           ["-isystem" + d for d in (_INCLUDE, os.path.join(_INCLUDE, "torch", "csrc", "api",
                                                             "include"))] + [str(path)])
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    prepared.close()
    assert not os.path.exists(prepared.directory)
