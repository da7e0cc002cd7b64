"""Routing changes in the ledger: every change that reached ZooKeeper, in order, with who made it and why.

A change is written here first as a *pending* transaction, then to ZooKeeper, then marked committed; a
change that never reached ZooKeeper is removed again (see :mod:`switchyard.routing.store`). Only
committed transactions count for history and for rebuilding the ZooKeeper tree.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from itertools import groupby
from typing import Any

from sqlalchemy import delete, insert, select, update

from switchyard.keys import BindingKey
from switchyard.ledger.base import LedgerBase, utc
from switchyard.ledger.kinds import (
    BINDINGS,
    CLUSTERS,
    KINDS,
    LINKS,
    AnyKind,
    BindingEvent,
    ClusterEvent,
    LinkEvent,
    RoutingEvent,
    RoutingSnapshot,
    kind_of,
)
from switchyard.ledger.schema import ledger_txns

PENDING, COMMITTED = "pending", "committed"


@dataclass(frozen=True)
class RoutingTxn:
    """One routing change as the ledger records it: several subjects, of any kinds, under one epoch."""

    id: str
    epoch: int
    actor: str
    reason: str
    at: datetime
    events: tuple[RoutingEvent, ...] = ()
    request_id: str | None = None


@dataclass(frozen=True)
class TxnRecord:
    id: str
    epoch: int
    status: str
    created_at: datetime


class RoutingRecords(LedgerBase):
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
            for kind, events in groupby(sorted(txn.events, key=_kind_order), key=kind_of):
                conn.execute(insert(kind.table), [kind.row(txn.id, e) for e in events])

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
            for kind in KINDS:
                conn.execute(delete(kind.table).where(kind.table.c.txn_id == txn_id))
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
            return [TxnRecord(r.id, r.epoch, r.status, utc(r.created_at)) for r in rows]

    def history(self, key: BindingKey | None = None, *, limit: int = 100) -> list[BindingEvent]:
        """Committed binding events, newest first; of one key, or of all."""
        return self.events(BINDINGS, key, limit=limit)

    def cluster_history(self, cluster_id: str | None = None, *, limit: int = 100) -> list[ClusterEvent]:
        return self.events(CLUSTERS, cluster_id, limit=limit)

    def link_history(self, link_id: str | None = None, *, limit: int = 100) -> list[LinkEvent]:
        return self.events(LINKS, link_id, limit=limit)

    def events(self, kind: AnyKind, subject: Any = None, *, limit: int = 100) -> list[Any]:
        """Committed events of one kind, newest first; of one subject, or of all."""
        table = kind.table
        query = _committed(table).order_by(table.c.epoch.desc(), table.c.id.desc())
        if subject is not None:
            query = query.where(kind.matches(subject))
        with self._connection() as conn:
            return [kind.event_from(r._mapping) for r in conn.execute(query.limit(limit))]

    def state(self) -> RoutingSnapshot:
        """Replay the committed history into the tree it describes."""
        tree = RoutingSnapshot(0)
        epoch = 0
        with self._connection() as conn:
            for kind in KINDS:
                nodes = tree.nodes(kind)
                for row in conn.execute(_committed(kind.table).order_by(kind.table.c.epoch)):
                    event = kind.event_from(row._mapping)
                    epoch = max(epoch, event.epoch)
                    subject, node = kind.subject_of(event), kind.left_by(event)
                    if node is None:
                        nodes.pop(subject, None)
                    else:
                        nodes[subject] = node
        return replace(tree, epoch=epoch)


def _committed(table: Any) -> Any:
    return (
        select(table)
        .join(ledger_txns, ledger_txns.c.id == table.c.txn_id)
        .where(ledger_txns.c.status == COMMITTED)
    )


def _kind_order(event: RoutingEvent) -> int:
    return KINDS.index(kind_of(event))
