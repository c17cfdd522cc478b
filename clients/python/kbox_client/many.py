"""How Client.evaluate_many splits work to fit kboxd's limits (pure logic)."""
from __future__ import annotations

import collections
import hashlib
from typing import Deque, Dict, List, Sequence, Tuple


def route_of(request: dict) -> str:
    """The routing key of a request: its reference, so that every sample of
    one problem goes to the same daemon (whose reference cache knows it)."""
    digest = hashlib.sha256(str(request.get("reference_source", "")).encode("utf-8")).hexdigest()
    return "reference-" + digest[:32]


def limit_of(info: dict) -> int:
    """Jobs one endpoint admits at once for this caller: max_in_flight_jobs,
    or the token's max_concurrent_jobs when that is lower."""
    limit = int(info.get("max_in_flight_jobs") or 1)
    token = int(info.get("token_max_concurrent_jobs") or 0)
    return max(1, min(limit, token) if token > 0 else limit)


class Plan(object):
    """The requests in groups by reference, handed out in chunks no larger
    than one submission may be and no more than the window has room for."""

    def __init__(self, requests: Sequence[dict], infos: Sequence[dict]):
        if not infos:
            raise ValueError("no endpoint to ask for limits")
        self.batch = min(limit_of(info) for info in infos)
        self.window = sum(limit_of(info) for info in infos)
        groups: Dict[str, List[int]] = collections.OrderedDict()
        for index, request in enumerate(requests):
            groups.setdefault(route_of(request), []).append(index)
        self._groups: Deque[Tuple[str, Deque[int]]] = collections.deque(
            (route, collections.deque(indices)) for route, indices in groups.items())

    @property
    def pending(self) -> bool:
        return bool(self._groups)

    def next_chunk(self, room: int) -> Tuple[str, List[int]]:
        """The next (route, request indices): one group's next requests, at
        most min(room, batch) of them."""
        route, indices = self._groups[0]
        take = max(1, min(room, self.batch, len(indices)))
        chunk = [indices.popleft() for _ in range(take)]
        if not indices:
            self._groups.popleft()
        return route, chunk
