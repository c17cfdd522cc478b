"""A GCC precompiled header of kbox's light <torch/extension.h> (docs/compile-speed.md).

Built by a trusted process kboxd starts at start-up (kbox_pch.py), never in a
job: a PCH is compiler input for every later build. The layout under kboxd's
`<work_dir>/pch`:

  <key>/torch/extension.h            a copy of light_include/torch/extension.h
  <key>/torch/extension.h.gch/O0.gch for builds without -O (torch's default)
  <key>/torch/extension.h.gch/O2.gch for builds with -O1/-O2/-O3
  <key>/manifest.json                what went in, and each .gch's size

`key` is a digest of everything that affects the PCH: the header's bytes, the
torch version, the compiler's identity and the exact flags. GCC looks for
`extension.h.gch` beside the `extension.h` an `#include` resolves to, so the
compile stage passes `<key>` as the include directory in place of
light_include. A `.gch` directory holds one PCH per variant and GCC takes the
first one valid for the command line (same compiler binary, same macros:
`__OPTIMIZE__` tells -O0 from -O1..3, hence two), else parses the header.

The compile stage gets `<key>` read-only. A truncated .gch makes GCC fail
rather than parse (checked): the harness compares every .gch's size with the
manifest first, and a build that still fails because of one (a corrupt file
of the right size) is built again exactly as asked, like any failed light try.
"""
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from . import light_headers

HEADER_NAME = os.path.join("torch", "extension.h")
LIGHT_HEADER = os.path.join(light_headers.LIGHT_INCLUDE, HEADER_NAME)
MANIFEST = "manifest.json"

# (file name in the .gch directory, extra_cflags of the variant). GCC checks
# macros, not the -O level: one optimised PCH serves -O1, -O2 and -O3.
VARIANTS = (("O0", []), ("O2", ["-O2"]))

# The compile stage report's `precompiled_header` field.
OFFERED = "offered"    # the light builds got the PCH directory; GCC decides per command
INVALID = "invalid"    # the spec named one that failed the check: light header without it


def torch_compile_command(extra_cflags):
    """(cxx, cflags, post_cflags): what torch's cpp_extension passes g++ for a
    load_inline/load build with these extra_cflags and no include paths of
    the caller's, taken from the build.ninja torch itself writes, less
    -DTORCH_EXTENSION_NAME=<name>. That macro differs per build; a PCH built
    without it is valid for any name, as the light header never uses it."""
    import torch.utils.cpp_extension as ce
    with tempfile.TemporaryDirectory(prefix="kbox-pch-flags-") as tmp:
        source = os.path.join(tmp, "flags.cpp")
        open(source, "w").close()
        ninja = os.path.join(tmp, "build.ninja")
        ce._write_ninja_file_to_build_library(**_writer_arguments(
            ce._write_ninja_file_to_build_library, ninja, source, extra_cflags))
        values = {}
        with open(ninja, encoding="utf-8") as f:
            for line in f:
                name, sep, value = line.partition(" = ")
                if sep and name in ("cxx", "cflags", "post_cflags"):
                    values[name] = value.rstrip("\n")
    cflags = [a for a in shlex.split(values.get("cflags", ""), posix=True)
              if not a.startswith("-DTORCH_EXTENSION_NAME=")]
    return values.get("cxx", "c++"), cflags, shlex.split(values.get("post_cflags", ""))


def _writer_arguments(writer, ninja, source, extra_cflags):
    """Keyword arguments for torch's private ninja writer, by parameter name:
    its positional list grew between versions (torch 2.x added SYCL's)."""
    import inspect
    known = {"path": ninja, "name": "kbox_pch_flags", "sources": [source],
             "extra_cflags": list(extra_cflags), "extra_ldflags": [], "extra_include_paths": [],
             "is_standalone": False}
    arguments = {}
    for name, param in inspect.signature(writer).parameters.items():
        if name in known:
            arguments[name] = known[name]
        elif name.startswith("extra_"):
            arguments[name] = []       # extra_cuda_cflags, extra_sycl_cflags, ...
        elif name.startswith("with_"):
            arguments[name] = False    # with_cuda, with_sycl: g++'s flags alone
        elif param.default is inspect.Parameter.empty:
            raise RuntimeError("torch's ninja writer wants %r, unknown to kbox" % name)
    return arguments


def compiler_identity(cxx):
    """The resolved compiler binary and its --version line: GCC accepts a PCH
    only from the same binary; the key changes with an upgrade."""
    path = shutil.which(cxx) or cxx
    out = subprocess.run([path, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=False).stdout
    return "%s %s" % (os.path.realpath(path), out.splitlines()[0] if out else "")


def describe():
    """Everything the PCH depends on, as the manifest records it."""
    import torch
    with open(LIGHT_HEADER, "rb") as f:
        header = f.read()
    variants = {}
    cxx = "c++"
    for name, extra in VARIANTS:
        cxx, cflags, post = torch_compile_command(extra)
        variants[name] = {"cflags": cflags, "post_cflags": post}
    return {"header_sha256": hashlib.sha256(header).hexdigest(),
            "torch": torch.__version__, "cxx": cxx,
            "compiler": compiler_identity(cxx), "variants": variants}


def key_of(description):
    text = json.dumps(description, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:24]


def _compile(description, out_dir):
    """Builds every variant into out_dir (in parallel). Raises RuntimeError
    with the compiler's output when one fails."""
    header = os.path.join(out_dir, HEADER_NAME)
    gch_dir = header + ".gch"
    os.makedirs(gch_dir)
    shutil.copyfile(LIGHT_HEADER, header)
    procs = []
    for name, variant in description["variants"].items():
        # The shape of torch's ninja rule ($cxx $cflags -c $in -o $out
        # $post_cflags), compiling the header as a header.
        argv = ([shutil.which(description["cxx"]) or description["cxx"], "-x", "c++-header"] +
                variant["cflags"] + ["-c", header, "-o", os.path.join(gch_dir, name + ".gch")] +
                variant["post_cflags"])
        procs.append((name, subprocess.Popen(argv, stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, text=True)))
    failures = []
    for name, proc in procs:
        output, _ = proc.communicate()
        if proc.returncode != 0:
            failures.append("%s: exit %d: %s" % (name, proc.returncode, output.strip()[-2000:]))
    if failures:
        raise RuntimeError("; ".join(failures))
    sizes = {name + ".gch": os.path.getsize(os.path.join(gch_dir, name + ".gch"))
             for name in description["variants"]}
    manifest = dict(description, gch_bytes=sizes)
    with open(os.path.join(out_dir, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, sort_keys=True, indent=1)
    for dirpath, dirnames, filenames in os.walk(out_dir):
        os.chmod(dirpath, 0o755)  # the sandbox's uid reads it
        for name in filenames:
            os.chmod(os.path.join(dirpath, name), 0o644)


def build(root):
    """The PCH directory for this toolchain under root: reused when a
    complete one is there, built otherwise. Other entries of root (stale
    keys, unfinished builds) are removed: only this process writes there."""
    description = describe()
    key = key_of(description)
    final = os.path.join(root, key)
    os.makedirs(root, exist_ok=True)
    for entry in os.listdir(root):
        if entry != key:
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)
    if check(final) == "":
        return final
    shutil.rmtree(final, ignore_errors=True)
    partial = os.path.join(root, ".partial-%s-%d" % (key, os.getpid()))
    try:
        _compile(description, partial)
        os.rename(partial, final)  # readers see a whole directory or none
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


def check(pch_dir):
    """"" when pch_dir holds a complete PCH of the light header this harness
    ships, else why not. Cheap (no hashing of the .gch files): their sizes
    must be the manifest's, which catches a truncated file."""
    if not pch_dir:
        return "none"
    try:
        with open(os.path.join(pch_dir, MANIFEST), encoding="utf-8") as f:
            manifest = json.load(f)
        with open(os.path.join(pch_dir, HEADER_NAME), "rb") as f:
            copy = f.read()
        with open(LIGHT_HEADER, "rb") as f:
            if f.read() != copy:
                return "its extension.h is not the light header"
        gch_dir = os.path.join(pch_dir, HEADER_NAME) + ".gch"
        for name, size in manifest["gch_bytes"].items():
            if os.path.getsize(os.path.join(gch_dir, name)) != size:
                return "%s is not the size the manifest records" % name
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        return "%s: %s" % (type(e).__name__, e)
    return ""


def main(argv):
    if len(argv) != 2 or argv[0] != "--root":
        print("usage: kbox_pch.py --root DIR", file=sys.stderr)
        return 2
    try:
        path = build(argv[1])
    except Exception as e:
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, str(e)[-4000:])}))
        return 1
    print(json.dumps({"dir": path}))
    return 0
