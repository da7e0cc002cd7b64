"""The gateway against going direct to the broker, in one run on the same stack.

- full speed: 40,000 records of 1 KiB, as fast as the producer goes (acks=all, linger 5 ms);
- fixed load: 5,000 records/s of 1 KiB for 5 s (5 every millisecond, paced by sleeping so the client
  leaves the CPU to the gateway and brokers on this 2-core machine), latency from produce() to the
  delivery report (linger 0, so latency is the network path and not batching);
- fetch: the same 40,000 records read back without a group (assign from the start);
- the gateway's own share of the fixed-load latency, from its ``switchyard.gateway.added_latency``
  metric (seconds in the gateway with the broker's part excluded; bucket bounds, so "≤").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers.otlp import OtlpReceiver, bucket_quantile
from tests.helpers.processes import GatewayProcess

SIZE = 1024
FULL = 40_000
RATE, SECONDS = 5_000, 5
PARTITIONS = 3
EXPORT_S = 1


def full_speed(bootstrap: str, topic: str, size: int = SIZE, count: int = FULL) -> float:
    """Records/s producing ``count`` records of ``size`` bytes as fast as the producer goes."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "client.id": "bench@p"})
    payload = b"x" * size
    started = time.perf_counter()
    for i in range(count):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    assert producer.flush(60) == 0
    return count / (time.perf_counter() - started)


def fixed_load(bootstrap: str, topic: str) -> list[float]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "client.id": "bench@p"})
    payload = b"y" * SIZE
    latencies: list[float] = []

    def report(sent_at: float) -> object:
        return lambda err, _msg: latencies.append(time.perf_counter() - sent_at) if err is None else None

    producer.produce(topic, payload)  # connections up before the clock starts
    producer.flush(10)
    start = time.perf_counter()
    burst = RATE // 1000  # records per millisecond: paced by sleeping, so the client leaves CPU to the rest
    for tick in range(SECONDS * 1000):
        due = start + tick / 1000
        while (now := time.perf_counter()) < due:
            producer.poll(max(0.0, due - now))
        for _ in range(burst):
            producer.produce(topic, payload, on_delivery=report(time.perf_counter()))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert len(latencies) == RATE * SECONDS
    return sorted(latencies)


def fetch(bootstrap: str, topic: str, count: int = FULL) -> float:
    """Records/s reading ``count`` records of ``topic``'s partitions back (assigned, no group)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "client.id": "bench@c"}
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    started = time.perf_counter()
    while got < count and time.perf_counter() - started < 120:
        got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
    elapsed = time.perf_counter() - started
    consumer.close()
    assert got >= count
    return got / elapsed


@pytest.fixture(scope="module")
def gateway(
    routing: RoutingStore,
    stack_config: Config,
    otlp: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayProcess]:
    assert stack_config.source is not None
    process = GatewayProcess(
        stack_config.source,
        root=routing.layout.root,
        gateway_id="gw-bench",
        log=tmp_path_factory.mktemp("gw-bench") / "gateway.log",
        overrides={
            "SWITCHYARD__TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
            "SWITCHYARD__TELEMETRY__EXPORT_INTERVAL_S": str(EXPORT_S),
        },
    )
    process.start()
    yield process
    process.stop()


def pct(samples: list[float], q: float) -> float:
    return samples[min(len(samples) - 1, int(q * len(samples)))] * 1000


def test_gateway_against_direct(gateway: GatewayProcess, stack_config: Config, otlp: OtlpReceiver) -> None:
    direct = stack_config.clusters["primary"].bootstrap  # the gateway's default cluster
    results = {}
    for name, bootstrap in (("direct", direct), ("gateway", gateway.bootstrap)):
        topic = f"bench-{name}-{uuid.uuid4().hex[:6]}"
        kafka.create_topics(direct, [topic], partitions=PARTITIONS)
        throughput = full_speed(bootstrap, topic)
        time.sleep(EXPORT_S * 2)  # the gateway's metrics up to here are reported
        before = otlp.histogram("switchyard.gateway.added_latency", api="produce")[1]
        latencies = fixed_load(bootstrap, topic)
        time.sleep(EXPORT_S * 2)
        bounds, after = otlp.histogram("switchyard.gateway.added_latency", api="produce")
        own = [a - b for a, b in zip(after, before or [0] * len(after), strict=True)]
        results[name] = (throughput, pct(latencies, 0.5), pct(latencies, 0.99), fetch(bootstrap, topic))
    own_p50, own_p99 = (bucket_quantile(bounds, own, q) * 1000 for q in (0.5, 0.99))  # s -> ms

    d, g = results["direct"], results["gateway"]
    rows = [
        (name, f"{r[0]:,.0f}", f"{r[1]:.2f}", f"{r[2]:.2f}", f"{r[3]:,.0f}") for name, r in results.items()
    ]
    rows.append(
        (
            "gateway/direct",
            f"{g[0] / d[0]:.0%}",
            f"+{g[1] - d[1]:.2f}",
            f"+{g[2] - d[2]:.2f}",
            f"{g[3] / d[3]:.0%}",
        )
    )
    rows.append(("in the gateway itself", "", f"≤ {own_p50:g}", f"≤ {own_p99:g}", ""))
    print(f"\ngateway vs direct: 1 KiB records; full speed {FULL:,}; fixed load {RATE:,}/s for {SECONDS}s")
    print(render(("path", "produce msg/s", "p50 ms @5k/s", "p99 ms @5k/s", "fetch msg/s"), rows))
