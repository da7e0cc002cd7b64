"""A port that accepts connections is not a healthy service: each probe must get a real answer."""

from __future__ import annotations

import socket
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
