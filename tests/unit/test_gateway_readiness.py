"""The gateway's health and readiness answers, over a real socket: what a load balancer probes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from workers.gateway.process import readiness


async def ask(port: int, raw: bytes) -> tuple[int, dict[str, Any]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def test_ready_follows_the_gateway_never_the_clusters_and_bad_requests_are_named() -> None:
    state = {"ready": False}

    def status() -> tuple[bool, dict[str, Any]]:
        return state["ready"], {"clusters": {"primary": "shielded", "standby": "reachable"}}

    async def scenario() -> list[tuple[int, dict[str, Any]]]:
        server = await readiness.serve("127.0.0.1", 0, status)
        port = server.sockets[0].getsockname()[1]
        try:
            answers = [await ask(port, b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n")]
            state["ready"] = True
            answers.append(await ask(port, b"GET /ready?verbose HTTP/1.1\r\n\r\n"))
            answers.append(await ask(port, b"GET /health HTTP/1.0\r\n\r\n"))
            answers.append(await ask(port, b"POST /ready HTTP/1.1\r\n\r\n"))
            answers.append(await ask(port, b"\x00\x00\x00\x10garbage\r\n\r\n"))
            return answers
        finally:
            server.close()

    not_yet, ready, alive, elsewhere, garbage = asyncio.run(scenario())
    assert not_yet == (503, {"ready": False, "clusters": {"primary": "shielded", "standby": "reachable"}})
    assert ready[0] == 200
    assert ready[1]["clusters"]["primary"] == "shielded"  # a shielded cluster is said, not a reason
    assert alive == (200, {"alive": True})
    assert elsewhere == (404, {"error": "GET /health or GET /ready"})
    assert garbage == (400, {"error": "not an HTTP request line"})
