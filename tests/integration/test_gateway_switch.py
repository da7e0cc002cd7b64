"""Live traffic moved between clusters by driving the routing store the way a switchover saga will.

A producer and a consumer group run through the gateway the whole time. The test blocks the AppID,
waits for the gateway's acknowledgement, copies the topic and the group's committed offsets to the
standby (the mirror's job, done by hand here, offsets identical), flips the binding, and lets traffic
go on. Every acknowledged record must be on the standby exactly once, nothing may reach the primary
after the block (while the producer is seen trying), and the application must receive every record, in
order per partition, receiving one again only where its commit was refused. That last allowance is
what clients still notice of a switch: the commit for the batch in hand is refused while blocked, and
the group resumes from the last commit that got through (the test prints how many records that is).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import BindingState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import BindingChange, RoutingStore
from switchyard.stack import TESTBED_CONSUMER_SETTINGS
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.processes import GatewayProcess
from tests.helpers.threads import Worker
from tests.integration.test_gateway import gateway, otlp  # noqa: F401 - shared module fixtures

PARTITIONS = 3
EXPECTED_COMMIT_FAILURES = {
    "NOT_COORDINATOR",
    "UNKNOWN_MEMBER_ID",
    "ILLEGAL_GENERATION",
    "REBALANCE_IN_PROGRESS",
}
"""Why commits fail across a switch today (carrying them over is the gateway's next step)."""


@dataclass
class Batch:
    """What the application got from one ``consume`` call, and whether committing it worked."""

    records: list[tuple[int, int, int]]
    """(partition, offset, value) in the order received."""
    commit_error: str | None = None


class Traffic:
    """A producer and a consumer group on one topic, through the gateway, in background threads.

    The consumer is the application: every record it receives is processed, then the batch is
    committed synchronously. Everything is kept — each batch, its commit's outcome, every error the
    client reported — so the test judges the switch by what the application saw.
    """

    def __init__(self, bootstrap: str, app: str, topic: str, group: str, *, idempotent: bool) -> None:
        self.topic = topic
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        self.sent = 0
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.batches: list[Batch] = []
        self.errors: list[str] = []
        # Idempotent (the Java client's default): the gateway carries its producer id and sequences
        # over to the new cluster. Not idempotent: one request in flight keeps order across retries.
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"{app}@producer",
                "acks": "all",
                "linger.ms": 2,
                **(
                    {"enable.idempotence": True}
                    if idempotent
                    else {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}
                ),
            }
        )
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"{app}@consumer",
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **TESTBED_CONSUMER_SETTINGS,
            }
        )
        self.threads = [Worker(self._produce, name="producer"), Worker(self._consume, name="consumer")]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    @property
    def received(self) -> list[int]:
        return [value for batch in self.batches for _, _, value in batch.records]

    def _produce(self) -> None:
        def delivered(err: object, msg: object) -> None:
            if err is None:
                self.acked.append(int(msg.value()))  # type: ignore[attr-defined]
            else:
                self.failed.append(str(err))

        while not self.stop_producing.is_set():
            if len(self.producer) >= 2000:  # blocked: wait rather than pile records up
                self.producer.poll(0.05)
                continue
            self.producer.produce(
                self.topic, key=str(self.sent).encode(), value=str(self.sent).encode(), on_delivery=delivered
            )
            self.sent += 1
            self.producer.poll(0.002)
        assert self.producer.flush(60) == 0, "records never acknowledged"

    def _consume(self) -> None:
        self.consumer.subscribe([self.topic])
        try:
            while not self.stop_consuming.is_set():
                messages = self.consumer.consume(200, 0.2)
                self.errors += [str(m.error()) for m in messages if m.error() is not None]
                records = [
                    (m.partition() or 0, m.offset() or 0, int(m.value() or b"-1"))
                    for m in messages
                    if m.error() is None
                ]
                if not records:
                    continue
                batch = Batch(records)
                self.batches.append(batch)  # processed: the application has seen them
                try:
                    self.consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    batch.commit_error = exc.args[0].name()
        finally:
            self.consumer.close()


def topic_ids(bootstrap: str, topic: str) -> list[int]:
    """Every record value of the topic, read directly from one cluster."""
    return [int(r.value or b"-1") for rs in kafka.read_partitions(bootstrap, topic).values() for r in rs]


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
    writer = Consumer({"bootstrap.servers": target, "group.id": group, **TESTBED_CONSUMER_SETTINGS})
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


def assert_in_order(batches: list[Batch]) -> None:
    """Per partition, records arrive in offset order: each the next one, or a step back to one already
    seen (the group resuming at its last commit) — never a step over a record not yet seen."""
    last: dict[int, int] = defaultdict(lambda: -1)
    highest: dict[int, int] = defaultdict(lambda: -1)
    for batch in batches:
        for partition, offset, _ in batch.records:
            assert offset == last[partition] + 1 or offset <= highest[partition], (
                f"partition {partition}: {offset} after {last[partition]} (highest {highest[partition]})"
            )
            last[partition], highest[partition] = offset, max(highest[partition], offset)


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent-producer", "plain-producer"])
def test_live_traffic_follows_a_switch(
    gateway: GatewayProcess,  # noqa: F811
    otlp: OtlpReceiver,  # noqa: F811
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
        refused = otlp.latest("gateway.blocked", api="produce", app=app)
        deadline = time.monotonic() + 30
        while otlp.latest("gateway.blocked", api="produce", app=app) < refused + 5:
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
        traffic.stop_producing.set()
        traffic.threads[0].join(90)

    deadline = time.monotonic() + 90
    while not set(traffic.acked) <= set(traffic.received) and time.monotonic() < deadline:
        time.sleep(0.2)
    traffic.stop_consuming.set()
    traffic.threads[1].join(30)

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


def judge_consumer(traffic: Traffic) -> str:
    """What the application received is complete, in order, and only repeated where a commit failed."""
    assert traffic.errors == []
    received = Counter(traffic.received)
    assert set(received) == set(traffic.acked), "records the application never received"
    assert_in_order(traffic.batches)
    failed = [b for b in traffic.batches if b.commit_error is not None]
    uncommitted = {value for batch in failed for _, _, value in batch.records}
    twice = {value for value, times in received.items() if times > 1}
    assert twice <= uncommitted, "records processed again although their commit had succeeded"
    reasons = Counter(str(b.commit_error) for b in failed)
    assert set(reasons) <= EXPECTED_COMMIT_FAILURES, reasons
    return f"{len(received)} records, {len(twice)} twice, {len(failed)} commits refused {dict(reasons)}"
