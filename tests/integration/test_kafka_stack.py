"""The stack's Apache Kafka clusters on their own: storage kept across stops and kills, three brokers
replicating, the 3.9 line beside 4.x, and `stack up` refusing what it cannot run with the reason."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.errors import StackError
from switchyard.stack import Stack, health
from tests.helpers.clusters import cluster_config, cluster_stack
from tests.helpers.stacks import KAFKA_DIST

OLDER = "3.9.2"


def refusal(path: Path) -> str:
    """What `stack up` stops with for this configuration."""
    stack = cluster_stack(path)
    try:
        with pytest.raises(StackError) as refused:
            stack.up(timeout_s=120)
        assert not list(stack.state_dir.glob("*.pid")), "up left a process running"
    finally:
        stack.down()
    return str(refused.value)


@pytest.fixture
def solo(tmp_path: Path) -> Iterator[Path]:
    path = cluster_config(tmp_path)
    yield path
    cluster_stack(path).down()


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


def records(n: int, tag: str) -> list[kafka.Record]:
    return [kafka.Record(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode()) for i in range(n)]


def read_all(bootstrap: str, topic: str, count: int) -> list[bytes]:
    got = kafka.consume(bootstrap, topic, group=f"g-{uuid.uuid4().hex[:8]}", count=count)
    return sorted(r.key or b"" for r in got)


def test_records_survive_a_stop_and_a_kill(solo: Path) -> None:
    stack = cluster_stack(solo)
    stack.up(timeout_s=120)
    bootstrap = stack.config.clusters["solo"].bootstrap
    topic = f"kept-{uuid.uuid4().hex[:8]}"
    kafka.create_topics(bootstrap, [topic], partitions=3)
    assert kafka.produce(bootstrap, topic, records(300, "a")) == 300

    stack.down()
    stack.up(timeout_s=120)
    assert kafka.produce(bootstrap, topic, records(200, "b")) == 200

    kill(stack, stack.services[0].name)
    stack.up(timeout_s=120)  # what is not running is started again, on the same storage
    assert read_all(bootstrap, topic, 500) == sorted(
        r.key or b"" for r in records(300, "a") + records(200, "b")
    )
    ends = kafka.ends_of(bootstrap, [(topic, p) for p in range(3)])
    assert sum(ends.values()) == 500


def test_three_brokers_replicate_and_one_may_die(tmp_path: Path) -> None:
    path = cluster_config(tmp_path, brokers=3)
    stack = cluster_stack(path)
    try:
        stack.up(timeout_s=120)
        assert [s.name for s in stack.services] == ["kafka-solo-1", "kafka-solo-2", "kafka-solo-3"]
        bootstrap = stack.config.clusters["solo"].bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert sorted(b.id for b in admin.list_topics(timeout=10).brokers.values()) == [1, 2, 3]
        topic = f"triple-{uuid.uuid4().hex[:8]}"
        kafka.create_topics(bootstrap, [topic], partitions=3, config={"min.insync.replicas": "2"})
        partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        assert all(sorted(p.replicas) == [1, 2, 3] for p in partitions)
        assert kafka.produce(bootstrap, topic, records(100, "a")) == 100
        assert len(read_all(bootstrap, topic, 100)) == 100  # __consumer_offsets made while all three are up

        kill(stack, "kafka-solo-1")  # two of three remain: a quorum, and min.insync.replicas met
        assert kafka.produce(bootstrap, topic, records(100, "b")) == 100
        assert len(read_all(bootstrap, topic, 200)) == 200
    finally:
        stack.down()


def test_the_older_line_runs_and_storage_keeps_its_version(tmp_path: Path) -> None:
    path = cluster_config(tmp_path, version=OLDER)
    stack = cluster_stack(path)
    try:
        stack.up(timeout_s=120)
        bootstrap = stack.config.clusters["solo"].bootstrap
        topic = f"old-{uuid.uuid4().hex[:8]}"
        kafka.create_topics(bootstrap, [topic])
        assert kafka.produce(bootstrap, topic, records(10, "a")) == 10
        log = stack.process(stack.services[0]).log_file.read_text()
        assert f"Kafka version: {OLDER}" in log
    finally:
        stack.down()
    state = json.loads((stack.config.stack.state_dir / "kafka" / "solo" / "cluster.json").read_text())
    assert state["version"] == OLDER

    data = yaml.safe_load(path.read_text())
    del data["stack"]["clusters"]["solo"]["version"]  # now the default, 4.x
    path.write_text(yaml.safe_dump(data))
    assert f"formatted by Apache Kafka {OLDER}, and the configuration asks for 4." in refusal(path)


def test_a_version_maven_cannot_resolve_stops_up_with_the_reason(tmp_path: Path) -> None:
    path = cluster_config(tmp_path, version="4.4.99")
    refused = refusal(path)
    assert "Maven could not resolve Apache Kafka 4.4.99" in refused
    assert "kafka_2.13" in refused  # Maven's own words name what is missing
    assert not (KAFKA_DIST / "4.4.99").exists()
    assert not (tmp_path / "state" / "kafka").exists()  # nothing formatted, nothing started


@pytest.mark.parametrize(
    ("properties", "when", "reason"),
    [
        (
            {"num.io.threads": 0},
            "formatting its storage failed",
            "Invalid value 0 for configuration num.io.threads",
        ),
        (
            {"authorizer.class.name": "org.example.NoSuchAuthorizer"},
            "exited during start-up",
            "NoSuchAuthorizer",
        ),
    ],
)
def test_a_broker_that_will_not_start_is_reported_with_its_reason(
    tmp_path: Path, properties: dict[str, Any], when: str, reason: str
) -> None:
    refused = refusal(cluster_config(tmp_path, properties=properties))
    assert f"kafka-solo: {when}" in refused
    assert reason in refused  # the broker's own words, not only the frames of its stack trace
