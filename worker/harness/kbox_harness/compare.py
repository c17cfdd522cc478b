"""Compares the candidate's outputs with the reference's (one TrialResult).

Values are compared in float64 with torch.allclose(equal_nan=True)
semantics: |d| <= atol + rtol*|ref| for finite pairs, exact equality for
infinities, NaN only where the reference has NaN.

The arithmetic runs on the tensors' own device (a GPU output never goes to
the host: only max abs/rel error, mismatch counts and the first mismatch
come back), over the flattened tensor in chunks of CHUNK_ELEMENTS, so the
float64 copies take a bounded amount of extra memory whatever the output's
size (a 6.4 GB float32 output would be 12.8 GB in float64). IEEE float64
gives the same answer on either device, chunked or not: every figure is an
elementwise test, a count or a maximum.
"""
import math

import torch

# Elements per chunk on a GPU: the float64 working set of a chunk is a few
# tensors of 8 bytes an element (about 1 GiB in all at 16 Mi), small next to
# a GPU's memory and large enough that per-chunk launches and the two host
# syncs per chunk cost nothing measurable.
CHUNK_ELEMENTS = 1 << 24
# On the CPU, chunks that stay in cache (2 MiB a float64 tensor): 4-5x faster
# than 16 Mi on a 25 MB output (docs/benchmarks.md).
CPU_CHUNK_ELEMENTS = 1 << 18

def flatten(out):
    """Outputs as a flat list: a tensor, or nested tuples/lists of them."""
    if isinstance(out, (tuple, list)):
        items = []
        for o in out:
            items.extend(flatten(o))
        return items
    return [out]


def _shape(t):
    return list(t.shape)


def flat_f64_chunks(t, device=None, chunk=None):
    """(offset, float64 1-D chunk) over t flattened, on t's device (or
    `device`). A complex tensor is read as its real view (real, imaginary
    pairs), as compare_outputs reports it."""
    flat = t.detach().reshape(-1)
    where = device if device is not None else flat.device
    chunk = chunk or (CPU_CHUNK_ELEMENTS if torch.device(where).type == "cpu" else CHUNK_ELEMENTS)
    complex_ = flat.is_complex()
    step = max(1, chunk // 2) if complex_ else chunk
    for start in range(0, flat.numel(), step):
        part = flat[start:start + step]
        if device is not None:
            part = part.to(device)
        if complex_:
            part = torch.view_as_real(part.to(torch.complex128)).reshape(-1)
            yield 2 * start, part
        else:
            yield start, part.to(torch.float64)


def _unravel(flat_index, shape):
    index = []
    for dim in reversed(shape):
        index.append(flat_index % dim if dim else 0)
        flat_index = flat_index // dim if dim else 0
    return list(reversed(index))


def _scalar_tensor(x):
    return torch.tensor(x) if isinstance(x, (bool, int, float)) else None


class _Tally(object):
    """The running figures of one comparison."""

    def __init__(self):
        self.total = 0
        self.mismatched = 0
        self.nonfinite_mismatch = 0
        self.max_abs = 0.0
        self.max_rel = 0.0


def _compare_chunk(rf, cf, atol, rtol):
    """(bad mask or None when none is bad, [mismatches, non-finite
    mismatches, max abs diff, max rel diff] as 0-d float64 tensors) of two
    float64 chunks."""
    diff = (cf - rf).abs_()
    # A NaN or an infinity on either side makes the difference non-finite,
    # and a finite one means both sides are finite; where the largest
    # difference is finite (a NaN anywhere makes it NaN) the full rule below
    # reduces to |d| <= atol + rtol*|ref| (d = 0 where they are equal).
    max_abs = diff.max()
    if math.isfinite(float(max_abs)):
        ref_abs = rf.abs()
        bad = diff > ref_abs * rtol + atol
        n_bad = bad.sum()
        max_rel = diff.div_(ref_abs.add_(1e-12)).max()
        return bad, [n_bad, torch.zeros_like(n_bad), max_abs, max_rel]
    finite = torch.isfinite(rf) & torch.isfinite(cf)
    both_nan = torch.isnan(rf) & torch.isnan(cf)
    # Identical values (same infinity, both NaN) differ by 0, not NaN.
    same = (rf == cf) | both_nan
    diff = torch.where(same, torch.zeros_like(diff), diff)
    close = torch.where(finite, diff <= atol + rtol * rf.abs(), same)
    bad = ~close
    figures = [bad.sum(), (bad & ~finite).sum(), diff.max(), (diff / (rf.abs() + 1e-12)).max()]
    return bad, figures


def _compare_tensor(i, r, c, atol, rtol, tally, result):
    """Adds tensor pair i (same shape and dtype) to the tally; records the
    first mismatch in result."""
    shape = _shape(r) + ([2] if r.is_complex() else [])
    c_chunks = flat_f64_chunks(c, device=r.device)
    for (start, rf), (_, cf) in zip(flat_f64_chunks(r), c_chunks):
        tally.total += rf.numel()
        bad, figures = _compare_chunk(rf, cf, atol, rtol)
        # One transfer of four scalars per chunk (counts are exact in float64
        # up to 2**53 elements).
        n_bad, n_nonfinite, max_abs, max_rel = torch.stack(
            [f.to(torch.float64) for f in figures]).tolist()
        tally.mismatched += int(n_bad)
        tally.nonfinite_mismatch += int(n_nonfinite)
        tally.max_abs = _nanmax(tally.max_abs, max_abs)
        tally.max_rel = _nanmax(tally.max_rel, max_rel)
        if n_bad and "first_mismatch" not in result:
            # argmax of a 0/1 tensor is its first 1 (PyTorch returns the
            # first maximal index).
            local = int(torch.argmax(bad.to(torch.uint8)))
            pair = torch.stack([rf[local], cf[local]]).tolist()
            result["first_mismatch"] = {
                "output_index": i,
                "index": _unravel(start + local, shape),
                "expected": pair[0],
                "actual": pair[1],
            }


def compare_outputs(ref_out, cand_out, atol, rtol):
    """Returns the TrialResult fields (all but seed) as a dict."""
    refs, cands = flatten(ref_out), flatten(cand_out)
    result = {"passed": False, "max_abs_diff": 0.0, "max_rel_diff": 0.0,
              "mismatch_fraction": 0.0, "failure": ""}
    if len(refs) != len(cands):
        result["failure"] = "expected %d outputs, got %d" % (len(refs), len(cands))
        return result
    multi = len(refs) > 1
    failures = []
    tally = _Tally()
    for i, (r, c) in enumerate(zip(refs, cands)):
        where = "output %d: " % i if multi else ""
        if not isinstance(r, torch.Tensor):
            r = _scalar_tensor(r)
            if r is None:
                if refs[i] != cands[i]:
                    failures.append("%sexpected %r, got %r" % (where, refs[i], cands[i]))
                continue
            if not isinstance(c, torch.Tensor) and _scalar_tensor(c) is not None:
                c = _scalar_tensor(c)
        if not isinstance(c, torch.Tensor):
            failures.append("%sexpected a torch.Tensor, got %s" % (where, type(c).__name__))
            continue
        if _shape(c) != _shape(r):
            failures.append("%sshape mismatch: expected %s, got %s" % (where, _shape(r), _shape(c)))
            continue
        if c.dtype != r.dtype:
            failures.append("%sdtype mismatch: expected %s, got %s" % (where, r.dtype, c.dtype))
            continue
        with torch.no_grad():
            _compare_tensor(i, r, c, atol, rtol, tally, result)
    if tally.nonfinite_mismatch:
        failures.append("NaN/Inf placement differs at %d element(s)" % tally.nonfinite_mismatch)
    result["max_abs_diff"] = tally.max_abs
    result["max_rel_diff"] = tally.max_rel
    result["mismatch_fraction"] = (tally.mismatched / float(tally.total)) if tally.total else 0.0
    result["failure"] = "; ".join(failures)
    result["passed"] = not failures and tally.mismatched == 0
    return result


def _nanmax(current, m):
    """max(current, m) where a NaN on either side makes the result NaN."""
    if current != current:
        return current
    if m != m:
        return m
    return max(current, m)


def rounding_error(ref_out, ref_out64):
    """(largest |ref - ref64|, largest |ref|) over the floating-point outputs,
    finite elements of both sides only, where ref64 is the reference's
    output computed in float64 on the same inputs: the reference's own
    rounding error there. None when no output can be paired so (structure,
    shape or kind differ, or nothing finite)."""
    refs, refs64 = flatten(ref_out), flatten(ref_out64)
    if len(refs) != len(refs64):
        return None
    error, largest, paired = 0.0, 0.0, False
    with torch.no_grad():
        for r, r64 in zip(refs, refs64):
            if not isinstance(r, torch.Tensor) or not r.is_floating_point() or not r.numel():
                continue
            if not isinstance(r64, torch.Tensor) or not r64.is_floating_point() or r64.shape != r.shape:
                return None
            a, b = r.detach().double(), r64.detach().to(device=r.device, dtype=torch.float64)
            finite = torch.isfinite(a) & torch.isfinite(b)
            if not bool(finite.any()):
                continue
            error = max(error, float((a - b).abs()[finite].max()))
            largest = max(largest, float(a.abs()[finite].max()))
            paired = True
    return (error, largest) if paired else None
