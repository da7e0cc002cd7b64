"""Real health checks: each asks the service a question only a working instance can answer.

ZooKeeper answers ``srvr`` with its mode once it serves (standalone, or leader or follower of a quorum);
a Kafka broker answers an ApiVersions request with error code 0
(in ZooKeeper mode, and names its cluster's controller);
Temporal's frontend reports SERVING on the gRPC health service; the Web UI answers HTTP; a Spark master's
web UI reports itself ALIVE, and a Spark worker is healthy once that master lists it ALIVE. A port that
merely accepts connections passes none of them.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from switchyard.config import split_hostport
from switchyard.errors import StackError

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
            sock.sendall(b"srvr")
            answer = _read_all(sock)
    except OSError as exc:
        return Health(False, f"unreachable: {exc}")
    mode = re.search(rb"^Mode: ([\w-]+)", answer, re.MULTILINE)
    if mode:  # a read-only node (cut off from its quorum, in read-only mode) takes no writes
        return Health(mode[1] != b"read-only", mode[1].decode())
    if b"not currently serving" in answer:  # a node of an ensemble without its quorum
        return Health(False, "not serving: no quorum")
    return Health(False, f"answered {answer[:40]!r} to srvr (is srvr in 4lw.commands.whitelist?)")


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


def kafka_with_controller(host: str, port: int, timeout_s: float = 2.0) -> Health:
    """As :func:`kafka`, and the cluster has a controller: a broker in ZooKeeper mode answers ApiVersions
    before one is elected, and until then a topic cannot be created (a test's first CreateTopics went
    unanswered for 15 s once)."""
    answered = kafka(host, port, timeout_s)
    if not answered.ok:
        return answered
    from confluent_kafka.admin import AdminClient  # the stack's other probes need no client library

    try:
        metadata = AdminClient({"bootstrap.servers": f"{host}:{port}"}).list_topics(timeout=timeout_s)
    except Exception as exc:  # KafkaException, or no answer in time
        return Health(False, f"no metadata: {exc}")
    if metadata.controller_id < 0:
        return Health(False, "no controller elected yet")
    return Health(True, f"{answered.detail}, controller {metadata.controller_id}")


def temporal(address: str, timeout_s: float = 5.0) -> Health:
    """The frontend's gRPC health service says SERVING, asked through the ``temporal`` CLI.

    Not through the SDK's client in this process: a probe of a server still starting times out and
    leaves the SDK's native connect running, and a native call still running when Python exits hangs or
    aborts the interpreter (temporalio/sdk-python issue 300) — which is how ``stack up`` once ended in
    SIGSEGV after printing its table. A child process takes its unfinished call with it.
    """
    if not port_open(*split_hostport(address)):
        return Health(False, "unreachable: connection refused")
    wait = f"{timeout_s:g}s"
    argv = [tool("temporal"), "operator", "cluster", "health", "--address", address,
            "--client-connect-timeout", wait, "--command-timeout", wait]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 5, check=False)
    except subprocess.TimeoutExpired:
        return Health(False, f"unreachable: no answer in {timeout_s:g}s")
    if done.returncode == 0 and done.stdout.strip() == "SERVING":
        return Health(True, "SERVING")
    said = (done.stderr.strip() or done.stdout.strip()).splitlines()
    return Health(False, f"unreachable: {said[0] if said else f'exit code {done.returncode}'}")


def tool(name: str) -> str:
    """A command from this environment's bin directory first (the venv), then from PATH."""
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise StackError(f"{name}: command not found (pip install -e '.[embedded]')")
    return found


def http(url: str, timeout_s: float = 2.0) -> Health:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return Health(True, f"HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        return Health(False, f"HTTP {exc.code}")
    except OSError as exc:
        return Health(False, f"unreachable: {exc}")


def spark_master(host: str, ui_port: int, timeout_s: float = 2.0) -> Health:
    state = _spark_state(host, ui_port, timeout_s)
    if isinstance(state, Health):
        return state
    alive = sum(w.get("state") == "ALIVE" for w in state.get("workers", []))
    return Health(state.get("status") == "ALIVE", f"{state.get('status')}, {alive} workers alive")


def spark_worker(host: str, master_ui_port: int, ui_port: int, timeout_s: float = 2.0) -> Health:
    """Registered with the master and ALIVE there (the worker is known by its web UI's port; the master
    also lists a restarted worker's earlier, DEAD registration)."""
    state = _spark_state(host, master_ui_port, timeout_s)
    if isinstance(state, Health):
        return Health(False, f"master: {state.detail}")
    known = [w for w in state.get("workers", []) if str(w.get("webuiaddress", "")).endswith(f":{ui_port}")]
    if not known:
        return Health(False, "not registered with the master")
    worker = max(known, key=lambda w: w.get("state") == "ALIVE")
    return Health(worker.get("state") == "ALIVE", f"{worker.get('state')}, {worker.get('cores')} cores")


def _spark_state(host: str, ui_port: int, timeout_s: float) -> dict[str, Any] | Health:
    """The master's own account of itself and its workers (its web UI's JSON)."""
    try:
        with urllib.request.urlopen(f"http://{host}:{ui_port}/json/", timeout=timeout_s) as response:
            found = json.loads(response.read())
    except (OSError, ValueError) as exc:
        return Health(False, f"unreachable: {exc}")
    return found if isinstance(found, dict) else Health(False, "unexpected answer")


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
