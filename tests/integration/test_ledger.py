"""The ledger on SQLite and on a throwaway PostgreSQL: schema by migration, history, replay."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from switchyard.keys import BindingKey
from switchyard.ledger import BindingEvent, ClusterEvent, Ledger, RoutingTxn
from switchyard.ledger import base as ledger_module
from switchyard.ledger.schema import metadata
from switchyard.model import Binding, BindingState, Cluster, ClusterState

T0 = datetime(2026, 11, 1, 12, 0, 0, 123000, tzinfo=UTC)
ORDERS = BindingKey.for_app("orders")
GROUP = BindingKey.group("a#b", "g@1")


def txn(
    txn_id: str, epoch: int, *events: BindingEvent | ClusterEvent, request_id: str | None = None
) -> RoutingTxn:
    at = T0 + timedelta(seconds=epoch)
    return RoutingTxn(txn_id, epoch, "user:test", f"change {epoch}", at, events, request_id)


def moved(
    key: BindingKey, old: str | None, new: str, epoch: int, state: BindingState = BindingState.ACTIVE
) -> BindingEvent:
    at = T0 + timedelta(seconds=epoch)
    old_state = BindingState.ACTIVE if old else None
    return BindingEvent(key, old, new, old_state, state, epoch, "user:test", f"change {epoch}", at)


def test_migrations_build_exactly_the_schema_the_code_uses(ledger: Ledger) -> None:
    with ledger.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    assert diff == []


def test_opening_twice_migrates_once(ledger_url: str) -> None:
    Ledger.open(ledger_url).close()
    again = Ledger.open(ledger_url)
    with again.engine.connect() as conn:
        versions = conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalars().all()
    assert versions == [_head()]
    again.close()


def test_the_head_the_ledger_checks_before_migrating_is_alembics() -> None:
    """An open skips Alembic when the schema is at :data:`HEAD`; a HEAD behind the newest migration
    would leave a new table unmade."""
    assert _head() == ledger_module.HEAD


def test_pending_changes_are_invisible_until_committed(ledger: Ledger) -> None:
    ledger.record_intent(txn("t1", 1, moved(ORDERS, None, "primary", 1)))
    assert [p.id for p in ledger.pending()] == ["t1"]
    assert ledger.history() == []
    assert ledger.state().bindings == {}
    ledger.mark_committed("t1", at=T0)
    assert ledger.pending() == []
    assert [e.epoch for e in ledger.history()] == [1]


def test_discard_removes_a_change_entirely(ledger: Ledger) -> None:
    ledger.record_intent(txn("t1", 1, moved(ORDERS, None, "primary", 1), request_id="req"))
    ledger.discard("t1")
    assert ledger.pending() == []
    assert ledger.requested("req") == []
    with ledger.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM binding_events").scalar() == 0


def test_history_and_replay(ledger: Ledger) -> None:
    cluster = ClusterEvent("primary", "p:9092", None, ClusterState.ACTIVE, 1, "user:test", "add", T0)
    changes = [
        txn("t1", 1, cluster),
        txn("t2", 2, moved(ORDERS, None, "primary", 2)),
        txn(
            "t3", 3, moved(ORDERS, "primary", "standby", 3, BindingState.BLOCKED), moved(GROUP, None, "dr", 3)
        ),
        txn("t4", 4, moved(ORDERS, "standby", "standby", 4)),
    ]
    for change in changes:
        ledger.record_intent(change)
        ledger.mark_committed(change.id, at=change.at)
    ledger.record_intent(txn("t5", 5, moved(ORDERS, "standby", "primary", 5)))  # never committed

    assert [e.epoch for e in ledger.history(ORDERS)] == [4, 3, 2]
    assert [str(e.key) for e in ledger.history(limit=2)] == ["orders", "a\\#b##g\\@1"]
    assert ledger.history(GROUP)[0].key == GROUP
    state = ledger.state()
    assert state.epoch == 4
    assert state.bindings == {
        ORDERS: Binding("standby", 4, BindingState.ACTIVE, T0 + timedelta(seconds=4), "user:test"),
        GROUP: Binding("dr", 3, BindingState.ACTIVE, T0 + timedelta(seconds=3), "user:test"),
    }
    assert state.clusters == {
        "primary": Cluster("primary", "p:9092", ClusterState.ACTIVE, 1, T0, "user:test")
    }
    assert [c.cluster_id for c in ledger.cluster_history()] == ["primary"]


def _head() -> str:
    """The newest migration revision, as the migrations folder says."""
    config = AlembicConfig()
    config.set_main_option("script_location", str(Path(ledger_module.__file__).with_name("migrations")))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head
