"""Typed views of kboxd's EvaluateResult, beside the dicts the client returns.

    from kbox_client import Client, Result
    result = Result.from_dict(client.evaluate(...))
    if result.correct: print(result.speedup, result.candidate_timing.lower_quartile_ms)

Field names are the proto's (proto/kbox/v1/evaluation.proto, proto3 JSON
names): tests/clients/python/test_pure_functions.py checks each against the
proto, so a renamed field fails there rather than reading as its default.
A field the dict lacks (proto3 JSON leaves out defaults) takes its default;
fields kboxd adds later are kept in `raw` until a class names them.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple, Type, TypeVar

T = TypeVar("T")


def _read(cls: Type[T], doc: Optional[dict]) -> T:
    """An instance of dataclass `cls` from a proto3 JSON dict: each field
    from its name, nested messages and repeated ones converted, 64-bit
    integers (strings in proto3 JSON) made ints."""
    doc = doc or {}
    values: Dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "raw" or f.name not in doc:
            continue
        value = doc[f.name]
        nested = _NESTED.get((cls.__name__, f.name))
        if nested is not None:
            value = tuple(_read(nested, v) for v in value) if isinstance(value, list) else _read(nested, value)
        elif f.type in ("int", "Optional[int]") and isinstance(value, str):
            value = int(value)
        values[f.name] = value
    if any(f.name == "raw" for f in dataclasses.fields(cls)):
        values["raw"] = doc
    return cls(**values)


@dataclasses.dataclass(frozen=True)
class Timing(object):
    """kbox.v1.Timing: one side's timed calls (milliseconds)."""
    count: int = 0
    method: str = ""
    median_ms: float = 0.0
    mean_ms: float = 0.0
    min_ms: float = 0.0
    lower_quartile_ms: float = 0.0  # what speedup is computed from
    lower_quartile_ci_low_ms: float = 0.0
    lower_quartile_ci_high_ms: float = 0.0
    source: str = ""  # reference only: "live" or "cache"


@dataclasses.dataclass(frozen=True)
class Verdict(object):
    """kbox.v1.Verdict: one anti-cheat finding."""
    rule_id: str = ""
    severity: str = ""  # INFO, SUSPICIOUS or REJECT
    message: str = ""
    line: int = 0
    phase: str = ""  # PHASE_STATIC, PHASE_COMPILE or PHASE_RUN


@dataclasses.dataclass(frozen=True)
class TrialResult(object):
    """kbox.v1.TrialResult: one correctness trial."""
    seed: int = 0
    passed: bool = False
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    failure: str = ""
    distribution: str = ""


@dataclasses.dataclass(frozen=True)
class PhaseDurations(object):
    """kbox.v1.PhaseDurations (milliseconds)."""
    static_ms: float = 0.0
    compile_ms: float = 0.0
    queue_wait_ms: float = 0.0
    run_ms: float = 0.0
    total_ms: float = 0.0
    device_turn_ms: float = 0.0


@dataclasses.dataclass(frozen=True)
class Result(object):
    """kbox.v1.EvaluateResult. `raw` is the dict it was read from."""
    job_id: str = ""
    status: str = ""
    rewardable: bool = False
    message: str = ""
    speedup: float = 0.0
    speedup_ci_low: float = 0.0
    speedup_ci_high: float = 0.0
    candidate_timing: Timing = dataclasses.field(default_factory=Timing)
    reference_timing: Timing = dataclasses.field(default_factory=Timing)
    trials: Tuple[TrialResult, ...] = ()
    verdicts: Tuple[Verdict, ...] = ()
    durations: PhaseDurations = dataclasses.field(default_factory=PhaseDurations)
    build_cache_hit: bool = False
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_dict(cls, doc: dict) -> "Result":
        return _read(cls, doc)

    @property
    def correct(self) -> bool:
        """Correct and rewardable: what a reward may be given for."""
        return self.status == "CORRECT" and self.rewardable

    @property
    def candidates_fault(self) -> bool:
        """Whether the status says something about the candidate (not
        INFRA_ERROR, REFERENCE_ERROR or CANCELLED)."""
        return self.status not in ("INFRA_ERROR", "REFERENCE_ERROR", "CANCELLED", "")


_NESTED = {
    ("Result", "candidate_timing"): Timing,
    ("Result", "reference_timing"): Timing,
    ("Result", "trials"): TrialResult,
    ("Result", "verdicts"): Verdict,
    ("Result", "durations"): PhaseDurations,
}

# The proto message each class reads (for the test that checks the names).
PROTO_MESSAGES = {Result: "EvaluateResult", Timing: "Timing", Verdict: "Verdict",
                  TrialResult: "TrialResult", PhaseDurations: "PhaseDurations"}
