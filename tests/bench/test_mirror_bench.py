"""The mirror against a plain consume -> produce loop between the same clusters, in one run.

- throughput: 100,000 records of 1 KiB waiting on the source (3 partitions). The plain loop reads them
  from the beginning without a group and writes them to the target (idempotent producer, linger 5 ms,
  as the mirror); the mirror is started on a paused link first (so its group join is not timed), then
  resumed, and timed until the target holds every record;
- steady-state lag: 5,000 records/s of 1 KiB for 10 s through the running mirror; a consumer on the
  target measures, per record, arrival time minus the record's timestamp (copied from the source, so
  it is the moment it was produced there).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.mirror.status import read_status
from switchyard.model import LinkState
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers.processes import MirrorProcess
from tests.helpers.records import fill_topic

SIZE = 1024
RECORDS = 100_000
PARTITIONS = 3
RATE, SECONDS = 5_000, 10
ACTOR = "user:bench"


@pytest.fixture(scope="module")
def mirror(
    stack_config: Config,
    routing: RoutingStore,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[MirrorProcess]:
    assert stack_config.source is not None
    process = MirrorProcess(
        stack_config.source,
        root=routing.layout.root,
        name="bench",
        log=tmp_path_factory.mktemp("mirror-bench") / "mirror.log",
        overrides={
            "SWITCHYARD__LEDGER__URL": f"sqlite:///{ledger_path}",
            "SWITCHYARD__MIRROR__TOPIC_REFRESH_S": "1",
            "SWITCHYARD__MIRROR__STATUS_INTERVAL_S": "0.2",
            "SWITCHYARD__MIRROR__CONSUMER": "{session.timeout.ms: 6000}",
        },
    )
    process.start()
    yield process
    process.stop()


def plain_loop(source: str, target: str, topic: str) -> float:
    """Records per second of the simplest correct copy: consume, produce, wait for every ack."""
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-plain", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5})
    copied = 0
    started = time.perf_counter()
    while copied < RECORDS:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                continue
            while True:
                try:
                    producer.produce(topic, msg.value(), msg.key(), partition=msg.partition())
                    break
                except BufferError:
                    producer.poll(0.01)
            copied += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.perf_counter() - started
    consumer.close()
    return RECORDS / elapsed


def copied(store: RoutingStore, link: str) -> int:
    return sum(p.target_end for m in read_status(store.zk, store.layout, link) for p in m.partitions)


def wait_for(condition: object, timeout_s: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def mirror_throughput(store: RoutingStore, source: str, topic: str) -> float:
    link = f"bench-{topic}"
    store.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    store.set_link_state(link, LinkState.PAUSED, actor=ACTOR, reason="bench: hold until timed")
    reported = lambda: len([p for m in read_status(store.zk, store.layout, link) for p in m.partitions])  # noqa: E731
    wait_for(lambda: reported() == PARTITIONS, 60, "the mirror never took the partitions")
    started = time.perf_counter()
    store.set_link_state(link, LinkState.RUNNING, actor=ACTOR, reason="bench: go")
    wait_for(lambda: copied(store, link) >= RECORDS, 300, "the mirror did not copy everything")
    return RECORDS / (time.perf_counter() - started)


def steady_lag(source: str, target: str, topic: str, *, copy_to: str | None = None) -> list[float]:
    """Produce at RATE for SECONDS; per record, when it is visible on the target minus when produced.

    The mirror copies ``topic`` already (same name on the target); with ``copy_to``, a plain loop
    copies it to that topic instead, for the baseline."""
    seen_topic = copy_to or topic
    lags: list[float] = []
    done = threading.Event()

    def watch() -> None:
        consumer = Consumer({"bootstrap.servers": target, "group.id": "bench-lag", "fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(seen_topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while len(lags) < RATE * SECONDS and not done.is_set():
            for msg in consumer.consume(1000, 0) or consumer.consume(1, 0.1):  # no waiting for a batch
                if msg.error() is None:
                    lags.append(time.time() - msg.timestamp()[1] / 1000)
        consumer.close()

    def plain_copy() -> None:
        consumer = Consumer(
            {"bootstrap.servers": source, "group.id": "bench-plain-lag", "fetch.wait.max.ms": 100}
        )
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        producer = Producer({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5})
        while not done.is_set():
            for msg in consumer.consume(1000, 0) or consumer.consume(1, 0.1):
                if msg.error() is None:
                    producer.produce(seen_topic, msg.value(), msg.key(), partition=msg.partition(),
                                     timestamp=msg.timestamp()[1])  # fmt: skip
            producer.poll(0)
        producer.flush(10)
        consumer.close()

    helpers = [threading.Thread(target=watch)] + ([threading.Thread(target=plain_copy)] if copy_to else [])
    for helper in helpers:
        helper.start()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 0})
    payload = b"s" * SIZE
    start = time.perf_counter()
    for tick in range(SECONDS * 1000):
        due = start + tick / 1000
        while (now := time.perf_counter()) < due:
            producer.poll(max(0.0, due - now))
        for _ in range(RATE // 1000):
            producer.produce(topic, payload)
        producer.poll(0)
    assert producer.flush(30) == 0
    helpers[0].join(60)
    done.set()
    for helper in helpers[1:]:
        helper.join(30)
    assert len(lags) == RATE * SECONDS, f"{len(lags)} of {RATE * SECONDS} records seen on the target"
    return sorted(lags)


def mirrored_topic(store: RoutingStore, source: str, topic: str) -> str:
    link = f"bench-{topic}"
    kafka.create_topics(source, [topic], partitions=PARTITIONS)
    store.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    wait_for(lambda: len([p for m in read_status(store.zk, store.layout, link) for p in m.partitions])
             == PARTITIONS, 60, "the mirror never took the partitions")  # fmt: skip
    return topic


def test_mirror_against_a_plain_loop(
    mirror: MirrorProcess,
    routing: RoutingStore,
    stack_config: Config,
) -> None:
    source, target = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    plain_topic, mirror_topic = f"plain-{uuid.uuid4().hex[:6]}", f"mirrored-{uuid.uuid4().hex[:6]}"
    fill_topic(source, plain_topic, RECORDS, partitions=PARTITIONS, size=SIZE)
    kafka.create_topics(target, [plain_topic], partitions=PARTITIONS)
    plain = plain_loop(source, target, plain_topic)
    fill_topic(source, mirror_topic, RECORDS, partitions=PARTITIONS, size=SIZE)
    mirrored = mirror_throughput(routing, source, mirror_topic)
    plain_topic = f"steady-plain-{uuid.uuid4().hex[:6]}"
    for bootstrap in (source, target):
        kafka.create_topics(bootstrap, [plain_topic], partitions=PARTITIONS)
    plain_lags = steady_lag(source, target, plain_topic, copy_to=f"{plain_topic}-copy")
    lags = steady_lag(source, target, mirrored_topic(routing, source, f"steady-{uuid.uuid4().hex[:6]}"))

    def pct(samples: list[float], q: float) -> str:
        return f"{samples[min(len(samples) - 1, int(q * len(samples)))] * 1000:.1f}"

    print(
        f"\nmirror vs plain loop: {RECORDS:,} records of 1 KiB, {PARTITIONS} partitions, primary -> standby"
    )
    print(render(
        ("path", "copy msg/s", "ratio"),
        [("plain consume->produce", f"{plain:,.0f}", "100%"),
         ("mirror", f"{mirrored:,.0f}", f"{mirrored / plain:.0%}")],
    ))  # fmt: skip
    print(f"steady state at {RATE:,}/s for {SECONDS}s, produce -> visible on the target:")
    print(render(
        ("path", "p50 ms", "p99 ms", "max ms"),
        [(name, pct(samples, 0.5), pct(samples, 0.99), pct(samples, 1.0))
         for name, samples in (("plain consume->produce", plain_lags), ("mirror", lags))],
    ))  # fmt: skip
