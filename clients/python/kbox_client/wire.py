"""What the operations ask a transport to do (Call, Sleep) and what comes
back (Response), shared by the blocking and the asyncio transports."""
from __future__ import annotations

import dataclasses
import json
from typing import Dict, Optional

from .endpoints import Endpoint

# A reply larger than this is refused (kboxd's results are bounded far below).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024
MAX_HEADER_BYTES = 64 * 1024
USER_AGENT = "kbox-client-python/0.1"


@dataclasses.dataclass
class Call:
    """One HTTP exchange with one endpoint."""
    endpoint: Endpoint
    method: str
    path: str                      # after the endpoint's prefix, with any query
    body: Optional[bytes] = None   # JSON
    timeout_s: float = 60.0        # for the whole exchange

    def __repr__(self):  # never the body: it holds candidate source
        return "Call(%s %s%s)" % (self.method, self.endpoint.url, self.path)


@dataclasses.dataclass
class Sleep:
    seconds: float


@dataclasses.dataclass
class Response:
    endpoint: Endpoint
    status: int
    headers: Dict[str, str]        # lower-case names
    body: bytes

    def json(self):
        return json.loads(self.body.decode("utf-8"))

    def __repr__(self):
        return "Response(%d from %s)" % (self.status, self.endpoint.url)


def request_headers(call: Call, token: Optional[str]) -> Dict[str, str]:
    headers = {"Host": call.endpoint.host_header, "User-Agent": USER_AGENT,
               "Accept": "application/json"}
    if call.body is not None:
        headers["Content-Type"] = "application/json"
        headers["Content-Length"] = str(len(call.body))
    if token:
        headers["Authorization"] = "Bearer " + token
    return headers


def encode_json(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
