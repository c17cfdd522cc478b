"""Loads the reference and the candidate as two separate modules.

Each file gets its own module object and namespace (kbox_reference,
kbox_candidate), so names defined by one can never shadow the other's.
"""
import importlib.util
import sys

REFERENCE_MODULE = "kbox_reference"
CANDIDATE_MODULE = "kbox_candidate"


def load_module(name, path):
    """Executes the file at `path` as module `name`; returns the module.

    Exceptions from the file's top-level code propagate unchanged; the
    half-initialised module is removed from sys.modules first."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError("cannot load %s as a module" % path)
    module = importlib.util.module_from_spec(spec)  # sets __file__ = path
    # Registered before executing: dataclasses, pickling and typing look the
    # module up by name while its body runs.
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


class MissingDefinition(Exception):
    """The client's file lacks a name the KernelBench format requires."""


def require(module, name, what):
    if not hasattr(module, name):
        raise MissingDefinition("%s defines no %s" % (what, name))
    return getattr(module, name)
