"""An idempotent producer moved by switches keeps writing through a gateway restarted after them: where
its batches go and as whom is kept in ZooKeeper (``workers.gateway.producer_store``), not in the memory
of the process that moved it. Before, a gateway restarted after a switch over and back sent the client's
batches on untranslated, the cluster saw its own stale sequences for the id, and kafka-python stopped
with OUT_OF_ORDER_SEQUENCE_NUMBER (found by the soak)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kafka import KafkaProducer
from kio.schema.errors import ErrorCode

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import BindingState
from switchyard.routing import BindingChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from tests.helpers.batches import record_batch
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import RawClient
from tests.helpers.traffic import topic_ids
from workers.gateway import apis
from workers.gateway.entities import element_type, make
from workers.gateway.protocol import request_schema

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
    client = RawClient(int(gateway.bootstrap.rsplit(":", 1)[1]), client_id=app)
    try:
        deadline = time.monotonic() + 30
        while True:  # a broker's first InitProducerId is answered "load in progress" while it gets ids
            issued = client.answer(client.send(
                apis.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=timedelta(minutes=1),
                producer_id=-1, producer_epoch=-1,
            ))  # fmt: skip
            if issued.error_code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert issued.error_code == ErrorCode.none, issued

        topic_cls = element_type(request_schema(apis.PRODUCE, 9), "topic_data")
        partition_cls = element_type(topic_cls, "partition_data")

        def produce(sequence: int, tag: str, bumped: int = 0) -> ErrorCode:
            values = [f"{tag}{n}".encode() for n in range(3)]
            batch = record_batch(issued.producer_id, issued.producer_epoch + bumped, sequence, values)
            data = make(topic_cls, name=topic, partition_data=(make(partition_cls, index=0, records=batch),))
            answer = client.answer(client.send(
                apis.PRODUCE, 9, transactional_id=None, acks=-1, timeout=timedelta(seconds=30),
                topic_data=(data,),
            ))  # fmt: skip
            return ErrorCode(answer.responses[0].partition_responses[0].error_code)

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
    assert [r.value for r in kafka.read_partitions(primary, topic)[0]] == [b"a0", b"a1", b"a2"]
    assert [r.value for r in kafka.read_partitions(standby, topic)[0]] == [
        f"{t}{n}".encode() for t in "bcdeg" for n in range(3)
    ]
