"""A port that accepts connections is not a healthy service: each probe must get a real answer."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from switchyard.config import SparkConfig, StackConfig, StackSparkConfig, load_config
from switchyard.stack import health
from switchyard.stack.services import build
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
    answers.append(b"srvr is not executed because it is not in the whitelist.")
    result = health.zookeeper("127.0.0.1", port)
    assert not result.ok
    assert "whitelist" in result.detail


@pytest.mark.parametrize("mode", ["standalone", "leader", "follower"])
def test_zookeeper_serving(impostor: tuple[int, list[bytes]], mode: str) -> None:
    port, answers = impostor
    answers.append(f"Zookeeper version: 3.8.4\nMode: {mode}\nNode count: 5\n".encode())
    assert health.zookeeper("127.0.0.1", port) == health.Health(True, mode)


def test_a_read_only_zookeeper_node_is_down(impostor: tuple[int, list[bytes]]) -> None:
    port, answers = impostor
    answers.append(b"Zookeeper version: 3.8.4\nMode: read-only\n")
    assert health.zookeeper("127.0.0.1", port) == health.Health(False, "read-only")


def test_a_zookeeper_node_without_its_quorum_is_down(impostor: tuple[int, list[bytes]]) -> None:
    port, answers = impostor
    answers.append(b"This ZooKeeper instance is not currently serving requests\n")
    assert health.zookeeper("127.0.0.1", port) == health.Health(False, "not serving: no quorum")


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


def json_answer(body: str) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()


def test_a_spark_master_is_healthy_when_alive_and_a_worker_when_it_lists_it_alive(
    impostor: tuple[int, list[bytes]],
) -> None:
    port, answers = impostor
    workers = [("8082", "DEAD", 2), ("8082", "ALIVE", 2), ("8083", "DEAD", 1)]  # 8082 restarted
    state = json.dumps({
        "status": "ALIVE",
        "workers": [{"webuiaddress": f"http://127.0.0.1:{p}", "state": s, "cores": c} for p, s, c in workers],
    })  # fmt: skip
    answers += [json_answer(state)] * 4 + [json_answer('{"status": "STANDBY", "workers": []}')]
    assert health.spark_master("127.0.0.1", port) == health.Health(True, "ALIVE, 1 workers alive")
    assert health.spark_worker("127.0.0.1", port, 8082) == health.Health(True, "ALIVE, 2 cores")
    assert health.spark_worker("127.0.0.1", port, 8083) == health.Health(False, "DEAD, 1 cores")
    assert health.spark_worker("127.0.0.1", port, 8084) == health.Health(
        False, "not registered with the master"
    )
    assert not health.spark_master("127.0.0.1", port).ok  # a standby master takes no jobs


def test_the_stack_runs_a_spark_cluster_only_when_asked(tmp_path: Path) -> None:
    base = load_config(Path(__file__).parents[2] / "infra" / "embedded.yaml")
    assert not [s for s in build(base) if s.name.startswith("spark")]
    asked = base.model_copy(
        update={
            "spark": SparkConfig(master="spark://127.0.0.1:17077"),
            "stack": StackConfig(state_dir=tmp_path, spark=StackSparkConfig(workers=2, worker_cores=3)),
        }
    )
    spark = {s.name: s for s in build(asked) if s.name.startswith("spark")}
    assert list(spark) == ["spark-master", "spark-worker-1", "spark-worker-2"]
    assert [s.port for s in spark.values()] == [17077, 18078, 18079]
    start = spark["spark-worker-2"].argv
    assert start is not None
    worker = start()
    assert worker[-1] == "spark://127.0.0.1:17077"
    assert worker[worker.index("--cores") + 1] == "3"
    assert worker[worker.index("--webui-port") + 1] == "18079"
    assert Path(spark["spark-master"].env["SPARK_HOME"], "bin", "spark-class").exists()
