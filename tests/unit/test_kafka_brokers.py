"""What the stack asks of Apache Kafka: each broker's properties, and the jars Maven resolves."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

from switchyard.config import load_config
from switchyard.errors import ConfigError, StackError
from switchyard.stack.brokers import KafkaCluster, new_cluster_id
from switchyard.stack.distribution import KafkaDistribution


def cluster(tmp_path: Path, brokers: int, **wanted: object) -> KafkaCluster:
    data = {
        "clusters": {"primary": {"bootstrap": ",".join(f"127.0.0.1:{9092 + i}" for i in range(brokers))}},
        "default_cluster": "primary",
        "stack": {
            "state_dir": str(tmp_path / "state"),
            "clusters": {"primary": {"brokers": brokers, **wanted}},
        },
    }
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(data))
    return KafkaCluster.from_config(load_config(path, environ={}), "primary")


def properties(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines())


def test_one_broker_is_its_own_quorum_and_replicates_nothing(tmp_path: Path) -> None:
    solo = cluster(tmp_path, 1, controllers="127.0.0.1:9192")
    assert solo.service_name(1) == "kafka-primary"
    props = properties(solo.server_properties(1, [("127.0.0.1", 9192)], tmp_path / "data"))
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9192"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9192"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert props["offsets.topic.replication.factor"] == props["default.replication.factor"] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["auto.create.topics.enable"] == "false"
    assert props["share.coordinator.state.topic.replication.factor"] == "1"


def test_three_brokers_vote_together_and_replicate_three_ways(tmp_path: Path) -> None:
    three = cluster(
        tmp_path, 3, properties={"min.insync.replicas": 2, "unclean.leader.election.enable": True}
    )
    controllers = [("127.0.0.1", 9192 + i) for i in range(3)]
    assert [three.service_name(n) for n in three.node_ids] == [
        "kafka-primary-1",
        "kafka-primary-2",
        "kafka-primary-3",
    ]
    props = properties(three.server_properties(2, controllers, tmp_path / "data"))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9192,2@127.0.0.1:9193,3@127.0.0.1:9194"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093,CONTROLLER://127.0.0.1:9193"
    assert props["default.replication.factor"] == props["offsets.topic.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["min.insync.replicas"] == "2"  # the configuration's own, over the stack's
    assert props["unclean.leader.election.enable"] == "true"


def test_the_older_line_gets_no_share_groups_and_brings_its_own_logging(tmp_path: Path) -> None:
    older = cluster(tmp_path, 1, version="3.9.2")
    props = properties(older.server_properties(1, [("127.0.0.1", 9192)], tmp_path / "data"))
    assert not any(key.startswith("share.") for key in props)
    assert "log4j-core" not in older.dist.pom()
    assert older.dist.logging_options(tmp_path)[0].startswith("-Dlog4j.configuration=file:")


def test_a_cluster_in_zookeeper_mode_registers_there_under_its_own_znode(tmp_path: Path) -> None:
    older = cluster(tmp_path, 3, version="3.9.2", metadata="zookeeper")
    assert older.metadata == "zookeeper"
    props = properties(older.server_properties(2, [], tmp_path / "data", "Xy0"))
    assert props["broker.id"] == "2"
    assert props["zookeeper.connect"] == "127.0.0.1:2181/kafka-clusters/primary/Xy0"  # its storage's id
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert not any(k.startswith(("process.", "controller.", "node.", "metadata.")) for k in props), props
    assert props["default.replication.factor"] == "3"


def _refused(tmp_path: Path, **wanted: object) -> str:
    with pytest.raises(ConfigError) as refused:
        cluster(tmp_path, 1, **wanted)
    return str(refused.value)


def test_zookeeper_mode_is_refused_where_kafka_has_none_naming_the_key(tmp_path: Path) -> None:
    said = _refused(tmp_path, metadata="zookeeper")  # the default version, 4.x
    assert "stack.clusters.primary.metadata" in said
    assert "no ZooKeeper mode" in said
    said = _refused(tmp_path, version="3.9.2", metadata="zookeeper", controllers="127.0.0.1:9192")
    assert "stack.clusters.primary.controllers" in said
    assert "metadata" in _refused(tmp_path, version="3.9.2", metadata="zk")


def test_storage_made_in_one_mode_is_refused_in_the_other(tmp_path: Path) -> None:
    home = tmp_path / "state" / "kafka" / "primary"
    home.mkdir(parents=True)
    (home / "cluster.json").write_text(
        '{"cluster_id": "x", "version": "3.9.2", "controllers": [["127.0.0.1", 9192]]}'  # before modes: KRaft
    )
    older = cluster(tmp_path, 1, version="3.9.2", metadata="zookeeper")
    with pytest.raises(StackError) as refused:
        older._identity()
    assert "made in kraft mode, and the configuration asks for zookeeper" in str(refused.value)
    assert "stack.clusters.primary.metadata" in str(refused.value)


def test_the_pom_asks_for_the_broker_its_tools_the_clients_and_a_logging_binding(tmp_path: Path) -> None:
    pom = KafkaDistribution("4.4.0", tmp_path).pom()
    for artifact in ("kafka_2.13", "kafka-tools", "kafka-clients", "kafka-streams", "log4j-core",
                     "log4j-slf4j-impl"):  # fmt: skip
        assert f"<artifactId>{artifact}</artifactId>" in pom
    assert pom.count("<version>4.4.0</version>") == 5  # the project's own, and the four of Kafka


def test_a_folder_resolved_from_other_artifacts_is_resolved_again(tmp_path: Path) -> None:
    dist = KafkaDistribution("4.4.0", tmp_path)
    dist.folder.mkdir()
    (dist.folder / "complete").write_text("4.4.0\n")  # what a folder without Kafka Streams says
    assert not dist.ready()


def test_a_cluster_id_never_starts_like_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """The formatter's argument parser takes an id starting with '-' for an option (one in 32 did)."""
    draws = iter([b"\xfb" + bytes(15), b"\x00" * 16])  # the first encodes to "-w...", the second to "AAAA..."
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    assert new_cluster_id() == "A" * 22


def test_a_broker_maps_the_class_archive_once_it_is_made(tmp_path: Path) -> None:
    """The archive is only good for the JVM that made it, so it is named after that JVM's binary; a
    broker maps it when it is there and starts without it when not."""
    kafka = cluster(tmp_path, 1)
    java = shutil.which("java")
    if java is None:
        pytest.skip("no java on the path")
    archive = kafka.dist.class_archive(java)
    assert archive.parent == kafka.dist.folder
    assert kafka.dist.class_archive("/some/other/jdk/bin/java") != archive
    assert not any(a.startswith("-XX:SharedArchiveFile") for a in kafka.argv(1))
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(b"made by a broker's exit")
    assert f"-XX:SharedArchiveFile={archive}" in kafka.argv(1)
    assert "-XX:TieredStopAtLevel=1" in kafka.argv(1)
