"""What is checked of partition migrations once they are in effect: a fault migration's origin's true end,
recorded when the origin answers again (the gap between it and the end offset is then known, and reads
of the origin are cut there for good).

Run by ``switchyard migrations check``. Idempotent: a migration whose end is recorded is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard import kafka
from switchyard.config import Config
from switchyard.model import MigrationMode, PartitionId
from switchyard.partition_migration import answers
from switchyard.routing import MigrationChange
from switchyard.routing.store import RoutingStore


@dataclass(frozen=True)
class OriginEnd:
    partition: PartitionId
    origin_end: int | None
    """The end recorded now; None when the origin did not answer."""
    overrun: int = 0
    """Records the origin holds at or past the end offset (written around the gateways): never read."""

    def describe(self) -> str:
        if self.origin_end is None:
            return f"{self.partition}: its origin does not answer yet"
        line = f"{self.partition}: the origin's end {self.origin_end} recorded"
        return line + (f"; {self.overrun} records past the end offset are never read" if self.overrun else "")


def record_origin_ends(store: RoutingStore, config: Config, *, actor: str) -> list[OriginEnd]:
    """For each fault migration whose origin's end is not known: read it if the origin answers, and
    record it (at most the end offset)."""
    found = []
    for partition, migration in sorted(store.snapshot().migrations.items()):
        if migration.mode is not MigrationMode.FAULT or migration.origin_end is not None:
            continue
        assert migration.end_offset is not None  # a fault migration is in effect from the start
        bootstrap = config.clusters[migration.origin].bootstrap
        if not answers(bootstrap):
            found.append(OriginEnd(partition, None))
            continue
        key = (partition.topic, partition.partition)
        end = kafka.ends_of(bootstrap, [key])[key]
        recorded = min(end, migration.end_offset)
        store.apply(
            [MigrationChange.of(migration, origin_end=recorded)], actor=actor,
            reason=f"the origin answers again: its end is {end}",
        )  # fmt: skip
        found.append(OriginEnd(partition, recorded, max(0, end - migration.end_offset)))
    return found
