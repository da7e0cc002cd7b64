"""One partition of three moved between clusters through the gateway under live traffic (seed 004),
by driving the routing store the way the partition migration saga does.

A producer and a consumer group run through the gateway the whole time. The migration is recorded
(writes to the partition held at the gateway), acknowledged by the gateway, the origin's exact end read
and recorded as the end offset, and the writes released to the target. Judged by what the application
saw: every send acknowledged, each record once across the two clusters, nothing written to the origin's
partition after its end, and the consumer's offsets for the partition going on from the end offset
without a gap or a repeat.
"""

from __future__ import annotations

import itertools
import re
import time
import uuid
from collections import Counter

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import LinkState, MigrationMode, MigrationState, PartitionId
from switchyard.routing import MigrationChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from switchyard.sagas.ids import partition_migration_id
from switchyard.traffic import Traffic
from tests.helpers.live import Live, capture, unique
from tests.helpers.processes import GatewayProcess
from tests.helpers.traffic import judge_consumer
from tests.integration.test_gateway import gateway  # noqa: F401 - a shared module fixture

PARTITIONS = 3
MOVED = 1
ACTOR = "user:test"


def pause(traffic: Traffic, partition: int, held_at: float, released_at: float) -> float:
    """The longest time between two acknowledgements of ``partition``'s records around the hold."""
    times = [t for t, (p, _) in zip(traffic.acked_at, traffic.acked_where, strict=False) if p == partition]
    before = max(t for t in times if t <= held_at)
    after = [t for t in times if t >= before]
    return max(b - a for a, b in itertools.pairwise(after) if a <= released_at + 1)


def values(bootstrap: str, topic: str, partition: int) -> list[int]:
    return [int(r.value or b"-1") for r in kafka.read_partitions(bootstrap, topic).get(partition, [])]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent-producer", "plain-producer"])
def test_a_smooth_migration_moves_one_partitions_writes_and_keeps_its_offsets_going_on(
    gateway: GatewayProcess,  # noqa: F811
    routing: RoutingStore,
    stack_config: Config,
    idempotent: bool,
) -> None:
    app, topic = f"mig-{uuid.uuid4().hex[:6]}", f"migrating-{uuid.uuid4().hex[:6]}"
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    for bootstrap in (primary, standby):
        kafka.create_topics(bootstrap, [topic], partitions=PARTITIONS)
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="start")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    moved = PartitionId(topic, MOVED)

    traffic = Traffic(gateway.bootstrap, app, topic, f"g-{uuid.uuid4().hex[:6]}", idempotent=idempotent,
                      rate_per_s=400)  # fmt: skip
    traffic.start()
    try:
        traffic.wait_for(300)
        held_at = time.monotonic()
        base = kafka.ends_of(standby, [(topic, MOVED)])[topic, MOVED]
        begun = routing.apply(
            [MigrationChange(moved, 0, "primary", "standby", MigrationMode.SMOOTH, MigrationState.MIGRATING,
                             target_base=base)],
            actor=ACTOR, reason="smooth migration: hold the partition's writes",
        )  # fmt: skip
        wait_for_acks(routing.zk, routing.layout, begun, timeout_s=10)
        end = kafka.ends_of(primary, [(topic, MOVED)])[topic, MOVED]
        migrating = routing.migration(moved)
        assert migrating is not None
        took = routing.apply(
            [MigrationChange.of(migrating, state=MigrationState.MIGRATED, end_offset=end, origin_end=end)],
            actor=ACTOR, reason="smooth migration: its end read, writes go to the target",
        )  # fmt: skip
        wait_for_acks(routing.zk, routing.layout, took, timeout_s=10)
        released_at = time.monotonic()
        traffic.wait_for(600)
    finally:
        traffic.stop()

    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    on_origin = {p: values(primary, topic, p) for p in range(PARTITIONS)}
    on_target = values(standby, topic, MOVED)
    assert len(on_origin[MOVED]) == end  # nothing written to the origin's partition after its end
    held = Counter(v for vs in on_origin.values() for v in vs) + Counter(on_target)
    assert set(held) == set(traffic.acked)
    assert max(held.values()) == 1  # each record once, on one side
    moved_acks = sorted(o for p, o in traffic.acked_where if p == MOVED)
    assert moved_acks == list(range(end + len(on_target)))  # acknowledged at client offsets, no gap
    assert on_target, "nothing was written to the target"
    print(
        f"\nend offset {end}; {len(on_target)} records on the target; the partition's writes paused "
        f"{pause(traffic, MOVED, held_at, released_at):.3f}s (held to released: {released_at - held_at:.3f}s)"
    )
    print(judge_consumer(traffic))  # every record, offsets in order per partition (continuous across E)


def test_the_saga_migrates_a_partition_under_traffic_and_a_switch_of_its_topic_is_refused(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """``switchyard migrate-partition`` end to end on the live worker and gateway: the plan finds the
    origin from the gateway's usage report, the saga holds, records the end, releases; then a
    switchover along a link that copies the topic is refused by its plan, naming the migration."""
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    app, topic = unique("pm"), unique("pmt")
    kafka.create_topics(primary, [topic], partitions=PARTITIONS)  # the saga creates it on the standby
    traffic = Traffic(live.gateway.bootstrap, app, topic, unique("pmg"), idempotent=True, rate_per_s=300)
    traffic.start()
    try:
        traffic.wait_for(300)
        dry = live.cli("migrate-partition", topic, str(MOVED), "--to", "standby", "--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f"ok: {topic}'s users are routed to primary" in dry.stdout
        migrated = live.cli("migrate-partition", topic, str(MOVED), "--to", "standby", "--wait")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        traffic.wait_for(300)
    finally:
        traffic.stop()

    saga = partition_migration_id(topic, MOVED)
    assert f"partition-migration migrated: {topic}[{MOVED}]" in migrated.stdout
    migration = routing.migration(PartitionId(topic, MOVED))
    assert migration is not None
    assert migration.end_offset is not None
    assert (migration.origin, migration.target, migration.state) == ("primary", "standby", "migrated")
    end = migration.end_offset
    assert f"end offset {end}" in migrated.stdout
    assert len(values(primary, topic, MOVED)) == end
    on_target = values(standby, topic, MOVED)
    held = Counter(v for p in range(PARTITIONS) for v in values(primary, topic, p)) + Counter(on_target)
    assert set(held) == set(traffic.acked)
    assert max(held.values()) == 1
    assert sorted(traffic.acked) == list(range(traffic.sent))
    print(f"\npartition migration saga: {judge_consumer(traffic, carried=True)}")  # no commit refused

    listed = live.cli("migrations", "list")
    row = rf"{re.escape(topic)}\[{MOVED}\]\s+primary\s+standby\s+smooth\s+migrated\s+{end}\s+{end}\s+no"
    assert re.search(row, listed.stdout), listed.stdout
    shown = live.cli("migrations", "show", topic, str(MOVED))
    assert f"client offsets from {end} on: the target's" in shown.stdout
    assert "migrating -> migrated" in shown.stdout
    assert "- -> migrating" in shown.stdout
    runs = routing.ledger.saga_runs(saga)
    assert [(r.kind, r.outcome) for r in runs] == [("partition-migration", "migrated")]
    capture(live, saga, runs[0].run_id, "partition-migration-live")

    refused_while_a_link_copies_it(live, routing, app, topic)


def refused_while_a_link_copies_it(live: Live, routing: RoutingStore, app: str, topic: str) -> None:
    """A switchover along a link that copies a topic with a migrated partition is refused by its plan;
    so is a migration of a topic a link copies."""
    link = unique("pm-link")
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="a later switch")
    try:
        switch = live.cli("switchover", app, "--link", link, "--dry-run")
        assert switch.returncode == 5, switch.stdout + switch.stderr
        assert f"refused: {topic}[{MOVED}] was migrated from primary to standby" in switch.stdout
        again = live.cli("migrate-partition", topic, "0", "--to", "standby", "--dry-run")
        assert again.returncode == 5
        assert f"refused: link {link} copies {topic} between primary and standby" in again.stdout
    finally:
        routing.set_link_state(link, LinkState.DELETED, actor=ACTOR, reason="done")
