"""Compile stage: nvcc parses only the ATen operators a CUDA source names.

A `.cu` file that load_inline builds starts with `#include <torch/types.h>`,
which includes <ATen/ATen.h>, which declares every one of ATen's ~2,000
operators (<ATen/Functions.h>, and in torch 2.x <ATen/NativeFunctions.h>).
nvcc parses all of that three times (cudafe++, cicc, the host compiler), and
that is most of a CUDA candidate's build (docs/compile-speed.md).

PyTorch builds its own sources with AT_PER_OPERATOR_HEADERS defined: every
torch header that needs an operator then includes that operator's own
<ATen/ops/NAME.h> instead of <ATen/Functions.h>. The macro selects includes
and nothing else (`tests/harness/test_per_operator_headers.py` checks every
use of it in the installed headers). Only <ATen/ATen.h> includes the two
aggregates unconditionally, so the light try's nvcc command also gets a
directory, searched before torch's own, holding a stand-in <ATen/ATen.h>: the
installed one's text with those two lines replaced by the <ATen/ops/NAME.h>
of every operator NAME the candidate's CUDA sources mention.

Whatever the nvcc pass sees is a strict subset of what the build as asked
sees, from the same installed headers. A source that needs an operator this
misses (a name built by a macro, an `at::native::` function, ...) fails the
light try, and the build as asked follows (extension_hook.py), as for any
light try.
"""
import functools
import os
import re
import shutil
import tempfile

MACRO = "AT_PER_OPERATOR_HEADERS"
# Defined only on the light try's nvcc command: the light <torch/extension.h>
# then includes only the tensor API (torch/types.h) in CUDA sources, not the
# Python bindings, which main.cpp's g++ command (without it) still gets.
LIGHT_CUDA_MACRO = "KBOX_CUDA_LIGHT"

# The report's cuda_per_operator_headers field.
USED = "used"
FELL_BACK = "fell_back"

_AGGREGATES = ("#include <ATen/Functions.h>", "#include <ATen/NativeFunctions.h>")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CUDA_SUFFIXES = (".cu", ".cuh")


def torch_include_dir():
    """torch's include directory (the one holding ATen/ATen.h), or ''."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        return ""
    d = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "include")
    return d if os.path.isfile(os.path.join(d, "ATen", "ATen.h")) else ""


@functools.lru_cache(maxsize=4)
def operator_names(include_dir):
    """Every NAME with a public header <ATen/ops/NAME.h>."""
    try:
        entries = os.listdir(os.path.join(include_dir, "ATen", "ops"))
    except OSError:
        return frozenset()
    return frozenset(e[:-2] for e in entries if e.endswith(".h"))


def operators_named(texts, operators):
    """The operators whose names occur as identifiers in texts, sorted. An
    in-place or out= variant (`relu_`, `add_out`, `mm_outf`) is declared in its
    operator's header, so it names that operator too."""
    found = set()
    for text in texts:
        for word in set(_IDENTIFIER.findall(text)):
            for name in (word, word.rstrip("_"), _strip_suffix(word, "_outf"),
                         _strip_suffix(word, "_out")):
                if name in operators:
                    found.add(name)
    return sorted(found)


def _strip_suffix(word, suffix):
    return word[:-len(suffix)] if word.endswith(suffix) else word


def aten_standin(real_text, operators):
    """The stand-in <ATen/ATen.h>: the installed header's text with its
    aggregate includes replaced by the given operators' headers; None when
    the installed header does not have the shape this relies on."""
    lines = real_text.splitlines()
    if "#pragma once" not in (line.strip() for line in lines):
        return None
    if not any(line.strip() == _AGGREGATES[0] for line in lines):
        return None
    per_op = ["#include <ATen/ops/%s.h>" % name for name in operators]
    out = ["// kbox: <ATen/ATen.h> with only the operators this build's CUDA sources name",
           "// (kbox_harness/per_operator_headers.py)."]
    placed = False
    for line in lines:
        if line.strip() in _AGGREGATES:
            if not placed:
                out.extend(per_op)
                placed = True
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def cuda_texts(sources):
    """The CUDA source texts nvcc will compile for one call, from the hook's
    record of its sources (lists of strings: {"cuda_sources": [...]} for
    load_inline, {"sources": [paths]} for load). None when there are none."""
    texts = list(sources.get("cuda_sources") or [])
    for path in sources.get("sources") or []:
        if path.endswith(_CUDA_SUFFIXES):
            try:
                with open(path, "r", encoding="utf-8", errors="replace") as f:
                    texts.append(f.read())
            except OSError:
                return None  # torch reports the missing file
    return texts or None


class Prepared(object):
    """A stand-in directory for one light try, removed by close()."""

    def __init__(self, directory, flags, operators):
        self.directory = directory
        self.flags = flags          # appended to the try's extra_cuda_cflags
        self.operators = operators  # what the stand-in includes

    def close(self):
        shutil.rmtree(self.directory, ignore_errors=True)


def prepare(texts, include_dir=None, parent=None):
    """A Prepared for CUDA sources texts, or None when the installed torch
    does not allow it (no ATen/ops, an ATen.h of another shape)."""
    include_dir = torch_include_dir() if include_dir is None else include_dir
    operators = operator_names(include_dir) if include_dir else frozenset()
    if not operators:
        return None
    try:
        with open(os.path.join(include_dir, "ATen", "ATen.h"), "r", encoding="utf-8") as f:
            real = f.read()
    except OSError:
        return None
    named = operators_named(texts, operators)
    text = aten_standin(real, named)
    if text is None:
        return None
    directory = tempfile.mkdtemp(prefix="kbox-per-op-", dir=parent)
    os.makedirs(os.path.join(directory, "ATen"))
    with open(os.path.join(directory, "ATen", "ATen.h"), "w", encoding="utf-8") as f:
        f.write(text)
    flags = ["-D" + MACRO, "-D" + LIGHT_CUDA_MACRO, "-I" + directory]
    return Prepared(directory, flags, named)
