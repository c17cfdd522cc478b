"""Compares the candidate's outputs with the reference's (one TrialResult).

Values are compared in float64 on the CPU with torch.allclose(equal_nan=True)
semantics: |d| <= atol + rtol*|ref| for finite pairs, exact equality for
infinities, NaN only where the reference has NaN.
"""
import torch


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


def _as_f64(t):
    t = t.detach().to("cpu")
    if t.is_complex():
        t = torch.view_as_real(t.to(torch.complex128))
    return t.to(torch.float64)


def _unravel(flat_index, shape):
    index = []
    for dim in reversed(shape):
        index.append(flat_index % dim if dim else 0)
        flat_index = flat_index // dim if dim else 0
    return list(reversed(index))


def _scalar_tensor(x):
    return torch.tensor(x) if isinstance(x, (bool, int, float)) else None


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
    total = 0
    mismatched = 0
    max_abs = 0.0
    max_rel = 0.0
    nonfinite_mismatch = 0
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
        rf, cf = _as_f64(r), _as_f64(c)
        total += rf.numel()
        if rf.numel() == 0:
            continue
        finite = torch.isfinite(rf) & torch.isfinite(cf)
        both_nan = torch.isnan(rf) & torch.isnan(cf)
        diff = (cf - rf).abs()
        # Identical values (same infinity, both NaN) differ by 0, not NaN.
        same = (rf == cf) | both_nan
        diff = torch.where(same, torch.zeros_like(diff), diff)
        close = torch.where(finite, diff <= atol + rtol * rf.abs(), same)
        bad = ~close
        n_bad = int(bad.sum())
        mismatched += n_bad
        nonfinite_mismatch += int((bad & ~finite).sum())
        max_abs = _nanmax(max_abs, diff)
        max_rel = _nanmax(max_rel, diff / (rf.abs() + 1e-12))
        if n_bad and "first_mismatch" not in result:
            flat = int(bad.reshape(-1).nonzero()[0])
            shape = _shape(rf)
            result["first_mismatch"] = {
                "output_index": i,
                "index": _unravel(flat, shape),
                "expected": float(rf.reshape(-1)[flat]),
                "actual": float(cf.reshape(-1)[flat]),
            }
    if nonfinite_mismatch:
        failures.append("NaN/Inf placement differs at %d element(s)" % nonfinite_mismatch)
    result["max_abs_diff"] = max_abs
    result["max_rel_diff"] = max_rel
    result["mismatch_fraction"] = (mismatched / float(total)) if total else 0.0
    result["failure"] = "; ".join(failures)
    result["passed"] = not failures and mismatched == 0
    return result


def _nanmax(current, t):
    """max(current, t.max()) where a NaN anywhere makes the result NaN."""
    if current != current:
        return current
    m = float(t.max())
    if m != m:
        return m
    return max(current, m)
