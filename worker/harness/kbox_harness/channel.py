"""The command channel between the judge process and the candidate's process.

The run stage is two processes (see docs/anticheat.md, "Two processes"): the
judge holds the reference, its outputs and the comparison; the candidate's
process holds only the candidate. The judge sends one command at a time as a
JSON line and reads one JSON line back. Everything the candidate's side sends
is untrusted data: lines are bounded, must be JSON objects, and a reply that
is not one is a protocol error blamed on the candidate.

A second, one-way pipe carries the audit hook's reports from the candidate's
process; they are written the moment a call is denied (a candidate that later
scrubs its own memory cannot take a report back).
"""
import json
import os
import select

MAX_LINE_BYTES = 1 << 20
MAX_AUDIT_REPORTS = 32
AUDIT_PREFIX = "run.forbidden-call "  # how the audit hook's reports begin

# Captured at import: the candidate's process imports this module before any
# candidate code runs.
_read = os.read
_write = os.write
_dumps = json.dumps
_loads = json.loads


class ChannelClosed(Exception):
    """The other side closed its end (it exited or was killed)."""


class ProtocolError(Exception):
    """The other side sent something that is not a bounded JSON object."""


def write_line(fd, obj):
    data = (_dumps(obj, separators=(",", ":"), allow_nan=True) + "\n").encode("utf-8")
    view = memoryview(data)
    while view:
        n = _write(fd, view)
        view = view[n:]


class LineReader(object):
    """Reads newline-terminated JSON objects from fd, at most MAX_LINE_BYTES each."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()

    def read(self):
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[:end + 1]
                return _parse(line)
            if len(self.buf) > MAX_LINE_BYTES:
                raise ProtocolError("a reply longer than %d bytes" % MAX_LINE_BYTES)
            chunk = _read(self.fd, 65536)
            if not chunk:
                raise ChannelClosed()
            self.buf += chunk


def _parse(line):
    try:
        obj = _loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ProtocolError("a reply that is not JSON: %s" % e)
    if not isinstance(obj, dict):
        raise ProtocolError("a reply that is not a JSON object")
    return obj


class AuditReader(object):
    """Drains the audit pipe without blocking; keeps the first reports."""

    def __init__(self, fd):
        self.fd = fd
        self.buf = bytearray()
        self.reports = []
        self.dropped = 0

    def drain(self):
        while self.fd is not None:
            ready, _, _ = select.select([self.fd], [], [], 0)
            if not ready:
                break
            chunk = _read(self.fd, 65536)
            if not chunk:
                os.close(self.fd)
                self.fd = None
                break
            self.buf += chunk
            *lines, rest = bytes(self.buf).split(b"\n")
            self.buf = bytearray(rest[:4096])
            for line in lines:
                text = line.decode("utf-8", "replace").strip()
                if not text.startswith(AUDIT_PREFIX):
                    continue  # not the hook's (anything may be written here)
                if len(self.reports) < MAX_AUDIT_REPORTS:
                    self.reports.append(text[:300])
                else:
                    self.dropped += 1
        return self.reports
