"""Compile stage: build an extension against kbox's light <torch/extension.h> first.

Almost all of a load_inline build is the compiler parsing PyTorch's headers,
and torch/extension.h pulls in the whole C++ frontend (docs/compile-speed.md).
light_include/torch/extension.h includes a strict subset of it. torch passes a
user's extra_include_paths as `-I` and its own directories as `-isystem`, so
adding light_include to extra_include_paths makes it win for the line
load_inline prepends to main.cpp and for the candidate's own
`#include <torch/extension.h>` in its C++ and CUDA sources alike.

If that build fails for any reason, the caller builds again exactly as the
candidate asked; that build's result and log are the ones reported, so a
genuine compile error reads the same as without this path.
"""
import contextlib
import functools
import os

LIGHT_INCLUDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "light_include")

# The compile stage report's `light_headers` field.
USED = "used"            # every extension built with the light header
FELL_BACK = "fell_back"  # at least one needed torch's own header (built again)
OFF = "off"              # the spec turned the path off

_INCLUDE_ARG = "extra_include_paths"


def applicable(arguments, parameters):
    """Whether a load/load_inline call (its bound arguments) can take the light
    path. Not when torch 2.x's use_pch is asked for: its precompiled header is
    built from torch's own extension.h, keyed by the flags."""
    if _INCLUDE_ARG not in parameters:
        return False
    if arguments.get("use_pch"):
        return False
    paths = arguments.get(_INCLUDE_ARG)
    # torch iterates the value; anything but a list of strings is left to torch.
    return paths is None or (isinstance(paths, (list, tuple)) and
                             all(isinstance(p, str) for p in paths))


def with_light_include(arguments, include_dir=LIGHT_INCLUDE):
    """A copy of the call's arguments with include_dir (light_include, or the
    precompiled header's directory holding a copy of the same header) appended
    to its include paths (after the candidate's own: a directory it passes
    keeps precedence).
    Lists and dicts are copied: load_inline edits cpp_sources/cuda_sources in
    place (prepends the include, appends the bindings), and the fallback build
    must see them as the candidate passed them."""
    light = {k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict) else v)
             for k, v in arguments.items()}
    light[_INCLUDE_ARG] = list(arguments.get(_INCLUDE_ARG) or []) + [include_dir]
    return light


@contextlib.contextmanager
def versioned_as_asked(ce, name, tails=((LIGHT_INCLUDE,),)):
    """torch's JIT_EXTENSION_VERSIONER hashes the include paths and flags: a
    build with light_include (or the PCH's directory) would count as changed
    build conditions, and a later call (or the fallback build) would be named
    `<name>_v1` where the run stage,
    which sees the candidate's own arguments, expects `<name>`. While the light
    build runs, the versioner hashes the arguments without what the light try
    appended to them (`tails`: its include directory, its nvcc flags), so
    a successful light build is versioned exactly as the candidate's call.
    Yields a function that undoes the versioner's entry for `name` (after a
    failed light build, so the fallback starts from the same state)."""
    versioner = getattr(ce, "JIT_EXTENSION_VERSIONER", None)
    bump = getattr(versioner, "bump_version_if_changed", None)
    entries = getattr(versioner, "entries", None)
    if bump is None or not isinstance(entries, dict):
        yield lambda: None
        return
    saved = entries.get(name)
    own = vars(versioner).get("bump_version_if_changed")  # set on the instance?

    @functools.wraps(bump)
    def bump_without_light(*args, **kwargs):
        groups = kwargs.get("build_arguments")
        if groups is not None:
            kwargs["build_arguments"] = [
                _without_tails(group, tails) if isinstance(group, list) else group
                for group in groups]
        return bump(*args, **kwargs)

    def undo():
        if saved is None:
            entries.pop(name, None)
        else:
            entries[name] = saved

    versioner.bump_version_if_changed = bump_without_light
    try:
        yield undo
    finally:
        if own is None:
            del versioner.bump_version_if_changed  # the class's method again
        else:
            versioner.bump_version_if_changed = own


def _without_tails(group, tails):
    """group without the tail the light try appended to it, if it ends with one
    (only the appended copy: a candidate's own equal entry stays)."""
    for tail in tails:
        tail = list(tail)
        if tail and group[-len(tail):] == tail:
            return group[:-len(tail)]
    return group
