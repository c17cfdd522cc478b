"""The next turn of a multi-turn kernel-writing conversation, from a result.

    from kbox_client.feedback import next_turn_message
    message = next_turn_message(result)  # text for the model's next turn

What the model sees is what it can act on: the first compiler errors with
their lines, how far its output was off (and where, by index), the
anti-cheat rule that rejected it, or its speedup and what bounded its time.
What it must never see: kboxd's seeds (it could tune a candidate to the
inputs they draw) and the reference's values (it could return them). The
message is therefore built from the result's structured fields, not copied
from its free text: trial seeds, `first_mismatch.expected`/`actual`,
`settings` and `output_tail` are never read into it; failure clauses that
quote a non-tensor output's value are replaced by a description; and every
seed the result carries is scrubbed from the finished text as a last guard.
"""
from __future__ import annotations

import re
from typing import List, Optional

from .errors import InfraError, ReferenceFailed

# How much of a compile log the model gets.
MAX_COMPILE_ERRORS = 3
MAX_CONTEXT_LINES_PER_ERROR = 4
MAX_LOG_CHARS = 2500
MAX_TRACEBACK_LINES = 12
MIN_SCRUBBED_SEED_DIGITS = 4

_DIAGNOSTIC = re.compile(r"^(?P<where>[^\s:][^:]*?(?::\d+){1,2}|[^\s(]+\(\d+\)):\s*"
                         r"(?P<kind>fatal error|error|warning|note)\b", re.IGNORECASE)
_ERRORISH = re.compile(r"\berror\b", re.IGNORECASE)
# Build-tool lines that say nothing about the code.
_NOISE = re.compile(r"^(\[\d+/\d+\] |FAILED: |ninja: |c\+\+ \[command omitted\]|"
                    r"nvcc \[command omitted\]|subprocess\.CalledProcessError|"
                    r"RuntimeError: Error building extension|The above exception)")
# Trial failure clauses that describe structure, not values.
_STRUCTURAL = re.compile(r"^(output \d+: )?(shape mismatch|dtype mismatch|expected a torch\.Tensor"
                         r"|expected \d+ outputs|NaN/Inf placement)")


def next_turn_message(result: dict, candidate_source: Optional[str] = None) -> str:
    """The feedback for `result` (an EvaluateResult dict). With the
    candidate's source, a compile error also quotes its first failing line.

    Raises InfraError / ReferenceFailed for INFRA_ERROR / REFERENCE_ERROR:
    those are not the candidate's outcome and must not become a turn."""
    status = result.get("status")
    if status == "INFRA_ERROR":
        raise InfraError(result)
    if status == "REFERENCE_ERROR":
        raise ReferenceFailed(result)
    if status == "CANCELLED":
        raise ValueError("job %s was cancelled by its client: it has no outcome"
                         % result.get("job_id", "?"))
    build = {"CORRECT": _correct, "COMPILE_ERROR": _compile_error, "INCORRECT": _incorrect,
             "RUNTIME_ERROR": _runtime_error, "TIMEOUT": _timeout, "REJECTED": _rejected,
             "SANDBOX_VIOLATION": _sandbox_violation}.get(status)
    if build is None:
        raise ValueError("not an EvaluateResult with a known status: %r" % (status,))
    return scrub_seeds(build(result, candidate_source).rstrip() + "\n", result)


def scrub_seeds(text: str, result: dict) -> str:
    """`text` with every seed that `result` carries replaced by "<seed>".
    Seeds of fewer than MIN_SCRUBBED_SEED_DIGITS digits are left alone: they
    hide nothing (a thousand guesses find one), and scrubbing them would
    garble line numbers (KernelBench's default seed is 42)."""
    seeds = {str((result.get("settings") or {}).get("seed", ""))}
    seeds.update(str(t.get("seed", "")) for t in result.get("trials", []))
    for seed in sorted((s for s in seeds if len(s) >= MIN_SCRUBBED_SEED_DIGITS), key=len,
                       reverse=True):
        text = re.sub(r"(?<!\d)%s(?!\d)" % re.escape(seed), "<seed>", text)
    return text


# -- compile errors -----------------------------------------------------------------

def trim_compile_log(text: str, max_errors: int = MAX_COMPILE_ERRORS) -> str:
    """The first `max_errors` error diagnostics of a compiler log, each with
    the source and caret lines after it (and the "In function" line before
    it); build-tool noise dropped. Logs without compiler diagnostics (a
    Python traceback) keep their last lines, where the exception is."""
    lines = [l for l in text.splitlines() if not _NOISE.match(l.strip())]
    picked: List[str] = []
    errors = 0
    i = 0
    while i < len(lines) and errors < max_errors:
        m = _DIAGNOSTIC.match(lines[i].strip())
        if m and m.group("kind").lower() in ("error", "fatal error"):
            errors += 1
            if i > 0 and lines[i - 1].rstrip().endswith(":") and "In " in lines[i - 1]:
                picked.append(lines[i - 1])
            picked.append(lines[i])
            j = i + 1
            while (j < len(lines) and j - i <= MAX_CONTEXT_LINES_PER_ERROR
                   and not _DIAGNOSTIC.match(lines[j].strip())
                   and not lines[j].rstrip().endswith(":")):
                picked.append(lines[j])
                j += 1
            i = j
            continue
        i += 1
    if not picked:
        tail = [l for l in lines if l.strip()][-MAX_TRACEBACK_LINES:]
        picked = tail
    out = "\n".join(picked)
    if len(out) > MAX_LOG_CHARS:
        out = out[:MAX_LOG_CHARS].rstrip() + "\n[... cut]"
    return out


def _compile_error(result: dict, source: Optional[str]) -> str:
    log = result.get("compile_log") or {}
    parts = ["Your candidate did not compile."]
    trimmed = trim_compile_log(log.get("text", ""))
    if trimmed:
        parts.append("First errors (line numbers are lines of your candidate.py):\n" + trimmed)
    elif result.get("message"):
        parts.append(result["message"])
    line = int(log.get("first_error_line") or 0)
    if line and source:
        src = source.splitlines()
        if 0 < line <= len(src):
            parts.append("Line %d of your candidate: %s" % (line, src[line - 1].strip()))
    parts.append("Fix the code so that it builds.")
    return "\n\n".join(parts)


# -- wrong output ---------------------------------------------------------------------

def describe_failure(failure: str) -> str:
    """A trial's `failure` text without values: clauses about shape, dtype,
    output count or NaN placement are kept; one quoting a non-tensor output's
    expected value becomes a statement that it differs."""
    kept = []
    for clause in (c.strip() for c in failure.split("; ") if c.strip()):
        if _STRUCTURAL.match(clause):
            kept.append(clause)
        else:
            where = re.match(r"^(output \d+): ", clause)
            kept.append("%s: a non-tensor value differs from the reference's"
                        % where.group(1) if where else
                        "a non-tensor output differs from the reference's")
    return "; ".join(kept)


def _trial_difference(t: dict) -> str:
    if t.get("failure"):
        return describe_failure(t["failure"])
    text = ("max abs diff %s, max rel diff %s, %.2f%% of elements outside tolerance"
            % (_num(t.get("max_abs_diff", 0)), _num(t.get("max_rel_diff", 0)),
               100.0 * float(t.get("mismatch_fraction", 0))))
    first = t.get("first_mismatch")
    if first:
        text += "; first wrong element: output %d at index [%s]" % (
            int(first.get("output_index", 0)),
            ", ".join(str(int(i)) for i in first.get("index", [])))
    return text


def _incorrect(result: dict, source: Optional[str]) -> str:
    trials = result.get("trials", [])
    failed = [(n, t) for n, t in enumerate(trials, 1) if not t.get("passed")]
    settings = result.get("settings") or {}
    parts = ["Your candidate compiled and ran, but its output does not match the reference: "
             "%d of %d trial(s) failed (tolerance atol %s, rtol %s)."
             % (len(failed), len(trials), _num(settings.get("atol", 0)),
                _num(settings.get("rtol", 0)))]
    # Trials that failed alike are told once, with the distributions they had.
    groups: List[list] = []
    for n, t in failed:
        text = _trial_difference(t)
        if groups and groups[-1][0] == text:
            groups[-1][1].append((n, t.get("distribution") or "as drawn"))
        else:
            groups.append([text, [(n, t.get("distribution") or "as drawn")]])
    for text, members in groups[:3]:
        numbers = ", ".join(str(n) for n, _ in members)
        kinds = ", ".join(dict.fromkeys(d for _, d in members))  # unique, in order
        parts.append("- trial%s %s (inputs %s): %s"
                     % ("s" if len(members) > 1 else "", numbers, kinds, text))
    if len(groups) > 3:
        parts.append("- %d more failed trial(s)" % sum(len(m) for _, m in groups[3:]))
    if failed and failed[0][0] > 1:
        parts.append("Earlier trials passed: the error depends on the input values "
                     "(their distribution is named above).")
    parts.append("Fix the computation so that it matches the reference on every trial.")
    return "\n".join(parts)


# -- correct ---------------------------------------------------------------------------

def _correct(result: dict, source: Optional[str]) -> str:
    trials = result.get("trials", [])
    parts = ["Your candidate is correct on all %d trial(s)." % len(trials)]
    cand = result.get("candidate_timing") or {}
    ref = result.get("reference_timing") or {}
    speedup = float(result.get("speedup") or 0)
    if speedup > 0 and cand and ref:
        verdict = "faster than" if speedup > 1 else "slower than" if speedup < 1 else "as fast as"
        parts.append("Speedup %.2fx (%s the reference; 95%% interval %.2fx to %.2fx): "
                     "median %s ms per call against the reference's %s ms."
                     % (speedup, verdict, float(result.get("speedup_ci_low") or 0),
                        float(result.get("speedup_ci_high") or 0),
                        _num(cand.get("median_ms", 0)), _num(ref.get("median_ms", 0))))
        parts.append("What dominated its time: " + _what_dominated(result, cand))
    else:
        parts.append("Its speed was not measured.")
    flagged = [v for v in result.get("verdicts", []) if v.get("severity") == "SUSPICIOUS"]
    if flagged:
        parts.append("Flagged by the anti-cheat checks (not rejected, but review them):\n"
                     + "\n".join(_verdict_line(v) for v in flagged))
    return "\n".join(parts)


def _what_dominated(result: dict, cand: dict) -> str:
    median = float(cand.get("median_ms") or 0)
    floor = float(result.get("physical_floor_ms") or 0)
    count = int(cand.get("count") or 0)
    outran = int(cand.get("outran_calls") or 0)
    if count and outran * 2 > count:
        return ("launch overhead: in %d of %d timed calls launching the work took longer than "
                "running it; launch fewer kernels (fuse them)." % (outran, count))
    if floor > 0 and median > 0:
        ratio = median / floor
        if ratio < 1.5:
            return ("memory traffic: %s ms is within %.1fx of the %s ms it takes just to move "
                    "the inputs and outputs; only moving fewer bytes makes it faster."
                    % (_num(median), ratio, _num(floor)))
        return ("computation or latency, not memory traffic: %s ms is %.1fx the %s ms that "
                "moving the inputs and outputs takes." % (_num(median), ratio, _num(floor)))
    iqr = float(cand.get("iqr_ms") or 0)
    tail = (" Timings varied (interquartile range %s ms), so small differences are noise."
            % _num(iqr)) if median > 0 and iqr > 0.5 * median else ""
    return "its own computation in forward (%s timing, no memory-traffic floor known)%s" % (
        cand.get("method") or "host", "." if not tail else "." + tail)


# -- the rest -----------------------------------------------------------------------------

def _runtime_error(result: dict, source: Optional[str]) -> str:
    error = result.get("runtime_error") or {}
    where = " (line %d of your candidate.py)" % error["candidate_line"] \
        if error.get("candidate_line") else ""
    parts = ["Your candidate failed while running: %s: %s%s"
             % (error.get("type") or "error", error.get("message") or result.get("message", ""),
                where)]
    tb = [l for l in (error.get("traceback") or "").splitlines() if l.strip()]
    if len(tb) > 1:  # one line is the exception again
        parts.append("Traceback (last lines):\n" + "\n".join(tb[-MAX_TRACEBACK_LINES:]))
    return "\n".join(parts)


def _timeout(result: dict, source: Optional[str]) -> str:
    error = result.get("runtime_error") or {}
    stage = "building" if error.get("phase") == "PHASE_COMPILE" else "running"
    return ("Your candidate ran past the time limit while %s (%s). Make it finish: look for "
            "loops that never end or work far larger than the problem needs."
            % (stage, result.get("message", "")))


def _verdict_line(v: dict) -> str:
    where = "candidate.py"
    if v.get("line"):
        where += ":%d" % v["line"]
        if v.get("column"):
            where += ":%d" % v["column"]
    line = "- %s (%s): %s" % (v.get("rule_id", "?"), where, v.get("message", ""))
    if v.get("snippet"):
        line += "\n    " + v["snippet"]
    return line


def _rejected(result: dict, source: Optional[str]) -> str:
    rejecting = [v for v in result.get("verdicts", []) if v.get("severity") == "REJECT"]
    lines = ["Your candidate was rejected by the anti-cheat checks and was not scored:"]
    lines += [_verdict_line(v) for v in rejecting] or ["- " + result.get("message", "")]
    lines.append("Compute the result with your own kernel; do not call library "
                 "implementations of the operation or game the measurement.")
    return "\n".join(lines)


def _sandbox_violation(result: dict, source: Optional[str]) -> str:
    return ("Your candidate attempted something the sandbox forbids and was stopped: %s. "
            "A kernel needs no files, network, processes or system calls beyond computing "
            "its output." % result.get("message", ""))


def _num(x) -> str:
    return "%.4g" % float(x)


def next_turn_feedback(result: dict, candidate_source: Optional[str] = None) -> dict:
    """The same feedback as a dict, for trainers that build their own turn:
    {"status", "text" (next_turn_message's), "rewardable"} and, by status,
    "compile_errors" (the first diagnostics, lines of candidate.py),
    "trials_failed"/"trials", "error_type"/"error_line", "rejected_by"
    (rule, line, message), "speedup". Built from the same fields as the
    text, so it holds no seed and no reference value either. Raises as
    next_turn_message does for INFRA_ERROR and REFERENCE_ERROR."""
    text = next_turn_message(result, candidate_source)
    status = result["status"]
    out: dict = {"status": status, "text": text, "rewardable": bool(result.get("rewardable"))}
    if status == "COMPILE_ERROR":
        trimmed = trim_compile_log((result.get("compile_log") or {}).get("text", ""))
        out["compile_errors"] = [line for line in trimmed.splitlines() if _DIAGNOSTIC.match(line)]
    elif status == "INCORRECT":
        trials = result.get("trials", [])
        out["trials"] = len(trials)
        out["trials_failed"] = sum(1 for t in trials if not t.get("passed"))
    elif status in ("RUNTIME_ERROR", "TIMEOUT"):
        error = result.get("runtime_error") or {}
        out["error_type"] = error.get("type") or ""
        out["error_line"] = int(error.get("candidate_line") or 0)
    elif status == "REJECTED":
        out["rejected_by"] = [{"rule": v.get("rule_id", ""), "line": int(v.get("line") or 0),
                               "message": scrub_seeds(v.get("message", ""), result)}
                              for v in result.get("verdicts", []) if v.get("severity") == "REJECT"]
    elif status == "CORRECT":
        out["speedup"] = result.get("speedup")
    return out
