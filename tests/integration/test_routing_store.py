"""Fenced compare-and-set on real ZooKeeper, with the ledger on SQLite and on PostgreSQL."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

from switchyard.config import Config
from switchyard.errors import BindingConflict, BindingRefused, LedgerError, RoutingError
from switchyard.keys import BindingKey
from switchyard.ledger import Ledger
from switchyard.ledger.kinds import MIGRATIONS
from switchyard.mirror.control import delete_link
from switchyard.model import (
    BindingState,
    ClusterState,
    LinkState,
    MigrationMode,
    MigrationState,
    PartitionId,
)
from switchyard.routing import BindingChange, LinkChange, MigrationChange, RoutingStore
from switchyard.routing.rebuild import rebuild
from switchyard.routing.zk import connect, disconnect

ORDERS = BindingKey.for_app("orders")
HOST7 = BindingKey.instance("orders", "host-7")
PAYMENTS = BindingKey.topic("orders", "payments")
BILLING = BindingKey.group("orders", "billing")
ACTOR = "user:test"


def bind(store: RoutingStore, key: BindingKey, cluster: str, **kw: object) -> int:
    return store.set_binding(key, cluster, actor=ACTOR, reason="test", **kw)  # type: ignore[arg-type]


def crash(*_: object) -> str:
    raise SystemExit("process killed between the ledger write and the ZooKeeper write")


def test_concurrent_compare_and_set_one_wins_the_other_gets_the_named_conflict(
    store: RoutingStore, stack_config: Config
) -> None:
    """Two writers on two ZooKeeper sessions, fenced on the same epoch, released at the same instant."""
    start = bind(store, ORDERS, "primary")
    other_zk = connect(stack_config)
    other = RoutingStore(other_zk, store.layout.root, store.ledger)
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def switch(name: str, routing: RoutingStore, cluster: str) -> None:
        barrier.wait()
        try:
            outcomes[name] = routing.apply(
                [BindingChange(ORDERS, start, cluster)], actor=f"user:{name}", reason="race"
            )
        except BindingConflict as exc:
            outcomes[name] = exc

    try:
        threads = [
            threading.Thread(target=switch, args=("a", store, "standby")),
            threading.Thread(target=switch, args=("b", other, "standby")),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        disconnect(other_zk)

    wins = [v for v in outcomes.values() if isinstance(v, int)]
    conflicts = [v for v in outcomes.values() if isinstance(v, BindingConflict)]
    assert len(wins) == 1, outcomes
    assert len(conflicts) == 1, outcomes
    assert conflicts[0].key == "orders"
    assert (conflicts[0].expected, conflicts[0].actual) == (start, wins[0])
    assert f"expected epoch {start}, but it is at epoch {wins[0]}" in str(conflicts[0])
    assert [e.epoch for e in store.ledger.history(ORDERS)] == [wins[0], start]


def test_several_keys_change_atomically_under_one_epoch(store: RoutingStore) -> None:
    e_orders = bind(store, ORDERS, "primary")
    e_host = bind(store, HOST7, "primary")
    epoch = store.apply(
        [
            BindingChange(ORDERS, e_orders, "standby", BindingState.BLOCKED),
            BindingChange(HOST7, e_host, "standby", BindingState.BLOCKED),
            BindingChange(BILLING, 0, "standby"),
        ],
        actor=ACTOR,
        reason="block",
    )
    snapshot = store.snapshot()
    assert snapshot.epoch == epoch
    assert {k: (b.cluster, b.state, b.epoch) for k, b in snapshot.bindings.items()} == {
        ORDERS: ("standby", BindingState.BLOCKED, epoch),
        HOST7: ("standby", BindingState.BLOCKED, epoch),
        BILLING: ("standby", BindingState.ACTIVE, epoch),
    }
    assert sorted(str(e.key) for e in store.ledger.history() if e.epoch == epoch) == [
        "orders",
        "orders##billing",
        "orders@host-7",
    ]


def test_one_stale_fence_changes_nothing_at_all(store: RoutingStore) -> None:
    e_orders = bind(store, ORDERS, "primary")
    bind(store, HOST7, "primary")
    before = store.snapshot()
    history = store.ledger.history()
    with pytest.raises(BindingConflict, match="orders@host-7: expected epoch 0"):
        store.apply(
            [BindingChange(ORDERS, e_orders, "standby"), BindingChange(HOST7, 0, "standby")],
            actor=ACTOR,
            reason="stale",
        )
    assert store.snapshot() == before
    assert store.ledger.history() == history
    assert store.ledger.pending() == []


def test_epochs_only_grow_and_every_node_carries_its_change_epoch(store: RoutingStore) -> None:
    epochs = [store.epoch()]
    for cluster in ["primary", "standby", "primary", "standby"]:
        epochs.append(bind(store, ORDERS, cluster))
    epochs.append(bind(store, PAYMENTS, "standby"))
    assert epochs == sorted(set(epochs))
    assert store.binding(ORDERS).epoch == epochs[-2]  # type: ignore[union-attr]
    assert store.binding(PAYMENTS).epoch == epochs[-1]  # type: ignore[union-attr]
    assert store.ledger.state().epoch == store.epoch() == epochs[-1]


def test_a_request_id_makes_a_retry_harmless(store: RoutingStore) -> None:
    first = store.apply(
        [BindingChange(ORDERS, 0, "primary")], actor=ACTOR, reason="r", request_id="wf-1/flip"
    )
    again = store.apply(
        [BindingChange(ORDERS, 0, "primary")], actor=ACTOR, reason="r", request_id="wf-1/flip"
    )
    assert again == first
    assert len(store.ledger.history(ORDERS)) == 1


def test_refusals(store: RoutingStore) -> None:
    with pytest.raises(BindingRefused, match="cluster 'dr' is not registered"):
        bind(store, ORDERS, "dr")
    bind(store, ORDERS, "primary")
    with pytest.raises(BindingRefused, match="already active on primary"):
        bind(store, ORDERS, "primary")
    store.set_cluster_state("standby", ClusterState.SHIELDED, actor=ACTOR, reason="maintenance")
    with pytest.raises(BindingRefused, match="'standby' is shielded and takes no new traffic"):
        bind(store, ORDERS, "standby")
    assert bind(store, ORDERS, "standby", force=True) > 0
    with pytest.raises(BindingRefused, match="more than once"):
        store.apply(
            [BindingChange(HOST7, 0, "primary"), BindingChange(HOST7, 0, "standby")], actor=ACTOR, reason=""
        )


def test_blocking_in_place_is_allowed_on_a_shielded_cluster(store: RoutingStore) -> None:
    epoch = bind(store, ORDERS, "standby")
    store.set_cluster_state("standby", ClusterState.DOWN, actor=ACTOR, reason="dead")
    bind(store, ORDERS, "standby", state=BindingState.BLOCKED, expected_epoch=epoch)
    assert store.binding(ORDERS).state is BindingState.BLOCKED  # type: ignore[union-attr]


def test_a_failed_zookeeper_write_leaves_no_ledger_row(store: RoutingStore) -> None:
    bind(store, ORDERS, "primary")
    rows = store.ledger.history()
    with pytest.raises(BindingConflict):
        store.apply([BindingChange(ORDERS, 0, "standby")], actor=ACTOR, reason="stale")
    assert store.ledger.history() == rows
    assert store.ledger.pending() == []


def test_a_failed_ledger_write_leaves_no_zookeeper_change(store: RoutingStore) -> None:
    bind(store, ORDERS, "primary")
    before = store.snapshot()
    with store.ledger.engine.begin() as conn:  # the ledger breaks for real: its events table is gone
        conn.execute(text("ALTER TABLE binding_events RENAME TO binding_events_gone"))
    try:
        with pytest.raises(LedgerError, match="binding_events"):
            bind(store, ORDERS, "standby")
        assert store.snapshot() == before
    finally:
        with store.ledger.engine.begin() as conn:
            conn.execute(text("ALTER TABLE binding_events_gone RENAME TO binding_events"))


def test_a_crash_after_the_zookeeper_write_is_settled_as_committed(
    store: RoutingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost(*_: object, **__: object) -> None:
        raise LedgerError("database went away")

    monkeypatch.setattr(store.ledger, "mark_committed", lost)
    with pytest.raises(LedgerError):
        bind(store, ORDERS, "primary")
    monkeypatch.undo()
    assert store.binding(ORDERS).cluster == "primary"  # type: ignore[union-attr]
    assert [p.epoch for p in store.ledger.pending()] == [store.epoch()]
    assert store.recover(everything=True)[0][1] == "committed"
    assert store.ledger.pending() == []
    assert store.ledger.state().bindings == store.snapshot().bindings


def test_a_crash_before_the_zookeeper_write_is_settled_as_aborted_for_good(
    store: RoutingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    intents = []
    original = store._commit

    def record_then_crash(*args: object) -> str:
        intents.append(args)
        return crash()

    monkeypatch.setattr(store, "_commit", record_then_crash)
    with pytest.raises(SystemExit):
        bind(store, ORDERS, "primary")
    monkeypatch.undo()
    assert len(store.ledger.pending()) == 1
    assert store.recover(everything=True)[0][1] == "aborted"
    assert store.ledger.pending() == []
    assert store.ledger.history() == []
    # The dead writer's transaction can never land afterwards: its outcome marker says aborted.
    with pytest.raises(RoutingError, match="settled as aborted"):
        original(*intents[0])  # type: ignore[arg-type]
    assert store.binding(ORDERS) is None


def test_young_pending_rows_are_left_to_their_writer(
    store: RoutingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "_commit", crash)
    with pytest.raises(SystemExit):
        bind(store, ORDERS, "primary")
    monkeypatch.undo()
    store.settle_after = timedelta(minutes=5)
    assert store.recover() == []
    assert len(store.ledger.pending()) == 1


def test_rebuild_from_the_ledger_restores_the_tree_exactly(store: RoutingStore) -> None:
    e1 = bind(store, ORDERS, "primary")
    bind(store, HOST7, "standby")
    bind(store, BindingKey.instance("..", "a/b"), "standby")
    store.apply(
        [BindingChange(ORDERS, e1, "standby", BindingState.BLOCKED), BindingChange(BILLING, 0, "primary")],
        actor="workflow:switchover-orders/run-1",
        reason="block",
    )
    store.set_cluster_state("primary", ClusterState.SHIELDED, actor=ACTOR, reason="drain")
    before = store.snapshot()

    store.zk.delete(store.layout.root, recursive=True)  # ZooKeeper lost everything
    report = rebuild(store)
    assert (report.counts["bindings"], report.counts["clusters"], report.epoch) == (4, 2, before.epoch)
    assert store.snapshot() == before
    assert rebuild(store).unchanged


def test_rebuild_removes_what_the_ledger_does_not_know(store: RoutingStore) -> None:
    bind(store, ORDERS, "primary")
    bind(store, HOST7, "primary")
    wanted = store.snapshot()
    store.zk.set(store.layout.binding(ORDERS), b"")  # an unlogged hand edit
    stray = store.binding(HOST7)
    assert stray is not None
    store.zk.create(store.layout.binding(PAYMENTS), stray.to_json(), makepath=True)
    report = rebuild(store, dry_run=True)
    assert report.removed == ["orders#payments"]
    assert not report.unchanged
    assert PAYMENTS in store.snapshot().bindings  # dry run wrote nothing
    rebuild(store)
    assert store.snapshot() == wanted


def test_rebuild_refuses_to_roll_routing_back(store: RoutingStore, ledger_url: str) -> None:
    bind(store, ORDERS, "primary")
    behind = Ledger.open(ledger_url)
    with behind.engine.begin() as conn:
        conn.execute(text("DELETE FROM binding_events"))
    behind.close()
    with pytest.raises(BindingRefused, match="would roll routing back"):
        rebuild(store)


def test_links_are_fenced_recorded_and_final_once_promoted(store: RoutingStore) -> None:
    created = store.create_link(
        "p2s",
        "primary",
        "standby",
        include=["orders\\..*"],
        exclude=["orders\\.tmp"],
        actor=ACTOR,
        reason="t",
    )
    link = store.link("p2s")
    assert link is not None
    assert (link.state, link.epoch, link.include, link.exclude) == (
        LinkState.RUNNING, created, ("orders\\..*",), ("orders\\.tmp",)
    )  # fmt: skip
    assert link.copies("orders.a")
    assert not link.copies("orders.tmp")
    assert not link.copies("xorders.a")
    assert store.snapshot().links == {"p2s": link}

    with pytest.raises(BindingRefused, match="link p2s: already running"):
        store.set_link_state("p2s", LinkState.RUNNING, actor=ACTOR, reason="t")
    paused = store.set_link_state("p2s", LinkState.PAUSED, actor=ACTOR, reason="drill")
    with pytest.raises(BindingConflict, match="link p2s: expected epoch"):
        store.apply([LinkChange.of(link, LinkState.PROMOTED)], actor=ACTOR, reason="stale fence")

    # a saga's flip and promote in one change: one epoch for both
    fresh = store.link("p2s")
    assert fresh is not None
    epoch = store.apply(
        [BindingChange(ORDERS, 0, "standby"), LinkChange.of(fresh, LinkState.PROMOTED)],
        actor=ACTOR, reason="switchover",
    )  # fmt: skip
    assert store.binding(ORDERS).epoch == epoch  # type: ignore[union-attr]
    assert store.link("p2s").state is LinkState.PROMOTED  # type: ignore[union-attr]
    with pytest.raises(BindingRefused, match="promoted links are final"):
        store.set_link_state("p2s", LinkState.RUNNING, actor=ACTOR, reason="t")
    with pytest.raises(BindingRefused, match="same cluster"):
        store.create_link("loop", "primary", "primary", actor=ACTOR, reason="t")
    with pytest.raises(BindingRefused, match="'elsewhere' is not registered"):
        store.create_link("far", "primary", "elsewhere", actor=ACTOR, reason="t")

    history = store.ledger.link_history("p2s")
    assert [(e.epoch, e.from_state, e.to_state) for e in history] == [
        (epoch, LinkState.PAUSED, LinkState.PROMOTED),
        (paused, LinkState.RUNNING, LinkState.PAUSED),
        (created, None, LinkState.RUNNING),
    ]


def test_a_link_another_reverses_is_deleted_only_after_it_or_forced(
    store: RoutingStore, stack_config: Config
) -> None:
    """The offsets clients see through a reverse link are presented through the link it reverses: that
    one goes last (or forced), not silently first."""
    store.create_link("p2s", "primary", "standby", actor=ACTOR, reason="t")
    store.set_link_state("p2s", LinkState.PROMOTED, actor=ACTOR, reason="switchover")
    store.create_link("s2p", "standby", "primary", reverse_of="p2s", actor=ACTOR, reason="t")
    store.set_link_state("s2p", LinkState.PROMOTED, actor=ACTOR, reason="switchback")
    with pytest.raises(BindingRefused, match="link p2s is reversed by s2p: clients there see offsets"):
        delete_link(stack_config, store, "p2s", actor=ACTOR, reason="tidy")
    delete_link(stack_config, store, "s2p", actor=ACTOR, reason="tidy")
    delete_link(stack_config, store, "p2s", actor=ACTOR, reason="tidy")
    assert store.snapshot().links == {}


def test_rebuild_restores_links(store: RoutingStore) -> None:
    store.create_link("p2s", "primary", "standby", actor=ACTOR, reason="t")
    store.set_link_state("p2s", LinkState.PAUSED, actor=ACTOR, reason="t")
    before = store.snapshot()
    store.zk.delete(store.layout.root, recursive=True)
    report = rebuild(store)
    assert report.counts["links"] == 1
    assert store.snapshot() == before


def test_partition_migrations_are_fenced_recorded_in_the_snapshot_and_rebuilt(store: RoutingStore) -> None:
    orders1, orders2 = PartitionId("orders", 1), PartitionId("orders", 2)
    begun = store.apply(
        [
            MigrationChange(orders1, 0, "primary", "standby", MigrationMode.SMOOTH, MigrationState.MIGRATING),
            MigrationChange(
                orders2,
                0,
                "primary",
                "standby",
                MigrationMode.FAULT,
                MigrationState.MIGRATED,
                end_offset=9000,
                ignore_origin=True,
            ),
        ],
        actor=ACTOR,
        reason="move two partitions",
    )
    migrating = store.migration(orders1)
    assert migrating is not None
    assert (migrating.state, migrating.end_offset, migrating.epoch) == (MigrationState.MIGRATING, None, begun)
    with pytest.raises(BindingConflict, match=re.escape("migration of orders[1]: expected epoch 0")):
        store.apply(
            [
                MigrationChange(
                    orders1, 0, "primary", "standby", MigrationMode.SMOOTH, MigrationState.MIGRATING
                )
            ],
            actor=ACTOR,
            reason="a second saga",
        )
    took = store.apply(
        [MigrationChange.of(migrating, state=MigrationState.MIGRATED, end_offset=1234, origin_end=1234)],
        actor=ACTOR,
        reason="its end read",
    )
    snapshot = store.snapshot()
    assert set(snapshot.migrations) == {orders1, orders2}
    assert snapshot.migrations[orders1].end_offset == 1234
    assert snapshot.migrations[orders1].epoch == took
    assert snapshot.migrations[orders2].ignore_origin
    history = store.ledger.events(MIGRATIONS, orders1)
    assert [(e.from_state, e.to_state) for e in history] == [
        (MigrationState.MIGRATING, MigrationState.MIGRATED),
        (None, MigrationState.MIGRATING),
    ]
    assert store.ledger.events(MIGRATIONS, PartitionId("orders", 3)) == []
    assert store.ledger.state().migrations == snapshot.migrations
    store.zk.delete(store.layout.root, recursive=True)
    report = rebuild(store)
    assert report.counts["migrations"] == 2
    assert store.snapshot() == snapshot


def test_names_and_patterns_are_checked_where_they_enter(store: RoutingStore) -> None:
    for bad, problem in (
        (BindingKey.for_app("orders "), "the AppID 'orders ' begins or ends with white space"),
        (BindingKey.group("orders", "bill\ning"), "the group name 'bill\\ning' has an invisible character"),
    ):
        with pytest.raises(BindingRefused, match=re.escape(problem)):
            bind(store, bad, "primary")
    with pytest.raises(BindingRefused, match=r"pattern 'mir\[\(' is not a regular expression"):
        store.create_link("bad", "primary", "standby", include=["mir[("], actor=ACTOR, reason="t")
    with pytest.raises(BindingRefused, match="a link id is empty"):
        store.create_link("", "primary", "standby", actor=ACTOR, reason="t")
    with pytest.raises(BindingRefused, match="a cluster id ' dr' begins or ends"):
        store.register_cluster(" dr", "dr:9092", actor=ACTOR, reason="t")
    assert store.snapshot().links == {}
    assert store.ledger.link_history("bad") == []


def test_a_deleted_link_is_gone_from_the_tree_the_ledger_and_a_rebuild(store: RoutingStore) -> None:
    store.create_link("p2s", "primary", "standby", actor=ACTOR, reason="t")
    link = store.link("p2s")
    assert link is not None
    store.set_link_state("p2s", LinkState.PAUSED, actor=ACTOR, reason="t")
    with pytest.raises(BindingConflict, match="link p2s: expected epoch"):  # fenced like every change
        store.apply([LinkChange.of(link, LinkState.DELETED)], actor=ACTOR, reason="stale")
    deleted = store.set_link_state("p2s", LinkState.DELETED, actor=ACTOR, reason="done with it")
    assert store.link("p2s") is None
    assert "p2s" not in store.snapshot().links
    assert store.ledger.link_history("p2s")[0].to_state is LinkState.DELETED  # newest first
    assert "p2s" not in store.ledger.state().links
    with pytest.raises(BindingRefused, match="link 'p2s' does not exist"):
        store.set_link_state("p2s", LinkState.DELETED, actor=ACTOR, reason="again")
    assert rebuild(store).counts["links"] == 0
    recreated = store.create_link("p2s", "standby", "primary", actor=ACTOR, reason="a new link, same id")
    assert recreated > deleted
    again = store.link("p2s")
    assert again is not None
    assert (again.source, again.target) == ("standby", "primary")


def test_an_unbound_key_is_gone_from_the_tree_the_ledger_and_a_rebuild(store: RoutingStore) -> None:
    """What a compensation does for a key a saga blocked that was not bound before: the key resolves as
    if never bound again, and its application's binding (the parent node) stays."""
    store.set_binding(ORDERS, "primary", actor=ACTOR, reason="t")
    blocked = store.set_binding(HOST7, "primary", BindingState.BLOCKED, actor=ACTOR, reason="t")
    with pytest.raises(BindingConflict, match="expected epoch"):  # fenced like every change
        store.apply([BindingChange(HOST7, 1, "primary", BindingState.UNBOUND)], actor=ACTOR, reason="stale")
    store.apply([BindingChange(HOST7, blocked, "primary", BindingState.UNBOUND)], actor=ACTOR, reason="undo")
    assert store.binding(HOST7) is None
    assert store.binding(ORDERS) is not None
    assert HOST7 not in store.snapshot().bindings
    assert store.ledger.history(HOST7)[0].to_state is BindingState.UNBOUND  # newest first
    assert HOST7 not in store.ledger.state().bindings
    with pytest.raises(BindingRefused, match="orders@host-7: not bound"):
        store.apply([BindingChange(HOST7, 0, "primary", BindingState.UNBOUND)], actor=ACTOR, reason="again")
    assert rebuild(store).unchanged
    store.set_binding(HOST7, "standby", expected_epoch=0, actor=ACTOR, reason="bound anew")
    assert store.binding(HOST7).cluster == "standby"  # type: ignore[union-attr]
