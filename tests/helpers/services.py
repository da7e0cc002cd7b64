"""Servers of a test's own: a throwaway PostgreSQL, a private ZooKeeper or Kafka broker it may stop."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from tests.helpers import ports
from tests.helpers.live import Live
from tests.helpers.stacks import KAFKA_DIST


class PostgresServer:
    """A throwaway PostgreSQL server: initdb in a temporary directory, trust auth, a free port.

    PostgreSQL refuses to run as root, so as root it runs as the ``postgres`` system user that
    Debian's package creates, in a directory of its own under /tmp (pytest's are closed to others).
    """

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="switchyard-pg-"))
        self.data = self.directory / "data"
        self.port = ports.reserve_block(1)
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

        self.port = ports.reserve_block(1)
        self.name = name
        self.service = make(directory / name, "127.0.0.1", self.port)
        self.process = ManagedProcess(name, directory)
        self.connect = f"127.0.0.1:{self.port}"

    @classmethod
    def zookeeper(cls, directory: Path) -> PrivateService:
        from switchyard.stack.services import zookeeper

        return cls(directory, zookeeper, "zookeeper")

    @classmethod
    def kafka(
        cls,
        directory: Path,
        *,
        advertised: int | None = None,
        version: str | None = None,
        properties: dict[str, str] | None = None,
    ) -> PrivateService:
        """An Apache Kafka broker (one KRaft node) of ``version`` (the default's if None), with
        ``properties`` over the stack's own; ``advertised``: the port of a proxy in front of it, where
        clients are sent."""
        from switchyard.config import DEFAULT_KAFKA_VERSION
        from switchyard.stack.brokers import KafkaCluster
        from switchyard.stack.distribution import KafkaDistribution
        from switchyard.stack.services import brokers

        def make(home: Path, host: str, port: int) -> Any:
            cluster = KafkaCluster(
                cluster_id="private",
                dist=KafkaDistribution(version or DEFAULT_KAFKA_VERSION, KAFKA_DIST).ensure(),
                addresses=[(host, port)],
                controllers=[(host, ports.reserve_block(1))],
                home=home,
                heap="256m",
                properties={
                    **({"advertised.listeners": f"PLAINTEXT://{host}:{advertised}"} if advertised else {}),
                    **(properties or {}),
                },
            )
            return brokers(cluster)[0]

        return cls(directory, make, "kafka")

    def start(self) -> None:
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start it, not waiting for it to serve (``wait_ready``): several start side by side."""
        assert self.service.argv is not None
        self.service.prepare()
        self.process.start(self.service.argv())

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 90
        while not self.service.probe().ok:
            if time.monotonic() > deadline:
                raise RuntimeError(f"private {self.name} did not start:\n{self.process.log_tail()}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.stop()


@contextmanager
def kafka_pair(directory: Path) -> Iterator[tuple[PrivateService, PrivateService]]:
    """A primary and a standby broker of a test module's own, which it may freeze (SIGSTOP): thawed and
    stopped at the end whatever it did to them."""
    primary, standby = PrivateService.kafka(directory / "p"), PrivateService.kafka(directory / "s")
    with ExitStack() as stack:
        for broker in (primary, standby):  # side by side: a broker takes seconds to serve
            stack.callback(_thaw_and_stop, broker)
            broker.launch()
        for broker in (primary, standby):
            broker.wait_ready()
        yield primary, standby


def _thaw_and_stop(broker: PrivateService) -> None:
    """Killed, not shut down: its records are thrown away with it, and a broker thawed after a long
    freeze took seconds to shut down cleanly (part of a 19 s teardown)."""
    pid = broker.process.pid()
    if pid is not None:
        os.kill(pid, signal.SIGCONT)
    broker.process.stop(grace_s=0)


@pytest.fixture(scope="module", name="brokers")
def private_brokers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PrivateService, PrivateService]]:
    """A primary and a standby broker of the module's own (``kafka_pair``): a module that freezes one
    imports this and ``live_on_brokers`` (fixtures ``brokers`` and ``live``)."""
    with kafka_pair(tmp_path_factory.mktemp("brokers")) as pair:
        yield pair


@pytest.fixture(scope="module", name="live")
def live_on_brokers(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    brokers: tuple[PrivateService, PrivateService],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Live]:
    """A gateway, a mirror and a worker whose primary and standby are ``brokers``, with the module's
    ``LIVE_SETTINGS`` (environment overrides) if it has them."""
    primary, standby = brokers
    overrides = {
        "SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": primary.connect,
        "SWITCHYARD__CLUSTERS__STANDBY__BOOTSTRAP": standby.connect,
        **getattr(request.module, "LIVE_SETTINGS", {}),
    }
    deployment = Live(
        stack_config, routing.layout.root, ledger_path, tmp_path_factory.mktemp("live"), overrides
    )
    deployment.start()
    yield deployment
    deployment.stop()
