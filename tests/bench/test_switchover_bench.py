"""Switch timing under live load: an application producing 5,000 records/s through the gateway (and a
consumer group reading them) is switched to the standby, back, and to the standby again by the sagas —
a round trip, five times, each on a new app.

Per switch: the saga's own RTO and client hold (its clock), and what the producer saw — from the saga's
start to the first acknowledgement on the target, and the pause (the longest time without an
acknowledgement while the saga ran: last on the source to first on the target). The baseline, taken in
the same run, is the longest time without an acknowledgement over an equal window before the first
saga, with no switch. Nothing lost or written twice is asserted every run; timings are only printed.
SWITCHYARD_BENCH_STEPS=1 also prints each switch's steps (start and duration, from the ledger): where the
time while clients are held goes.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from collections import Counter
from typing import Any

from switchyard import kafka, launch, temporal
from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import Kind, Progress, SwitchRequest
from switchyard.table import render
from switchyard.traffic import Traffic
from tests.helpers.links import linked
from tests.helpers.live import Live
from tests.helpers.traffic import topic_ids

RATE = 5_000
ROUND_TRIP = (Kind.SWITCHOVER, Kind.SWITCHBACK, Kind.SWITCHOVER)
RUNS = int(os.environ.get("SWITCHYARD_BENCH_RUNS", "5"))
PARTITIONS = 3
ACTOR = "user:bench"


def prepare(routing: RoutingStore, config: Config) -> tuple[str, str, str]:
    app, topic = f"bench-{uuid.uuid4().hex[:6]}", f"bench-orders-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(config.clusters["primary"].bootstrap, [topic], partitions=PARTITIONS)
    return app, topic, linked(routing, app, [app], [topic], PARTITIONS)


def one_run(live: Live, routing: RoutingStore, config: Config) -> list[dict[str, Any]]:
    """One round trip under load: a row of figures per switch."""
    assert live.gateway is not None
    app, topic, link = prepare(routing, config)
    traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True, rate_per_s=RATE)
    traffic.start()
    rows = []
    try:
        traffic.wait_for(RATE)  # a second of traffic acknowledged and read
        quiet_from = time.monotonic()
        time.sleep(3)
        baseline, _ = traffic.longest_silence(quiet_from, time.monotonic())
        for number, kind in enumerate(ROUND_TRIP):
            policy = launch.policy_of(config, kind)
            request = SwitchRequest([app], link=link, actor=ACTOR, reason="bench", policy=policy)
            began = time.monotonic()
            result, fenced = asyncio.run(switch(config, app, kind, request))
            if os.environ.get("SWITCHYARD_BENCH_STEPS") == "1":
                print(f"\n{kind.value}: {step_times(routing, saga_id([app]))}")
            traffic.wait_for(RATE)
            ended = time.monotonic()
            assert result["outcome"] == "switched", result
            link = result["reverse_link"]  # the way back
            last_on_source, first_on_target = traffic.handover(fenced)
            rows.append({
                "switch": f"{number + 1} {kind.value}",
                "rto": result["rto_ms"] / 1000,
                "held": result["pause_ms"] / 1000,
                "first_on_target": first_on_target - began,
                "pause": first_on_target - last_on_source,
                "silence": traffic.longest_silence(began, ended)[0],
                "baseline": baseline,
            })  # fmt: skip
    finally:
        traffic.stop()
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    on_standby = Counter(topic_ids(config.clusters["standby"].bootstrap, topic))
    assert set(on_standby) == set(traffic.acked)  # nothing lost
    assert max(on_standby.values()) == 1  # nothing written twice
    for row in rows:
        row["acked"] = len(traffic.acked)
    return rows


async def switch(
    config: Config, app: str, kind: Kind, request: SwitchRequest, *, topic: str | None = None
) -> tuple[dict[str, Any], dict[int, int]]:
    """The saga's result, and each partition's end on the source when the saga fenced it (of ``topic``
    where the link copies several)."""
    workflow_id = saga_id([app])
    await launch.start(config, kind, workflow_id, request)
    result = await launch.follow(config, workflow_id, lambda _line: None)
    client = await temporal.connect(config)
    handle = client.get_workflow_handle(workflow_id)
    progress = await handle.query("progress", result_type=Progress)
    return result, {p.partition: p.source_end for p in progress.partitions if topic in (None, p.topic)}


def step_times(routing: RoutingStore, workflow_id: str) -> str:
    """Each step of the saga's last run as ``name@start+duration`` in milliseconds from its first step:
    where the time while clients are held goes (SWITCHYARD_BENCH_STEPS=1 prints it per switch)."""
    run = routing.ledger.saga_runs(workflow_id, limit=1)[0]
    ran = routing.ledger.saga_steps(run.run_id)
    first = min(s.started_at for s in ran)
    return " ".join(
        f"{s.step}@{(s.started_at - first).total_seconds() * 1000:.0f}"
        f"+{(s.ended_at - s.started_at).total_seconds() * 1000:.0f}"
        for s in sorted(ran, key=lambda s: s.started_at)
    )


def test_a_round_trip_under_live_load(live: Live, routing: RoutingStore, stack_config: Config) -> None:
    config = live.effective
    runs = [one_run(live, routing, config) for _ in range(RUNS)]
    keys = ("rto", "held", "first_on_target", "pause", "silence")
    rows: list[tuple[object, ...]] = [
        (i + 1, r["switch"], *(f"{r[k]:.2f}" for k in keys), f"{r['baseline']:.3f}",
         f"{r['pause'] / r['baseline']:.0f}x", int(r["acked"]))
        for i, run in enumerate(runs) for r in run
    ]  # fmt: skip
    for number, kind in enumerate(ROUND_TRIP):
        switches = [run[number] for run in runs]
        for name, pick in (("p50", statistics.median), ("max", max)):
            baseline = pick(r["baseline"] for r in switches)
            figures = (f"{pick(r[k] for r in switches):.2f}" for k in keys)
            rows.append((name, f"{number + 1} {kind.value}", *figures, f"{baseline:.3f}", "", ""))
    header = (
        "RUN", "SWITCH", "SAGA RTO", "HELD (SAGA)", "START->1ST ACK ON TARGET",
        "PAUSE (LAST SOURCE->1ST TARGET ACK)", "LONGEST ACK GAP", "BASELINE GAP", "PAUSE/BASELINE", "ACKED",
    )  # fmt: skip
    print(f"\n\nround trips under {RATE:,} records/s through the gateway, {RUNS} runs (seconds)")
    print(render(header, rows))
