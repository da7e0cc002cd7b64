"""Every routing kind round-trips through its own description: a change's event is a ledger row and
back, the node it leaves is the node its path reads back, and a removal leaves none."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from switchyard.keys import BindingKey
from switchyard.ledger.kinds import (
    KINDS,
    AnyChange,
    BindingChange,
    ClusterChange,
    LinkChange,
    MigrationChange,
    RoutingSnapshot,
    kind_of,
)
from switchyard.model import (
    BindingState,
    Cluster,
    ClusterState,
    LinkState,
    MigrationMode,
    MigrationState,
    PartitionId,
)

AT = datetime(2026, 11, 24, 12, 0, 0, 123000, tzinfo=UTC)

CHANGES: list[AnyChange] = [
    ClusterChange("dc/1 west", 0, "b:9092", ClusterState.SHIELDED),
    BindingChange(BindingKey.for_app("orders"), 0, "primary"),
    BindingChange(BindingKey.group("a#b", "g@1/x"), 4, "standby", BindingState.BLOCKED),
    LinkChange("p2s/1", 0, "primary", "standby", ("orders.*",), ("tmp",), LinkState.PAUSED, "s2p"),
    MigrationChange(
        PartitionId("orders.v2", 11),
        0,
        "primary",
        "standby",
        MigrationMode.FAULT,
        MigrationState.MIGRATED,
        1_500_000,
        7,
        1_499_001,
        ignore_origin=True,
    ),
    MigrationChange(PartitionId("t", 0), 3, "a", "b", MigrationMode.SMOOTH, MigrationState.MIGRATING),
]
REMOVALS: list[AnyChange] = [
    BindingChange(BindingKey.topic("orders", "t"), 3, "primary", BindingState.UNBOUND),
    LinkChange("p2s", 3, "primary", "standby", (".*",), (), LinkState.DELETED),
    MigrationChange(PartitionId("t", 1), 3, "a", "b", MigrationMode.SMOOTH, MigrationState.CALLED_OFF),
]


def test_every_kind_is_in_the_list_once() -> None:
    assert len({kind.name for kind in KINDS}) == len(KINDS) == 4
    assert {type(c.kind) for c in CHANGES} == {type(k) for k in KINDS}


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c.kind.name)
def test_an_event_is_a_row_and_back_and_its_node_reads_back_from_its_path(change: AnyChange) -> None:
    kind = change.kind
    event = change.event(None, 7, "user:test", "why", AT)
    assert kind_of(event) is kind
    row: dict[str, Any] = kind.row("txn-1", event)
    assert row["txn_id"] == "txn-1"
    assert kind.event_from(row) == event
    assert kind.subject_of(event) == change.subject
    node = kind.left_by(event)
    assert node is not None
    assert node.epoch == 7
    assert kind.subject_at(kind.segment(change.subject)) == change.subject  # slashes in names too
    assert kind.decode(change.subject, node.to_json()) == node


@pytest.mark.parametrize("change", REMOVALS, ids=lambda c: c.kind.name)
def test_a_removal_leaves_no_node(change: AnyChange) -> None:
    event = change.event(None, 8, "user:test", "gone", AT)
    assert change.kind.left_by(event) is None
    assert change.kind.event_from(change.kind.row("txn-2", event)) == event


def test_a_bindings_folder_of_finer_keys_is_no_subject() -> None:
    kind = BindingChange(BindingKey.for_app("orders"), 0, "p").kind
    assert kind.subject_at("orders/instances") is None
    assert kind.subject_at("orders/elsewhere/x") is None


def test_a_topics_folder_of_partitions_is_no_subject() -> None:
    kind = CHANGES[-1].kind
    assert kind.subject_at("orders") is None
    assert kind.subject_at("orders/01") is None  # one number, one name
    assert kind.subject_at("orders/-1") is None
    assert kind.subject_at("orders/2") == PartitionId("orders", 2)


def test_the_counter_s_history_of_changes_stays_within_its_bytes() -> None:
    from switchyard.routing.layout import RECENT_BYTES, epoch_data, remember_changes

    at = datetime(2026, 11, 25, tzinfo=UTC)

    long_name = [["bindings", "a" * 120 + "/groups/" + "g" * 120]]
    data = epoch_data(0, "", at)
    for epoch in range(1, 1000):  # the bound is reached after ~330 epochs of these
        recent = remember_changes(data, epoch, f"txn-{epoch}", long_name * 3)
        data = epoch_data(epoch, f"txn-{epoch}", at, recent)
    assert RECENT_BYTES - 1024 < len(data) < RECENT_BYTES + 1024
    assert recent[-1][:2] == [999, "txn-999"]
    assert [e[0] for e in recent] == list(range(999 - len(recent) + 1, 1000))  # the latest, gapless
    assert remember_changes(data, 1000, "txn-1000", long_name * 2000) == []  # alone past the bound


@pytest.mark.parametrize("state", list(ClusterState))
def test_a_cluster_is_shielded_in_any_state_but_active_and_an_unknown_one_is_not(state: ClusterState) -> None:
    snapshot = RoutingSnapshot(3, clusters={"dr": Cluster("dr", "b:9092", state, 1, AT, "t")})
    assert snapshot.shielded("dr") is (state is not ClusterState.ACTIVE)
    assert not snapshot.shielded("elsewhere")
