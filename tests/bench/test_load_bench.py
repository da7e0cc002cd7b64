"""The gateway at fixed loads: for records of 1 KiB and of 100 B, a producer offers 5, 20 and 50 MiB/s
for a few seconds to each path of :mod:`tests.bench.test_relay_bench` (direct, a plain relay, the
gateway; the proxy pinned to a core of its own, the brokers to the other), while a consumer on the same
path reads the topic as it fills. The client (producer and consumer, in Python) is not pinned: on this
2-core machine, put on the brokers' core it starves it — direct p50 went from 1.5 ms to 6 ms and a relay
or gateway's to over a second at 5 MiB/s, the brokers' queue and not the proxy's — so it borrows the
proxy's core when it must, which counts against the proxies.

Per path and load: the rate achieved against the one offered; the produce latency (``produce()`` to the
delivery report, acks=all, linger 1 ms) at p50 and p99; the end-to-end latency (``produce()`` to the
consumer's receipt, through the proxy both ways) at p50 and p99; and for the proxies what they add to
the direct path's figures in the same run; and the proxy's CPU, as a share of one core over the time the
load was measured (offered and read back: where the client falls behind the load, longer than the load's
few seconds). Every 10th record is timed. A load the client itself cannot
offer on this machine shows as achieved below offered on the direct path too.
"""

from __future__ import annotations

import os
import statistics
import struct
import threading
import time
import uuid
from collections.abc import Callable

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition

from switchyard import kafka
from switchyard.table import render
from tests.bench.test_relay_bench import PROXY_CORE, REST_CORE, Route, paths  # noqa: F401 - fixture
from tests.helpers.processes import cpu_seconds

LOADS_MIB_S = (5, 20, 50)
SIZES = (1024, 100)
SECONDS = float(os.environ.get("SWITCHYARD_LOAD_S", "5"))
PARTITIONS = 3
SAMPLE_EVERY = 10
MiB = 2**20
_STAMP = struct.Struct(">d")


class Reader:
    """A consumer reading every partition from its end, noting each timed record's end-to-end latency."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.latencies: list[float] = []
        self.stop = threading.Event()
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"load-{uuid.uuid4().hex[:6]}",
                                  "client.id": "load@c", "fetch.wait.max.ms": 100})  # fmt: skip
        self.consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self.stop.is_set():
            for message in self.consumer.consume(1000, 0.1):
                key = message.key()
                if message.error() is None and key:
                    self.latencies.append(time.perf_counter() - _STAMP.unpack(key)[0])
        self.consumer.close()


def offered(bootstrap: str, topic: str, size: int, mib_s: float) -> tuple[float, list[float], int]:
    """Offer ``mib_s`` of ``size``-byte records for SECONDS; the MiB/s achieved (acknowledged payload over
    the time to the last acknowledgement), the timed records' produce latencies, the records sent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "client.id": "load@p",
                         "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    producer.produce(topic, b"warm")
    assert producer.flush(10) == 0
    latencies: list[float] = []
    acked = [0]

    def timed(sent: float) -> Callable[[object, object], None]:
        def report(err: object, _msg: object) -> None:
            if err is None:
                latencies.append(time.perf_counter() - sent)
                acked[0] += 1

        return report

    def counted(err: object, _msg: object) -> None:
        if err is None:
            acked[0] += 1

    payload = b"l" * size
    per_tick = mib_s * MiB / size / 1000  # records per millisecond
    started = time.perf_counter()
    sent, owed = 0, 0.0
    for tick in range(int(SECONDS * 1000)):
        due = started + tick / 1000
        while (now := time.perf_counter()) < due:
            producer.poll(max(0.0, due - now))
        owed += per_tick
        while owed >= 1:
            owed -= 1
            now = time.perf_counter()
            try:
                if sent % SAMPLE_EVERY == 0:
                    producer.produce(topic, payload, key=_STAMP.pack(now), on_delivery=timed(now))
                else:
                    producer.produce(topic, payload, on_delivery=counted)
            except BufferError:
                producer.poll(0.001)
                continue
            sent += 1
        producer.poll(0)
    assert producer.flush(60) == 0
    elapsed = time.perf_counter() - started
    return acked[0] * size / MiB / elapsed, latencies, sent


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def test_fixed_loads(paths: list[Route]) -> None:  # noqa: F811
    results: dict[tuple[str, int, int], dict[str, float]] = {}
    for size in SIZES:
        for load in LOADS_MIB_S:
            for path in paths:
                topic = f"load-{path.name}-{uuid.uuid4().hex[:6]}"
                kafka.create_topics(path.create_on, [topic], partitions=PARTITIONS)
                reader = Reader(path.bootstrap, topic)
                time.sleep(1)  # its first fetches are out
                cpu_before = cpu_seconds(path.proxy) if path.proxy else 0.0
                began = time.perf_counter()
                achieved, produced, sent = offered(path.bootstrap, topic, size, load)
                deadline = time.monotonic() + 30
                while len(reader.latencies) < len(produced) and time.monotonic() < deadline:
                    time.sleep(0.1)
                reader.stop.set()
                reader.thread.join(10)
                cpu = (cpu_seconds(path.proxy) - cpu_before) if path.proxy else 0.0
                window = time.perf_counter() - began  # longer than SECONDS where the client fell behind
                results[(path.name, size, load)] = {
                    "achieved": achieved, "p50": pct(produced, 0.5), "p99": pct(produced, 0.99),
                    "e2e50": pct(reader.latencies, 0.5), "e2e99": pct(reader.latencies, 0.99),
                    "cpu": cpu / window, "sent": sent,
                    "read": len(reader.latencies) / max(len(produced), 1),
                }  # fmt: skip
    rows = []
    for size in SIZES:
        for load in LOADS_MIB_S:
            direct = results[("direct", size, load)]
            for path in paths:
                r = results[(path.name, size, load)]
                added = "" if path.proxy is None else (
                    f"{r['p50'] - direct['p50']:+.2f} / {r['p99'] - direct['p99']:+.2f}"
                )  # fmt: skip
                added_e2e = "" if path.proxy is None else (
                    f"{r['e2e50'] - direct['e2e50']:+.2f} / {r['e2e99'] - direct['e2e99']:+.2f}"
                )  # fmt: skip
                rows.append((
                    f"{size} B", f"{load}", path.name, f"{r['achieved']:.1f}", f"{r['p50']:.2f}",
                    f"{r['p99']:.2f}", added, f"{r['e2e50']:.2f}", f"{r['e2e99']:.2f}", added_e2e,
                    f"{r['cpu']:.0%}" if path.proxy else "",
                ))  # fmt: skip
    print(f"\n\nfixed loads for {SECONDS:g} s each; proxies pinned to core {PROXY_CORE}, brokers to core "
          f"{REST_CORE}, the client unpinned; latency of every {SAMPLE_EVERY}th record, ms")  # fmt: skip
    header = ("RECORDS", "OFFERED MiB/s", "PATH", "ACHIEVED MiB/s", "PRODUCE p50", "p99", "ADDED p50 / p99",
              "END TO END p50", "p99", "ADDED p50 / p99", "PROXY CPU")  # fmt: skip
    print(render(header, rows))
    print(f"end-to-end samples read back: {statistics.mean(r['read'] for r in results.values()):.0%}")
