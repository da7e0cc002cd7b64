"""A fault migration (seed 004): the origin frozen (SIGSTOP of its broker, its data kept), both partitions
of a topic migrated to the standby at once — one ignoring the origin, one not — and the origin back.

Judged by what the applications saw: the producer's writes land on the target while the origin is still
frozen; the reader of the partition that ignores the origin goes on from the target; the other waits,
and once the origin is back (its end recorded, unshielded) reads the origin's remaining records, steps
over the gap, and reads the target's. Every client offset keeps the record it stood for before the
origin came back (the seed's first open problem), and the gap is counted. On brokers of this module's
own, so that freezing one disturbs nothing else.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic

from switchyard import kafka
from switchyard.model import ClusterState, MigrationMode, PartitionId
from switchyard.routing.store import RoutingStore
from switchyard.traffic import debug_log
from tests.helpers import ports
from tests.helpers.live import Live, readiness
from tests.helpers.processes import freeze
from tests.helpers.raw import RawClient
from tests.helpers.services import PrivateService, live_on_brokers, private_brokers  # noqa: F401 - fixtures
from workers.gateway.brokers import topic_identity
from workers.gateway.routing import apis

MARGIN = 1000
BEFORE = 100
"""Records each partition holds on the origin when it freezes."""
IGNORING, WAITING = 0, 1
"""The partition migrated with ignore-origin, and the one whose readers wait for the origin."""


HEALTH_PORT = ports.reserve(1)[0]
LIVE_SETTINGS = {
    "SWITCHYARD__SAGAS__FAULT_MARGIN": str(MARGIN),
    "SWITCHYARD__GATEWAY__HEALTH_PORT": str(HEALTH_PORT),
}


class Reader:
    """One partition read through the gateway from an offset, by assignment: every (offset, value)."""

    def __init__(self, bootstrap: str, app: str, topic: str, partition: int, start: int) -> None:
        self.got: list[tuple[int, bytes]] = []
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": app, "group.id": app,
                                  "enable.auto.commit": False})  # fmt: skip
        self.consumer.assign([TopicPartition(topic, partition, start)])
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop.is_set():
            message = self.consumer.poll(0.2)
            if message is not None and message.error() is None:
                self.got.append((message.offset() or 0, message.value() or b""))
        self.consumer.close()

    def until(self, check: object, timeout_s: float = 60) -> None:
        assert callable(check)
        deadline = time.monotonic() + timeout_s
        while not check(self.got):
            assert time.monotonic() < deadline, f"the reader got {len(self.got)}, up to {self.got[-1:]}"
            time.sleep(0.1)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_a_fault_migration_writes_on_at_once_and_no_offset_changes_meaning_when_the_origin_returns(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    assert live.gateway is not None
    primary, standby = brokers
    app, topic = f"fault-{uuid.uuid4().hex[:6]}", f"faulty-{uuid.uuid4().hex[:6]}"
    for broker in (primary, standby):  # a fault migration needs the topic on its target already
        kafka.create_topics(broker.connect, [topic], partitions=2)
    acked: list[tuple[int, int, bytes, float]] = []
    """(partition, client offset, value, when) of every acknowledged record."""
    debug = os.environ.get("SWITCHYARD_TRAFFIC_DEBUG")  # librdkafka's log, as switchyard.traffic writes it
    producer = Producer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app,
                         **({"debug": debug, "logger": debug_log(app)} if debug else {})})  # fmt: skip

    def send(partition: int, value: bytes) -> None:
        def done(err: object, msg: object) -> None:
            if err is None:
                acked.append((partition, msg.offset(), value, time.monotonic()))  # type: ignore[attr-defined]

        producer.produce(topic, value, partition=partition, on_delivery=done)

    for i in range(BEFORE):
        for partition in (IGNORING, WAITING):
            send(partition, f"{partition}-before-{i}".encode())
    assert producer.flush(30) == 0
    readers = {p: Reader(live.gateway.bootstrap, app, topic, p, 0) for p in (IGNORING, WAITING)}
    try:
        for reader in readers.values():
            reader.until(lambda got: len(got) >= BEFORE)
        readers[WAITING].close()  # it stops half way: the origin still holds records it has not read
        waiting_at = BEFORE // 2

        freeze(primary.process.pid())  # the origin stops answering, its data kept
        with delivered_meanwhile(producer):  # each write timed as it is acknowledged, not at a flush
            began = migrate_both(live, topic, lambda p, i: send(p, f"{p}-after-{i}".encode()))
        assert producer.flush(60) == 0
        first_on_target = min(t for p, o, _, t in acked if o >= BEFORE and p == IGNORING)
        print(f"\nfault migration: the first write acknowledged on the target {first_on_target - began:.1f}s "
              "after the migrate-partition command")  # fmt: skip

        ignoring = readers[IGNORING]
        ignoring.until(lambda got: len(got) >= BEFORE + 50)  # it went on, from the target
        # a frozen, shielded cluster keeps the gateway ready
        assert readiness(HEALTH_PORT, "primary") == (200, "shielded")
        asked_by_id(live.gateway.port, app, topic)
        late = Reader(live.gateway.bootstrap, app, topic, WAITING, waiting_at)
        time.sleep(3)
        assert late.got == [], "a reader of the origin's records got some while the origin was frozen"
        before_return = {(IGNORING, o): v for o, v in ignoring.got} | meanings(acked)

        os.kill(primary.process.pid() or 0, signal.SIGCONT)  # the origin is back
        early = live.cli("clusters", "unshield", "primary")  # before its end is recorded: refused
        assert early.returncode == 5, early.stdout + early.stderr  # BindingRefused
        assert "fault migrations whose end is not recorded" in early.stderr
        checked = live.cli("migrations", "check")
        assert f"{topic}[{WAITING}]: the origin's end {BEFORE} recorded" in checked.stdout, checked.stdout
        assert routing.cluster("primary").state is ClusterState.SHIELDED  # type: ignore[union-attr]
        assert live.cli("clusters", "unshield", "primary").returncode == 0
        late.until(lambda got: len(got) >= BEFORE - waiting_at + 50)
    finally:
        for reader in readers.values():
            reader.close()
        os.kill(primary.process.pid() or 0, signal.SIGCONT)
    late.close()
    no_connection_closed_over_the_shield(live)

    judge(live, routing, brokers, topic, acked, late.got, ignoring.got, before_return, waiting_at)


def judge(
    live: Live,
    routing: RoutingStore,
    brokers: tuple[PrivateService, PrivateService],
    topic: str,
    acked: list[tuple[int, int, bytes, float]],
    late: list[tuple[int, bytes]],
    ignoring: list[tuple[int, bytes]],
    before_return: dict[tuple[int, int], bytes],
    waiting_at: int,
) -> None:
    """The waiting reader read the origin's rest, then the target's past the gap; no client offset changed
    meaning when the origin came back; nothing was acknowledged twice."""
    migration = routing.migration(PartitionId(topic, WAITING))
    assert migration is not None
    assert migration.mode is MigrationMode.FAULT
    end = migration.end_offset
    assert end == BEFORE + MARGIN  # the gateways saw every write acknowledged up to BEFORE
    assert migration.origin_end == BEFORE
    offsets = [o for o, _ in late]
    assert offsets[: BEFORE - waiting_at] == list(range(waiting_at, BEFORE))  # the origin's rest first
    assert offsets[BEFORE - waiting_at :] == list(range(end, end + 50))  # then the target's, past the gap
    gap = end - BEFORE
    print(f"fault migration: the waiting reader stepped over a gap of {gap} offsets ({BEFORE}..{end - 1})")
    after_return = {(WAITING, o): v for o, v in late} | {(IGNORING, o): v for o, v in ignoring}
    for key, value in after_return.items():  # problem 1: no client offset changed meaning
        assert before_return.get(key, value) == value, f"{key} meant {before_return[key]!r}, now {value!r}"
    held = Counter(
        r.value
        for broker in brokers
        for rs in kafka.read_partitions(broker.connect, topic).values()
        for r in rs
    )
    assert set(held) == {v for _, _, v, _ in acked}  # every acknowledged record kept
    twice = sorted(v for v, n in held.items() if n > 1)
    # twice only what was sent to the frozen origin before its partition's migration took effect: the
    # gateway had passed it on, the origin wrote it when it woke, the client had retried it on the target
    # (an at-least-once write, as on any failover); the reader ignoring the origin never sees those
    assert all(v.startswith(b"0-after-") for v in twice), twice
    assert len({v for _, v in ignoring}) == len(ignoring)
    print(f"fault migration: {len(twice)} records written to the frozen origin and, retried, to the target")
    shown = live.cli("migrations", "show", topic, str(WAITING))
    assert f"{BEFORE} to {end - 1}: a gap, no record" in shown.stdout, shown.stdout


def migrate_both(live: Live, topic: str, send: Callable[[int, int], None]) -> float:
    """Fault-migrate both partitions, the producer writing each all the while; when the first saga began."""
    began = time.monotonic()
    ignoring = live.cli_in_background(
        "migrate-partition", topic, str(IGNORING), "--to", "standby", "--fault", "--ignore-origin", "--wait"
    )
    for i in range(50):
        send(IGNORING, i)
    out, err = ignoring.communicate(timeout=180)
    assert ignoring.returncode == 0, out + err
    assert f"partition-migration migrated: {topic}[{IGNORING}]" in out
    waiting = live.cli("migrate-partition", topic, str(WAITING), "--to", "standby", "--fault", "--wait")
    assert waiting.returncode == 0, waiting.stdout + waiting.stderr
    for i in range(50):
        send(WAITING, i)
    return began


def no_connection_closed_over_the_shield(live: Live) -> None:
    """Every request of a shielded cluster's clients was answered (librdkafka asks for its metrics
    subscription every few seconds): none cost a client its connection."""
    closed = [line for line in (live.logs / "gateway.log").read_text().splitlines()
              if "closing connection" in line and "shielded" in line]  # fmt: skip
    assert closed == [], f"the gateway closed {len(closed)} client connections over the shield: {closed[:2]}"


def asked_by_id(port: int, app: str, topic: str) -> None:
    """Metadata asking by topic id, of the shielded cluster's client: answered from what the gateway
    saw of the cluster (not asked), under the id clients see; an id it never saw, UNKNOWN_TOPIC_ID."""
    client = RawClient(port, client_id=app)
    try:
        stranger = uuid.uuid4()
        answer = client.answer(client.send(
            apis.METADATA, 12, allow_auto_topic_creation=False, topics=(
                MetadataRequestTopic(topic_id=topic_identity.topic_id(topic), name=None),
                MetadataRequestTopic(topic_id=stranger, name=None),
            ),
        ))  # fmt: skip
    finally:
        client.close()
    known, unknown = answer.topics
    assert (known.name, known.topic_id, known.error_code) == (topic, topic_identity.topic_id(topic), 0)
    assert [p.partition_index for p in known.partitions] == [IGNORING, WAITING]
    assert (unknown.topic_id, unknown.error_code) == (stranger, ErrorCode.unknown_topic_id)


@contextlib.contextmanager
def delivered_meanwhile(producer: Producer) -> Iterator[None]:
    """The producer's delivery reports served as they arrive (confluent-kafka runs them only in poll)."""
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            producer.poll(0.05)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)


def meanings(acked: list[tuple[int, int, bytes, float]]) -> dict[tuple[int, int], bytes]:
    """(partition, client offset) -> value, as the producer's acknowledgements said."""
    return {(p, o): v for p, o, v, _ in acked}
