"""kbox-reward-server: OpenRLHF's remote reward model protocol over kboxd.

    kbox-reward-server --kbox http://kbox:8080 --listen 0.0.0.0:5000 --reward correct_plus_speedup
    # OpenRLHF: --remote_rm_url http://HOST:5000/get_reward

POST /get_reward with {"query": [prompt + response, ...], "prompts": [...],
"labels": [reference source, ...]} answers {"rewards": [...], "scores": [...],
"extra_logs": {"kbox_masked": [...]}}. The response is the query with its
prompt taken off when it starts with it. OpenRLHF needs a number for every
sample, so a masked one (kbox's failure, not the candidate's) gets 0.0 and
kbox_masked 1.0; filter on that to drop it. Standard library only.
"""
from __future__ import annotations

import argparse
import http.server
import json
import sys
from typing import List, Optional

from . import rl
from .client import Client

MAX_BODY_BYTES = 64 << 20
REWARDS = {"correct_plus_speedup": rl.correct_plus_speedup, "tiered": rl.tiered,
           "speedup_log": rl.speedup_log}


def rewards_for(client, body: dict, reward: rl.Reward, backend: str, fields: dict) -> dict:
    """The answer to one /get_reward body (ValueError when malformed)."""
    queries = body.get("query")
    labels = body.get("labels")
    prompts = body.get("prompts") or [""] * len(queries or [])
    if not isinstance(queries, list) or not isinstance(labels, list) or len(queries) != len(labels) \
            or len(prompts) != len(queries):
        raise ValueError("want lists query, labels (and prompts) of one length")
    responses = [q[len(p):] if isinstance(q, str) and isinstance(p, str) and p and q.startswith(p) else q
                 for q, p in zip(queries, prompts)]
    scores = rl.score_completions(client, responses, labels, reward=reward, backend=backend, **fields)
    rewards = [0.0 if s is None else s for s in scores]
    return {"rewards": rewards, "scores": rewards,
            "extra_logs": {"kbox_masked": [1.0 if s is None else 0.0 for s in scores]}}


def make_handler(client, reward: rl.Reward, backend: str, fields: dict):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, status: int, doc: dict) -> None:
            data = json.dumps(doc).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/get_reward":
                return self._answer(404, {"error": "POST /get_reward"})
            length = int(self.headers.get("Content-Length") or 0)
            if length <= 0 or length > MAX_BODY_BYTES:
                return self._answer(400, {"error": "a JSON body of at most %d bytes" % MAX_BODY_BYTES})
            try:
                body = json.loads(self.rfile.read(length))
                return self._answer(200, rewards_for(client, body, reward, backend, fields))
            except ValueError as e:
                return self._answer(400, {"error": str(e)})

        def log_message(self, fmt, *args):
            sys.stderr.write("kbox-reward-server: " + (fmt % args) + "\n")

    return Handler


def serve(listen: str, client, reward: rl.Reward, backend: str, fields: Optional[dict] = None):
    """A ThreadingHTTPServer (not yet serving) on HOST:PORT (port 0: any)."""
    host, _, port = listen.rpartition(":")
    return http.server.ThreadingHTTPServer((host or "0.0.0.0", int(port)),
                                           make_handler(client, reward, backend, fields or {}))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="kbox-reward-server", description=__doc__.split("\n")[0])
    parser.add_argument("--kbox", help="kboxd URL(s), comma-separated (default $KBOX_URL)")
    parser.add_argument("--listen", default="127.0.0.1:5000", help="HOST:PORT to serve on")
    parser.add_argument("--reward", choices=sorted(REWARDS), default="correct_plus_speedup")
    parser.add_argument("--backend", default="cuda", choices=["cuda", "triton", "cpu"])
    parser.add_argument("--anticheat-profile", default=None)
    args = parser.parse_args(argv)
    client = Client(args.kbox.split(",") if args.kbox else None)
    fields = {"anticheat_profile": args.anticheat_profile} if args.anticheat_profile else {}
    server = serve(args.listen, client, REWARDS[args.reward](), args.backend, fields)
    print("kbox-reward-server: http://%s:%d/get_reward" % server.server_address[:2], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
