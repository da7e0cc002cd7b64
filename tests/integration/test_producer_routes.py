"""An idempotent producer moved by switches keeps writing through a gateway restarted after them: where
its batches go and as whom is kept in ZooKeeper (``workers.gateway.producers.store``), not in the memory
of the process that moved it. Before, a gateway restarted after a switch over and back sent the client's
batches on untranslated, the cluster saw its own stale sequences for the id, and kafka-python stopped
with OUT_OF_ORDER_SEQUENCE_NUMBER (found by the soak)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import BindingState, PartitionId
from switchyard.routing import BindingChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from tests.helpers.migrations import migrate
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import RawProducer
from tests.helpers.traffic import topic_ids

ACTOR = "user:test"
BATCH = 150


@pytest.fixture
def gateway(routing: RoutingStore, stack_config: Config, tmp_path: Path) -> Iterator[GatewayProcess]:
    assert stack_config.source is not None
    process = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id="gw-routes", log=tmp_path / "gateway.log"
    )
    process.start()
    yield process
    process.stop()


def move(routing: RoutingStore, key: BindingKey, source: str, target: str) -> None:
    """Block, then bind to ``target``, each applied by every gateway (a switch without the mirror)."""
    bound = routing.binding(key)
    blocked = routing.apply(
        [BindingChange(key, bound.epoch if bound else 0, source, BindingState.BLOCKED)],
        actor=ACTOR,
        reason="t",
    )
    wait_for_acks(routing.zk, routing.layout, blocked, timeout_s=10)
    flipped = routing.apply(
        [BindingChange(key, blocked, target, BindingState.ACTIVE)], actor=ACTOR, reason="t"
    )
    wait_for_acks(routing.zk, routing.layout, flipped, timeout_s=10)


def bound_to_primary(
    routing: RoutingStore, config: Config, prefix: str, partitions: int
) -> tuple[str, str, BindingKey, str, str]:
    """An application bound to the primary and a topic on both clusters: (app, topic, its binding key,
    primary, standby)."""
    app, topic = f"{prefix}-{uuid.uuid4().hex[:6]}", f"{prefix}-topic-{uuid.uuid4().hex[:6]}"
    primary, standby = (config.clusters[c].bootstrap for c in ("primary", "standby"))
    for bootstrap in (primary, standby):
        kafka.create_topics(bootstrap, [topic], partitions=partitions)
    key = BindingKey.for_app(app)
    wait_for_acks(routing.zk, routing.layout,
                  routing.set_binding(key, "primary", actor=ACTOR, reason="t"), timeout_s=10)  # fmt: skip
    return app, topic, key, primary, standby


def test_a_moved_producer_writes_on_through_a_restarted_gateway(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    app, topic, key, primary, standby = bound_to_primary(routing, stack_config, "routes", 3)
    producer = KafkaProducer(bootstrap_servers=gateway.bootstrap, client_id=app)  # idempotent by default
    sent = 0

    def send() -> None:
        nonlocal sent
        futures = [producer.send(topic, str(n).encode()) for n in range(sent, sent + BATCH)]
        producer.flush(60)
        for future in futures:
            future.get(timeout=1)  # raises what the producer was told
        sent += BATCH

    try:
        send()  # on the primary, as the id the primary issued
        move(routing, key, "primary", "standby")
        send()  # on the standby, as the gateway's id there
        move(routing, key, "standby", "primary")
        send()  # on the primary again, as another id of the gateway's
        gateway.stop()
        gateway.start()
        send()  # the restarted gateway knows as whom
        move(routing, key, "primary", "standby")
        send()
    finally:
        producer.close(10)
    on_primary, on_standby = Counter(topic_ids(primary, topic)), Counter(topic_ids(standby, topic))
    assert set(on_primary) == set(range(BATCH)) | set(range(2 * BATCH, 4 * BATCH))
    assert set(on_standby) == set(range(BATCH, 2 * BATCH)) | set(range(4 * BATCH, 5 * BATCH))
    assert max((on_primary + on_standby).values()) == 1


def values(bootstrap: str, topic: str, partition: int) -> list[bytes | None]:
    return [r.value for r in kafka.read_partitions(bootstrap, topic).get(partition, [])]


def tagged(tags: str) -> list[bytes | None]:
    """The values of ``RawProducer`` batches tagged ``tags``, in order."""
    return [f"{t}{n}".encode() for t in tags for n in range(3)]


def test_a_moved_producers_sequences_start_where_its_old_cluster_left_them(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    """A batch the old cluster refused waits in the client for its retry while later ones may reach the
    new cluster first. A cluster takes any sequence as a new producer's first, so a later batch sent
    first was written at 0, the earlier one never, and librdkafka reported both delivered (it counts a
    batch acknowledged when a later one is): records lost without an error (a switchover in the suite
    lost three). Here the client's batches come out of order on purpose, and only the one at the old
    cluster's next sequence may go first; a retry of a batch the old cluster holds is a duplicate."""
    app, topic, key, primary, standby = bound_to_primary(routing, stack_config, "starts", 1)
    client = RawProducer(gateway.port, app)
    try:

        def produce(sequence: int, tag: str, bumped: int = 0) -> ErrorCode:
            return client.produce(topic, {0: (sequence, tag)}, bumped)[0]

        assert produce(0, "a") == ErrorCode.none  # a0..a2, on the primary
        move(routing, key, "primary", "standby")
        # b0..b2 (sequences 3..5) failed on the primary and wait for their retry: c0..c2 may not go first
        assert produce(6, "c") == ErrorCode.not_leader_or_follower
        assert produce(0, "a") == ErrorCode.duplicate_sequence_number  # its answer lost, a's retry
        assert kafka.ends_of(standby, [(topic, 0)]) == {(topic, 0): 0}
        assert produce(3, "b") == ErrorCode.none
        assert produce(6, "c") == ErrorCode.none
        assert produce(9, "d") == ErrorCode.none
        # librdkafka bumps its own epoch after a gap and numbers every partition from 0 again: not
        # duplicates of the first batches
        assert produce(0, "e", bumped=1) == ErrorCode.none
        assert produce(12, "f") == ErrorCode.invalid_producer_epoch  # of the epoch it left
        assert produce(3, "g", bumped=1) == ErrorCode.none
    finally:
        client.close()
    assert values(primary, topic, 0) == tagged("a")
    assert values(standby, topic, 0) == tagged("bcdeg")


def test_a_migrated_partitions_sequences_start_where_its_origin_left_them(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    """The same for a partition migration: the partition's batches go to the target as the gateway's own
    id there, and only the one at the origin's next sequence may go first."""
    app, topic, _, primary, standby = bound_to_primary(routing, stack_config, "mstarts", 2)
    client = RawProducer(gateway.port, app)
    try:
        assert client.produce(topic, {0: (0, "a"), 1: (0, "a")}) == {0: ErrorCode.none, 1: ErrorCode.none}
        migrate(routing, stack_config, PartitionId(topic, 1), "primary", "standby")
        # b (3..5) failed on the origin and waits for its retry: c may not go first, nor with it
        assert client.produce(topic, {1: (6, "c")}) == {1: ErrorCode.not_leader_or_follower}
        # the part left on the origin goes; the migrated one waits for b
        assert client.produce(topic, {0: (3, "b"), 1: (6, "c")}) == {
            0: ErrorCode.none,
            1: ErrorCode.not_leader_or_follower,
        }
        assert client.produce(topic, {1: (0, "a")}) == {1: ErrorCode.duplicate_sequence_number}
        assert kafka.ends_of(standby, [(topic, 1)]) == {(topic, 1): 0}
        assert client.produce(topic, {0: (3, "b"), 1: (3, "b")}) == {0: ErrorCode.none, 1: ErrorCode.none}
        assert client.produce(topic, {0: (6, "c"), 1: (6, "c")}) == {0: ErrorCode.none, 1: ErrorCode.none}
        issued = client.producer_id, client.epoch
        client.close()
        # a gateway restarted since writes on as the id it stored, from the starts it stored
        gateway.stop()
        gateway.start()
        client = RawProducer(gateway.port, app, issued)
        assert client.produce(topic, {0: (9, "d"), 1: (9, "d")}) == {0: ErrorCode.none, 1: ErrorCode.none}
    finally:
        client.close()
    assert values(primary, topic, 0) == tagged("abcd")
    assert values(primary, topic, 1) == tagged("a")
    assert values(standby, topic, 1) == tagged("bcd")


def test_a_migrated_partitions_writes_go_on_through_another_gateway_process(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A client's connections land on any process of a gateway. One process wrote the first batch after
    a migration to the target as its own id there; the client's next batch, through another process
    that had seen the partition held too, waited for ever for that first batch under an id of the
    other's own: refused NOT_LEADER_OR_FOLLOWER until the client gave up on it (a chaos trial's Java
    producer, for 120 s, the first process killed). The id and the starts are stored and shared."""
    app, topic, _, primary, standby = bound_to_primary(routing, stack_config, "mshared", 1)
    assert stack_config.source is not None
    other = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id="gw-other", log=tmp_path / "other.log"
    )
    other.start()
    client = RawProducer(gateway.port, app)
    try:
        assert client.produce(topic, {0: (0, "a")}) == {0: ErrorCode.none}
        migrate(routing, stack_config, PartitionId(topic, 0), "primary", "standby")  # both see it held
        assert client.produce(topic, {0: (3, "b")}) == {0: ErrorCode.none}  # to the target, through one
        issued = client.producer_id, client.epoch
        client.close()
        client = RawProducer(other.port, app, issued)  # reconnected, to the other
        assert client.produce(topic, {0: (6, "c")}) == {0: ErrorCode.none}
        assert client.produce(topic, {0: (3, "b")}) == {0: ErrorCode.none}  # a retry: the broker dedups it
        assert client.produce(topic, {0: (9, "d")}) == {0: ErrorCode.none}
    finally:
        client.close()
        other.stop()
    assert values(primary, topic, 0) == tagged("a")
    assert values(standby, topic, 0) == tagged("bcd")


def test_a_switched_producers_writes_split_by_a_migration_stay_translated(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    """A producer switched to the standby (its batches there as the gateway's own id) and a partition
    then migrated from the standby: a request naming both partitions is split, and the part left on the
    standby is written as that id too. Sent as the client's own id, the standby took it for another
    producer's, and a retry of it sent whole was written again."""
    app, topic, key, primary, standby = bound_to_primary(routing, stack_config, "split", 2)
    client = RawProducer(gateway.port, app)
    try:
        assert client.produce(topic, {0: (0, "a"), 1: (0, "a")}) == {0: ErrorCode.none, 1: ErrorCode.none}
        move(routing, key, "primary", "standby")
        assert client.produce(topic, {0: (3, "b"), 1: (3, "b")}) == {0: ErrorCode.none, 1: ErrorCode.none}
        migrate(routing, stack_config, PartitionId(topic, 1), "standby", "primary")
        assert client.produce(topic, {0: (6, "c"), 1: (6, "c")}) == {0: ErrorCode.none, 1: ErrorCode.none}
        assert client.produce(topic, {0: (6, "c")}) == {0: ErrorCode.none}  # its answer lost: a retry
        assert client.produce(topic, {0: (9, "d")}) == {0: ErrorCode.none}
    finally:
        client.close()
    assert values(standby, topic, 0) == tagged("bcd")
    assert values(standby, topic, 1) == tagged("b")
    assert values(primary, topic, 1) == tagged("ac")
