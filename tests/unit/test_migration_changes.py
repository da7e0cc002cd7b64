"""What a partition migration's change may and may not do: it begins, takes effect, ages (once its origin
holds nothing below its end), records its origin's true end; its clusters and end offset never change
once in effect (client offsets would change meaning), and it is called off only before it took effect."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from switchyard.errors import BindingRefused
from switchyard.ledger.kinds import MigrationChange
from switchyard.model import (
    Cluster,
    ClusterState,
    MigrationMode,
    MigrationState,
    PartitionId,
    PartitionMigration,
)
from switchyard.moves.partition_aging import ages

AT = datetime(2026, 11, 24, tzinfo=UTC)
P = PartitionId("orders", 1)
SMOOTH, FAULT = MigrationMode.SMOOTH, MigrationMode.FAULT
MIGRATING, MIGRATED, AGED = MigrationState.MIGRATING, MigrationState.MIGRATED, MigrationState.AGED


class Registered:
    def __init__(self, **states: ClusterState) -> None:
        self.states = states

    def cluster(self, cluster_id: str) -> Cluster | None:
        state = self.states.get(cluster_id)
        return None if state is None else Cluster(cluster_id, "b:9092", state, 1, AT, "t")


CLUSTERS = Registered(primary=ClusterState.ACTIVE, standby=ClusterState.ACTIVE)


def node(change: MigrationChange, epoch: int = 5) -> PartitionMigration:
    left = change.kind.left_by(change.event(None, epoch, "t", "t", AT))
    assert left is not None
    return left


def new(mode: MigrationMode = SMOOTH, state: MigrationState = MIGRATING, **kw: Any) -> MigrationChange:
    return MigrationChange(P, 0, "primary", "standby", mode, state, **kw)


def refused(change: MigrationChange, old: PartitionMigration | None, match: str, **kw: Any) -> None:
    with pytest.raises(BindingRefused, match=match):
        change.check(old, kw.get("clusters", CLUSTERS), [change], kw.get("force", False))


def test_a_smooth_migration_begins_takes_effect_ages_and_records_nothing_twice() -> None:
    begun = new()
    begun.check(None, CLUSTERS, [begun], False)
    migrating = node(begun)
    effect = MigrationChange.of(migrating, state=MIGRATED, end_offset=1200, origin_end=1200)
    effect.check(migrating, CLUSTERS, [effect], False)
    migrated = node(effect, 6)
    aged = MigrationChange.of(migrated, state=AGED)
    aged.check(migrated, CLUSTERS, [aged], False)
    refused(MigrationChange.of(migrated), migrated, "already migrated")
    refused(MigrationChange.of(node(aged, 7)), node(aged, 7), "aged, final")


def test_once_in_effect_its_end_offset_and_clusters_never_change() -> None:
    migrated = node(new(FAULT, MIGRATED, end_offset=5000))
    refused(MigrationChange.of(migrated, end_offset=4000), migrated, "end offset 5000 is fixed")
    refused(MigrationChange.of(migrated, target_base=3), migrated, "end offset 5000 is fixed")
    refused(MigrationChange.of(migrated, target="elsewhere"), migrated, "one migration per partition")
    refused(MigrationChange.of(migrated, state=MIGRATING, end_offset=None), migrated, "is fixed")
    back = MigrationChange.of(migrated, origin_end=4321)  # the background check, once the origin is back
    back.check(migrated, CLUSTERS, [back], False)
    known = node(back)
    refused(MigrationChange.of(known, origin_end=4400), known, "origin's end is recorded already")
    ignoring = MigrationChange.of(known, ignore_origin=True)
    ignoring.check(known, CLUSTERS, [ignoring], False)


def test_called_off_only_before_it_took_effect() -> None:
    migrating = node(new())
    off = MigrationChange.of(migrating, state=MigrationState.CALLED_OFF)
    off.check(migrating, CLUSTERS, [off], False)
    assert off.kind.left_by(off.event(migrating, 6, "t", "t", AT)) is None
    migrated = node(new(FAULT, MIGRATED, end_offset=10))
    refused(MigrationChange.of(migrated, state=MigrationState.CALLED_OFF), migrated, "cannot be called off")
    refused(dataclasses.replace(off, expected_epoch=0), None, "has no migration")


def test_a_new_migration_needs_two_registered_clusters_and_an_active_target() -> None:
    refused(dataclasses.replace(new(), target="nowhere"), None, "cluster 'nowhere' is not registered")
    refused(dataclasses.replace(new(), target="primary"), None, "origin and target are the same cluster")
    shielded = Registered(primary=ClusterState.ACTIVE, standby=ClusterState.SHIELDED)
    refused(new(), None, "'standby' is shielded", clusters=shielded)
    new().check(None, shielded, [], True)  # forced
    refused(new(FAULT), None, "a fault migration takes effect at once")
    refused(new(FAULT, AGED, end_offset=3), None, "begins migrating or migrated")


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (new(state=MIGRATED), "migrated needs its end offset"),
        (new(end_offset=4), "its end offset is set when it takes effect"),
        (new(FAULT, MIGRATED, end_offset=10, origin_end=11), "origin's end 11 is past the end offset 10"),
        (new(FAULT, MIGRATED, end_offset=-1), "a negative end offset"),
        (dataclasses.replace(new(), partition=PartitionId("a b", 0)), "not a Kafka topic name"),
        (dataclasses.replace(new(), partition=PartitionId("ok", -2)), "negative partition number"),
        (dataclasses.replace(new(), origin=" p"), "begins or ends with white space"),
    ],
)
def test_malformed_migrations_never_enter_the_tree(change: MigrationChange, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        change.well_formed()


def test_a_migration_ages_only_in_effect_with_its_origins_end_known() -> None:
    migrating = node(new())
    refused(MigrationChange.of(migrating, state=AGED, end_offset=10, origin_end=10), migrating,
            "it ages once in effect, not while migrating")  # fmt: skip
    away = node(new(FAULT, MIGRATED, end_offset=5000))
    with pytest.raises(ValueError, match="aged needs the origin's end"):
        MigrationChange.of(away, state=AGED).well_formed()


@pytest.mark.parametrize(
    ("state", "origin_end", "log_start", "why"),
    [
        (MIGRATED, 1200, 1200, "its origin's log starts at 1200, at or past the origin's end 1200"),
        (MIGRATED, 1200, 5000, "its origin's log starts at 5000, at or past the origin's end 1200"),
        (MIGRATED, 1200, None, None),  # not found there: no proof (a restarted broker), aging is final
        (MIGRATED, 1200, 1199, None),  # one record left below the end: readers may still want it
        (MIGRATED, 0, 0, "its origin's log starts at 0, at or past the origin's end 0"),  # it held none
        (MIGRATED, None, 10**9, None),  # a fault migration's origin not seen since: its end is unknown
        (AGED, 1200, 1200, None),
    ],
)
def test_a_migration_ages_when_its_origin_holds_nothing_below_its_end(
    state: MigrationState, origin_end: int | None, log_start: int | None, why: str | None
) -> None:
    migration = node(new(FAULT, MIGRATED, end_offset=1_001_200, origin_end=origin_end))
    assert ages(dataclasses.replace(migration, state=state), log_start) == why
