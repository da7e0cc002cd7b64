"""The SQL ledger: every routing change that reached ZooKeeper, in order, with who made it and why.

A change is written here first as a *pending* transaction, then to ZooKeeper, then marked committed; a
change that never reached ZooKeeper is removed again (see :mod:`switchyard.routing.store`). Only
committed transactions count for history and for rebuilding the ZooKeeper tree.

The schema is created and upgraded by Alembic when the ledger is opened.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Connection, Engine, create_engine, delete, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from switchyard.errors import LedgerError
from switchyard.keys import BindingKey
from switchyard.ledger.schema import (
    binding_events,
    cluster_events,
    ledger_txns,
    link_events,
    reconciliation_runs,
    verification_partitions,
    verification_runs,
)
from switchyard.model import Binding, BindingState, Cluster, ClusterState, Link, LinkState

PENDING, COMMITTED = "pending", "committed"
_COUNTS = ("records", "missing", "extra", "mismatched", "misaligned")
_MIGRATIONS = Path(__file__).with_name("migrations")


@dataclass(frozen=True)
class BindingEvent:
    key: BindingKey
    from_cluster: str | None
    to_cluster: str
    from_state: BindingState | None
    to_state: BindingState
    epoch: int
    actor: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class ClusterEvent:
    cluster_id: str
    bootstrap: str
    from_state: ClusterState | None
    to_state: ClusterState
    epoch: int
    actor: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class LinkEvent:
    link_id: str
    source: str
    target: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    reverse_of: str | None
    from_state: LinkState | None
    to_state: LinkState
    epoch: int
    actor: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class RoutingTxn:
    """One routing change as the ledger records it: several keys and clusters under one epoch."""

    id: str
    epoch: int
    actor: str
    reason: str
    at: datetime
    bindings: tuple[BindingEvent, ...] = ()
    clusters: tuple[ClusterEvent, ...] = ()
    request_id: str | None = None
    links: tuple[LinkEvent, ...] = ()


@dataclass(frozen=True)
class TxnRecord:
    id: str
    epoch: int
    status: str
    created_at: datetime


@dataclass(frozen=True)
class LedgerState:
    """The routing tree as the committed history says it must be."""

    epoch: int
    bindings: dict[BindingKey, Binding]
    clusters: dict[str, Cluster]
    links: dict[str, Link]


class Ledger:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @classmethod
    def open(cls, url: str) -> Ledger:
        """Connect and bring the schema to the newest revision."""
        parsed = make_url(url)
        if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        ledger = cls(create_engine(url))
        ledger.migrate()
        return ledger

    def migrate(self) -> None:
        config = AlembicConfig()
        config.set_main_option("script_location", str(_MIGRATIONS))
        with self._connection() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def close(self) -> None:
        self.engine.dispose()

    def record_intent(self, txn: RoutingTxn) -> None:
        """Write the change as pending, in one SQL transaction, before ZooKeeper is touched."""
        with self._connection() as conn:
            conn.execute(
                insert(ledger_txns).values(
                    id=txn.id,
                    epoch=txn.epoch,
                    status=PENDING,
                    request_id=txn.request_id,
                    actor=txn.actor,
                    reason=txn.reason,
                    created_at=txn.at,
                )
            )
            if txn.bindings:
                conn.execute(insert(binding_events), [_row(txn.id, e) for e in txn.bindings])
            if txn.clusters:
                conn.execute(insert(cluster_events), [_row(txn.id, e) for e in txn.clusters])
            if txn.links:
                conn.execute(insert(link_events), [_row(txn.id, e) for e in txn.links])

    def mark_committed(self, txn_id: str, *, at: datetime) -> None:
        with self._connection() as conn:
            conn.execute(
                update(ledger_txns)
                .where(ledger_txns.c.id == txn_id, ledger_txns.c.status == PENDING)
                .values(status=COMMITTED, committed_at=at)
            )

    def discard(self, txn_id: str) -> None:
        """Remove a change that never reached ZooKeeper, events and all."""
        with self._connection() as conn:
            conn.execute(delete(binding_events).where(binding_events.c.txn_id == txn_id))
            conn.execute(delete(cluster_events).where(cluster_events.c.txn_id == txn_id))
            conn.execute(delete(link_events).where(link_events.c.txn_id == txn_id))
            conn.execute(
                delete(ledger_txns).where(ledger_txns.c.id == txn_id, ledger_txns.c.status == PENDING)
            )

    def pending(self) -> list[TxnRecord]:
        return self._txns(ledger_txns.c.status == PENDING)

    def requested(self, request_id: str) -> list[TxnRecord]:
        """The attempts recorded for one idempotency key (at most one of them committed)."""
        return self._txns(ledger_txns.c.request_id == request_id)

    def _txns(self, condition: Any) -> list[TxnRecord]:
        columns = (ledger_txns.c.id, ledger_txns.c.epoch, ledger_txns.c.status, ledger_txns.c.created_at)
        with self._connection() as conn:
            rows = conn.execute(select(*columns).where(condition).order_by(ledger_txns.c.epoch))
            return [TxnRecord(r.id, r.epoch, r.status, _utc(r.created_at)) for r in rows]

    def history(self, key: BindingKey | None = None, *, limit: int = 100) -> list[BindingEvent]:
        """Committed binding events, newest first; of one key, or of all."""
        query = _committed(binding_events).order_by(binding_events.c.epoch.desc(), binding_events.c.id.desc())
        if key is not None:
            query = query.where(binding_events.c.binding_key == str(key))
        with self._connection() as conn:
            return [_binding_event(r._mapping) for r in conn.execute(query.limit(limit))]

    def cluster_history(self, cluster_id: str | None = None, *, limit: int = 100) -> list[ClusterEvent]:
        query = _committed(cluster_events).order_by(cluster_events.c.epoch.desc(), cluster_events.c.id.desc())
        if cluster_id is not None:
            query = query.where(cluster_events.c.cluster_id == cluster_id)
        with self._connection() as conn:
            return [_cluster_event(r._mapping) for r in conn.execute(query.limit(limit))]

    def link_history(self, link_id: str | None = None, *, limit: int = 100) -> list[LinkEvent]:
        query = _committed(link_events).order_by(link_events.c.epoch.desc(), link_events.c.id.desc())
        if link_id is not None:
            query = query.where(link_events.c.link_id == link_id)
        with self._connection() as conn:
            return [_link_event(r._mapping) for r in conn.execute(query.limit(limit))]

    def state(self) -> LedgerState:
        """Replay the committed history into the tree it describes."""
        bindings: dict[BindingKey, Binding] = {}
        clusters: dict[str, Cluster] = {}
        epoch = 0
        with self._connection() as conn:
            for row in conn.execute(_committed(binding_events).order_by(binding_events.c.epoch)):
                e = _binding_event(row._mapping)
                bindings[e.key] = Binding(e.to_cluster, e.epoch, e.to_state, e.at, e.actor)
                epoch = max(epoch, e.epoch)
            for row in conn.execute(_committed(cluster_events).order_by(cluster_events.c.epoch)):
                c = _cluster_event(row._mapping)
                clusters[c.cluster_id] = Cluster(
                    c.cluster_id, c.bootstrap, c.to_state, c.epoch, c.at, c.actor
                )
                epoch = max(epoch, c.epoch)
            links: dict[str, Link] = {}
            for row in conn.execute(_committed(link_events).order_by(link_events.c.epoch)):
                k = _link_event(row._mapping)
                epoch = max(epoch, k.epoch)
                if k.to_state is LinkState.DELETED:
                    links.pop(k.link_id, None)
                    continue
                links[k.link_id] = Link(
                    k.link_id, k.source, k.target, k.include, k.exclude, k.to_state, k.epoch, k.at, k.actor,
                    k.reverse_of,
                )  # fmt: skip
        return LedgerState(epoch, bindings, clusters, links)

    # ---- verification and reconciliation

    def record_verification(
        self, run_id: str, link_id: str, result: dict[str, Any], *, verdict: str, started_at: datetime,
        finished_at: datetime, master: str,
    ) -> None:  # fmt: skip
        """A verification job's findings: totals per run, counts and first examples per partition."""
        partitions = result["partitions"]
        groups = result.get("groups", [])
        totals = {name: sum(p[name] for p in partitions) for name in _COUNTS}
        with self._connection() as conn:
            conn.execute(
                insert(verification_runs).values(
                    id=run_id,
                    link_id=link_id,
                    started_at=started_at,
                    finished_at=finished_at,
                    verdict=verdict,
                    groups_checked=len(groups),
                    groups_wrong=sum(1 for g in groups if not g["ok"]),
                    master=master,
                    report=json.dumps(result),
                    **totals,
                )
            )
            if partitions:
                conn.execute(
                    insert(verification_partitions),
                    [
                        {
                            "run_id": run_id,
                            "topic": p["topic"],
                            "partition": p["partition"],
                            "source_from": p["source_from"],
                            "source_to": p["source_to"],
                            "examples": json.dumps(p["examples"]),
                            **{n: p[n] for n in _COUNTS},
                        }
                        for p in partitions
                    ],
                )

    def verification(self, run_id: str) -> dict[str, Any] | None:
        """A recorded verification: its row, with the findings document decoded."""
        return self._run(verification_runs, run_id)

    def record_reconciliation(
        self, run_id: str, link_id: str, result: dict[str, Any], *, parquet: str, started_at: datetime,
        finished_at: datetime,
    ) -> None:  # fmt: skip
        records = sum(e["records"] for e in result.get("exported", []))
        with self._connection() as conn:
            conn.execute(
                insert(reconciliation_runs).values(
                    id=run_id,
                    link_id=link_id,
                    started_at=started_at,
                    finished_at=finished_at,
                    parquet=parquet,
                    records=records,
                    report=json.dumps(result),
                )
            )

    def reconciliation(self, run_id: str) -> dict[str, Any] | None:
        return self._run(reconciliation_runs, run_id)

    def _run(self, table: Any, run_id: str) -> dict[str, Any] | None:
        with self._connection() as conn:
            row = conn.execute(select(table).where(table.c.id == run_id)).first()
        return {**row._mapping, "report": json.loads(row.report)} if row else None

    def claim_republish(self, run_id: str, *, at: datetime) -> bool:
        """Mark a reconciliation as being republished; False when it already was (never twice)."""
        with self._connection() as conn:
            claimed = conn.execute(
                update(reconciliation_runs)
                .where(reconciliation_runs.c.id == run_id, reconciliation_runs.c.republished_at.is_(None))
                .values(republished_at=at)
            )
        return claimed.rowcount == 1

    def finish_republish(self, run_id: str, records: int) -> None:
        with self._connection() as conn:
            conn.execute(
                update(reconciliation_runs)
                .where(reconciliation_runs.c.id == run_id)
                .values(republished_records=records)
            )

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except SQLAlchemyError as exc:
            raise LedgerError(f"ledger {self.engine.url.render_as_string()}: {exc}") from exc


def _committed(table: Any) -> Any:
    return (
        select(table)
        .join(ledger_txns, ledger_txns.c.id == table.c.txn_id)
        .where(ledger_txns.c.status == COMMITTED)
    )


def _utc(value: datetime) -> datetime:
    """SQLite hands back naive datetimes; everything the ledger stores is UTC."""
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _row(txn_id: str, event: BindingEvent | ClusterEvent | LinkEvent) -> dict[str, Any]:
    """An event as a table row: its fields by name, the binding key in its text form, lists as JSON."""
    row: dict[str, Any] = {f.name: getattr(event, f.name) for f in fields(event)}
    if isinstance(event, BindingEvent):
        row["binding_key"] = str(row.pop("key"))
    if isinstance(event, LinkEvent):
        row["include"], row["exclude"] = json.dumps(event.include), json.dumps(event.exclude)
    return {"txn_id": txn_id, **row}


def _binding_event(row: Any) -> BindingEvent:
    return BindingEvent(
        key=BindingKey.parse(row["binding_key"]),
        from_cluster=row["from_cluster"],
        to_cluster=row["to_cluster"],
        from_state=BindingState(row["from_state"]) if row["from_state"] else None,
        to_state=BindingState(row["to_state"]),
        epoch=row["epoch"],
        actor=row["actor"],
        reason=row["reason"],
        at=_utc(row["at"]),
    )


def _cluster_event(row: Any) -> ClusterEvent:
    return ClusterEvent(
        cluster_id=row["cluster_id"],
        bootstrap=row["bootstrap"],
        from_state=ClusterState(row["from_state"]) if row["from_state"] else None,
        to_state=ClusterState(row["to_state"]),
        epoch=row["epoch"],
        actor=row["actor"],
        reason=row["reason"],
        at=_utc(row["at"]),
    )


def _link_event(row: Any) -> LinkEvent:
    return LinkEvent(
        link_id=row["link_id"],
        source=row["source"],
        target=row["target"],
        include=tuple(json.loads(row["include"])),
        exclude=tuple(json.loads(row["exclude"])),
        reverse_of=row["reverse_of"],
        from_state=LinkState(row["from_state"]) if row["from_state"] else None,
        to_state=LinkState(row["to_state"]),
        epoch=row["epoch"],
        actor=row["actor"],
        reason=row["reason"],
        at=_utc(row["at"]),
    )
