"""Turns an exception into a kbox.v1.RuntimeError dict.

The traceback shows the client's frames (and library frames) but never the
harness's own, and names the client files candidate.py / reference.py so the
text is the same on every host.
"""
import os
import traceback

from . import sanitize

_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_MESSAGE_BYTES = 4096


def _is_harness_file(filename):
    # importlib's frozen frames are import machinery noise, not client code.
    if filename.startswith("<frozen importlib"):
        return True
    try:
        return os.path.abspath(filename).startswith(_HARNESS_DIR + os.sep)
    except Exception:
        return False


def same_file(a, b):
    if not a or not b:
        return False
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except Exception:
        return False


def exception_line(exc):
    """`ExcType: message` on one line."""
    msg = str_safe(exc)
    return "%s: %s" % (type(exc).__name__, msg) if msg else type(exc).__name__


def str_safe(exc):
    try:
        return str(exc)
    except Exception:  # A client exception's __str__ may itself raise.
        return "<unprintable %s>" % type(exc).__name__


def candidate_line(exc, candidate_path):
    """Line of the innermost traceback frame in the candidate file; 0 if none."""
    line = 0
    for frame in traceback.extract_tb(exc.__traceback__):
        if same_file(frame.filename, candidate_path):
            line = frame.lineno or 0
    if isinstance(exc, SyntaxError) and same_file(exc.filename, candidate_path):
        line = exc.lineno or line
    return line


def format_traceback(exc, scrubber, max_bytes):
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not _is_harness_file(f.filename)]
    lines = ["Traceback (most recent call last):\n"] if frames else []
    lines.extend(traceback.StackSummary.from_list(frames).format())
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return sanitize.sanitize("".join(lines), scrubber, max_bytes)


def harness_frame(exc):
    """'module.function:line' of the innermost frame of kbox's harness that
    exc passed through ('' if none): which call of kbox's failed, without a
    host path."""
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__)
                  if not f.filename.startswith("<") and _is_harness_file(f.filename)]
    except Exception:
        return ""
    if not frames:
        return ""
    f = frames[-1]
    module = os.path.splitext(os.path.basename(f.filename))[0]
    return "%s.%s:%d" % (module, f.name, f.lineno or 0)


def runtime_error(exc, phase, scrubber, max_bytes, candidate_path=""):
    """A kbox.v1.RuntimeError for exc, raised in `phase` (PHASE_COMPILE / PHASE_RUN)."""
    try:
        tb = format_traceback(exc, scrubber, max_bytes)
    except Exception as e:  # Never let a broken client exception break the report.
        tb = "<traceback unavailable: %s>" % type(e).__name__
    return {
        "type": type(exc).__name__,
        "message": sanitize.sanitize(str_safe(exc), scrubber, min(max_bytes, MAX_MESSAGE_BYTES)),
        "traceback": tb,
        "candidate_line": candidate_line(exc, candidate_path) if candidate_path else 0,
        "phase": phase,
    }


def one_line(text, limit=300):
    """First line of text, shortened, for StageReport.message."""
    text = (text or "").strip().split("\n", 1)[0]
    return text if len(text) <= limit else text[:limit - 3] + "..."
