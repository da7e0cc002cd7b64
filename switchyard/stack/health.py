"""Real health checks: each asks the service a question only a working instance can answer.

ZooKeeper answers ``ruok`` with ``imok``; a Kafka broker answers an ApiVersions request with error code 0;
Temporal's frontend reports SERVING on the gRPC health service; the Web UI answers HTTP. A port that
merely accepts connections passes none of them.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import timedelta

_API_VERSIONS = 18


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def zookeeper(host: str, port: int, timeout_s: float = 2.0) -> Health:
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"ruok")
            answer = _read_all(sock)
    except OSError as exc:
        return Health(False, f"unreachable: {exc}")
    if answer == b"imok":
        return Health(True, "imok")
    return Health(False, f"answered {answer[:40]!r} to ruok (is ruok in 4lw.commands.whitelist?)")


class ProbeError(Exception):
    """The service answered, but not as a working one would."""


def api_versions(host: str, port: int, timeout_s: float = 2.0) -> dict[int, tuple[int, int]]:
    """Ask a Kafka-protocol server for its APIs with ApiVersions v0: API key -> (min, max) version.

    Raises OSError or EOFError when it cannot be asked, ProbeError when the answer is wrong.
    """
    client_id = b"switchyard-health"
    correlation = 0x5A5A
    body = struct.pack(">hhih", _API_VERSIONS, 0, correlation, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read_exact(sock, 4))[0]
        answer = _read_exact(sock, size)
    if len(answer) < 10:
        raise ProbeError(f"short ApiVersions answer ({len(answer)} bytes)")
    got_correlation, error_code, count = struct.unpack(">ihi", answer[:10])
    if got_correlation != correlation:
        raise ProbeError(f"ApiVersions answer has correlation id {got_correlation}, sent {correlation}")
    if error_code:
        raise ProbeError(f"ApiVersions error code {error_code}")
    if len(answer) < 10 + 6 * count:
        raise ProbeError(f"ApiVersions answer lists {count} APIs in {len(answer)} bytes")
    entries = (struct.unpack_from(">hhh", answer, 10 + 6 * i) for i in range(count))
    return {key: (low, high) for key, low, high in entries}


def kafka(host: str, port: int, timeout_s: float = 2.0) -> Health:
    """ApiVersions answered with the right correlation id and error code 0."""
    try:
        versions = api_versions(host, port, timeout_s)
    except (OSError, EOFError) as exc:
        return Health(False, f"unreachable: {exc or 'connection closed'}")
    except ProbeError as exc:
        return Health(False, str(exc))
    return Health(True, f"{len(versions)} APIs")


def temporal(address: str, timeout_s: float = 3.0) -> Health:
    from temporalio.service import ConnectConfig, ServiceClient

    from switchyard.config import split_hostport

    if not port_open(*split_hostport(address)):
        return Health(False, "unreachable: connection refused")

    async def check() -> bool:
        client = await ServiceClient.connect(ConnectConfig(target_host=address))
        return await client.check_health(timeout=timedelta(seconds=timeout_s))

    try:
        serving = asyncio.run(asyncio.wait_for(check(), timeout_s))
    except Exception as exc:  # any failure to reach or ask is "not healthy", with its reason
        return Health(False, f"unreachable: {type(exc).__name__}: {exc}".strip())
    return Health(True, "SERVING") if serving else Health(False, "health service says NOT_SERVING")


def http(url: str, timeout_s: float = 2.0) -> Health:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return Health(True, f"HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        return Health(False, f"HTTP {exc.code}")
    except OSError as exc:
        return Health(False, f"unreachable: {exc}")


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed")
        data += chunk
    return bytes(data)
