"""KernelBench's evaluation entry point, answered by kboxd.

A KernelBench pipeline switches by changing one import:

    from kernelbench.eval import eval_kernel_against_ref      # before
    from kbox_client.kernelbench import eval_kernel_against_ref  # after

The signature is KernelBench's (src/kernelbench/eval.py) and the result has
the fields of its KernelExecResult. The endpoint comes from $KBOX_URL (and the
token from $KBOX_TOKEN), or from configure(). What differs, on purpose:

- runtime and ref_runtime are kboxd's mean times in milliseconds (what
  KernelBench fills them with, its "in us" comment notwithstanding), measured
  in kboxd's sandbox with its own timing method; runtime_stats carries
  KernelBench's keys (mean, std, min, max, num_trials, hardware, device) plus
  kboxd's median and its confidence interval.
- ref_runtime is filled whenever kboxd timed the reference, which it does
  with every timed job.
- An anti-cheat rejection is correctness=False with
  metadata["anticheat_rejected"]; it never reaches KernelBench's pipeline as a
  pass.
- kbox's own failures (INFRA_ERROR, after the client's retries) raise
  kbox_client.InfraError, and a broken reference raises ReferenceFailed:
  neither is the candidate's outcome, so neither becomes a result a trainer
  could score.
- build_dir and timing_method are accepted and not used (kboxd has its own
  build cache and timer); device picks nothing (kboxd schedules GPUs).
"""
from __future__ import annotations

import dataclasses
import json
import threading
from typing import Dict, Optional, Sequence, Union

from .client import Client
from .errors import InfraError, ReferenceFailed
from .messages import make_request
from .retry import RetryPolicy

# KernelBench's backend names -> kboxd's. "cpu" is kbox's own addition.
_BACKENDS = {"cuda": "cuda", "triton": "triton", "cpu": "cpu"}


@dataclasses.dataclass
class KernelExecResult(object):
    """KernelBench's KernelExecResult, as a dataclass (no pydantic here)."""
    compiled: bool = False
    correctness: bool = False
    metadata: dict = dataclasses.field(default_factory=dict)
    runtime: float = -1.0       # ms, candidate mean; -1 when not measured
    runtime_stats: dict = dataclasses.field(default_factory=dict)
    ref_runtime: float = -1.0   # ms, reference mean; -1 when not measured
    ref_runtime_stats: dict = dataclasses.field(default_factory=dict)

    def model_dump(self) -> dict:
        return dataclasses.asdict(self)

    dict = model_dump  # pydantic v1's name

    def model_dump_json(self) -> str:
        return json.dumps(self.model_dump())

    json = model_dump_json


_lock = threading.Lock()
_client: Optional[Client] = None
_options: dict = {}


def configure(url: Union[None, str, Sequence[str]] = None, *, token: Optional[str] = None,
              client: Optional[Client] = None, retry: Optional[RetryPolicy] = None,
              timeout_s: Optional[float] = None, anticheat_profile: Optional[str] = None,
              anticheat_overrides: Optional[Dict[str, str]] = None) -> Client:
    """Sets the kboxd endpoint(s) the module-level function uses (default:
    $KBOX_URL), or a ready Client, and what every evaluation asks for: the
    anti-cheat profile and per-rule overrides (default: the daemon's
    profile), the longest wait for a result. Returns the client in use."""
    global _client
    with _lock:
        _client = client or Client(url, token=token, retry=retry)
        _options.clear()
        if timeout_s is not None:
            _options["timeout_s"] = timeout_s
        if anticheat_profile:
            _options["anticheat_profile"] = anticheat_profile
        if anticheat_overrides:
            _options["anticheat_overrides"] = dict(anticheat_overrides)
        return _client


def _current_client() -> Client:
    global _client
    with _lock:
        if _client is None:
            _client = Client()
        return _client


def eval_kernel_against_ref(original_model_src: str, custom_model_src: str, seed_num: int = 42,
                            num_correct_trials: int = 1, num_perf_trials: int = 10,
                            measure_performance: bool = False, timing_method: str = "cuda_event",
                            verbose: bool = False, build_dir=None, device=None,
                            backend: str = "cuda", precision="fp32",
                            check_for_excessive_speedup: bool = True,
                            excessive_speedup_threshold: float = 10, *,
                            client: Optional[Client] = None,
                            idempotency_key: Optional[str] = None) -> KernelExecResult:
    """Evaluates custom_model_src (ModelNew) against original_model_src
    (Model) in kboxd; see the module comment for what differs from
    KernelBench. `client` and `idempotency_key` are kbox's additions."""
    del build_dir, timing_method  # kboxd has its own build cache and timing method
    kb_backend = str(backend).lower()
    if kb_backend not in _BACKENDS:
        raise ValueError("backend %r is not served by kbox (use %s)"
                         % (backend, ", ".join(sorted(_BACKENDS))))
    client = client or _current_client()
    request = make_request(original_model_src, custom_model_src, _BACKENDS[kb_backend],
                           precision=precision, correctness_trials=num_correct_trials,
                           seed=seed_num, measure_performance=bool(measure_performance),
                           performance_trials=num_perf_trials if measure_performance else None,
                           anticheat_profile=_options.get("anticheat_profile"),
                           anticheat_overrides=_options.get("anticheat_overrides"))
    result = client.evaluate(request, idempotency_key=idempotency_key,
                             timeout_s=_options.get("timeout_s"))
    kb = to_kernel_exec_result(result, device=device, measure_performance=measure_performance,
                               check_for_excessive_speedup=check_for_excessive_speedup,
                               excessive_speedup_threshold=excessive_speedup_threshold)
    if verbose:
        print("[kbox] job %s: %s%s" % (result.get("job_id"), result.get("status"),
                                       " (%s)" % result["message"] if result.get("message") else ""))
    return kb


def to_kernel_exec_result(result: dict, device=None, measure_performance: bool = True,
                          check_for_excessive_speedup: bool = True,
                          excessive_speedup_threshold: float = 10) -> KernelExecResult:
    """An EvaluateResult as KernelBench's KernelExecResult (the metadata keys
    are KernelBench's where it has one for the fact)."""
    status = result.get("status")
    if status == "INFRA_ERROR":
        raise InfraError(result)
    if status == "REFERENCE_ERROR":
        raise ReferenceFailed(result)
    if status == "CANCELLED":
        raise ValueError("job %s was cancelled by its client: it has no outcome"
                         % result.get("job_id", "?"))
    fingerprint = result.get("fingerprint") or {}
    metadata = {"hardware": fingerprint.get("device_name", ""),
                "device": str(device) if device is not None else _device_of(fingerprint)}
    out = KernelExecResult(metadata=metadata)
    error = result.get("runtime_error") or {}
    static_reject = any(v.get("severity") == "REJECT" and v.get("phase") == "PHASE_STATIC"
                        for v in result.get("verdicts", []))
    compile_phase_failure = error.get("phase") == "PHASE_COMPILE"
    out.compiled = status not in ("COMPILE_ERROR",) and not static_reject and not compile_phase_failure
    out.correctness = status == "CORRECT" and bool(result.get("rewardable"))

    trials = result.get("trials", [])
    if trials:
        passed = sum(1 for t in trials if t.get("passed"))
        metadata["correctness_trials"] = "(%d / %d)" % (
            passed, (result.get("settings") or {}).get("correctness_trials", len(trials)))
    if status == "COMPILE_ERROR":
        log = result.get("compile_log") or {}
        metadata["compilation_error_name"] = error.get("type") or "CompileError"
        metadata["compilation_error"] = log.get("text") or result.get("message", "")
    elif status == "INCORRECT":
        metadata["correctness_issue"] = result.get("message", "Output mismatch")
        metadata["correctness_issue_name"] = "correctness_issue"
        failed = [t for t in trials if not t.get("passed")]
        metadata["max_difference"] = ["%.6f" % t.get("max_abs_diff", 0.0) for t in failed]
    elif status in ("RUNTIME_ERROR", "TIMEOUT", "SANDBOX_VIOLATION"):
        metadata["runtime_error"] = error.get("message") or result.get("message", "")
        metadata["runtime_error_name"] = error.get("type") or status
        if error.get("traceback"):
            metadata["runtime_error_traceback"] = error["traceback"]
        if status == "TIMEOUT":
            metadata["error"] = "Evaluation timed out"
    elif status == "REJECTED":
        metadata["anticheat_rejected"] = [
            {"rule_id": v.get("rule_id"), "message": v.get("message"), "line": v.get("line", 0)}
            for v in result.get("verdicts", []) if v.get("severity") == "REJECT"]
    metadata["kbox"] = {"job_id": result.get("job_id"), "status": status,
                        "rewardable": bool(result.get("rewardable")),
                        "message": result.get("message", ""),
                        "build_cache_hit": bool(result.get("build_cache_hit"))}

    if measure_performance and out.correctness and result.get("candidate_timing"):
        out.runtime_stats = _stats(result["candidate_timing"], metadata)
        out.runtime = out.runtime_stats["mean"]
        if result.get("reference_timing"):
            out.ref_runtime_stats = _stats(result["reference_timing"], metadata)
            out.ref_runtime = out.ref_runtime_stats["mean"]
            if (check_for_excessive_speedup and out.runtime > 0
                    and out.ref_runtime / out.runtime > excessive_speedup_threshold):
                metadata["excessive_speedup"] = True
    return out


def _stats(timing: dict, metadata: dict) -> dict:
    return {"mean": timing.get("mean_ms", 0.0), "std": timing.get("std_ms", 0.0),
            "min": timing.get("min_ms", 0.0), "max": timing.get("max_ms", 0.0),
            "num_trials": timing.get("count", 0), "hardware": metadata["hardware"],
            "device": metadata["device"], "median": timing.get("median_ms", 0.0),
            "median_ci": [timing.get("median_ci_low_ms", 0.0), timing.get("median_ci_high_ms", 0.0)],
            "timing_method": timing.get("method", "")}


def _device_of(fingerprint: dict) -> str:
    if fingerprint.get("device_name", "cpu") == "cpu":
        return "cpu"
    return "cuda:%d" % int(fingerprint.get("device_index", 0))
