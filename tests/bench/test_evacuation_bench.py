"""What a whole-cluster move costs as the cluster grows: an Apache Kafka 3.9 cluster in ZooKeeper mode
with 20 and 200 topics (two partitions each), used by applications producing and consuming through the
gateway, evacuated to the 4.x KRaft cluster one application per batch (tests/helpers/estates.py).

Per size: the batches, how long clients were held at each batch's switch (p50 and max, the switches' own
clocks), how long the first copy of every topic took, and the whole move from the saga's start to its
end. Every acknowledged record received by its application's committing group, none twice, and no failed
send are asserted every run; timings only printed. ``SWITCHYARD_EVACUATION=20`` runs one size."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import evacuation_id
from switchyard.table import render
from tests.helpers.estates import empty_source
from tests.helpers.live import Live
from tests.helpers.spread import SpreadApp

SIZES = tuple(int(n) for n in os.environ.get("SWITCHYARD_EVACUATION", "20,200").split(","))
APP_TOPICS = 5
"""Topics per application at 20 topics; 20 at 200 (ten applications either way at 200)."""
PARTITIONS = 2
RATE = 50
"""Records per second per application, spread over its topics."""
ROWS: list[dict[str, Any]] = []

pytestmark = pytest.mark.timeout(3600)


@pytest.fixture
def emptied(legacy_live: Live, legacy_routing: RoutingStore, legacy_config: Config) -> Iterator[None]:
    """Each size moves the module's 3.9 cluster whole."""
    yield
    empty_source(legacy_routing, legacy_config, legacy_live)


@pytest.mark.parametrize("size", SIZES)
def test_evacuation_cost_by_size(
    legacy_live: Live, legacy_routing: RoutingStore, legacy_config: Config, emptied: None, size: int
) -> None:
    live = legacy_live
    assert live.gateway is not None
    per_app = APP_TOPICS if size <= 20 else size // 10
    tag = uuid.uuid4().hex[:6]
    topics = [f"evb-{tag}-{i:03d}" for i in range(size)]
    primary = legacy_config.clusters["primary"].bootstrap
    for start in range(0, size, 50):
        kafka.create_topics(primary, topics[start : start + 50], partitions=PARTITIONS)
    apps = [
        SpreadApp(live.gateway.bootstrap, topics[i : i + per_app], rate=RATE) for i in range(0, size, per_app)
    ]
    try:
        deadline = time.monotonic() + 180
        while not all(a.seen_everywhere for a in apps):  # the gateways saw every topic used
            assert time.monotonic() < deadline, "not every topic read through the gateway"
            time.sleep(0.5)
        moved = live.cli("evacuate", "primary", "--to", "standby", "--batch", str(per_app), "--keep-source",
                         "--wait", "--reason", "bench", timeout_s=3000)  # fmt: skip
        assert moved.returncode == 0, moved.stdout + moved.stderr
    finally:
        for a in apps:
            a.finish()
    result = legacy_routing.ledger.saga_runs(evacuation_id("primary"))[0]
    assert result.result is not None
    ended = result.result
    copy = next(s for s in legacy_routing.ledger.saga_steps(result.run_id) if s.step == "copy_cluster")
    held = [b["pause_ms"] / 1000 for b in ended["batches"]]
    lost, twice = sum(len(a.lost) for a in apps), sum(len(a.twice) for a in apps)
    ROWS.append({
        "topics": size, "partitions": size * PARTITIONS, "applications": len(apps), "batches": len(held),
        "held p50 s": round(statistics.median(held), 2), "held max s": round(max(held), 2),
        "first copy s": round((copy.ended_at - copy.started_at).total_seconds(), 1),
        "whole move s": round(ended["duration_ms"] / 1000, 1),
        "acked": sum(len(a.acked) for a in apps), "lost": lost, "twice": twice,
    })  # fmt: skip
    print("\n" + render(list(ROWS[0]), [list(r.values()) for r in ROWS]))
    assert ended["outcome"] == "evacuated", ended["detail"]
    assert [b["outcome"] for b in ended["batches"]] == ["switched"] * len(apps)
    assert not [f for a in apps for f in a.failed]
    assert (lost, twice) == (0, 0)
