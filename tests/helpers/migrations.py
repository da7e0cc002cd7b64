"""A smooth partition migration carried out on the routing store, step by step as the partition
migration saga does it, without the saga: for tests of what the gateway does at each step."""

from __future__ import annotations

from switchyard import kafka
from switchyard.config import Config
from switchyard.model import MigrationMode, MigrationState, PartitionId
from switchyard.routing import MigrationChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks

ACTOR = "user:test"


def migrate(routing: RoutingStore, config: Config, partition: PartitionId, origin: str, target: str) -> int:
    """Move ``partition``'s writes from ``origin`` to ``target``: held, the origin's end read, released
    to the target, each step applied by every gateway. Returns the end offset."""
    key = (partition.topic, partition.partition)
    base = kafka.ends_of(config.clusters[target].bootstrap, [key])[key]
    begun = routing.apply(
        [MigrationChange(partition, 0, origin, target, MigrationMode.SMOOTH, MigrationState.MIGRATING,
                         target_base=base)],
        actor=ACTOR, reason="smooth migration: hold the partition's writes",
    )  # fmt: skip
    wait_for_acks(routing.zk, routing.layout, begun, timeout_s=10)
    end = kafka.ends_of(config.clusters[origin].bootstrap, [key])[key]
    migrating = routing.migration(partition)
    assert migrating is not None
    took = routing.apply(
        [MigrationChange.of(migrating, state=MigrationState.MIGRATED, end_offset=end, origin_end=end)],
        actor=ACTOR, reason="smooth migration: its end read, writes go to the target",
    )  # fmt: skip
    wait_for_acks(routing.zk, routing.layout, took, timeout_s=10)
    return end
