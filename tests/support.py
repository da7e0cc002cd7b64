"""Test-side helpers: free ports and configurations for stacks that never collide with another run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml


def free_ports(count: int) -> list[int]:
    """Ports nobody listens on right now, distinct from each other (held open together while chosen)."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def stack_config_data(state_dir: Path) -> dict[str, Any]:
    zk, primary, standby, temporal, ui, gateway = free_ports(6)
    return {
        "clusters": {
            "primary": {"bootstrap": f"127.0.0.1:{primary}"},
            "standby": {"bootstrap": f"127.0.0.1:{standby}"},
        },
        "default_cluster": "primary",
        "zookeeper": {"connect": f"127.0.0.1:{zk}"},
        "temporal": {"address": f"127.0.0.1:{temporal}"},
        "gateway": {"bootstrap_port": gateway},
        "stack": {"state_dir": str(state_dir), "temporal_ui_port": ui},
    }


def write_stack_config(directory: Path) -> Path:
    """A config for an isolated stack on free ports, its state under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    path.write_text(yaml.safe_dump(stack_config_data(directory / "state"), sort_keys=False))
    return path


class PostgresServer:
    """A throwaway PostgreSQL server: initdb in a temporary directory, trust auth, a free port.

    PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` system user that
    Debian's package creates, in a directory of its own under /tmp (pytest's are closed to others).
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="switchyard-pg-"))
        self.data = self.directory / "data"
        (self.port,) = free_ports(1)
        bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not bins:
            raise RuntimeError("PostgreSQL is not installed (make setup installs it)")
        self.bin = bins[-1].parent

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, text=True)

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "switchyard", "--auth=trust")
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.directory / "postgres.log")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://switchyard@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url(), isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        engine.dispose()
        return self.url(name)


class PrivateService:
    """A ZooKeeper or a Kafka broker of a test's own, which the test may stop and restart."""

    def __init__(self, directory: Path, make: Callable[[Path, str, int], Any], name: str) -> None:
        from switchyard.stack.process import ManagedProcess

        (self.port,) = free_ports(1)
        self.name = name
        self.service = make(directory / name, "127.0.0.1", self.port)
        self.process = ManagedProcess(name, directory)
        self.connect = f"127.0.0.1:{self.port}"

    @classmethod
    def zookeeper(cls, directory: Path) -> PrivateService:
        from switchyard.stack.services import zookeeper

        return cls(directory, zookeeper, "zookeeper")

    @classmethod
    def kafka(cls, directory: Path) -> PrivateService:
        from switchyard.stack.services import kafka_broker

        return cls(directory, lambda _home, host, port: kafka_broker("private", host, port), "kafka")

    def start(self) -> None:
        assert self.service.argv is not None
        self.service.prepare()
        self.process.start(self.service.argv())
        deadline = time.monotonic() + 30
        while not self.service.probe().ok:
            if time.monotonic() > deadline:
                raise RuntimeError(f"private {self.name} did not start:\n{self.process.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.stop()


def free_port_block(count: int, *, low: int = 20000, high: int = 60000) -> int:
    """The first of ``count`` consecutive free ports (a gateway's bootstrap port and its virtual brokers)."""
    import random

    for _ in range(200):
        start = random.randrange(low, high - count)
        socks = []
        try:
            for port in range(start, start + count):
                s = socket.socket()
                s.bind(("127.0.0.1", port))
                socks.append(s)
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {count} free ports found")


class SwitchyardProcess:
    """A real ``switchyard <command>`` process with its own routing root and a log file."""

    command = ""

    def __init__(
        self,
        config_path: Path,
        *,
        root: str,
        name: str,
        log: Path,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.root = root
        self.id = name
        self.log = log
        self.env = {**os.environ, "SWITCHYARD__ZOOKEEPER__ROOT": root, **(overrides or {})}
        self.argv = [
            sys.executable,
            "-m",
            "switchyard",
            "--config",
            str(config_path),
            self.command,
            "--id",
            name,
        ]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not self.ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.command} did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)

    def ready(self) -> bool:
        return True

    def stop(self, sig: int = 15) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)
            self.process.wait(timeout=30)


class GatewayProcess(SwitchyardProcess):
    """A real `switchyard gateway` process on a free block of ports."""

    command = "gateway"

    def __init__(
        self,
        config_path: Path,
        *,
        root: str,
        gateway_id: str,
        log: Path,
        overrides: dict[str, str] | None = None,
    ) -> None:
        self.port = free_port_block(16)
        overrides = {"SWITCHYARD__GATEWAY__BOOTSTRAP_PORT": str(self.port), **(overrides or {})}
        super().__init__(config_path, root=root, name=gateway_id, log=log, overrides=overrides)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def ready(self) -> bool:
        from switchyard.stack import health

        return health.kafka("127.0.0.1", self.port).ok


class MirrorProcess(SwitchyardProcess):
    """A real `switchyard mirror` process (ready once started: it reports per link in ZooKeeper)."""

    command = "mirror"


class OtlpReceiver:
    """An OTLP/HTTP metrics endpoint that keeps every data point it is sent, for tests to read."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
            ExportMetricsServiceRequest,
        )

        points: list[tuple[str, dict[str, str], float]] = []
        histograms: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[list[float], list[int]]] = {}
        self.points, self.histograms = points, histograms

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                export = ExportMetricsServiceRequest.FromString(body)
                for resource in export.resource_metrics:
                    for scope in resource.scope_metrics:
                        for metric in scope.metrics:
                            kind = metric.WhichOneof("data") or ""
                            for point in getattr(metric, kind).data_points:
                                labels = {
                                    a.key: str(
                                        getattr(a.value, a.value.WhichOneof("value") or "string_value")
                                    )
                                    for a in point.attributes
                                }
                                if kind == "histogram":
                                    histograms[(metric.name, tuple(sorted(labels.items())))] = (
                                        list(point.explicit_bounds),
                                        list(point.bucket_counts),
                                    )
                                value = (
                                    point.count if kind == "histogram" else point.as_int or point.as_double
                                )
                                points.append((metric.name, labels, float(value)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def latest(self, name: str, **labels: str) -> float:
        """The last reported value of metric ``name`` at the points whose attributes include ``labels``."""
        found: dict[tuple[tuple[str, str], ...], float] = {}
        for metric, attributes, value in self.points:
            if metric == name and labels.items() <= attributes.items():
                found[tuple(sorted(attributes.items()))] = value
        return sum(found.values())

    def histogram(self, name: str, **labels: str) -> tuple[list[float], list[int]]:
        """The latest report of histogram ``name`` (cumulative): bucket bounds and counts."""
        for (metric, attributes), found in self.histograms.items():
            if metric == name and labels.items() <= dict(attributes).items():
                return found
        return [], [0]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def bucket_quantile(bounds: list[float], counts: list[int], q: float) -> float:
    """The upper bound of the histogram bucket that holds quantile ``q`` (inf for the overflow bucket)."""
    rank, seen = q * sum(counts), 0
    for bound, count in zip([*bounds, float("inf")], counts, strict=True):
        seen += count
        if seen >= rank:
            return bound
    return float("inf")


def commit_offset(bootstrap: str, group: str, topic: str, offset: int, partition: int = 0) -> None:
    """Commit ``offset`` for ``group`` as a consumer would, without joining the group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
    finally:
        consumer.close()


def fill_topic(bootstrap: str, topic: str, count: int, *, partitions: int, size: int = 1024) -> None:
    """``count`` records of ``size`` bytes spread round-robin over the partitions, as fast as the broker
    takes them (benchmark set-up); keys are the record numbers, timestamps fixed and increasing."""
    from confluent_kafka import Producer

    from switchyard import kafka

    kafka.create_topics(bootstrap, [topic], partitions=partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000})
    payload = b"q" * size
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic, payload, str(i).encode(), partition=i % partitions, timestamp=1_700_000_000_000 + i
                )
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0
