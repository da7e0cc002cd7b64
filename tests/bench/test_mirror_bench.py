"""The mirror against a plain consume -> produce loop between the same clusters, in one run.

- throughput, in four rounds; each round fills one source topic (450,000 records of 1 KiB,
  3 partitions) that both copy, the plain loop to a topic of its own on the target, the mirror to the
  same name. The order alternates plain-mirror, mirror-plain, ... (the shared test machine's speed
  drifts; an ABBA order cancels a steady drift). The plain loop reads from the beginning without a group
  and writes to the target (idempotent producer, linger 5 ms, as the mirror); the mirror is started on a
  paused link first (so its group join is not timed), then resumed, and its link is removed after its
  round (an idle link's copier would otherwise share the process with later rounds). The copy rate is
  timed from the target's first acknowledgement to its last (the plain loop's delivery reports and
  flush; the mirror's status, published every 50 ms with its time): how fast each copies, apart from
  how soon it starts, which is shown beside it (the mirror's, from the resume, includes librdkafka
  looking up where a partition paused before its first fetch starts: about half a second). Each is
  charged the CPU its process used meanwhile. The medians are compared;
- steady-state lag: 5,000 records/s of 1 KiB for 10 s, copied by the running mirror and, beside it for
  the baseline, by a plain loop into a topic of its own. Offsets are identical on both sides, so each
  record's lag is when it became visible on the target minus when it became visible on the source
  (two watchers): what the copy adds, not the producer's own queueing.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.mirror.status import read_status
from switchyard.model import LinkState
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers.processes import MirrorProcess, cpu_seconds
from tests.helpers.records import fill_topic

SIZE = 1024
RECORDS = 450_000
ROUNDS = 4
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
            "SWITCHYARD__MIRROR__STATUS_INTERVAL_S": "0.05",
            "SWITCHYARD__MIRROR__CONSUMER": "{session.timeout.ms: 6000}",
        },
    )
    process.start()
    yield process
    process.stop()


@dataclass
class Copied:
    rate: float
    """Records per second, from the first acknowledgement to the last."""
    cpu_us: float
    """CPU microseconds per record, every thread of the copying process."""
    start_s: float
    """From the start to the first acknowledgement."""


def timed(started: float, first: tuple[float, int], last: float, cpu_s: float) -> Copied:
    """``first``: when the first acknowledgement was seen, and how many records were acknowledged then."""
    at, done = first
    return Copied((RECORDS - done) / (last - at), cpu_s / RECORDS * 1e6, at - started)


def copied(store: RoutingStore, link: str) -> tuple[float, int]:
    """When the mirror's status was last published (every 50 ms here) and how many records the target
    had acknowledged then."""
    members = read_status(store.zk, store.layout, link)
    at = max((m.updated_at.timestamp() for m in members), default=0.0)
    return at, sum(p.target_end for m in members for p in m.partitions)


def plain_loop(source: str, target: str, topic: str, copy_to: str) -> Copied:
    """The simplest correct copy: consume, produce, wait for every acknowledgement."""
    consumer = Consumer({"bootstrap.servers": source, "group.id": "bench-plain", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5})
    copied, cpu = 0, time.process_time()
    acked: list[float] = []
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    while copied < RECORDS:
        for msg in consumer.consume(1000, 0.5):
            if msg.error() is not None:
                continue
            while True:
                try:
                    producer.produce(
                        copy_to, msg.value(), msg.key(), partition=msg.partition() or 0,
                        on_delivery=None if copied else lambda *_: acked.append(time.perf_counter()),
                    )  # fmt: skip
                    break
                except BufferError:
                    producer.poll(0.01)
            copied += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    last, cpu = time.perf_counter(), time.process_time() - cpu
    consumer.close()
    return timed(started, (acked[0], 1), last, cpu)


def taken(store: RoutingStore, link: str) -> int:
    """How many partitions of ``link`` the mirror's status lists."""
    return len([p for m in read_status(store.zk, store.layout, link) for p in m.partitions])


def mirror_throughput(store: RoutingStore, mirror: MirrorProcess, topic: str) -> Copied:
    link = f"bench-{topic}"
    store.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    store.set_link_state(link, LinkState.PAUSED, actor=ACTOR, reason="bench: hold until timed")
    wait_for(lambda: taken(store, link) == PARTITIONS, 60, "the mirror never took the partitions")
    assert mirror.process is not None
    cpu = cpu_seconds(mirror.process.pid)
    started = time.time()
    store.set_link_state(link, LinkState.RUNNING, actor=ACTOR, reason="bench: go")
    first: tuple[float, int] | None = None
    while (seen := copied(store, link))[1] < RECORDS:
        assert time.time() < started + 300, f"the mirror copied {seen[1]} of {RECORDS}"
        if seen[1] and first is None:
            first = seen
        time.sleep(0.01)
    cpu = cpu_seconds(mirror.process.pid) - cpu
    assert first is not None, "the mirror's status never showed a part of the copy"
    store.set_link_state(link, LinkState.DELETED, actor=ACTOR, reason="bench: timed")
    return timed(started, first, seen[0], cpu)


def wait_for(condition: object, timeout_s: float, what: str) -> None:
    assert callable(condition)
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


Seen = dict[tuple[int, int], float]
"""When each record (partition, offset) became visible, by a watcher's clock."""


def watch(bootstrap: str, topic: str, seen: Seen, done: threading.Event) -> None:
    """Note when each record of ``topic`` is first fetched, until RATE * SECONDS are or ``done``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-lag", "fetch.wait.max.ms": 10})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    while len(seen) < RATE * SECONDS and not done.is_set():
        for msg in consumer.consume(1000, 0) or consumer.consume(1, 0.1):  # no waiting for a batch
            if msg.error() is None:
                seen[(msg.partition() or 0, msg.offset() or 0)] = time.time()
    consumer.close()


def plain_copy(source: str, target: str, topic: str, copy_to: str, done: threading.Event) -> None:
    consumer = Consumer(
        {"bootstrap.servers": source, "group.id": "bench-plain-lag", "fetch.wait.max.ms": 100}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    producer = Producer({"bootstrap.servers": target, "enable.idempotence": True, "linger.ms": 5})
    while not done.is_set():
        for msg in consumer.consume(1000, 0) or consumer.consume(1, 0.1):
            if msg.error() is None:
                producer.produce(copy_to, msg.value(), msg.key(), partition=msg.partition() or 0)
        producer.poll(0)
    producer.flush(10)
    consumer.close()


def steady_lag(source: str, target: str, topic: str, *, copy_to: str | None = None) -> list[float]:
    """Produce at RATE for SECONDS; per record, when it is visible on the target minus when it was
    visible on the source. The mirror copies ``topic`` already (same name on the target); with
    ``copy_to``, a plain loop copies it to that topic instead, for the baseline."""
    on_source: Seen = {}
    on_target: Seen = {}
    done = threading.Event()
    helpers = [
        threading.Thread(target=watch, args=(source, topic, on_source, done)),
        threading.Thread(target=watch, args=(target, copy_to or topic, on_target, done)),
    ]
    if copy_to:
        helpers.append(threading.Thread(target=plain_copy, args=(source, target, topic, copy_to, done)))
    for helper in helpers:
        helper.start()
    producer = Producer({"bootstrap.servers": source, "linger.ms": 5})
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
    for helper in helpers[:2]:
        helper.join(60)
    done.set()
    for helper in helpers[2:]:
        helper.join(30)
    assert len(on_target) == RATE * SECONDS, (
        f"{len(on_target)} of {RATE * SECONDS} records seen on the target"
    )
    assert on_source.keys() == on_target.keys()
    return sorted(on_target[k] - on_source[k] for k in on_target)


def mirrored_topic(store: RoutingStore, source: str, topic: str) -> str:
    link = f"bench-{topic}"
    kafka.create_topics(source, [topic], partitions=PARTITIONS)
    store.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    wait_for(lambda: taken(store, link) == PARTITIONS, 60, "the mirror never took the partitions")
    return topic


def test_mirror_against_a_plain_loop(
    mirror: MirrorProcess,
    routing: RoutingStore,
    stack_config: Config,
) -> None:
    source, target = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    plain: list[Copied] = []
    mirrored: list[Copied] = []
    for round_ in range(ROUNDS):
        topic = f"copy-{uuid.uuid4().hex[:6]}"
        fill_topic(source, topic, RECORDS, partitions=PARTITIONS, size=SIZE)
        kafka.create_topics(target, [f"{topic}-plain"], partitions=PARTITIONS)
        for copier in ("plain", "mirror") if round_ % 2 == 0 else ("mirror", "plain"):
            if copier == "plain":
                plain.append(plain_loop(source, target, topic, f"{topic}-plain"))
            else:
                mirrored.append(mirror_throughput(routing, mirror, topic))
    plain_topic = f"steady-plain-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(source, [plain_topic], partitions=PARTITIONS)
    kafka.create_topics(target, [f"{plain_topic}-copy"], partitions=PARTITIONS)  # no auto-creation
    plain_lags = steady_lag(source, target, plain_topic, copy_to=f"{plain_topic}-copy")
    lags = steady_lag(source, target, mirrored_topic(routing, source, f"steady-{uuid.uuid4().hex[:6]}"))

    def pct(samples: list[float], q: float) -> str:
        return f"{samples[min(len(samples) - 1, int(q * len(samples)))] * 1000:.1f}"

    def median(runs: list[Copied]) -> Copied:
        fields = ("rate", "cpu_us", "start_s")
        return Copied(*(statistics.median(getattr(r, f) for r in runs) for f in fields))

    base, copy = median(plain), median(mirrored)
    print(
        f"\nmirror vs plain loop: {RECORDS:,} records of 1 KiB, {PARTITIONS} partitions, primary -> standby, "
        f"{ROUNDS} rounds in ABBA order (medians)"
    )
    print(render(
        ("path", "copy msg/s", "ratio", "CPU µs/record", "CPU s/GiB", "MiB/s per core", "start ms",
         "rounds msg/s"),
        [(name, f"{m.rate:,.0f}", f"{m.rate / base.rate:.0%}", f"{m.cpu_us:.1f}",
          f"{m.cpu_us * 1e-6 * 2**30 / SIZE:.1f}", f"{SIZE / (m.cpu_us * 1e-6) / 2**20:.0f}",
          f"{m.start_s * 1000:.0f}", " ".join(f"{r.rate / 1000:.0f}k" for r in runs))
         for name, m, runs in (("plain consume->produce", base, plain), ("mirror", copy, mirrored))],
    ))  # fmt: skip
    print("(CPU per GiB of record payload, and the payload one fully busy core would copy; MirrorMaker 2's")
    print(" published figure is 259 MB/s on 15.6 cores, 16.6 MB/s per core)")
    print(f"steady state at {RATE:,}/s for {SECONDS}s, visible on the source -> visible on the target:")
    print(render(
        ("path", "p50 ms", "p99 ms", "max ms"),
        [(name, pct(samples, 0.5), pct(samples, 0.99), pct(samples, 1.0))
         for name, samples in (("plain consume->produce", plain_lags), ("mirror", lags))],
    ))  # fmt: skip
