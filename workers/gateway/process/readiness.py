"""The gateway's HTTP health and readiness, for the load balancer in front of it (seed 004's third part:
a dead cluster must never take a gateway out of its load balancer).

``GET /health`` answers 200 while the process serves at all; ``GET /ready`` answers 200 once the gateway
listens, is registered and has its routing loaded — whatever the clusters behind it do: a shielded or
unreachable cluster is named in the body, never a reason to be taken out. Anything else gets 404, a
request that is not HTTP 400; each connection answers one request and closes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

Status = Callable[[], tuple[bool, dict[str, Any]]]
"""(ready, what to say) now."""
_MOST_BYTES = 8192
_READ_S = 5.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}


async def serve(host: str, port: int, status: Status, *, reuse_port: bool = False) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            code, body = await _respond(reader, status)
            payload = json.dumps(body, sort_keys=True).encode()
            head = (
                f"HTTP/1.1 {code} {_REASONS[code]}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + payload)
            await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(answer, host, port, reuse_port=reuse_port)


async def _respond(reader: asyncio.StreamReader, status: Status) -> tuple[int, dict[str, Any]]:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_S)
    except asyncio.LimitOverrunError:
        return 400, {"error": "request head too long"}
    if len(head) > _MOST_BYTES:
        return 400, {"error": "request head too long"}
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return 400, {"error": "not an HTTP request line"}
    method, path = parts[0], parts[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD") or path not in (b"/health", b"/ready"):
        return 404, {"error": "GET /health or GET /ready"}
    if path == b"/health":
        return 200, {"alive": True}
    ready, said = status()
    return (200 if ready else 503), {"ready": ready, **said}
