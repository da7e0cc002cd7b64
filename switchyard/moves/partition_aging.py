"""What is checked of partition migrations once they are in effect, on a schedule and by hand:

- a fault migration's origin's true end, recorded when the origin answers again (the gap between it and
  the end offset is then known, and reads of the origin are cut there for good);
- aging: a migration whose origin no longer holds any record below its end (retention, or a deletion)
  is marked ``aged``, and reads of the partition go only to the target;
- which origin topics have every partition aged from them and nothing else holding them there: no
  client routed to the origin using the topic (its metadata comes from there), no consumer group there
  holding offsets for it (Kafka drops a deleted topic's offsets), no link copying it. They are deleted
  by the ``RetireOriginTopic`` saga, after an approval.

Run by the ``MigrationAging`` workflow (a Temporal Schedule) and ``switchyard migrations check``.
Idempotent: what is recorded already is left alone, and every change is fenced on the record as read
(two checks at once: one records, the other says the record changed meanwhile). A partition or topic
that cannot be checked is said, and the others are checked all the same.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import KafkaException

from switchyard import kafka
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.errors import BindingConflict, BindingRefused, SwitchyardError
from switchyard.mirror.groups import committed_offsets, list_groups
from switchyard.model import (
    LinkState,
    MigrationMode,
    MigrationState,
    PartitionId,
    PartitionMigration,
)
from switchyard.moves.partition import answers, routed_users
from switchyard.routing import MigrationChange
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import origin_retirement_id, partition_migration_id

T = TypeVar("T")


@dataclass(frozen=True)
class OriginEnd:
    partition: PartitionId
    origin_end: int | None
    """The end recorded now; None when it was not (``why``)."""
    overrun: int = 0
    """Records the origin holds at or past the end offset (written around the gateways): never read."""
    why: str = "its origin does not answer yet"

    def describe(self) -> str:
        if self.origin_end is None:
            return f"{self.partition}: {self.why}"
        line = f"{self.partition}: the origin's end {self.origin_end} recorded"
        return line + (f"; {self.overrun} records past the end offset are never read" if self.overrun else "")


@dataclass(frozen=True)
class Aging:
    partition: PartitionId
    aged: bool
    why: str
    """Why it aged now, or why it does not yet."""

    def describe(self) -> str:
        return f"{self.partition}: {'aged' if self.aged else 'not aged'}, {self.why}"


@dataclass(frozen=True)
class OriginTopic:
    """A topic every partition of which was migrated away from ``origin`` and aged: no client reads it."""

    origin: str
    topic: str
    partitions: int

    def describe(self) -> str:
        return (
            f"{self.topic} on {self.origin}: all {self.partitions} partitions aged, nothing reads it (delete "
            f"it with `switchyard migrations retire {self.origin} {self.topic}`, after an approval)"
        )


def ages(migration: PartitionMigration, log_start: int | None) -> str | None:
    """Why ``migration`` may age, given its origin's log start now (None: the partition was not found
    there); None when it may not: the origin may still hold records clients read below the end. A
    partition not found is no proof (a broker's metadata just after a restart, a topic being made
    again): aging is final, so it ages only on a log start seen past the end."""
    if migration.state is not MigrationState.MIGRATED or migration.origin_end is None or log_start is None:
        return None
    if log_start >= migration.origin_end:
        return f"its origin's log starts at {log_start}, at or past the origin's end {migration.origin_end}"
    return None


class Origins:
    """What one check reads of the origin clusters, each read once: whether it answers (a shielded one
    is asked too: the shield keeps the gateways' clients away, while these checks are what tells when it
    is back), its partitions' log starts, which groups hold offsets for which topics."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._answers: dict[str, str | None] = {}
        self._groups: dict[str, dict[str, list[str]]] = {}

    def unreadable(self, cluster_id: str) -> str | None:
        """Why ``cluster_id`` cannot be read now; None if it can."""
        if cluster_id not in self._answers:
            self._answers[cluster_id] = self._unreadable(cluster_id)
        return self._answers[cluster_id]

    def _unreadable(self, cluster_id: str) -> str | None:
        if cluster_id not in self.config.clusters:
            return f"{cluster_id} is not in the configuration"
        if not answers(self.bootstrap(cluster_id)):
            return f"{cluster_id} does not answer"
        return None

    def bootstrap(self, cluster_id: str) -> str:
        return self.config.clusters[cluster_id].bootstrap

    def holders(self, cluster_id: str) -> dict[str, list[str]]:
        """Topic -> the consumer groups on the cluster that hold committed offsets for it."""
        if cluster_id not in self._groups:
            admin = ClusterAdmin(self.bootstrap(cluster_id))
            found: dict[str, list[str]] = {}
            for group in list_groups(admin):
                for topic in sorted({t for t, _ in committed_offsets(admin, group)}):
                    found.setdefault(topic, []).append(group)
            self._groups[cluster_id] = found
        return self._groups[cluster_id]


def _guarded(work: Callable[[], T], failed: Callable[[str], T]) -> T:
    """``work``'s result, or ``failed`` with why it could not be done: one partition's trouble (a
    leaderless partition, a change made meanwhile) never stops the others' checks."""
    try:
        return work()
    except (BindingConflict, BindingRefused) as changed:
        return failed(f"changed meanwhile, checked again next time ({changed})")
    except (KafkaException, SwitchyardError) as exc:
        return failed(f"not checked: {exc}")


def record_origin_ends(store: RoutingStore, config: Config, *, actor: str) -> list[OriginEnd]:
    """For each fault migration whose origin's end is not known: read it if the origin answers, and
    record it (at most the end offset). Not while the migration's saga is under way: a gateway that
    has not applied it yet could still have a write acknowledged there, past the end recorded."""
    found, origins = [], Origins(config)
    for partition, migration in sorted(store.snapshot().migrations.items()):
        if migration.mode is not MigrationMode.FAULT or migration.origin_end is not None:
            continue
        runs = store.ledger.saga_runs(partition_migration_id(partition.topic, partition.partition), limit=1)
        if runs and runs[0].ended_at is None:
            found.append(OriginEnd(partition, None, why="its migration saga is under way"))
            continue
        unreadable = origins.unreadable(migration.origin)
        if unreadable is not None:
            found.append(OriginEnd(partition, None, why=f"its origin {unreadable} yet"))
            continue
        record = functools.partial(_record_end, store, origins.bootstrap(migration.origin), migration, actor)
        found.append(_guarded(record, functools.partial(OriginEnd, partition, None, 0)))
    return found


def _record_end(store: RoutingStore, bootstrap: str, migration: PartitionMigration, actor: str) -> OriginEnd:
    assert migration.end_offset is not None  # a fault migration is in effect from the start
    key = (migration.id.topic, migration.id.partition)
    end = kafka.ends_of(bootstrap, [key])[key]
    at = min(end, migration.end_offset)
    store.apply(
        [MigrationChange.of(migration, origin_end=at)], actor=actor,
        reason=f"the origin answers again: its end is {end}",
    )  # fmt: skip
    return OriginEnd(migration.id, at, max(0, end - migration.end_offset))


def age_migrations(store: RoutingStore, config: Config, *, actor: str) -> list[Aging]:
    """Mark aged each migration in effect whose origin holds no record below its end any more."""
    found, origins = [], Origins(config)
    waiting: dict[str, list[PartitionMigration]] = {}
    for partition, migration in sorted(store.snapshot().migrations.items()):
        if migration.state is not MigrationState.MIGRATED:
            continue
        if migration.origin_end is None:
            found.append(Aging(partition, False, "its origin's end is not recorded yet (the origin is away)"))
            continue
        unreadable = origins.unreadable(migration.origin)
        if unreadable is not None:
            found.append(Aging(partition, False, f"its origin {unreadable}"))
            continue
        waiting.setdefault(migration.origin, []).append(migration)
    for origin, migrations in waiting.items():
        keys = [(m.id.topic, m.id.partition) for m in migrations]
        try:
            starts = kafka.starts_of(origins.bootstrap(origin), keys)
        except KafkaException as exc:
            found += [Aging(m.id, False, f"not checked: {exc}") for m in migrations]
            continue
        for migration in migrations:
            start = starts.get((migration.id.topic, migration.id.partition))
            age = functools.partial(_age, store, migration, start, actor)
            found.append(_guarded(age, functools.partial(Aging, migration.id, False)))
    return sorted(found, key=lambda a: a.partition)


def _age(store: RoutingStore, migration: PartitionMigration, start: int | None, actor: str) -> Aging:
    why = ages(migration, start)
    if why is not None:
        store.apply([MigrationChange.of(migration, state=MigrationState.AGED)], actor=actor, reason=why)
        return Aging(migration.id, True, why)
    if start is None:
        return Aging(
            migration.id, False, f"its origin {migration.origin} has no such partition (asked again)"
        )
    held = f"its origin holds records from offset {start} below its end {migration.origin_end}"
    return Aging(migration.id, False, held)


def retirable(store: RoutingStore, config: Config) -> tuple[list[OriginTopic], list[str]]:
    """The origin topics whose every partition aged away from them, that may be deleted now; and, in
    words, those that may not (what holds them there), or whose last retirement did not delete it
    (asked again only by ``switchyard migrations retire``: the schedule never asks twice)."""
    candidates = {
        (migration.origin, partition.topic)
        for partition, migration in store.snapshot().migrations.items()
        if migration.state is MigrationState.AGED
    }
    ripe, held, origins = [], [], Origins(config)
    for origin, topic in sorted(candidates):
        runs = store.ledger.saga_runs(origin_retirement_id(origin, topic), limit=1)
        if runs and runs[0].outcome in ("kept", "refused"):
            said = "was not approved" if runs[0].outcome == "kept" else "was refused"
            held.append(f"{topic} on {origin} stays: its last retirement {said}; ask again with "
                        f"`switchyard migrations retire {origin} {topic}`")  # fmt: skip
            continue
        try:
            found = check_retirable(store, config, origin, topic, origins)
        except BindingRefused as refused:
            held.append(f"{topic} on {origin} stays: {refused}")
            continue
        except (KafkaException, SwitchyardError) as exc:
            held.append(f"{topic} on {origin} stays: not checked: {exc}")
            continue
        if found is not None:
            ripe.append(found)
    return ripe, held


def check_retirable(
    store: RoutingStore, config: Config, origin: str, topic: str, origins: Origins | None = None
) -> OriginTopic | None:
    """The topic if it may be deleted from ``origin`` now; None if it is gone already. BindingRefused
    naming why not otherwise: the cluster shielded or away, a link that copies it, a partition not aged
    from there, a client routed there that uses it, a group there that holds its offsets."""
    snapshot = store.snapshot()
    if snapshot.shielded(origin):
        raise BindingRefused(f"{topic} cannot be retired now: {origin} is {snapshot.clusters[origin].state}")
    for link in snapshot.links.values():
        between = origin in (link.source, link.target)
        if link.state is not LinkState.PROMOTED and between and link.copies(topic):
            raise BindingRefused(f"link {link.id} copies {topic} between {link.source} and {link.target}")
    origins = origins or Origins(config)
    unreadable = origins.unreadable(origin)
    if unreadable is not None:
        raise BindingRefused(f"{topic} cannot be retired now: {unreadable}")
    there = [p for _, p in kafka.partitions(origins.bootstrap(origin), lambda name: name == topic)]
    if not there:
        return None
    for number in there:
        migration = snapshot.migrations.get(PartitionId(topic, number))
        if migration is None or migration.origin != origin or migration.state is not MigrationState.AGED:
            state = "no migration" if migration is None else f"{migration.state} from {migration.origin}"
            raise BindingRefused(
                f"{topic}[{number}] on {origin} is not aged ({state}): clients may still read it there"
            )
    users = routed_users(store, config, snapshot, topic).get(origin)
    if users:
        raise BindingRefused(
            f"{', '.join(sorted(set(users)))} use {topic} routed to {origin}: their metadata comes from "
            "there (deleted, the topic would vanish for them, or be created anew with the broker's defaults)"
        )
    holding = origins.holders(origin).get(topic)
    if holding:
        raise BindingRefused(
            f"groups {', '.join(holding)} on {origin} hold offsets for {topic}: a topic's deletion drops "
            "them, and the groups would start over by their reset policy"
        )
    return OriginTopic(origin, topic, len(there))
