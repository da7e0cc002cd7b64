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
  (two watchers): what the copy adds, not the producer's own queueing. The mirror and MirrorMaker 2
  are each measured in two windows, in the order mirror, MM2, MM2, mirror, and their samples pooled (a
  single window's p99 is a few stalls of the shared machine). The tail's shape is printed beside it:
  in how many separate 100 ms stretches of the source's time the records above the p99 were written —
  one or two stretches are stalls (a process that did not run), many are the copy's steady cost.
"""

from __future__ import annotations

import re
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
from tests.helpers.mirrormaker import DEFAULT, MM2_VERSION, MirrorMaker
from tests.helpers.processes import MirrorProcess
from tests.helpers.records import fill_topic
from tests.helpers.stacks import KAFKA_DIST

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


def timed(
    started: float, first: tuple[float, int], last: float, cpu_s: float, records: int = RECORDS
) -> Copied:
    """``first``: when the first acknowledgement was seen, and how many records were acknowledged then."""
    at, done = first
    return Copied((records - done) / (last - at), cpu_s / records * 1e6, at - started)


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


def mirror_throughput(
    store: RoutingStore, mirror: MirrorProcess, topic: str, records: int = RECORDS
) -> Copied:
    link = f"bench-{topic}"
    store.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    store.set_link_state(link, LinkState.PAUSED, actor=ACTOR, reason="bench: hold until timed")
    wait_for(lambda: taken(store, link) == PARTITIONS, 60, "the mirror never took the partitions")
    cpu = mirror.cpu_s()
    started = time.time()
    store.set_link_state(link, LinkState.RUNNING, actor=ACTOR, reason="bench: go")
    first: tuple[float, int] | None = None
    while (seen := copied(store, link))[1] < records:
        assert time.time() < started + 300, f"the mirror copied {seen[1]} of {records}"
        if seen[1] and first is None:
            first = seen
        time.sleep(0.01)
    cpu = mirror.cpu_s() - cpu
    assert first is not None, "the mirror's status never showed a part of the copy"
    store.set_link_state(link, LinkState.DELETED, actor=ACTOR, reason="bench: timed")
    return timed(started, first, seen[0], cpu, records)


def mm2_throughput(source: str, target: str, topic: str, work: Path) -> Copied:
    """MirrorMaker 2 started for this round alone (it reads its topics' list at its start), named
    ``primary.<topic>`` on the target (the default policy: the mirror's copy has the topic's own name).
    Timed and charged, like the others, from the target's first record to its last: its start (a Connect
    worker, its internal topics, the task) takes 8-12 s here and is shown beside it."""
    mm2 = MirrorMaker(KAFKA_DIST, work / topic, source=source, target=target, topics=re.escape(topic),
                      policy=DEFAULT)  # fmt: skip
    keys = [(f"primary.{topic}", p) for p in range(PARTITIONS)]
    started = time.time()
    mm2.start()
    try:
        first: tuple[float, int, float] | None = None
        while True:
            assert mm2.alive(), mm2.log_tail()
            done = sum(kafka.ends_of(target, keys).values()) if mm2_copy_exists(target, keys[0][0]) else 0
            now = time.time()
            if done and first is None:
                first = (now, done, mm2.cpu_s())
            if done >= RECORDS:
                break
            assert now < started + 300, f"MirrorMaker 2 copied {done} of {RECORDS}:\n{mm2.log_tail()}"
            time.sleep(0.05)
        assert first is not None
        cpu = mm2.cpu_s() - first[2]
    finally:
        mm2.stop()
    return Copied((RECORDS - first[1]) / (now - first[0]), cpu / RECORDS * 1e6, first[0] - started)


def mm2_copy_exists(target: str, name: str) -> bool:
    return bool(kafka.partitions(target, lambda topic: topic == name))


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


@dataclass
class Lags:
    """Per record: when it became visible on the source, and how much later on the target (seconds)."""

    samples: list[tuple[float, float]]

    def __add__(self, other: Lags) -> Lags:
        return Lags(self.samples + other.samples)

    def at(self, q: float) -> float:
        ordered = sorted(lag for _, lag in self.samples)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def stalls(self, q: float = 0.99, apart_s: float = 0.1) -> int:
        """In how many stretches of the source's time, ``apart_s`` apart at least, the records slower
        than the ``q`` quantile were written."""
        threshold = self.at(q)
        slow = sorted(at for at, lag in self.samples if lag > threshold)
        return sum(1 for i, at in enumerate(slow) if i == 0 or at - slow[i - 1] > apart_s)


def steady_lag(
    source: str, target: str, topic: str, *, copy_to: str | None = None, seen_as: str | None = None
) -> Lags:
    """Produce at RATE for SECONDS; per record, when it is visible on the target minus when it was
    visible on the source. A copier runs already and copies ``topic`` to the same name on the target, or
    to ``seen_as``; with ``copy_to``, a plain loop copies it to that topic instead, for the baseline."""
    on_source: Seen = {}
    on_target: Seen = {}
    done = threading.Event()
    helpers = [
        threading.Thread(target=watch, args=(source, topic, on_source, done)),
        threading.Thread(target=watch, args=(target, copy_to or seen_as or topic, on_target, done)),
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
    return Lags([(on_source[k], on_target[k] - on_source[k]) for k in on_target])


def mirrored_topic(store: RoutingStore, source: str, topic: str) -> str:
    link = f"bench-{topic}"
    kafka.create_topics(source, [topic], partitions=PARTITIONS)
    store.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    wait_for(lambda: taken(store, link) == PARTITIONS, 60, "the mirror never took the partitions")
    return topic


def row(name: str, m: Copied, runs: list[Copied], base: Copied, peer: Copied) -> tuple[str, ...]:
    """One copier's line of the throughput table, with its ratios to the plain loop and to MM2."""
    per_core = SIZE / (m.cpu_us * 1e-6) / 2**20
    return (name, f"{m.rate:,.0f}", f"{m.rate / base.rate:.0%}", f"{m.rate / peer.rate:.2f}x",
            f"{m.cpu_us:.1f}", f"{m.cpu_us * 1e-6 * 2**30 / SIZE:.1f}", f"{per_core:.0f}",
            f"{peer.cpu_us / m.cpu_us:.2f}x",
            f"{m.start_s * 1000:.0f}", " ".join(f"{r.rate / 1000:.0f}k" for r in runs))  # fmt: skip


def mm2_lag(source: str, target: str, work: Path) -> Lags:
    """The steady-state lag of MirrorMaker 2, running (and its copy created) before the load starts."""
    topic = f"steady-mm2-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(source, [topic], partitions=PARTITIONS)
    mm2 = MirrorMaker(KAFKA_DIST, work / topic, source=source, target=target, topics=re.escape(topic),
                      policy=DEFAULT)  # fmt: skip
    mm2.start()
    try:
        wait_for(lambda: mm2_copy_exists(target, f"primary.{topic}"), 120, "MirrorMaker 2 made no copy")
        time.sleep(3)  # its task assigned and fetching (it creates the copy first)
        return steady_lag(source, target, topic, seen_as=f"primary.{topic}")
    finally:
        mm2.stop()


def test_mirror_against_a_plain_loop_and_mirrormaker_2(
    mirror: MirrorProcess,
    routing: RoutingStore,
    stack_config: Config,
    tmp_path: Path,
) -> None:
    source, target = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    plain: list[Copied] = []
    mirrored: list[Copied] = []
    peer: list[Copied] = []
    for round_ in range(ROUNDS):
        topic = f"copy-{uuid.uuid4().hex[:6]}"
        fill_topic(source, topic, RECORDS, partitions=PARTITIONS, size=SIZE)
        kafka.create_topics(target, [f"{topic}-plain"], partitions=PARTITIONS)
        order = ("plain", "mirror", "mm2")  # forward, then backward: a steady drift cancels out
        for copier in order if round_ % 2 == 0 else order[::-1]:
            if copier == "plain":
                plain.append(plain_loop(source, target, topic, f"{topic}-plain"))
            elif copier == "mirror":
                mirrored.append(mirror_throughput(routing, mirror, topic))
            else:
                peer.append(mm2_throughput(source, target, topic, tmp_path))
    plain_topic = f"steady-plain-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(source, [plain_topic], partitions=PARTITIONS)
    kafka.create_topics(target, [f"{plain_topic}-copy"], partitions=PARTITIONS)  # no auto-creation
    plain_lags = steady_lag(source, target, plain_topic, copy_to=f"{plain_topic}-copy")

    def mirror_lag() -> Lags:
        return steady_lag(source, target, mirrored_topic(routing, source, f"steady-{uuid.uuid4().hex[:6]}"))

    lags = mirror_lag()
    peer_lags = mm2_lag(source, target, tmp_path) + mm2_lag(source, target, tmp_path)
    lags += mirror_lag()

    def median(runs: list[Copied]) -> Copied:
        fields = ("rate", "cpu_us", "start_s")
        return Copied(*(statistics.median(getattr(r, f) for r in runs) for f in fields))

    base, copy, other = median(plain), median(mirrored), median(peer)
    print(
        f"\nmirror vs plain loop vs MirrorMaker 2 ({MM2_VERSION}, dedicated): {RECORDS:,} records of 1 KiB, "
        f"{PARTITIONS} partitions, primary -> standby, {ROUNDS} rounds, the order reversed every other"
    )
    print(render(
        ("path (medians)", "copy msg/s", "vs plain", "vs MM2", "CPU µs/record", "CPU s/GiB", "MiB/s per core",
         "per core vs MM2", "start ms", "rounds msg/s"),
        [row(name, m, runs, base, other) for name, m, runs in (("plain consume->produce", base, plain),
                                                               ("mirror", copy, mirrored),
                                                               ("MirrorMaker 2", other, peer))],
    ))  # fmt: skip
    print("(CPU per GiB of record payload, and the payload one fully busy core would copy. MirrorMaker 2 is")
    print(" timed and charged from its first copied record, without its start; the others from their start)")
    print(f"steady state at {RATE:,}/s for {SECONDS}s (mirror and MM2: two windows each, pooled), visible on")
    print("the source -> visible on the target; stalls: separate stretches of time the slowest 1 % came from")
    print(render(
        ("path", "p50 ms", "p99 ms", "max ms", "p99 vs MM2", "p99 stalls"),
        [(name, *(f"{lag.at(q) * 1000:.1f}" for q in (0.5, 0.99, 1.0)),
          f"{lag.at(0.99) / peer_lags.at(0.99):.2f}x", lag.stalls())
         for name, lag in (("plain consume->produce", plain_lags), ("mirror", lags),
                           ("MirrorMaker 2", peer_lags))],
    ))  # fmt: skip


TRANSACTIONS, TRANSACTION_RECORDS = 3_000, 10


def test_a_transactional_topic_against_a_plain_one(
    mirror: MirrorProcess, routing: RoutingStore, stack_config: Config
) -> None:
    """The mirror's rate on a topic of transactions against the same records written plainly, in the same
    run (alternating). Every commit leaves a marker, a gap in each partition's source offsets and so a
    segment in the offset map, stored before the records after it: this is what that costs."""
    source = stack_config.clusters["primary"].bootstrap
    records = TRANSACTIONS * TRANSACTION_RECORDS
    plain: list[Copied] = []
    transactional: list[Copied] = []
    for round_ in range(2):
        topic = f"copy-txn-{uuid.uuid4().hex[:6]}"
        kafka.create_topics(source, [topic, f"{topic}-plain"], partitions=PARTITIONS)
        producer = Producer({"bootstrap.servers": source, "transactional.id": topic})
        producer.init_transactions(30)
        for number in range(TRANSACTIONS):
            producer.begin_transaction()
            for part in range(TRANSACTION_RECORDS):
                producer.produce(topic, bytes(SIZE), f"{number}-{part}".encode(), partition=part % PARTITIONS)
            producer.commit_transaction(30)
        fill_topic(source, f"{topic}-plain", records, partitions=PARTITIONS, size=SIZE)
        order = (topic, f"{topic}-plain")
        for name in order if round_ % 2 == 0 else order[::-1]:
            (plain if name.endswith("-plain") else transactional).append(
                mirror_throughput(routing, mirror, name, records)
            )
    base = statistics.median(r.rate for r in plain)
    print(
        f"\nthe mirror on {TRANSACTIONS:,} transactions of {TRANSACTION_RECORDS} records of 1 KiB over "
        f"{PARTITIONS} partitions (a gap at every commit), against the same records written plainly; 2 rounds"
    )
    print(render(
        ("topic", "copy msg/s (median)", "vs plain", "rounds msg/s", "CPU µs/record"),
        [(name, f"{statistics.median(r.rate for r in runs):,.0f}",
          f"{statistics.median(r.rate for r in runs) / base:.2f}",
          " / ".join(f"{r.rate:,.0f}" for r in runs), f"{statistics.median(r.cpu_us for r in runs):.0f}")
         for name, runs in (("plain", plain), ("transactional", transactional))],
    ))  # fmt: skip
