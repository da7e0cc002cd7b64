"""Switchover timing under live load: an application producing 5,000 records/s through the gateway (and a
consumer group reading them) is switched to the standby by the saga, five times, each on a new app.

Per run: the saga's own RTO and client hold (its clock), and what the producer saw — from the saga's start
to the first acknowledgement on the target, and the pause (the longest time without an acknowledgement
while the saga ran: last on the source to first on the target). The baseline, taken in the same run, is
the longest time without an acknowledgement over an equal window before the saga, with no switch.
Nothing lost or written twice is asserted every run; timings are only printed.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from switchyard import kafka, launch, temporal
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import Kind, Progress, SwitchRequest
from switchyard.stack import Stack
from switchyard.table import render
from switchyard.traffic import Traffic
from tests.helpers.live import Live
from tests.helpers.traffic import topic_ids

RATE = 5_000
RUNS = int(os.environ.get("SWITCHYARD_BENCH_RUNS", "5"))
PARTITIONS = 3
ACTOR = "user:bench"


@pytest.fixture(scope="module")
def live(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    deployment = Live(
        stack_config, routing.layout.root, ledger_path, tmp_path_factory.mktemp("bench")
    ).start()
    yield deployment
    deployment.stop()


def prepare(routing: RoutingStore, config: Config) -> tuple[str, str, str]:
    app, topic = f"bench-{uuid.uuid4().hex[:6]}", f"bench-orders-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(config.clusters["primary"].bootstrap, [topic], partitions=PARTITIONS)
    routing.create_link(app, "primary", "standby", include=[topic], actor=ACTOR, reason="bench")
    wait_for_acks(
        routing.zk, routing.layout,
        routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="bench"), timeout_s=10,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while sum(len(m.partitions) for m in read_status(routing.zk, routing.layout, app)) < PARTITIONS:
        assert time.monotonic() < deadline, "the mirror never took up the link"
        time.sleep(0.2)
    return app, topic, app


def one_run(live: Live, routing: RoutingStore, config: Config) -> dict[str, float]:
    assert live.gateway is not None
    app, topic, link = prepare(routing, config)
    traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True, rate_per_s=RATE)
    traffic.start()
    try:
        traffic.wait_for(RATE)  # a second of traffic acknowledged and read
        quiet_from = time.monotonic()
        time.sleep(3)
        baseline, _ = traffic.longest_silence(quiet_from, time.monotonic())
        policy = launch.policy_of(config, Kind.SWITCHOVER)
        request = SwitchRequest([app], link=link, actor=ACTOR, reason="bench", policy=policy)
        began = time.monotonic()
        result, fenced = asyncio.run(switch(config, app, request))
        traffic.wait_for(RATE)
        ended = time.monotonic()
    finally:
        traffic.stop()
    assert result["outcome"] == "switched", result
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    on_standby = Counter(topic_ids(config.clusters["standby"].bootstrap, topic))
    assert set(on_standby) == set(traffic.acked)  # nothing lost
    assert max(on_standby.values()) == 1  # nothing written twice
    last_on_source, first_on_target = traffic.handover(fenced)
    return {
        "rto": result["rto_ms"] / 1000,
        "held": result["pause_ms"] / 1000,
        "first_on_target": first_on_target - began,
        "pause": first_on_target - last_on_source,
        "silence": traffic.longest_silence(began, ended)[0],
        "baseline": baseline,
        "acked": len(traffic.acked),
    }


async def switch(config: Config, app: str, request: SwitchRequest) -> tuple[dict[str, Any], dict[int, int]]:
    """The saga's result, and each partition's end on the source when the saga fenced it."""
    workflow_id = saga_id([app])
    await launch.start(config, Kind.SWITCHOVER, workflow_id, request)
    result = await launch.follow(config, workflow_id, lambda _line: None)
    client = await temporal.connect(config)
    progress = await client.get_workflow_handle(workflow_id).query("progress", result_type=Progress)
    return result, {p.partition: p.source_end for p in progress.partitions}


def test_switchover_under_live_load(live: Live, routing: RoutingStore, stack_config: Config) -> None:
    config = live.effective
    runs = [one_run(live, routing, config) for _ in range(RUNS)]
    keys = ("rto", "held", "first_on_target", "pause", "silence")
    rows: list[tuple[object, ...]] = [
        (i + 1, *(f"{r[k]:.2f}" for k in keys), f"{r['baseline']:.3f}", f"{r['pause'] / r['baseline']:.0f}x",
         int(r["acked"]))
        for i, r in enumerate(runs)
    ]  # fmt: skip
    for name, pick in (("p50", statistics.median), ("max", max)):
        baseline = pick(r["baseline"] for r in runs)
        rows.append((name, *(f"{pick(r[k] for r in runs):.2f}" for k in keys), f"{baseline:.3f}", "", ""))
    header = (
        "RUN", "SAGA RTO", "HELD (SAGA)", "START->1ST ACK ON TARGET", "PAUSE (LAST SOURCE->1ST TARGET ACK)",
        "LONGEST ACK GAP", "BASELINE GAP", "PAUSE/BASELINE", "ACKED",
    )  # fmt: skip
    print(f"\n\nswitchover under {RATE:,} records/s through the gateway, {RUNS} runs (seconds)")
    print(render(header, rows))
