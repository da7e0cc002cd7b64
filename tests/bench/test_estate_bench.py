"""What a switchover costs as the estate it moves grows: one application with 3, 30, 300 and 1,000
partitions (topics of up to 100) and 1, 10 and 50 consumer groups is switched to the standby by one saga
while it produces 500 records/s through the gateway.

Per scenario: the saga's RTO and how long it held clients (its own clock), the producer's pause (its
last acknowledgement on the source to its first on the target), and the steps that ran while clients
were held, from the saga's records in the ledger. Each group committed an offset for every partition of
one topic through the gateway (so the gateways saw the application use it); the sync carries them. Each
scenario's links are deleted after it (on Tansu a link idling over 1,000 partitions costs the broker
~40 % of a core: its consumer's fetches, performance.md), so each switch pays only for its own. The
figure the issue asks for, the pause of 300 partitions and 10 groups against 3 and 1 (target: at most
2x), is printed under the table; nothing lost, nothing written twice and every group carried are
asserted every run, timings only printed.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from switchyard import kafka, launch
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.ledger import Ledger
from switchyard.mirror.control import delete_link
from switchyard.mirror.groups import committed_offsets
from switchyard.routing.store import RoutingStore
from switchyard.sagas import steps
from switchyard.sagas.requests import Kind, SwitchRequest
from switchyard.table import render
from switchyard.traffic import Traffic
from tests.bench.test_switchover_bench import switch
from tests.helpers.links import linked
from tests.helpers.live import Live
from tests.helpers.traffic import topic_ids

SCENARIOS = tuple(
    tuple(int(n) for n in s.split("x"))
    for s in os.environ.get("SWITCHYARD_ESTATE", "3x1,30x1,300x1,1000x1,3x10,3x50,300x10,1000x50").split(",")
)
"""(partitions, groups) per scenario; ``SWITCHYARD_ESTATE=3x1,300x10`` runs fewer."""
RATE = 500
TOPIC_MOST = 100
"""Partitions per topic at most: a large estate is many topics, as real ones are."""
COMMITTED = 2
"""The offset each group commits on every partition it reads (each partition holds 3 records first)."""
HELD_STEPS = {
    steps.BLOCK: "block", steps.SETTLE: "settle", steps.DRAIN: "drain", steps.SYNC_GROUPS: "sync groups",
    steps.CHECK_COPY: "check copy", steps.FLIP: "flip", steps.AWAIT_ACKS: "acks (block+flip)",
}  # fmt: skip
"""The steps that run while clients are held, as the ledger names them, and as the table does."""
ACTOR = "user:bench"

pytestmark = pytest.mark.timeout(3600)


def topics_of(partitions: int) -> list[tuple[str, int]]:
    tag = uuid.uuid4().hex[:6]
    count = -(-partitions // TOPIC_MOST)
    return [(f"estate-{tag}-{i}", min(TOPIC_MOST, partitions - i * TOPIC_MOST)) for i in range(count)]


def prepare(
    live: Live, routing: RoutingStore, config: Config, partitions: int, groups: int
) -> dict[str, Any]:
    """Topics holding 3 records per partition (written by the app through the gateway), a link copying
    them, the app bound to the primary, and ``groups`` groups that committed through the gateway."""
    assert live.gateway is not None
    app = f"estate-{uuid.uuid4().hex[:6]}"
    primary = config.clusters["primary"].bootstrap
    topics = topics_of(partitions)
    for topic, count in topics:
        kafka.create_topics(primary, [topic], partitions=count)
    # through the gateway, as the application: the gateways see it use every topic, so the plan moves
    # them all (only the traffic's topic seen, the saga would split the link and move that one alone)
    seed = Producer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app, "linger.ms": 20})
    for topic, count in topics:
        for p in range(count):
            for i in range(COMMITTED + 1):
                seed.produce(topic, str(-2 - i).encode(), partition=p)  # not a number the traffic sends
    assert seed.flush(60) == 0
    linked(routing, app, [app], [t for t, _ in topics], partitions, timeout_s=300)
    committed = {}
    for g in range(groups):
        group, (topic, count) = f"{app}-g{g}", topics[g % len(topics)]
        committer = Consumer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app,
                              "group.id": group, "enable.auto.commit": False})  # fmt: skip
        offsets = [TopicPartition(topic, p, COMMITTED) for p in range(count)]
        committer.commit(offsets=offsets, asynchronous=False)
        committer.close()
        committed[group] = (topic, count)
    return {"app": app, "topics": topics, "groups": committed}


def one_scenario(
    live: Live, routing: RoutingStore, config: Config, partitions: int, groups: int
) -> dict[str, Any]:
    assert live.gateway is not None
    estate = prepare(live, routing, config, partitions, groups)
    app, (topic, _) = estate["app"], estate["topics"][0]
    traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True, rate_per_s=RATE)
    traffic.start()
    try:
        traffic.wait_for(RATE)
        request = SwitchRequest([app], link=app, actor=ACTOR, reason="bench",
                                policy=launch.policy_of(config, Kind.SWITCHOVER))  # fmt: skip
        result, fenced = asyncio.run(switch(config, app, Kind.SWITCHOVER, request, topic=topic))
        traffic.wait_for(RATE)
    finally:
        traffic.stop()
    assert result["outcome"] == "switched", result
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    on_standby = Counter(v for v in topic_ids(config.clusters["standby"].bootstrap, topic) if v >= 0)
    assert set(on_standby) >= set(traffic.acked)  # nothing lost
    assert max(on_standby.values()) == 1  # nothing written twice
    standby = ClusterAdmin(config.clusters["standby"].bootstrap)
    for group, (topic_of_group, count) in estate["groups"].items():  # every group carried, exactly
        found = committed_offsets(standby, group)
        assert found == {(topic_of_group, p): COMMITTED for p in range(count)}, (group, found)
    last_on_source, first_on_target = traffic.handover(fenced)
    steps = held_steps(live, result["saga_id"])
    assert steps["drained"] == partitions, steps  # the switch waited for every partition of the estate
    for link in (app, result["reverse_link"]):  # the next scenario's switch pays for no link of this one
        delete_link(config, routing, link, actor=ACTOR, reason="bench: scenario done", force=True)
    return {
        "partitions": partitions, "groups": groups, "rto": result["rto_ms"] / 1000,
        "held": result["pause_ms"] / 1000, "pause": first_on_target - last_on_source,
        "synced": result["groups_synced"], **steps,
    }  # fmt: skip


def held_steps(live: Live, workflow_id: str) -> dict[str, float]:
    """How long each step ran while clients were held, from the saga's records (its last run), and how
    many partitions the drain waited for."""
    ledger = Ledger.open(f"sqlite:///{live.ledger}")
    try:
        (run, *_) = ledger.saga_runs(workflow_id, limit=1)
        found = {name: 0.0 for name in HELD_STEPS.values()}
        for step in ledger.saga_steps(run.run_id):
            if step.step in HELD_STEPS and step.outcome == "ok":
                found[HELD_STEPS[step.step]] += (step.ended_at - step.started_at).total_seconds()
            if step.step == steps.DRAIN and step.outcome == "ok":
                ends = step.figures["target_ends"]  # a long list is stored as its length ("300 items")
                found["drained"] = int(ends.split()[0]) if isinstance(ends, str) else len(ends)
    finally:
        ledger.close()
    return found


def test_a_switchover_s_cost_as_the_estate_grows(live: Live, routing: RoutingStore) -> None:
    config = live.effective
    rows = [one_scenario(live, routing, config, p, g) for p, g in SCENARIOS]
    header = ("PARTITIONS", "GROUPS", "DRAINED", "RTO", "HELD (SAGA)", "PAUSE (PRODUCER)",
              "GROUP OFFSETS SYNCED", *(s.upper() for s in HELD_STEPS.values()))  # fmt: skip
    table = [
        (f"{r['partitions']:,}", r["groups"], f"{r['drained']:,}",
         *(f"{r[k]:.2f}" for k in ("rto", "held", "pause")), r["synced"],
         *(f"{r[s]:.2f}" for s in HELD_STEPS.values()))
        for r in rows
    ]  # fmt: skip
    print(f"\n\na switchover as the estate grows, {RATE} records/s through the gateway (seconds)")
    print(render(header, table))
    by = {(r["partitions"], r["groups"]): r for r in rows}
    small, large = by.get((3, 1)), by.get((300, 10))
    if small and large:
        print(f"pause, 300 partitions and 10 groups / 3 and 1: {large['pause'] / small['pause']:.2f}x "
              f"({large['pause']:.2f} s / {small['pause']:.2f} s; target at most 2x); held "
              f"{large['held'] / small['held']:.2f}x")  # fmt: skip
