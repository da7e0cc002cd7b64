"""Migrations in tests: a smooth partition migration carried out on the routing store, step by step as
the partition migration saga does it, without the saga (for tests of what the gateway does at each
step); and the wait for a topic's users to be seen, which a topic migration moves."""

from __future__ import annotations

import time

from switchyard import kafka
from switchyard.config import Config
from switchyard.model import MigrationMode, MigrationState, PartitionId
from switchyard.routing import MigrationChange, RoutingStore
from switchyard.routing.gateways import wait_for_acks
from switchyard.usage import read_usage

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


def seen_by_gateway(
    routing: RoutingStore, topic: str, apps: set[str], groups: set[tuple[str, str]], timeout_s: float = 30
) -> None:
    """Until the gateway's published report shows each application, and each (application, group)
    committing, on the topic."""
    deadline = time.monotonic() + timeout_s
    while True:
        uses = [u for u in read_usage(routing.zk, routing.layout, within_s=600) if u.topic == topic]
        if {u.app for u in uses} == apps and {(u.app, u.group) for u in uses if u.group} == groups:
            return
        assert time.monotonic() < deadline, uses
        time.sleep(0.5)
