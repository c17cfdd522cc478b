"""The candidate generator of scripts/kbox-bench, without compiling anything:
every candidate it can produce is distinct in its kernel code (so the build
cache cannot serve one for another), parses as KernelBench's format, and passes
kboxd's strict static anti-cheat checks (kbox-policy anticheat, the checker
kboxd runs); its references are the real KernelBench files.

Paths: KBOX_BIN_DIR (default <repo>/build/bin), KBOX_SHARED_DIR (default <repo>/../shared).
"""
import ast
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import kbox_bench_candidates as gen  # noqa: E402

SHARED = os.path.abspath(os.environ.get("KBOX_SHARED_DIR") or os.path.join(REPO, "..", "shared"))
POLICY = os.path.join(os.environ.get("KBOX_BIN_DIR") or os.path.join(REPO, "build", "bin"), "kbox-policy")
BACKENDS = ("cpu", "cuda")


LEVELS = (1, 2)


def every_candidate(backend, scale=1):
    return gen.generate(gen.max_candidates(backend, SHARED, LEVELS), backend, SHARED, scale, LEVELS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_kernels_are_pairwise_distinct(backend):
    cands = every_candidate(backend)
    assert len(cands) > 300
    # The kernel code itself differs, not only the extension's name or a comment.
    assert len({c["kernel_source"] for c in cands}) == len(cands)
    assert len({c["candidate_source"] for c in cands}) == len(cands)
    assert len({c["id"] for c in cands}) == len(cands)


@pytest.mark.parametrize("backend", BACKENDS)
def test_candidates_parse_as_kernelbench_format(backend):
    for c in every_candidate(backend):
        tree = ast.parse(c["candidate_source"])
        classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
        assert classes == {"ModelNew"}, c["id"]
        assert "load_inline(" in c["candidate_source"]
        if backend == "cuda":
            # A kernel the launch names, with a valid C++ identifier (the static
            # checks do not compile, so a name like 20_relu_kernel passes them).
            kernels = re.findall(r"__global__ void (\w+)\(", c["kernel_source"])
            assert len(kernels) == 1 and re.match(r"[A-Za-z_]\w*$", kernels[0]), c["id"]
            assert kernels[0] + "<<<" in c["kernel_source"], c["id"]
        else:
            assert "cpp_sources=_source" in c["candidate_source"]


def test_references_are_the_kernelbench_files():
    pairs = gen.problem_set(SHARED, LEVELS)
    assert len(pairs) >= 15
    for p, _ in pairs:
        assert os.path.isfile(p.path), p.path
        assert os.path.basename(os.path.dirname(p.path)) in ("level1", "level2")
        with open(p.path) as f:
            text = f.read()
        source, changes = gen.reference_source(p, scale=1)
        assert source == text and changes == {}
        names = {n.name for n in ast.parse(source).body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
        assert {"Model", "get_inputs", "get_init_inputs"} <= names, p.path


def test_scale_shrinks_only_the_size_constants():
    p = gen.problems(SHARED)[0]
    full, _ = gen.reference_source(p, scale=1)
    small, changes = gen.reference_source(p, scale=64)
    assert changes == {"batch_size": (4096, 64), "dim": (393216, 6144)}
    assert "batch_size = 64\n" in small and "dim = 6144\n" in small
    assert small.replace("batch_size = 64", "batch_size = 4096").replace("dim = 6144", "dim = 393216") == full
    linear = gen.kbox_bench_linear.problems(SHARED)[0]
    small, changes = gen.reference_source(linear, scale=64)
    assert changes == {"batch_size": (1024, 16), "in_features": (8192, 128), "out_features": (8192, 128)}
    assert "bias_shape = (out_features,)" in small


def test_generate_refuses_more_than_it_can_make_distinct():
    with pytest.raises(ValueError):
        gen.generate(gen.max_candidates("cpu", SHARED, LEVELS) + 1, "cpu", SHARED, 1, LEVELS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_candidate_passes_the_strict_static_checks(backend, tmp_path):
    assert os.access(POLICY, os.X_OK), "build kbox-policy first: %s" % POLICY
    for c in every_candidate(backend, scale=64):
        cand, ref = tmp_path / "candidate.py", tmp_path / "reference.py"
        cand.write_text(c["candidate_source"])
        ref.write_text(c["reference_source"])
        p = subprocess.run([POLICY, "anticheat", str(cand), "--reference", str(ref), "--backend", backend,
                            "--profile", "strict"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        assert p.returncode == 0 and "not rejected (0 findings" in p.stdout, (c["id"], p.stdout)
