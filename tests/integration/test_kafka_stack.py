"""The stack's Apache Kafka clusters on their own: storage kept across stops and kills, the 3.9 line
beside 4.x, and `stack up` refusing what it cannot run with the reason (three brokers: see
test_three_brokers)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from switchyard import kafka
from switchyard.errors import StackError
from tests.helpers import ports
from tests.helpers.clusters import cluster_config, cluster_stack, kill, read_all, records
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


def test_a_cluster_in_zookeeper_mode_keeps_its_records_across_a_kill_and_its_mode(tmp_path: Path) -> None:
    """3.9 in ZooKeeper mode: registered under its own znode, started again at once after a kill (the
    start waits for its registration's session to expire, which a broker started sooner exits on), and
    its storage refused to KRaft mode."""
    path = cluster_config(tmp_path, version=OLDER, zookeeper=True)
    stack = cluster_stack(path)
    try:
        stack.up(timeout_s=120)
        bootstrap = stack.config.clusters["solo"].bootstrap
        topic = f"zk-{uuid.uuid4().hex[:8]}"
        kafka.create_topics(bootstrap, [topic], partitions=3)
        assert kafka.produce(bootstrap, topic, records(100, "a")) == 100
        broker = next(s for s in stack.services if s.name == "kafka-solo")
        log = stack.process(broker).log_file.read_text()
        assert f"Kafka version: {OLDER}" in log
        assert f"Connecting to zookeeper on {stack.config.zookeeper.connect}/kafka-clusters/solo" in log
        kill(stack, "kafka-solo")
        stack.up(timeout_s=120)
        assert kafka.produce(bootstrap, topic, records(50, "b")) == 50
        assert len(read_all(bootstrap, topic, 150)) == 150
    finally:
        stack.down()
    data = yaml.safe_load(path.read_text())
    del data["stack"]["clusters"]["solo"]["metadata"]  # KRaft, on storage ZooKeeper mode made
    data["stack"]["clusters"]["solo"]["controllers"] = f"127.0.0.1:{ports.reserve(1)[0]}"
    path.write_text(yaml.safe_dump(data))
    assert "was made in zookeeper mode, and the configuration asks for kraft" in refusal(path)


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
