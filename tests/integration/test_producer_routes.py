"""An idempotent producer moved by switches keeps writing through a gateway restarted after them: where
its batches go and as whom is kept in ZooKeeper (``workers.gateway.producer_store``), not in the memory
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

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import BindingState
from switchyard.routing import BindingChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from tests.helpers.processes import GatewayProcess
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


def test_a_moved_producer_writes_on_through_a_restarted_gateway(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config
) -> None:
    app, topic = f"routes-{uuid.uuid4().hex[:6]}", f"routed-{uuid.uuid4().hex[:6]}"
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    for bootstrap in (primary, standby):
        kafka.create_topics(bootstrap, [topic], partitions=3)
    key = BindingKey.for_app(app)
    wait_for_acks(routing.zk, routing.layout,
                  routing.set_binding(key, "primary", actor=ACTOR, reason="t"), timeout_s=10)  # fmt: skip
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
