"""Real confluent-kafka clients through a real gateway process to the two embedded clusters."""

from __future__ import annotations

import json
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.config import Config, split_hostport
from switchyard.keys import BindingKey
from switchyard.model import LinkState, now
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.layout import epoch_data
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack, health
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.processes import GatewayProcess
from tests.helpers.stacks import QUICK_CONSUMER, routing_root
from workers.gateway.brokers.vnodes import FIRST_ID

ACTOR = "user:test"


@pytest.fixture(scope="module")
def gateway(
    routing: RoutingStore, stack_config: Config, otlp: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    assert stack_config.source is not None
    log = tmp_path_factory.mktemp("gw-log") / "gateway.log"
    process = GatewayProcess(
        stack_config.source,
        root=routing.layout.root,
        gateway_id="gw-a",
        log=log,
        overrides={
            "SWITCHYARD__TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
            "SWITCHYARD__TELEMETRY__EXPORT_INTERVAL_S": "0.5",
        },
    )
    process.start()
    yield process
    process.stop()


def bind(routing: RoutingStore, key: BindingKey, cluster: str) -> int:
    """Change a binding the way a saga does: write it, then wait until every gateway has applied it."""
    epoch = routing.set_binding(key, cluster, actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    return epoch


def only_on(config: Config, cluster: str, topic: str, count: int) -> None:
    """``topic`` holds ``count`` records on ``cluster``, read directly, and exists on no other cluster."""
    found = kafka.read_partitions(config.clusters[cluster].bootstrap, topic)
    assert sum(len(rs) for rs in found.values()) == count
    for other, settings in config.clusters.items():
        if other != cluster:
            listed = AdminClient({"bootstrap.servers": settings.bootstrap}).list_topics(timeout=10).topics
            assert topic not in listed, f"{topic} also on {other}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def records(n: int) -> list[kafka.Record]:
    return [kafka.Record(f"key-{i}".encode(), f"value-{i}".encode()) for i in range(n)]


def test_produce_and_consume_through_the_gateway(gateway: GatewayProcess, stack_config: Config) -> None:
    topic, app = unique("plain"), unique("plain")
    kafka.create_topics(gateway.bootstrap, [topic], partitions=3)
    sent = records(2000)
    assert kafka.produce(gateway.bootstrap, topic, sent, settings={"client.id": f"{app}@p1"}) == 2000
    got = kafka.consume(
        gateway.bootstrap,
        topic,
        group=unique("g"),
        count=2000,
        settings={**QUICK_CONSUMER, "client.id": f"{app}@c1"},
    )
    assert sorted((r.key, r.value) for r in got) == sorted((r.key, r.value) for r in sent)
    only_on(stack_config, "primary", topic, 2000)  # unbound: the default cluster, and only there


def test_the_binding_decides_the_cluster(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    topic, app = unique("bound"), unique("orders")
    bind(routing, BindingKey.for_app(app), "standby")
    kafka.create_topics(stack_config.clusters["standby"].bootstrap, [topic], partitions=2)
    assert kafka.produce(gateway.bootstrap, topic, records(500), settings={"client.id": f"{app}@p1"}) == 500
    only_on(stack_config, "standby", topic, 500)


def test_regex_subscription_is_answered_from_the_bound_cluster(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    app, prefix = unique("rx"), unique("rx")
    bind(routing, BindingKey.for_app(app), "standby")
    standby = stack_config.clusters["standby"].bootstrap
    kafka.create_topics(standby, [f"{prefix}-a", f"{prefix}-b"], partitions=1)
    kafka.produce(standby, f"{prefix}-a", records(100))
    kafka.produce(standby, f"{prefix}-b", records(100))
    got = kafka.consume(
        gateway.bootstrap,
        f"^{prefix}-.*",
        group=unique("g"),
        count=200,
        settings={**QUICK_CONSUMER, "client.id": f"{app}@c1"},
    )
    assert len(got) == 200


def test_produce_to_a_mirror_topic_is_refused_until_the_link_is_promoted(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    app, topic, link = unique("mirrored"), unique("mir"), unique("link")
    bind(routing, BindingKey.for_app(app), "standby")
    for cluster in stack_config.clusters.values():
        kafka.create_topics(cluster.bootstrap, [topic], partitions=1)
    epoch = routing.create_link(link, "primary", "standby", include=[f"{topic}.*"], actor=ACTOR, reason="t")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    with pytest.raises(kafka.KafkaOperationError, match="TOPIC_AUTHORIZATION_FAILED"):
        kafka.produce(gateway.bootstrap, topic, records(3), settings={"client.id": app}, timeout_s=10)
    # the same topic name on the link's source is writable: only the target copy is protected
    kafka.produce(stack_config.clusters["primary"].bootstrap, topic, records(1))
    assert kafka.produce(gateway.bootstrap, topic, records(2), settings={"client.id": unique("x")}) == 2

    epoch = routing.set_link_state(link, LinkState.PROMOTED, actor=ACTOR, reason="switchover")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    assert kafka.produce(gateway.bootstrap, topic, records(3), settings={"client.id": app}) == 3
    only_on_standby = kafka.read_partitions(stack_config.clusters["standby"].bootstrap, topic)
    assert sum(len(r) for r in only_on_standby.values()) == 3


def test_clients_only_ever_see_virtual_brokers(gateway: GatewayProcess, stack_config: Config) -> None:
    cluster = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(timeout=10)
    assert cluster.cluster_id == "switchyard"
    ports = {b.port for b in cluster.brokers.values()}
    assert ports
    assert all(gateway.port < p < gateway.port + 16 for p in ports), ports
    real = {
        node
        for c in stack_config.clusters.values()
        for node in AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10).brokers
    }
    assert all(v >= FIRST_ID for v in cluster.brokers), sorted(cluster.brokers)  # no real id is one of them
    assert all(r < FIRST_ID for r in real), real


def test_a_gateway_lists_every_clusters_brokers_from_its_start(
    stack: Stack, stack_config: Config, ledger_path: Path, tmp_path: Path
) -> None:
    """A gateway new to its routing root (no virtual id given out yet) lists the standby's brokers to a
    client of the primary from its first answer, as a process that has run through a switch does: a
    process listed only the brokers it had looked up itself, so the two processes of a gateway answered
    with different sets and kafkajs rebalanced its fetchers at each change (a chaos trial's loop)."""
    assert stack_config.source is not None
    real = {
        (cluster, node)
        for cluster, c in stack_config.clusters.items()
        for node in AdminClient({"bootstrap.servers": c.bootstrap}).list_topics(timeout=10).brokers
    }
    assert {cluster for cluster, _ in real} == set(stack_config.clusters), real
    with routing_root(stack_config, ledger_path) as fresh:
        process = GatewayProcess(
            stack_config.source, root=fresh.layout.root, gateway_id="gw-new", log=tmp_path / "gateway.log"
        )
        process.start()
        try:
            listed = AdminClient({"bootstrap.servers": process.bootstrap}).list_topics(timeout=10).brokers
        finally:
            process.stop()
    assert len(listed) == len(real), f"{len(listed)} brokers listed of {len(real)}: {sorted(listed)}"


def test_api_versions_are_answered_by_the_gateway(gateway: GatewayProcess, stack_config: Config) -> None:
    ours = health.api_versions("127.0.0.1", gateway.port)
    theirs = health.api_versions(*split_hostport(stack_config.clusters["primary"].bootstrap))
    assert ours[1][1] == 12 < theirs[1][1]  # Fetch capped where topics are named by id
    assert ours[17] == (1, 1)  # SaslHandshake: the gateway's own, framed tokens only
    for key, (low, high) in ours.items():
        if key in theirs and key not in (17, 18, 36):
            assert theirs[key][0] <= low <= high <= theirs[key][1]


@pytest.mark.parametrize(
    "garbage",
    [
        struct.pack(">i", -5),  # negative size
        struct.pack(">i", 2**30),  # larger than max_frame_bytes
        struct.pack(">i", 4) + b"\x00\x12\x00",  # size promises more than comes
        struct.pack(">i", 12) + b"\x03\xe7\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00",  # unknown API 999
        struct.pack(">i", 10) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\x7f",  # bad client id length
    ],
)
def test_a_malformed_frame_closes_that_connection_only(gateway: GatewayProcess, garbage: bytes) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=5) as sock:
        sock.sendall(garbage)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == b""  # closed by the gateway, without an answer
    assert health.kafka("127.0.0.1", gateway.port).ok  # and it goes on serving everyone else
    assert gateway.process is not None
    assert gateway.process.poll() is None


def test_a_broken_link_planted_in_zookeeper_is_ignored_and_traffic_goes_on(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    """A link whose pattern does not compile (written around the store, as an older version could, with
    an epoch of its own that names nothing it changed): the gateway reports it and routes as before,
    instead of failing every Produce to its target."""
    app, topic, link = unique("planted"), unique("planted"), unique("link")
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="t")
    node = routing.layout.link(link)
    raw = json.loads(routing.zk.get(node)[0])
    routing.zk.set(node, json.dumps({**raw, "include": ["mir[("]}).encode())
    counter, stat = routing.zk.get(routing.layout.epoch)
    planted = epoch_data(json.loads(counter)["epoch"] + 1, "an older version", now())
    routing.zk.set(routing.layout.epoch, planted, stat.version)
    bind(routing, BindingKey.for_app(app), "standby")  # the gateway reads the whole tree: a gap in history
    kafka.create_topics(stack_config.clusters["standby"].bootstrap, [topic], partitions=1)
    assert kafka.produce(gateway.bootstrap, topic, records(20), settings={"client.id": app}) == 20
    only_on(stack_config, "standby", topic, 20)
    assert f"link {link} is ignored: pattern 'mir[(' is not a regular expression" in gateway.log.read_text()


def test_records_read_through_the_gateway_carry_no_leader_epoch(
    gateway: GatewayProcess, stack_config: Config
) -> None:
    """A batch's header names the leader epoch of the cluster that wrote it, and librdkafka commits a
    position only when it is newer than its last commit, epochs compared before offsets: switched to a
    cluster of lower epochs, it would commit nothing until its group rejoined, then read again from its
    last commit. Through the gateway, every record comes with no epoch; read directly, with one."""
    topic = unique("epochs")
    kafka.create_topics(gateway.bootstrap, [topic], partitions=2)
    assert kafka.produce(gateway.bootstrap, topic, records(300)) == 300

    def epochs(bootstrap: str) -> set[int | None]:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("epochs")})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
        got: list[int | None] = []
        try:
            for _ in range(20):  # at most ~20 s
                got += [m.leader_epoch() for m in consumer.consume(300, 1) if m.error() is None]
                if len(got) >= 300:
                    break
        finally:
            consumer.close()
        assert len(got) == 300
        return set(got)

    assert epochs(gateway.bootstrap) == {None}
    assert None not in epochs(stack_config.clusters["primary"].bootstrap)


def test_a_consumer_of_the_new_group_protocol_reads_through_the_gateway(
    gateway: GatewayProcess, stack_config: Config
) -> None:
    """KIP-848 groups (``group.protocol=consumer``): ConsumerGroupHeartbeat is offered as the brokers offer
    it, and a consumer's assignment, which names its topic by the cluster's id, reaches it by the id
    clients see, so it reads (the switches are in ``test_compat.py`` and ``test_sagas.py``); the other
    APIs of the newer group protocols (share, streams, and ConsumerGroupDescribe) are not offered."""
    ours = health.api_versions("127.0.0.1", gateway.port)
    theirs = health.api_versions(*split_hostport(stack_config.clusters["primary"].bootstrap))
    assert {68, 69} <= set(theirs)  # ConsumerGroupHeartbeat and ConsumerGroupDescribe: the brokers have them
    assert ours[68] == theirs[68]
    assert not set(ours) & {69, 76, 77, 78, 79, 88, 89}, sorted(ours)
    topic = f"kip848-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic], partitions=1)
    kafka.produce(gateway.bootstrap, topic, [kafka.Record(b"k", b"v")])
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "group.id": topic, "group.protocol": "consumer",
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(40):
            message = consumer.poll(0.5)
            if message is not None:
                break
    finally:
        consumer.close()
    assert message is not None, "read nothing in 20 s"
    assert message.error() is None, message.error()
    assert (message.value(), message.offset()) == (b"v", 0)
