"""What the client raises. Every error says which endpoint (URL only) it came
from and never carries the bearer token or the request body."""
from __future__ import annotations

import json
from typing import Any, Optional


class KboxError(Exception):
    """Base of everything this package raises."""


class ConnectionFailed(KboxError):
    """No HTTP answer from an endpoint: refused, reset, timed out, or a reply
    that is not HTTP. `sent` is False when the request never left (the
    connection could not be opened), so the daemon cannot have acted on it."""

    def __init__(self, endpoint: str, reason: str, sent: bool):
        super().__init__("%s: %s" % (endpoint, reason))
        self.endpoint = endpoint
        self.reason = reason
        self.sent = sent


class ApiError(KboxError):
    """kboxd answered with a non-2xx status.

    kboxd's errors carry `{"code": 409, "field": ..., "message": ...}` and,
    beside it, `"error": {"code": "ALREADY_EXISTS", "message": ...}` (the
    symbolic code). Either or both are read: `status` is the HTTP status, `code` the
    symbolic or numeric code of the body, `field` the request field the error
    is about ("" when none)."""

    def __init__(self, endpoint: str, status: int, code: Any = None, field: str = "",
                 message: str = "", retry_after: Optional[float] = None):
        self.endpoint = endpoint
        self.status = status
        self.code = code if code is not None else status
        self.field = field
        self.message = message
        self.retry_after = retry_after
        where = " (field %s)" % field if field else ""
        super().__init__("HTTP %d from %s%s: %s" % (status, endpoint, where, message or "no message"))

    @classmethod
    def from_reply(cls, endpoint: str, status: int, body: bytes,
                   retry_after: Optional[float]) -> "ApiError":
        code, field, message = None, "", ""
        try:
            doc = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            doc = None
        if isinstance(doc, dict):
            # kboxd sends both shapes at once: {"code": 409, "field", "message",
            # "error": {"code": "ALREADY_EXISTS", "message"}}; the symbolic code
            # wins, and the field is only at the top.
            inner = doc.get("error") if isinstance(doc.get("error"), dict) else doc
            code = inner.get("code", doc.get("code"))
            field = str(inner.get("field") or doc.get("field") or "")
            message = str(inner.get("message") or doc.get("message") or "")
        elif body:
            message = body[:300].decode("utf-8", "replace").strip()
        kind = Unauthenticated if status == 401 else cls
        return kind(endpoint, status, code, field, message, retry_after)


class Unauthenticated(ApiError):
    """401: the token is missing or not one kboxd knows."""


class RetriesExhausted(KboxError):
    """Every attempt the retry policy allowed failed; `last` is the last
    failure (a ConnectionFailed or a retryable ApiError), `attempts` how many
    were made."""

    def __init__(self, what: str, attempts: int, last: Exception):
        super().__init__("%s failed after %d attempt(s); last error: %s" % (what, attempts, last))
        self.attempts = attempts
        self.last = last


class WaitTimeout(KboxError):
    """A job was not done within the time the caller allowed. The job goes on
    in kboxd; waiting again on the same Job picks it up."""

    def __init__(self, job_id: str, waited_s: float):
        super().__init__("job %s not done after %.1f s" % (job_id, waited_s))
        self.job_id = job_id
        self.waited_s = waited_s


class InfraError(KboxError):
    """kbox itself failed the evaluation (status INFRA_ERROR) and retries did
    not help. Not the candidate's fault: never score it. `result` is the last
    EvaluateResult."""

    def __init__(self, result: dict):
        super().__init__("kbox infrastructure error on job %s: %s"
                         % (result.get("job_id", "?"), result.get("message", "")))
        self.result = result


class ReferenceFailed(KboxError):
    """The reference itself failed (status REFERENCE_ERROR), so the candidate
    could not be judged: fix the problem, do not retry or score it."""

    def __init__(self, result: dict):
        super().__init__("the reference failed on job %s: %s"
                         % (result.get("job_id", "?"), result.get("message", "")))
        self.result = result
