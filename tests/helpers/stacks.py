"""Configurations for embedded stacks of the tests' own, on reserved ports."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from switchyard.config import Config
from switchyard.ledger import Ledger
from switchyard.routing.store import RoutingStore
from switchyard.routing.zk import connect, disconnect
from tests.helpers import ports

QUICK_CONSUMER = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}
"""A consumer whose group notices its death in 6 s rather than librdkafka's 45: for the tests' own
consumers and mirrors, which the tests kill. Client-library tests keep each library's defaults."""

KAFKA_DIST = Path(__file__).resolve().parents[2] / ".state" / "kafka-dist"
"""Apache Kafka's jars, resolved once for every test run and the demo (`make setup` resolves them)."""


def stack_config_data(state_dir: Path, brokers: int = 1, zookeepers: int = 1) -> dict[str, Any]:
    """A stack on reserved ports: ZooKeeper (an ensemble of ``zookeepers`` nodes), Temporal and two
    clusters of ``brokers`` brokers each."""
    zk, quorum = ports.reserve(zookeepers), ports.reserve(2 * zookeepers if zookeepers > 1 else 0)
    temporal, ui = ports.reserve(2)
    clients = {c: ports.reserve(brokers) for c in ("primary", "standby")}
    controllers = {c: ports.reserve(brokers) for c in ("primary", "standby")}

    def listed(found: list[int]) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in found)

    return {
        "clusters": {c: {"bootstrap": listed(clients[c])} for c in ("primary", "standby")},
        "default_cluster": "primary",
        "zookeeper": {"connect": listed(zk)},
        "temporal": {"address": f"127.0.0.1:{temporal}"},
        "gateway": {"bootstrap_port": ports.reserve_block(16)},
        "stack": {
            "state_dir": str(state_dir),
            "temporal_ui_port": ui,
            **({"zookeeper_quorum_ports": quorum} if quorum else {}),
            "kafka": {"dist_dir": str(KAFKA_DIST), **_kafka_version()},
            "clusters": {
                c: {"controllers": listed(controllers[c]), **({"brokers": brokers} if brokers > 1 else {})}
                for c in ("primary", "standby")
            },
        },
        "spark": {"submit_args": QUICK_JVMS},
        "mirror": {"consumer": dict(QUICK_CONSUMER)},  # tests kill mirrors: their groups notice in 6 s
    }


def transaction_version_1() -> bool:
    """Whether the tests' stacks run a release before Apache Kafka 4.0 (``SWITCHYARD_TEST_KAFKA_VERSION``),
    whose clusters speak the transaction protocol before version 2."""
    return int(os.environ.get("SWITCHYARD_TEST_KAFKA_VERSION", "4").split(".")[0]) < 4


def _kafka_version() -> dict[str, str]:
    """``SWITCHYARD_TEST_KAFKA_VERSION`` runs the tests' stacks on another Apache Kafka release (e.g. the
    transaction tests on 3.9.2, where clients speak the transaction protocol before version 2)."""
    version = os.environ.get("SWITCHYARD_TEST_KAFKA_VERSION")
    return {"version": version} if version else {}


QUICK_JVMS = [
    *("--conf", "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"),
    *("--conf", "spark.executor.extraJavaOptions=-XX:TieredStopAtLevel=1"),
]
"""The JVMs of the tests' Spark jobs compile with C1 only: their jobs are short and their JVM work is
light, and on the 2-core test machine this takes some 4 s off each job's 14 (see docs/testbed.md)."""


def write_stack_config(directory: Path, brokers: int = 1, zookeepers: int = 1) -> Path:
    """A config for an isolated stack on reserved ports (clusters of ``brokers`` brokers, ZooKeeper of
    ``zookeepers`` nodes), its state under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    data = stack_config_data(directory / "state", brokers, zookeepers)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextmanager
def routing_root(config: Config, ledger_path: Path) -> Iterator[RoutingStore]:
    """A routing root of its own on the stack's ZooKeeper, with both clusters registered; removed after."""
    zk = connect(config)
    ledger = Ledger.open(f"sqlite:///{ledger_path}")
    store = RoutingStore(zk, f"/t-{uuid.uuid4().hex[:10]}", ledger)
    store.ensure_layout()
    for cluster_id, cluster in config.clusters.items():
        store.register_cluster(cluster_id, cluster.bootstrap, actor="user:test", reason="test")
    try:
        yield store
    finally:
        zk.delete(store.layout.root, recursive=True)
        disconnect(zk)
        ledger.close()
