"""Baseline: what a plain client gets from each embedded broker, direct. Later benchmarks (gateway,
mirror) run against the same stack in the same run and report themselves as ratios of these figures."""

from __future__ import annotations

import time
import uuid

from switchyard import kafka
from switchyard.config import Config
from switchyard.stack import Stack
from switchyard.table import render
from tests.helpers.stacks import QUICK_CONSUMER

RECORDS = 20_000
SIZE = 1024


def test_direct_produce_and_consume_throughput(stack: Stack, stack_config: Config) -> None:
    payload = b"x" * SIZE
    for cluster in stack_config.clusters.values():  # warm up clients and brokers before measuring
        kafka.create_topics(cluster.bootstrap, ["bench-warmup"], partitions=3)
        kafka.produce(cluster.bootstrap, "bench-warmup", [kafka.Record(None, payload)] * 2000)
    timings: dict[str, tuple[float, float]] = {}
    for cluster_id, cluster in stack_config.clusters.items():
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        kafka.create_topics(cluster.bootstrap, [topic], partitions=3)
        records = [kafka.Record(str(i).encode(), payload) for i in range(RECORDS)]
        started = time.perf_counter()
        produced = kafka.produce(cluster.bootstrap, topic, records, settings={"linger.ms": 5})
        produce_s = time.perf_counter() - started
        started = time.perf_counter()
        consumed = kafka.consume(
            cluster.bootstrap, topic, group=f"{topic}-g", count=RECORDS, settings=QUICK_CONSUMER
        )
        consume_s = time.perf_counter() - started  # includes the group join
        assert produced == len(consumed) == RECORDS
        timings[cluster_id] = (produce_s, consume_s)

    first_produce_s = next(iter(timings.values()))[0]
    rows = [
        (
            cluster_id,
            f"{RECORDS / produce_s:,.0f}",
            f"{RECORDS * SIZE / produce_s / 2**20:.1f}",
            f"{RECORDS / consume_s:,.0f}",
            f"{first_produce_s / produce_s:.2f}",
        )
        for cluster_id, (produce_s, consume_s) in timings.items()
    ]
    print(f"\ndirect to broker: {RECORDS:,} records of {SIZE} B, 3 partitions, idempotent producer")
    print(
        render(
            ("cluster", "produce msg/s", "produce MiB/s", "consume msg/s incl. join", "produce vs first"),
            rows,
        )
    )
