"""What a consumer reads twice and never reads when its application moves to the standby: through
MirrorMaker 2, as its users move (the application stopped and repointed, its group's offsets as MM2
translated them), against a Switchyard switchover (the gateway moves it, nobody repoints anything).

One application — an idempotent producer at 2,000 records/s and a consumer group that commits after
each batch (``switchyard.traffic``), at the library's defaults but for reading from the earliest
offset where its group has none — on one 3-partition topic, in three scenarios:

- **MM2, planned**: the producer stops, the consumer reads to the end and commits, MirrorMaker 2 (identity
  names, checkpoints and group offsets synced every second, ``offset.lag.max`` 0) copies the rest and
  gets three seconds to sync the group; then the consumer starts on the standby in the same group.
- **MM2, failover**: the primary is lost at once — MirrorMaker 2 killed with the application — and the
  consumer starts on the standby from the offsets MM2 synced last.
- **Switchyard switchover**: the same application through the gateway, switched by the saga while it
  runs.

Per scenario: records acknowledged, records the consumer read twice, records on the standby it never
read, records acknowledged on the primary that never reached the standby (the failover's lost window,
not the consumer's doing), and how long the application could not write (MM2: from stopping it to
starting it on the standby, with no time to notice a failure or redeploy; Switchyard: the producer's
longest wait for an acknowledgement during the switch). Nothing is asserted of MirrorMaker;
Switchyard's 0, 0 and 0 are.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from switchyard import kafka, launch
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.mirror.groups import committed_offsets
from switchyard.routing.store import RoutingStore
from switchyard.sagas.requests import Kind, SwitchRequest
from switchyard.table import render
from switchyard.traffic import Reader, Traffic, account
from tests.bench.test_mirror_bench import mm2_copy_exists, wait_for
from tests.bench.test_switchover_bench import ACTOR, prepare, switch
from tests.helpers.live import Live
from tests.helpers.mirrormaker import MM2_VERSION, MirrorMaker
from tests.helpers.stacks import KAFKA_DIST
from tests.helpers.traffic import topic_ids

RATE = 2_000
RUN_S = 8.0
"""How long the application runs before it is moved."""
SYNC_S = 3.0
"""What a planned move gives MirrorMaker 2 after its copy caught up: three of its group syncs."""
IDLE_S = 5.0
"""A repointed consumer that received nothing for this long has read what it will."""
PARTITIONS = 3


@dataclass
class Outcome:
    scenario: str
    acked: int
    twice: int
    never: int
    lost: int
    down_s: float
    """How long the application could not write: stopped until repointed, or the producer's pause."""


def through_mirrormaker(stack_config: Config, work: Path, *, planned: bool) -> Outcome:
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    app = f"mm2-{uuid.uuid4().hex[:6]}"
    topic, group = f"{app}-orders", f"{app}-readers"
    kafka.create_topics(primary, [topic], partitions=PARTITIONS)
    mm2 = MirrorMaker(KAFKA_DIST, work / topic, source=primary, target=standby, topics=re.escape(topic))
    mm2.start()
    traffic = Traffic(primary, app, topic, group, idempotent=True, rate_per_s=RATE)
    stopped = False
    try:
        wait_for(lambda: mm2_copy_exists(standby, topic), 120, "MirrorMaker 2 made no copy")
        traffic.start()
        traffic.wait_for(RATE)
        target_admin = ClusterAdmin(standby)
        wait_for(lambda: bool(committed_offsets(target_admin, group)), 120, "MM2 synced no group offset")
        time.sleep(RUN_S)
        stopping = time.monotonic()
        if planned:
            traffic.stop()
            stopped = True
            keys = [(topic, p) for p in range(PARTITIONS)]
            wait_for(lambda: kafka.ends_of(standby, keys) == kafka.ends_of(primary, keys), 60, "MM2 behind")
            time.sleep(SYNC_S)
            mm2.stop()
        else:
            mm2.kill()
            traffic.stop(catch_up=False)
            stopped = True
    finally:
        mm2.stop()
        if not stopped:
            traffic.stop(catch_up=False)
    repointed = Reader(standby, app, topic, group)
    repointed.thread.start()
    down_s = time.monotonic() - stopping  # at the least: a producer repointed too starts no sooner
    while True:
        count = len(repointed.received)
        time.sleep(IDLE_S)
        if len(repointed.received) == count:
            break
    repointed.stop.set()
    repointed.thread.join(30)
    before, after = Counter(traffic.received), Counter(repointed.received)
    read = before + after
    on_standby, acked = set(topic_ids(standby, topic)), set(traffic.acked)
    return Outcome(
        f"MirrorMaker 2 {MM2_VERSION}, {'planned' if planned else 'failover'}, consumer repointed",
        len(acked),
        sum(1 for n in read.values() if n > 1),
        len((acked & on_standby) - set(read)),
        len(acked - on_standby),
        down_s,
    )


def through_switchyard(live: Live, routing: RoutingStore) -> Outcome:
    assert live.gateway is not None
    config = live.effective
    app, topic, link = prepare(routing, config)
    traffic = Traffic(live.gateway.bootstrap, app, topic, f"{app}-readers", idempotent=True, rate_per_s=RATE)
    traffic.start()
    try:
        traffic.wait_for(RATE)
        time.sleep(RUN_S)
        policy = launch.policy_of(config, Kind.SWITCHOVER)
        request = SwitchRequest([app], link=link, actor=ACTOR, reason="bench", policy=policy)
        began = time.monotonic()
        result, _ = asyncio.run(switch(config, app, Kind.SWITCHOVER, request))
        assert result["outcome"] == "switched", result
        traffic.wait_for(RATE)
        pause_s, _ = traffic.longest_silence(began, time.monotonic())
    finally:
        traffic.stop()
    found = account(traffic.readers[0], traffic.acked)
    on_standby, acked = set(topic_ids(config.clusters["standby"].bootstrap, topic)), set(traffic.acked)
    outcome = Outcome(
        "Switchyard switchover, through the gateway", len(acked), len(found.twice), len(found.missing),
        len(acked - on_standby), pause_s,
    )  # fmt: skip
    assert (outcome.twice, outcome.never, outcome.lost) == (0, 0, 0), outcome
    return outcome


def test_a_move_through_mirrormaker_2_against_a_switchyard_switchover(
    live: Live, routing: RoutingStore, stack_config: Config, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path_factory.mktemp("failover-bench")
    outcomes = [
        through_mirrormaker(stack_config, work, planned=True),
        through_mirrormaker(stack_config, work, planned=False),
        through_switchyard(live, routing),
    ]
    rows = [(o.scenario, o.acked, o.twice, o.never, o.lost, f"{o.down_s:.2f}") for o in outcomes]
    print(f"\n\na move to the standby under {RATE:,} records/s, one consumer group (records)")
    header = ("SCENARIO", "ACKED", "READ TWICE", "NEVER READ", "NOT ON THE STANDBY", "NO WRITES (s)")
    print(render(header, rows))
