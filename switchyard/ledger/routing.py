"""Routing changes in the ledger: every change that reached ZooKeeper, in order, with who made it and why.

A change is written here first as a *pending* transaction, then to ZooKeeper, then marked committed; a
change that never reached ZooKeeper is removed again (see :mod:`switchyard.routing.store`). Only
committed transactions count for history and for rebuilding the ZooKeeper tree.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update

from switchyard.keys import BindingKey
from switchyard.ledger.base import LedgerBase, utc
from switchyard.ledger.schema import binding_events, cluster_events, ledger_txns, link_events
from switchyard.model import Binding, BindingState, Cluster, ClusterState, Link, LinkState

PENDING, COMMITTED = "pending", "committed"


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
            return [TxnRecord(r.id, r.epoch, r.status, utc(r.created_at)) for r in rows]

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
                epoch = max(epoch, e.epoch)
                if e.to_state is BindingState.UNBOUND:
                    bindings.pop(e.key, None)
                    continue
                bindings[e.key] = Binding(e.to_cluster, e.epoch, e.to_state, e.at, e.actor)
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


def _committed(table: Any) -> Any:
    return (
        select(table)
        .join(ledger_txns, ledger_txns.c.id == table.c.txn_id)
        .where(ledger_txns.c.status == COMMITTED)
    )


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
        key=BindingKey.parse(row["binding_key"], check=False),
        from_cluster=row["from_cluster"],
        to_cluster=row["to_cluster"],
        from_state=BindingState(row["from_state"]) if row["from_state"] else None,
        to_state=BindingState(row["to_state"]),
        epoch=row["epoch"],
        actor=row["actor"],
        reason=row["reason"],
        at=utc(row["at"]),
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
        at=utc(row["at"]),
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
        at=utc(row["at"]),
    )
