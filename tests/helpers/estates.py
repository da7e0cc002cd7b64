"""An estate across major versions: the session stack with its primary replaced by a cluster of Apache
Kafka 3.9 in ZooKeeper mode of its own (on the session's ZooKeeper), its standby the session's 4.x KRaft
cluster — for the tests of moves from the one to the other (docs/runbooks/cluster-move.md)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from switchyard import kafka
from switchyard.config import Config, load_config
from switchyard.mirror.control import delete_link
from switchyard.moves.cluster import INTERNAL_PREFIXES
from switchyard.routing.store import RoutingStore
from switchyard.routing.zk import children_data
from switchyard.sagas.ids import evacuation_id
from switchyard.stack import Stack
from tests.helpers import ports
from tests.helpers.clusters import discard
from tests.helpers.live import Live, terminate

LEGACY_VERSION = "3.9.2"
"""The last Apache Kafka line with ZooKeeper."""


@contextmanager
def legacy_primary(stack_config: Config, directory: Path, *, brokers: int = 1) -> Iterator[Config]:
    """The session's configuration with ``primary`` a cluster of ``brokers`` 3.9 brokers in ZooKeeper mode,
    started here and discarded after; its state under ``directory``."""
    assert stack_config.source is not None
    data = yaml.safe_load(stack_config.source.read_text())
    addresses = ",".join(f"127.0.0.1:{p}" for p in ports.reserve(brokers))
    data["clusters"]["primary"] = {"bootstrap": addresses}
    data["stack"]["state_dir"] = str(directory / "state")
    data["stack"]["clusters"]["primary"] = {"version": LEGACY_VERSION, "metadata": "zookeeper",
                                            "brokers": brokers}  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    config = load_config(path, environ={})
    stack = Stack(config, only=set(_names(brokers)))
    try:
        stack.up(timeout_s=120)
        for service in stack.services:  # what the tests using it claim to cross
            log = stack.process(service).log_file.read_text()
            assert f"Kafka version: {LEGACY_VERSION}" in log, service.name
            assert "Connecting to zookeeper on" in log, service.name
        yield config
    finally:
        discard(stack)


def empty_source(routing: RoutingStore, config: Config, live: Live) -> None:
    """End the evacuation of ``primary`` if a failed test left it running, with its locks; remove every
    link from or to ``primary`` and every topic on it: each evacuation test moves the cluster whole, and
    what one leaves there (a batch rolled back, its links) would be planned again."""
    if terminate(live, evacuation_id("primary")):
        folder = routing.layout.folder("locks")
        for name in children_data(routing.zk, folder):
            routing.zk.delete(f"{folder}/{name}")
    primary = config.clusters["primary"].bootstrap
    for link in list(routing.snapshot().links.values()):
        if "primary" in (link.source, link.target):
            delete_link(config, routing, link.id, actor="user:test", reason="tidy", force=True)
    for topic in {t for t, _ in kafka.partitions(primary, lambda n: not n.startswith(INTERNAL_PREFIXES))}:
        kafka.delete_topic(primary, topic)


def _names(brokers: int) -> list[str]:
    return ["kafka-primary"] if brokers == 1 else [f"kafka-primary-{n}" for n in range(1, brokers + 1)]
