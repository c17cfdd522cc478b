"""Request bodies in the proto3 JSON mapping of proto/kbox/v1 (field names as
in the .proto; uint64 as strings; enums by name)."""
from __future__ import annotations

from typing import Dict, Optional

BACKENDS = {"cpu": "BACKEND_CPU", "cuda": "BACKEND_CUDA", "triton": "BACKEND_TRITON"}
PRECISIONS = {"fp32": "PRECISION_FP32", "fp16": "PRECISION_FP16", "bf16": "PRECISION_BF16"}

# EvaluateResult.status values that are the candidate's outcome, as opposed to
# INFRA_ERROR (kbox failed: retry) and REFERENCE_ERROR (the problem is broken).
CANDIDATE_STATUSES = frozenset({"CORRECT", "COMPILE_ERROR", "RUNTIME_ERROR", "INCORRECT",
                                "TIMEOUT", "REJECTED", "SANDBOX_VIOLATION"})


def backend_name(backend: str) -> str:
    """"cuda" / "BACKEND_CUDA" -> "BACKEND_CUDA"."""
    b = str(backend)
    if b.upper() in BACKENDS.values():
        return b.upper()
    try:
        return BACKENDS[b.lower()]
    except KeyError:
        raise ValueError("unknown backend %r; use one of %s" % (backend, ", ".join(BACKENDS)))


def precision_name(precision) -> str:
    """"fp16" / "PRECISION_FP16" / torch.float16 -> "PRECISION_FP16" (torch is
    not imported: a dtype is known by its str())."""
    p = str(precision)
    by_dtype = {"torch.float32": "fp32", "torch.float": "fp32", "torch.float16": "fp16",
                "torch.half": "fp16", "torch.bfloat16": "bf16"}
    p = by_dtype.get(p, p)
    if p.upper() in PRECISIONS.values():
        return p.upper()
    try:
        return PRECISIONS[p.lower()]
    except KeyError:
        raise ValueError("unknown precision %r; use one of %s" % (precision, ", ".join(PRECISIONS)))


def make_request(reference_source: str, candidate_source: str, backend: str, *,
                 precision=None, correctness_trials: Optional[int] = None,
                 seed: Optional[int] = None, atol: Optional[float] = None,
                 rtol: Optional[float] = None, measure_performance: Optional[bool] = None,
                 performance_trials: Optional[int] = None, time_limit_s: Optional[int] = None,
                 client_request_id: Optional[str] = None, anticheat_profile: Optional[str] = None,
                 anticheat_overrides: Optional[Dict[str, str]] = None,
                 fresh_reference_timing: Optional[bool] = None,
                 speedup_precision: Optional[float] = None) -> dict:
    """An EvaluateRequest. Options left None are left to kboxd's defaults."""
    if not isinstance(reference_source, str) or not isinstance(candidate_source, str):
        raise TypeError("reference_source and candidate_source must be str")
    req = {"reference_source": reference_source, "candidate_source": candidate_source,
           "backend": backend_name(backend)}
    if precision is not None:
        req["precision"] = precision_name(precision)
    if correctness_trials is not None:
        req["correctness_trials"] = int(correctness_trials)
    if seed is not None:
        if int(seed) < 0 or int(seed) >= 2 ** 64:
            raise ValueError("seed must fit in 64 unsigned bits")
        req["seed"] = str(int(seed))  # uint64 travels as a JSON string
    if atol is not None:
        req["atol"] = float(atol)
    if rtol is not None:
        req["rtol"] = float(rtol)
    if measure_performance is not None:
        req["measure_performance"] = bool(measure_performance)
    if performance_trials is not None:
        req["performance_trials"] = int(performance_trials)
    if time_limit_s is not None:
        req["time_limit_s"] = int(time_limit_s)
    if client_request_id:
        req["client_request_id"] = client_request_id
    if anticheat_profile:
        req["anticheat_profile"] = anticheat_profile
    if anticheat_overrides:
        req["anticheat_overrides"] = dict(anticheat_overrides)
    if fresh_reference_timing is not None:
        req["fresh_reference_timing"] = bool(fresh_reference_timing)
    if speedup_precision is not None:
        req["speedup_precision"] = float(speedup_precision)
    return req


def make_check_request(candidate_source: str, backend: str, *,
                       reference_source: Optional[str] = None, precision=None,
                       anticheat_profile: Optional[str] = None,
                       anticheat_overrides: Optional[Dict[str, str]] = None,
                       client_request_id: Optional[str] = None) -> dict:
    """A CheckRequest (POST /v1/check: the static checks alone)."""
    req = {"candidate_source": candidate_source, "backend": backend_name(backend)}
    if reference_source:
        req["reference_source"] = reference_source
    if precision is not None:
        req["precision"] = precision_name(precision)
    if anticheat_profile:
        req["anticheat_profile"] = anticheat_profile
    if anticheat_overrides:
        req["anticheat_overrides"] = dict(anticheat_overrides)
    if client_request_id:
        req["client_request_id"] = client_request_id
    return req
