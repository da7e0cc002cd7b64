"""Apache Kafka clusters of a test's own, run by the stack's own code without the rest of a stack."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from switchyard import kafka
from switchyard.config import load_config
from switchyard.stack import Stack, health
from tests.helpers import ports
from tests.helpers.stacks import KAFKA_DIST

SOLO = "solo"


def cluster_config(
    directory: Path,
    *,
    brokers: int = 1,
    version: str | None = None,
    properties: dict[str, Any] | None = None,
    zookeeper: bool = False,
) -> Path:
    """A configuration whose one cluster, ``solo``, has ``brokers`` brokers on reserved ports (with
    ``zookeeper``, in ZooKeeper mode, with the stack's ZooKeeper on a reserved port)."""
    clients = ports.reserve(brokers)
    solo: dict[str, Any] = {"brokers": brokers}
    if zookeeper:
        solo["metadata"] = "zookeeper"
    else:
        solo["controllers"] = ",".join(f"127.0.0.1:{p}" for p in ports.reserve(brokers))
    if version:
        solo["version"] = version
    if properties:
        solo["properties"] = properties
    data = {
        "clusters": {SOLO: {"bootstrap": ",".join(f"127.0.0.1:{p}" for p in clients)}},
        "default_cluster": SOLO,
        "stack": {"state_dir": str(directory / "state"), "kafka": {"dist_dir": str(KAFKA_DIST)},
                  "clusters": {SOLO: solo}},
    }  # fmt: skip
    if zookeeper:
        data["zookeeper"] = {"connect": f"127.0.0.1:{ports.reserve(1)[0]}"}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "switchyard.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def cluster_stack(path: Path) -> Stack:
    """The stack of ``path`` reduced to its cluster's brokers, and ZooKeeper if they keep their metadata
    there (no Temporal)."""
    config = load_config(path, environ={})
    names = {f"kafka-{SOLO}", *(f"kafka-{SOLO}-{n}" for n in range(1, 6))}
    if config.stack.cluster(SOLO).metadata == "zookeeper":
        names.add("zookeeper")
    return Stack(config, only=names)


def kill(stack: Stack, name: str) -> None:
    """SIGKILL, and wait until it is gone and its port closed: a JVM's main thread shows as a zombie
    while its other threads still exit, holding the process's sockets a moment longer."""
    service = next(s for s in stack.services if s.name == name)
    process = stack.process(service)
    pid = process.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while process.pid() is not None or health.port_open(service.host, service.port):
        assert time.monotonic() < deadline, f"{name} outlived SIGKILL by 30 s"
        time.sleep(0.05)


def discard(stack: Stack) -> None:
    """End a throwaway cluster at once (its storage goes with the test's folder): a graceful stop of
    three brokers, each handing its leadership on and the last waiting for a quorum, took 25 s."""
    for service in stack.services:
        stack.process(service).stop(grace_s=0)


def records(n: int, tag: str) -> list[kafka.Record]:
    """``n`` records keyed ``<tag>-<i>``."""
    return [kafka.Record(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode()) for i in range(n)]


def read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """The keys of ``count`` records of ``topic``, read by a group of their own, sorted."""
    got = kafka.consume(bootstrap, topic, group=f"g-{uuid.uuid4().hex[:8]}", count=count)
    return sorted(r.key or b"" for r in got)
