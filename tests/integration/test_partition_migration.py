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
import time
import uuid
from collections import Counter

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import MigrationMode, MigrationState, PartitionId
from switchyard.routing import MigrationChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from switchyard.traffic import Traffic
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
