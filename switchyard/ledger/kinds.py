"""The routing kinds — clusters, bindings, mirror links, partition migrations — each described once.

Everything that handles routing as a whole asks the kind rather than knowing it: the fenced write
(:mod:`switchyard.routing.store`), the ledger's records and replay, the snapshot and the rebuild. A
kind says where its nodes live in ZooKeeper and how a node reads, which ledger table holds its events
and how an event is a row, which node an event leaves behind, and what a change of it checks and
writes. A new kind is one description here, its event table in ``schema.py`` and its field in
:class:`RoutingSnapshot`.

It lives in the ledger package because the ledger needs it and must not import the routing package
(which imports the ledger); it imports nothing of ZooKeeper.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, Generic, Protocol, TypeVar
from urllib.parse import quote, unquote

from sqlalchemy import Table

from switchyard.errors import BindingRefused
from switchyard.keys import BindingKey, check_name
from switchyard.ledger.base import utc
from switchyard.ledger.schema import binding_events, cluster_events, link_events, migration_events
from switchyard.model import (
    Binding,
    BindingState,
    Cluster,
    ClusterState,
    Link,
    LinkState,
    MigrationMode,
    MigrationState,
    PartitionId,
    PartitionMigration,
    pattern_problem,
)


@dataclass(frozen=True)
class RoutingEvent:
    """A change of one subject, as the ledger records it (each kind's events add their fields)."""


S = TypeVar("S", BindingKey, str, PartitionId)
"""What names a node of a kind: a binding key, a cluster id, a link id, a partition."""
N = TypeVar("N", Binding, Cluster, Link, PartitionMigration)
E = TypeVar("E", bound=RoutingEvent)


@dataclass(frozen=True)
class RoutingSnapshot:
    """The routing tree as of one epoch: read from ZooKeeper, or replayed from the ledger's history."""

    epoch: int
    bindings: dict[BindingKey, Binding] = field(default_factory=dict)
    clusters: dict[str, Cluster] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)
    migrations: dict[PartitionId, PartitionMigration] = field(default_factory=dict)
    txn: str = field(default="", compare=False)
    """The change that wrote the epoch counter as read ("": not read from ZooKeeper): a reader of a
    later epoch reads only what changed since when the counter's history names this change first."""

    def nodes(self, kind: Kind[Any, Any, Any]) -> dict[Any, Any]:
        nodes: dict[Any, Any] = getattr(self, kind.name)
        return nodes

    def shielded(self, cluster: str) -> bool:
        """Whether ``cluster`` is shielded or down: not to be contacted (a cluster with no node is not)."""
        known = self.clusters.get(cluster)
        return known is not None and known.state is not ClusterState.ACTIVE


class Kind(ABC, Generic[S, N, E]):
    """One kind of routing node; the subclasses below are the whole list (:data:`KINDS`)."""

    name: ClassVar[str]
    """Its ZooKeeper folder under the root, and its field of :class:`RoutingSnapshot`."""
    depth: ClassVar[int] = 1
    """How many levels of nodes its folder holds."""
    table: ClassVar[Table]
    """The ledger table of its events."""
    subject_column: ClassVar[str]
    """The column of ``table`` that names the subject."""

    @abstractmethod
    def label(self, subject: S) -> str:
        """How messages name a subject."""

    def segment(self, subject: S) -> str:
        """The subject's node, relative to the folder."""
        return quote(str(subject), safe="")

    @abstractmethod
    def subject_at(self, relative: str) -> S | None:
        """The subject of the node at ``relative`` under the folder; None for a node that only holds
        others."""

    @abstractmethod
    def decode(self, subject: S, data: bytes) -> N:
        """A node's data (never empty: an empty node holds no subject)."""

    @abstractmethod
    def subject_of(self, event: E) -> S: ...

    def matches(self, subject: S) -> Any:
        """The SQL condition that picks the subject's rows of ``table``."""
        return self.table.c[self.subject_column] == str(subject)

    @abstractmethod
    def left_by(self, event: E) -> N | None:
        """The node ``event`` leaves behind; None when it removed the subject."""

    @abstractmethod
    def event_from(self, row: Mapping[Any, Any]) -> E: ...

    def row(self, txn_id: str, event: E) -> dict[str, Any]:
        """An event as a table row: its fields by name."""
        return {"txn_id": txn_id, **{f.name: getattr(event, f.name) for f in fields(event)}}

    @abstractmethod
    def describe(self, event: E) -> str: ...


@dataclass(frozen=True)
class BindingEvent(RoutingEvent):
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
class ClusterEvent(RoutingEvent):
    cluster_id: str
    bootstrap: str
    from_state: ClusterState | None
    to_state: ClusterState
    epoch: int
    actor: str
    reason: str
    at: datetime


@dataclass(frozen=True)
class LinkEvent(RoutingEvent):
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


def _when(row: Mapping[Any, Any]) -> dict[str, Any]:
    """The columns every event has besides its subject and its states."""
    return {"epoch": row["epoch"], "actor": row["actor"], "reason": row["reason"],
            "at": utc(row["at"])}  # fmt: skip


class NamedKind(Kind[str, N, E]):
    """A kind whose subjects are plain names, one node each directly in the folder, named in messages
    by the kind's noun and in its events by ``subject_column``."""

    node: ClassVar[Any]
    """The node's type (it reads itself: ``from_json(name, data)``)."""

    def label(self, subject: str) -> str:
        return f"{self.name.removesuffix('s')} {subject}"

    def subject_at(self, relative: str) -> str:
        return unquote(relative)

    def decode(self, subject: str, data: bytes) -> N:
        decoded: N = self.node.from_json(subject, data)
        return decoded

    def subject_of(self, event: E) -> str:
        subject: str = getattr(event, self.subject_column)
        return subject


class ClusterKind(NamedKind[Cluster, ClusterEvent]):
    name = "clusters"
    node = Cluster
    table = cluster_events
    subject_column = "cluster_id"

    def left_by(self, event: ClusterEvent) -> Cluster:
        return Cluster(event.cluster_id, event.bootstrap, event.to_state, event.epoch, event.at, event.actor)

    def event_from(self, row: Mapping[Any, Any]) -> ClusterEvent:
        return ClusterEvent(
            cluster_id=row["cluster_id"],
            bootstrap=row["bootstrap"],
            from_state=ClusterState(row["from_state"]) if row["from_state"] else None,
            to_state=ClusterState(row["to_state"]),
            **_when(row),
        )

    def describe(self, event: ClusterEvent) -> str:
        return f"cluster {event.cluster_id} {event.to_state}"


class BindingKind(Kind[BindingKey, Binding, BindingEvent]):
    name = "bindings"
    depth = 3  # <AppID>, then <AppID>/instances|topics|groups/<name>
    table = binding_events
    subject_column = "binding_key"

    def label(self, subject: BindingKey) -> str:
        return str(subject)

    def segment(self, subject: BindingKey) -> str:
        return subject.path

    def subject_at(self, relative: str) -> BindingKey | None:
        try:
            return BindingKey.from_path(relative)
        except ValueError:  # an application's folder of finer keys, or a node not of Switchyard's
            return None

    def decode(self, subject: BindingKey, data: bytes) -> Binding:
        return Binding.from_json(data)

    def subject_of(self, event: BindingEvent) -> BindingKey:
        return event.key

    def left_by(self, event: BindingEvent) -> Binding | None:
        if event.to_state is BindingState.UNBOUND:
            return None
        return Binding(event.to_cluster, event.epoch, event.to_state, event.at, event.actor)

    def event_from(self, row: Mapping[Any, Any]) -> BindingEvent:
        return BindingEvent(
            key=BindingKey.parse(row["binding_key"], check=False),
            from_cluster=row["from_cluster"],
            to_cluster=row["to_cluster"],
            from_state=BindingState(row["from_state"]) if row["from_state"] else None,
            to_state=BindingState(row["to_state"]),
            **_when(row),
        )

    def row(self, txn_id: str, event: BindingEvent) -> dict[str, Any]:
        row = super().row(txn_id, event)
        row["binding_key"] = str(row.pop("key"))
        return row

    def describe(self, event: BindingEvent) -> str:
        return f"{event.key} -> {event.to_cluster} {event.to_state}"


class LinkKind(NamedKind[Link, LinkEvent]):
    name = "links"
    node = Link
    table = link_events
    subject_column = "link_id"

    def left_by(self, event: LinkEvent) -> Link | None:
        if event.to_state is LinkState.DELETED:
            return None
        return Link(event.link_id, event.source, event.target, event.include, event.exclude, event.to_state,
                    event.epoch, event.at, event.actor, event.reverse_of)  # fmt: skip

    def event_from(self, row: Mapping[Any, Any]) -> LinkEvent:
        return LinkEvent(
            link_id=row["link_id"],
            source=row["source"],
            target=row["target"],
            include=tuple(json.loads(row["include"])),
            exclude=tuple(json.loads(row["exclude"])),
            reverse_of=row["reverse_of"],
            from_state=LinkState(row["from_state"]) if row["from_state"] else None,
            to_state=LinkState(row["to_state"]),
            **_when(row),
        )

    def row(self, txn_id: str, event: LinkEvent) -> dict[str, Any]:
        row = super().row(txn_id, event)
        row["include"], row["exclude"] = json.dumps(event.include), json.dumps(event.exclude)
        return row

    def describe(self, event: LinkEvent) -> str:
        return f"link {event.link_id} ({event.source} -> {event.target}) {event.to_state}"


@dataclass(frozen=True)
class MigrationEvent(RoutingEvent):
    topic: str
    partition: int
    origin: str
    target: str
    mode: MigrationMode
    end_offset: int | None
    target_base: int
    origin_end: int | None
    ignore_origin: bool
    from_state: MigrationState | None
    to_state: MigrationState
    epoch: int
    actor: str
    reason: str
    at: datetime


class MigrationKind(Kind[PartitionId, PartitionMigration, MigrationEvent]):
    name = "migrations"
    depth = 2  # <topic>/<partition>
    table = migration_events
    subject_column = "topic"

    def label(self, subject: PartitionId) -> str:
        return f"migration of {subject}"

    def segment(self, subject: PartitionId) -> str:
        return subject.path

    def subject_at(self, relative: str) -> PartitionId | None:
        try:
            return PartitionId.from_path(relative)
        except ValueError:  # a topic's folder
            return None

    def decode(self, subject: PartitionId, data: bytes) -> PartitionMigration:
        return PartitionMigration.from_json(subject, data)

    def subject_of(self, event: MigrationEvent) -> PartitionId:
        return PartitionId(event.topic, event.partition)

    def matches(self, subject: PartitionId) -> Any:
        return (self.table.c.topic == subject.topic) & (self.table.c.partition == subject.partition)

    def left_by(self, event: MigrationEvent) -> PartitionMigration | None:
        if event.to_state is MigrationState.CALLED_OFF:
            return None
        return PartitionMigration(
            PartitionId(event.topic, event.partition), event.origin, event.target, event.mode, event.to_state,
            event.end_offset, event.target_base, event.origin_end, event.ignore_origin, event.epoch,
            event.at, event.actor,
        )  # fmt: skip

    def event_from(self, row: Mapping[Any, Any]) -> MigrationEvent:
        return MigrationEvent(
            topic=row["topic"],
            partition=row["partition"],
            origin=row["origin"],
            target=row["target"],
            mode=MigrationMode(row["mode"]),
            end_offset=row["end_offset"],
            target_base=row["target_base"],
            origin_end=row["origin_end"],
            ignore_origin=bool(row["ignore_origin"]),
            from_state=MigrationState(row["from_state"]) if row["from_state"] else None,
            to_state=MigrationState(row["to_state"]),
            **_when(row),
        )

    def describe(self, event: MigrationEvent) -> str:
        end = "" if event.end_offset is None else f" at {event.end_offset}"
        subject = f"partition {event.topic}[{event.partition}]"
        return f"{subject} ({event.origin} -> {event.target}) {event.to_state}{end}"


CLUSTERS, BINDINGS, LINKS, MIGRATIONS = ClusterKind(), BindingKind(), LinkKind(), MigrationKind()
KINDS: tuple[Kind[Any, Any, Any], ...] = (CLUSTERS, BINDINGS, LINKS, MIGRATIONS)
"""Every kind, in the order a change prepares them (a binding may move onto a cluster the same change
registers)."""


class Clusters(Protocol):
    """What a change may look up while it is checked: the registered clusters."""

    def cluster(self, cluster_id: str) -> Cluster | None: ...


class Change(ABC, Generic[S, N, E]):
    """A requested change of one subject, fenced on the epoch the caller read it at."""

    kind: ClassVar[Kind[Any, Any, Any]]
    expected_epoch: int
    """The epoch the caller read for the subject; 0 when it must not exist yet."""

    @property
    @abstractmethod
    def subject(self) -> S: ...

    @abstractmethod
    def event(self, old: N | None, epoch: int, actor: str, reason: str, at: datetime) -> E:
        """What the change records; the node it writes is the one the event leaves (``Kind.left_by``)."""

    def check(
        self, old: N | None, clusters: Clusters, changes: Sequence[Change[Any, Any, Any]], force: bool
    ) -> None:
        """Refuse (:class:`BindingRefused`) a change that must not be made over ``old``; ``changes`` is
        the whole change it is part of."""

    def well_formed(self) -> None:
        """Raise ValueError for names or patterns that must never enter the tree."""


@dataclass(frozen=True)
class ClusterChange(Change[str, Cluster, ClusterEvent]):
    kind = CLUSTERS
    cluster_id: str
    expected_epoch: int
    bootstrap: str
    state: ClusterState = ClusterState.ACTIVE

    @property
    def subject(self) -> str:
        return self.cluster_id

    def event(self, old: Cluster | None, epoch: int, actor: str, reason: str, at: datetime) -> ClusterEvent:
        before = old.state if old else None
        return ClusterEvent(self.cluster_id, self.bootstrap, before, self.state, epoch, actor, reason, at)

    def well_formed(self) -> None:
        check_name("a cluster id", self.cluster_id)


@dataclass(frozen=True)
class BindingChange(Change[BindingKey, Binding, BindingEvent]):
    kind = BINDINGS
    key: BindingKey
    expected_epoch: int
    cluster: str
    state: BindingState = BindingState.ACTIVE

    @property
    def subject(self) -> BindingKey:
        return self.key

    def event(self, old: Binding | None, epoch: int, actor: str, reason: str, at: datetime) -> BindingEvent:
        return BindingEvent(self.key, old.cluster if old else None, self.cluster, old.state if old else None,
                            self.state, epoch, actor, reason, at)  # fmt: skip

    def check(
        self, old: Binding | None, clusters: Clusters, changes: Sequence[Change[Any, Any, Any]], force: bool
    ) -> None:
        if self.state is BindingState.UNBOUND:
            if old is None:
                raise BindingRefused(f"{self.key}: not bound")
            return
        if old is None or old.cluster != self.cluster:
            self._check_target(clusters, changes, force)
        if old is not None and (old.cluster, old.state) == (self.cluster, self.state):
            raise BindingRefused(f"{self.key}: already {self.state} on {self.cluster} (epoch {old.epoch})")

    def _check_target(
        self, clusters: Clusters, changes: Sequence[Change[Any, Any, Any]], force: bool
    ) -> None:
        planned = {c.cluster_id: c.state for c in changes if isinstance(c, ClusterChange)}
        if self.cluster in planned:
            state = planned[self.cluster]
        else:
            cluster = clusters.cluster(self.cluster)
            if cluster is None:
                raise BindingRefused(
                    f"{self.key}: cluster {self.cluster!r} is not registered (switchyard clusters add)"
                )
            state = cluster.state
        if state is not ClusterState.ACTIVE and not force:
            raise BindingRefused(
                f"{self.key}: cluster {self.cluster!r} is {state} and takes no new traffic "
                "(unshield it, or force the change)"
            )

    def well_formed(self) -> None:
        self.key.check()
        check_name("a cluster id", self.cluster)


@dataclass(frozen=True)
class LinkChange(Change[str, Link, LinkEvent]):
    kind = LINKS
    link_id: str
    expected_epoch: int
    source: str
    target: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    state: LinkState = LinkState.RUNNING
    reverse_of: str | None = None

    @classmethod
    def of(cls, link: Link, state: LinkState) -> LinkChange:
        """``link`` moved to ``state``, fenced on the epoch it was read at."""
        return cls(link.id, link.epoch, link.source, link.target, link.include, link.exclude, state,
                   link.reverse_of)  # fmt: skip

    @property
    def subject(self) -> str:
        return self.link_id

    def event(self, old: Link | None, epoch: int, actor: str, reason: str, at: datetime) -> LinkEvent:
        return LinkEvent(self.link_id, self.source, self.target, self.include, self.exclude, self.reverse_of,
                         old.state if old else None, self.state, epoch, actor, reason, at)  # fmt: skip

    def check(
        self, old: Link | None, clusters: Clusters, changes: Sequence[Change[Any, Any, Any]], force: bool
    ) -> None:
        """A link's ends never change; a promoted link is final but for its removal; clusters must be
        registered."""
        if self.state is LinkState.DELETED:
            if old is None:
                raise BindingRefused(f"link {self.link_id!r} does not exist")
            return
        if old is None:
            for end in (self.source, self.target):
                if clusters.cluster(end) is None:
                    raise BindingRefused(f"link {self.link_id}: cluster {end!r} is not registered")
            if self.source == self.target:
                raise BindingRefused(f"link {self.link_id}: source and target are the same cluster")
            return
        if (old.source, old.target) != (self.source, self.target):
            raise BindingRefused(f"link {self.link_id}: its source and target cannot change")
        if old.state is LinkState.PROMOTED:
            raise BindingRefused(f"link {self.link_id}: promoted links are final (reverse it instead)")
        if old.state is self.state and (old.include, old.exclude) == (self.include, self.exclude):
            raise BindingRefused(f"link {self.link_id}: already {self.state}")

    def well_formed(self) -> None:
        check_name("a link id", self.link_id)
        problem = pattern_problem((*self.include, *self.exclude))
        if problem is not None and self.state is not LinkState.DELETED:
            raise ValueError(f"link {self.link_id}: {problem}")


@dataclass(frozen=True)
class MigrationChange(Change[PartitionId, PartitionMigration, MigrationEvent]):
    """A partition migration begun, taking effect, aged, its origin's true end recorded, or called off.

    Once in effect its clusters, end offset and target base never change: every client offset keeps the
    one record it stands for."""

    kind = MIGRATIONS
    partition: PartitionId
    expected_epoch: int
    origin: str
    target: str
    mode: MigrationMode
    state: MigrationState
    end_offset: int | None = None
    target_base: int = 0
    origin_end: int | None = None
    ignore_origin: bool = False

    @classmethod
    def of(cls, migration: PartitionMigration, **changed: Any) -> MigrationChange:
        """``migration`` with ``changed`` fields, fenced on the epoch it was read at."""
        now = {f.name: getattr(migration, f.name) for f in fields(migration)}
        now = {k: v for k, v in now.items() if k not in ("id", "epoch", "updated_at", "by")}
        return cls(migration.id, migration.epoch, **(now | changed))

    @property
    def subject(self) -> PartitionId:
        return self.partition

    def event(
        self, old: PartitionMigration | None, epoch: int, actor: str, reason: str, at: datetime
    ) -> MigrationEvent:
        return MigrationEvent(
            self.partition.topic, self.partition.partition, self.origin, self.target, self.mode,
            self.end_offset, self.target_base, self.origin_end, self.ignore_origin,
            old.state if old else None, self.state, epoch, actor, reason, at,
        )  # fmt: skip

    def check(
        self,
        old: PartitionMigration | None,
        clusters: Clusters,
        changes: Sequence[Change[Any, Any, Any]],
        force: bool,
    ) -> None:
        name = f"migration of {self.partition}"
        if self.state is MigrationState.CALLED_OFF:
            if old is None:
                raise BindingRefused(f"{self.partition} has no migration")
            if old.state is not MigrationState.MIGRATING:
                raise BindingRefused(
                    f"{name}: in effect since epoch {old.epoch}, it cannot be called off (client offsets "
                    "at or above its end offset stand for the target's records)"
                )
            return
        if old is None:
            self._check_new(name, clusters, force)
            return
        if (old.origin, old.target, old.mode) != (self.origin, self.target, self.mode):
            raise BindingRefused(
                f"{self.partition} is migrating from {old.origin} to {old.target} ({old.mode}) since epoch "
                f"{old.epoch}: one migration per partition"
            )
        if old.state is MigrationState.AGED:
            raise BindingRefused(f"{name}: aged, final")
        if self.state is MigrationState.AGED and old.state is not MigrationState.MIGRATED:
            raise BindingRefused(f"{name}: it ages once in effect, not while {old.state}")
        if old.in_effect and (old.end_offset, old.target_base) != (self.end_offset, self.target_base):
            raise BindingRefused(
                f"{name}: its end offset {old.end_offset} is fixed since it took effect (epoch {old.epoch})"
            )
        if old.origin_end is not None and self.origin_end != old.origin_end:
            raise BindingRefused(f"{name}: the origin's end is recorded already ({old.origin_end})")
        if old == self._as_node(old):
            raise BindingRefused(f"{name}: already {self.state}")

    def _as_node(self, old: PartitionMigration) -> PartitionMigration:
        return PartitionMigration(
            self.partition, self.origin, self.target, self.mode, self.state, self.end_offset,
            self.target_base, self.origin_end, self.ignore_origin, old.epoch, old.updated_at, old.by,
        )  # fmt: skip

    def _check_new(self, name: str, clusters: Clusters, force: bool) -> None:
        for end in (self.origin, self.target):
            if clusters.cluster(end) is None:
                raise BindingRefused(f"{name}: cluster {end!r} is not registered")
        if self.origin == self.target:
            raise BindingRefused(f"{name}: origin and target are the same cluster")
        target = clusters.cluster(self.target)
        if target is not None and target.state is not ClusterState.ACTIVE and not force:
            raise BindingRefused(
                f"{name}: cluster {self.target!r} is {target.state} and takes no new traffic"
            )
        if self.state is MigrationState.AGED:
            raise BindingRefused(f"{name}: a migration begins migrating or migrated, not aged")
        if self.state is MigrationState.MIGRATING and self.mode is MigrationMode.FAULT:
            raise BindingRefused(
                f"{name}: a fault migration takes effect at once (its origin is unreachable)"
            )

    def well_formed(self) -> None:
        self.partition.check()
        check_name("a cluster id", self.origin)
        check_name("a cluster id", self.target)
        numbers = {"end offset": self.end_offset, "target base": self.target_base,
                   "origin end": self.origin_end}  # fmt: skip
        for what, value in numbers.items():
            if value is not None and value < 0:
                raise ValueError(f"migration of {self.partition}: a negative {what} ({value})")
        needs_end = self.state in (MigrationState.MIGRATED, MigrationState.AGED)
        if needs_end and self.end_offset is None:
            raise ValueError(f"migration of {self.partition}: {self.state} needs its end offset")
        if self.state is MigrationState.AGED and self.origin_end is None:
            raise ValueError(
                f"migration of {self.partition}: aged needs the origin's end (what it no longer holds)"
            )
        if self.state is MigrationState.MIGRATING and self.end_offset is not None:
            raise ValueError(f"migration of {self.partition}: its end offset is set when it takes effect")
        if self.origin_end is not None and self.end_offset is not None and self.origin_end > self.end_offset:
            raise ValueError(
                f"migration of {self.partition}: the origin's end {self.origin_end} is past the end "
                f"offset {self.end_offset}"
            )


AnyKind = Kind[Any, Any, Any]
AnyChange = Change[Any, Any, Any]


def kind_of(event: RoutingEvent) -> AnyKind:
    return _KIND_OF_EVENT[type(event)]


_KIND_OF_EVENT: dict[type[RoutingEvent], AnyKind] = {
    ClusterEvent: CLUSTERS,
    BindingEvent: BINDINGS,
    LinkEvent: LINKS,
    MigrationEvent: MIGRATIONS,
}
