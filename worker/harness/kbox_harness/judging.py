"""What the judge's parts share: how a stage ends early, trial seeds, and
the small formatting helpers of its messages."""
import hashlib

from . import errors


class ClientFailed(Exception):
    """Client code raised. For the reference `exc` is the exception; for the
    candidate `error` is the RuntimeError dict its process sent and
    `message` the one-line summary."""

    def __init__(self, party, exc=None, error=None, message="", violation=False, killed=False):
        Exception.__init__(self, party)
        self.party = party
        self.killed = killed  # its process died by SIGKILL (the judge saw it)
        self.violation = violation  # stopped by the sandbox, not a plain error
        self.exc = exc
        self.error = error
        self.message = message


class HarnessFailed(Exception):
    """kbox's own failure in the candidate's process (its harness side)."""


class StageEnd(Exception):
    """Ends the stage early with the report as it stands."""


def trial_seed(seed, i):
    """63-bit seed of trial i (or of a named phase), stable across hosts and versions."""
    digest = hashlib.blake2b(("kbox:%d:%s" % (seed, i)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def number(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x and x >= 0 else None


def failed(failure):
    return {"passed": False, "max_abs_diff": 0.0, "max_rel_diff": 0.0, "mismatch_fraction": 0.0,
            "failure": errors.one_line(failure)}


def worst(values):
    worst = 0.0
    for v in values:
        if v != v:
            return v
        worst = max(worst, v)
    return worst


def fmt(x):
    if x != x:
        return "NaN"
    return "%.6g" % x if abs(x) != float("inf") else ("Infinity" if x > 0 else "-Infinity")
