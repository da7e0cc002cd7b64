"""A port that accepts connections is not a healthy service: each probe must get a real answer."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from switchyard.stack import health
from tests.helpers.ports import unused_port


@pytest.fixture
def impostor() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server that answers every connection with the bytes queued in ``answers`` (or nothing)."""
    answers: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(1024)
                if answers:
                    conn.sendall(answers.pop(0))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], answers
    stop.set()
    thread.join()
    server.close()


@pytest.mark.parametrize("probe", [health.zookeeper, health.kafka])
def test_closed_port_is_unhealthy(probe: object) -> None:
    port = unused_port()
    result = probe("127.0.0.1", port)  # type: ignore[operator]
    assert not result.ok
    assert "unreachable" in result.detail


def test_temporal_on_a_closed_port_is_unhealthy() -> None:
    port = unused_port()
    result = health.temporal(f"127.0.0.1:{port}")
    assert not result.ok
    assert "connection refused" in result.detail


def test_temporal_probe_needs_the_grpc_health_service(impostor: tuple[int, list[bytes]]) -> None:
    port, answers = impostor
    answers.append(b"HTTP/1.1 200 OK\r\n\r\n")
    assert not health.temporal(f"127.0.0.1:{port}", timeout_s=2).ok


def test_zookeeper_wrong_answer(impostor: tuple[int, list[bytes]]) -> None:
    port, answers = impostor
    answers.append(b"ruok is not executed because it is not in the whitelist.")
    result = health.zookeeper("127.0.0.1", port)
    assert not result.ok
    assert "whitelist" in result.detail


def test_zookeeper_imok(impostor: tuple[int, list[bytes]]) -> None:
    port, answers = impostor
    answers.append(b"imok")
    assert health.zookeeper("127.0.0.1", port) == health.Health(True, "imok")


@pytest.mark.parametrize(
    ("answer", "detail"),
    [
        (b"", "connection closed"),
        (b"\x00\x00\x00\x02\x00\x00", "short ApiVersions answer"),
        (b"\x00\x00\x00\x0a" + b"\x00\x00\x00\x01" + b"\x00\x00" + b"\x00\x00\x00\x00", "correlation id 1"),
        (b"\x00\x00\x00\x0a" + b"\x00\x00\x5a\x5a" + b"\x00\x23" + b"\x00\x00\x00\x00", "error code 35"),
    ],
)
def test_kafka_probe_rejects_bad_answers(
    impostor: tuple[int, list[bytes]], answer: bytes, detail: str
) -> None:
    port, answers = impostor
    answers.append(answer)
    result = health.kafka("127.0.0.1", port)
    assert not result.ok
    assert detail in result.detail


def test_http_probe_reports_the_status(impostor: tuple[int, list[bytes]]) -> None:
    port, answers = impostor
    answers.append(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    assert health.http(f"http://127.0.0.1:{port}/") == health.Health(False, "HTTP 503")


def test_a_probe_of_a_silent_server_leaves_nothing_behind_at_exit() -> None:
    """The Temporal probe that times out must not leave the SDK's native client running: one still
    running when Python exits hangs the interpreter or aborts it ("PyGILState_Release ... finalizing";
    how `stack up` once ended with SIGSEGV after printing its table). Each run is a short-lived process
    probing a server that accepts and never answers, as a Temporal server still starting does."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        held: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:
            silent.settimeout(0.1)
            while not stop.is_set():
                try:
                    held.append(silent.accept()[0])
                except TimeoutError:
                    continue

        acceptor = threading.Thread(target=accept, daemon=True)
        acceptor.start()
        script = (
            "from switchyard.stack import health\n"
            f"print(health.temporal('127.0.0.1:{port}', timeout_s=0.5).ok)\n"
        )
        try:
            for _ in range(3):
                done = subprocess.run(
                    [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
                )
                assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "False", "")
        finally:
            stop.set()
            acceptor.join()
            for sock in held:
                sock.close()
