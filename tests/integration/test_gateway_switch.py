"""Live traffic moved between clusters by driving the routing store the way a switchover saga will.

A producer and a consumer group run through the gateway the whole time. The test blocks the AppID,
waits for the gateway's acknowledgement, copies the topic and the group's committed offsets to the
standby (the mirror's job, done by hand here, offsets identical), flips the binding, and lets traffic
go on. Every acknowledged record must be on the standby exactly once, nothing may reach the primary
after the block (while the producer is seen trying), and the application must receive every record, in
order per partition, receiving one again only where its commit was refused. No link copies the topic
here, so the gateway has no offset map to carry a commit made on the primary over to the standby: the
group resumes from the last commit that got through (the test prints how many records that is). With a
link, as the sagas run it, commits are carried and nothing is processed twice (``test_sagas.py``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.groups import group_state
from switchyard.model import BindingState
from switchyard.routing import BindingChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from switchyard.traffic import Traffic
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import RawClient, coordinator_port, join_group
from tests.helpers.stacks import QUICK_CONSUMER
from tests.helpers.traffic import judge_consumer, topic_ids
from tests.integration.test_gateway import gateway  # noqa: F401 - a shared module fixture

PARTITIONS = 3


def ends(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's log end offset, as read (a partition's records sit at offsets 0..end-1 here)."""
    return {p: len(rs) for p, rs in kafka.read_partitions(bootstrap, topic).items()}


def copy_topic(source: str, target: str, topic: str) -> None:
    """What the mirror will do: every record into the same partition, so offsets come out identical."""
    found = kafka.read_partitions(source, topic)
    for partition, records in found.items():
        assert [r.offset for r in records] == list(range(len(records)))
        kafka.produce(target, topic, [kafka.Record(r.key, r.value, partition) for r in records])
    copied = kafka.read_partitions(target, topic)
    assert {p: [(r.offset, r.value) for r in rs] for p, rs in copied.items()} == {
        p: [(r.offset, r.value) for r in rs] for p, rs in found.items()
    }


def copy_group_offsets(source: str, target: str, group: str, topic: str) -> dict[int, int]:
    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    reader = Consumer({"bootstrap.servers": source, "group.id": group})
    committed = [tp for tp in reader.committed(partitions, timeout=10) if tp.offset >= 0]
    reader.close()
    writer = Consumer({"bootstrap.servers": target, "group.id": group, **QUICK_CONSUMER})
    if committed:
        writer.commit(offsets=committed, asynchronous=False)
    writer.close()
    return {tp.partition: tp.offset for tp in committed}


@pytest.fixture
def mover(routing: RoutingStore, stack_config: Config) -> tuple[str, str]:
    app, topic = f"mover-{uuid.uuid4().hex[:6]}", f"moving-{uuid.uuid4().hex[:6]}"
    for cluster in stack_config.clusters.values():
        kafka.create_topics(cluster.bootstrap, [topic], partitions=PARTITIONS)
    return app, topic


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent-producer", "plain-producer"])
def test_live_traffic_follows_a_switch(
    gateway: GatewayProcess,  # noqa: F811
    otlp: OtlpReceiver,
    routing: RoutingStore,
    stack_config: Config,
    mover: tuple[str, str],
    idempotent: bool,
) -> None:
    app, topic = mover
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    key = BindingKey.for_app(app)
    epoch = routing.set_binding(key, "primary", actor="user:test", reason="start")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)

    group = f"movers-{uuid.uuid4().hex[:6]}"
    traffic = Traffic(gateway.bootstrap, app, topic, group, idempotent=idempotent)
    traffic.start()
    try:
        deadline = time.monotonic() + 60
        while len(traffic.received) < 300 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(traffic.received) >= 300, "traffic never got going through the gateway"

        # 1. block, and wait until the gateway has applied it (in-flight requests answered)
        blocked = routing.apply(
            [BindingChange(key, epoch, "primary", BindingState.BLOCKED)], actor="user:test", reason="block"
        )
        wait_for_acks(routing.zk, routing.layout, blocked, timeout_s=10)
        frozen = ends(primary, topic)
        blocked_name = "switchyard.gateway.blocked_requests"
        refused = otlp.latest(blocked_name, api="produce", app=app)
        deadline = time.monotonic() + 30
        while otlp.latest(blocked_name, api="produce", app=app) < refused + 2:  # held, answered, again
            assert time.monotonic() < deadline, "the producer was not seen trying while blocked"
            time.sleep(0.2)
        assert ends(primary, topic) == frozen  # it kept trying, and nothing got through

        # 2. the mirror's part, by hand: identical offsets, group offsets carried over
        copy_topic(primary, standby, topic)
        copy_group_offsets(primary, standby, group, topic)

        # 3. flip: active on the standby
        flipped = routing.apply(
            [BindingChange(key, blocked, "standby", BindingState.ACTIVE)], actor="user:test", reason="flip"
        )
        wait_for_acks(routing.zk, routing.layout, flipped, timeout_s=10)
        after_flip = len(traffic.acked)
        deadline = time.monotonic() + 60
        while len(traffic.acked) < after_flip + 500 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        traffic.stop()

    # what the producer saw
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))  # every record acknowledged
    assert len(traffic.acked) > after_flip + 400  # and plenty of them after the flip
    assert ends(primary, topic) == frozen  # nothing reached the primary after the block
    on_standby = Counter(topic_ids(standby, topic))
    assert set(on_standby) == set(traffic.acked)
    assert max(on_standby.values()) == 1  # each record exactly once on the standby

    # what the consumer saw: every record, in order per partition; twice only where a commit failed
    print(f"\n{'idempotent' if idempotent else 'plain'} producer: {judge_consumer(traffic)}")


def silent_member(bootstrap: str, group: str, topic: str, timeout: timedelta) -> RawClient:
    """A member that joins ``group`` at its coordinator, syncs, and then says nothing: a later member's
    join waits at the broker until ``timeout`` ends this one."""
    client = RawClient(coordinator_port(int(bootstrap.rsplit(":", 1)[1]), group))
    join_group(client, group, topic, timeout)
    return client


def test_a_member_whose_join_a_switch_cut_is_removed_from_the_cluster_it_was_joining(
    gateway: GatewayProcess,  # noqa: F811
    routing: RoutingStore,
    stack_config: Config,
    mover: tuple[str, str],
) -> None:
    """A consumer at a 30 s session time-out is still in its first join on the primary when its
    application is switched to the standby: the broker holds the join until the group's other member,
    silent, is dropped 10 s after it joined. The gateway cuts the join; the broker makes the consumer one
    of the group all the same when the round ends. The primary must forget it: left there, the group
    would refuse a switch back's offsets for 30 s (a chaos run held clients 16 s on it). The gateway
    removes it at the flip, while its join waits: Apache Kafka ends the round without it (the stand-in
    broker the project used before kept a member removed that way as the round's leader, and the
    group's later rounds never ended, so the gateway then waited for the join's answer)."""
    app, topic = mover
    primary = stack_config.clusters["primary"].bootstrap
    key = BindingKey.for_app(app)
    epoch = routing.set_binding(key, "primary", actor="user:test", reason="start")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    group = f"cut-{uuid.uuid4().hex[:6]}"
    silent = silent_member(primary, group, topic, timedelta(seconds=10))
    joined_at = time.monotonic()
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "client.id": f"{app}@consumer", "group.id": group,
         "session.timeout.ms": 30_000}
    )  # fmt: skip
    stop = threading.Event()

    def poll() -> None:  # a consumer joins only while polled
        while not stop.is_set():
            consumer.poll(0.1)

    polling = threading.Thread(target=poll)
    consumer.subscribe([topic])
    polling.start()
    try:
        admin = AdminClient({"bootstrap.servers": primary})
        deadline = time.monotonic() + 8
        while group_state(admin, group)[0] is not ConsumerGroupState.PREPARING_REBALANCING:
            assert time.monotonic() < deadline, "the consumer never began joining on the primary"
            time.sleep(0.1)
        flipped = routing.set_binding(key, "standby", actor="user:test", reason="flip")
        wait_for_acks(routing.zk, routing.layout, flipped, timeout_s=10)
        waited = time.monotonic() - joined_at  # the silent member's 10 s end the round
        assert group_state(admin, group)[0] is ConsumerGroupState.PREPARING_REBALANCING, (
            f"the round ended before the flip, {waited:.1f} s after the silent member joined"
        )
        deadline = time.monotonic() + 25  # the round ends within 10 s; the consumer's session is 30 s
        while group_state(admin, group) != (ConsumerGroupState.EMPTY, 0):
            assert time.monotonic() < deadline, "the cut join left its member in the group on the primary"
            time.sleep(0.2)
        offsets = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])
        for future in admin.alter_consumer_group_offsets([offsets]).values():  # a member would refuse it
            assert all(tp.error is None for tp in future.result(10).topic_partitions or ())
    finally:
        silent.close()
        stop.set()
        polling.join(5)
        threading.Thread(target=consumer.close, daemon=True).start()  # its join on the standby may wait
    assert f"group {group}: member" in gateway.log.read_text()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_committed_offsets_asked_where_the_group_was_coordinated_come_from_where_it_is_now(
    gateway: GatewayProcess,  # noqa: F811
    routing: RoutingStore,
    stack_config: Config,
    mover: tuple[str, str],
    protocol: str,
) -> None:
    """librdkafka sends an OffsetFetch its coordinator refuses twice more, to the same broker, then tells
    the application "Failed to fetch committed offsets" (CI, the compat test's KIP-848 round: partitions
    assigned as the switch began asked the primary's coordinator after the flip). Asked on a virtual
    broker of the cluster the identity has left, the gateway answers as the group's coordinator where the
    identity is routed now does — an OffsetFetch changes nothing, and it is what the consumer starts from."""
    app, topic = mover
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.produce(primary, topic, [kafka.Record(None, b"%d" % i, i % PARTITIONS) for i in range(30)])
    copy_topic(primary, standby, topic)
    key = BindingKey.for_app(app)
    epoch = routing.set_binding(key, "primary", actor="user:test", reason="start")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    group = f"asks-{uuid.uuid4().hex[:6]}"
    consumer = Consumer(
        {"bootstrap.servers": gateway.bootstrap, "client.id": f"{app}@consumer", "group.id": group,
         "group.protocol": protocol, "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        seen, deadline = 0, time.monotonic() + 60
        while seen < 30:
            assert time.monotonic() < deadline, f"the consumer read {seen} of 30 records through the gateway"
            message = consumer.poll(0.5)
            seen += message is not None and message.error() is None
        consumer.commit(asynchronous=False)  # at its coordinator on the primary
        on_standby = [TopicPartition(topic, p, 5 + p) for p in range(PARTITIONS)]  # unlike the primary's
        writer = Consumer({"bootstrap.servers": standby, "group.id": group})
        writer.commit(offsets=on_standby, asynchronous=False)
        writer.close()
        flipped = routing.set_binding(key, "standby", actor="user:test", reason="flip")
        wait_for_acks(routing.zk, routing.layout, flipped, timeout_s=10)
        asked = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    assert {tp.partition: tp.offset for tp in asked} == {p: 5 + p for p in range(PARTITIONS)}
