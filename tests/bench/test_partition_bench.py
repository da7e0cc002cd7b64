"""The pause of a smooth partition migration under live load: an application producing 1,000 records/s
through the gateway into three partitions (and a consumer group reading them) while the saga migrates
one partition, five times, each on a new topic.

Per run: the saga's own hold (its hold-writes step's start to its take-effect step's end, by its steps'
records) and what the producer saw — the longest time between two acknowledgements of the migrated
partition's records around the migration (the pause), and the same for the partitions left where they
were. The baseline, taken in the same run, is the migrated partition's longest gap over an equal window
before the saga. Nothing lost or written twice is asserted every run; timings are only printed.
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any

from switchyard import kafka
from switchyard.config import Config
from switchyard.model import PartitionId
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from switchyard.traffic import Traffic
from tests.helpers.live import Live

RATE = 1_000
RUNS = int(os.environ.get("SWITCHYARD_BENCH_RUNS", "5"))
PARTITIONS = 3
MOVED = 1


def gap(traffic: Traffic, partition: int, since: float, until: float) -> float:
    """The longest time between two acknowledgements of ``partition``'s records within [since, until]."""
    times = sorted(t for t, (p, _) in zip(traffic.acked_at, traffic.acked_where, strict=False)
                   if p == partition and since <= t <= until)  # fmt: skip
    return max((b - a for a, b in itertools.pairwise(times)), default=until - since)


def one_run(live: Live, routing: RoutingStore, config: Config) -> dict[str, Any]:
    assert live.gateway is not None
    app, topic = f"pbench-{uuid.uuid4().hex[:6]}", f"pbench-{uuid.uuid4().hex[:6]}"
    primary, standby = (config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.create_topics(primary, [topic], partitions=PARTITIONS)
    traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True, rate_per_s=RATE)
    traffic.start()
    try:
        traffic.wait_for(RATE)
        quiet_from = time.monotonic()
        time.sleep(3)
        baseline = gap(traffic, MOVED, quiet_from, time.monotonic())
        began = time.monotonic()
        run = live.cli("migrate-partition", topic, str(MOVED), "--to", "standby", "--wait")
        ended = time.monotonic()
        assert run.returncode == 0, run.stdout + run.stderr
        traffic.wait_for(RATE)
    finally:
        traffic.stop()
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    held = Counter(int(r.value or b"-1") for rs in kafka.read_partitions(primary, topic).values() for r in rs)
    held += Counter(int(r.value or b"-1") for r in kafka.read_partitions(standby, topic).get(MOVED, []))
    assert set(held) == set(traffic.acked)
    assert max(held.values()) == 1
    migration = routing.migration(PartitionId(topic, MOVED))
    assert migration is not None
    return {
        "end offset": migration.end_offset,
        "pause s": round(gap(traffic, MOVED, began, ended + 1), 3),
        "others' longest gap s": round(max(gap(traffic, p, began, ended + 1) for p in (0, 2)), 3),
        "baseline gap s": round(baseline, 3),
        "saga s": round(ended - began, 2),
    }


def test_the_pause_of_a_smooth_partition_migration(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    rows = [one_run(live, routing, stack_config) for _ in range(RUNS)]
    pauses = [r["pause s"] for r in rows]
    print(
        f"\nsmooth partition migration under {RATE:,} records/s, {RUNS} runs (one partition of {PARTITIONS}):"
    )
    print(render(list(rows[0]), [list(r.values()) for r in rows]))
    print(f"pause p50 {statistics.median(pauses):.3f}s, max {max(pauses):.3f}s "
          f"(baseline gap p50 {statistics.median(r['baseline gap s'] for r in rows):.3f}s)")  # fmt: skip
