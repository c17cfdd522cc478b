"""How tensors cross between the judge and the candidate's process.

Nothing crosses through a file: the two processes have different uids and
no shared writable directory (docs/judge-boundary.md). A crossing goes
through one of the stage's two arenas (sealed shared memory made by the
judge before the fork: one for the judge's inputs, one for the candidate's
outputs, docs/exchange-arena.md) when it fits, and otherwise through a fresh
sealed memfd of its own size, passed over the crossing socket (an AF_UNIX
socketpair made before the fork) just before the command or reply that
names it. A command or reply names its crossing as {"arena": n} or
{"memfd": n} (n bytes in exchange.save()'s layout).

What the candidate's process sends is untrusted: the judge checks the
memfd's seals (it can no longer shrink under the judge's mapping), its size
and every field of the layout, and copies the bytes it judges before it
judges them.
"""
import os
import socket

from . import exchange

# Captured before any candidate code loads.
_send_fds = socket.send_fds
_recv_fds = socket.recv_fds


class CrossingError(Exception):
    """A crossing that cannot be read: malformed, missing or oversized."""


def socketpair():
    """(judge's end, candidate's end) of the crossing socket."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


class Crossing(object):
    """One direction of crossings: `send` through `arena` (may be None) or a
    memfd on `sock`; `receive` what the other side sent the same way."""

    def __init__(self, sock, send_arena=None, receive_arena=None):
        self.sock = sock
        self.send_arena = send_arena
        self.receive_arena = receive_arena
        self.memfds = 0  # crossings that did not fit an arena

    def send(self, obj):
        """Writes obj where the other side can read it; returns the field
        that names it ({"arena": n} or {"memfd": n})."""
        if self.send_arena is not None:
            n = exchange.save_to_arena(self.send_arena, obj)
            if n is not None:
                return {"arena": n}
        arena, n = exchange.save_to_memfd(obj)
        try:
            _send_fds(self.sock, [b"m"], [arena.fd])
        finally:
            arena.close()
        self.memfds += 1
        return {"memfd": n}

    def receive(self, where, device=None, max_bytes=exchange.DEFAULT_MAX_BYTES, wait=True):
        """The object `where` names; its tensors are copies on `device` (or
        the CPU) that the sender can no longer change. wait=False: a memfd
        must be there already (the judge never blocks on the candidate)."""
        if not isinstance(where, dict) or len(where) != 1:
            raise CrossingError("a crossing named %r" % (where,))
        (kind, n), = where.items()
        if type(n) is not int or n < 0:
            raise CrossingError("a crossing of %r bytes" % (n,))
        try:
            if kind == "arena":
                if self.receive_arena is None:
                    raise CrossingError("a crossing through an arena this stage has not")
                return exchange.load_from_arena(self.receive_arena, n, device=device, max_bytes=max_bytes)
            if kind != "memfd":
                raise CrossingError("a crossing of kind %r" % (kind,))
            flags = 0 if wait else socket.MSG_DONTWAIT
            try:
                _, fds, _, _ = _recv_fds(self.sock, 16, 1, flags)
            except (BlockingIOError, InterruptedError):
                fds = []
            if len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                raise CrossingError("a memfd crossing that was not sent")
            arena = exchange.Arena.receive(fds[0], max_bytes)
            try:
                return exchange.load_from_arena(arena, n, device=device, max_bytes=max_bytes)
            finally:
                arena.close()
        except exchange.FormatError as e:
            raise CrossingError(str(e))
