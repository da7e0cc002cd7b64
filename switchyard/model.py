"""Bindings, clusters, mirror links and partition migrations as they are stored in ZooKeeper (JSON) and
recorded in the ledger.

Every routing node carries the epoch of the change that wrote it. Epochs come from one counter for the
whole tree, so they only grow, a change to several keys shares one epoch, and "this gateway has applied
epoch E" means it has applied every change up to E.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class BindingState(StrEnum):
    ACTIVE = "active"
    BLOCKED = "blocked"
    """Data requests get a retriable error until the binding is active again (usually on a new cluster)."""
    UNBOUND = "unbound"
    """Only in changes and the ledger: the key's binding is removed (its node emptied, as it may hold
    finer keys), so the key resolves as if never bound. Never read back from ZooKeeper."""


class ClusterState(StrEnum):
    ACTIVE = "active"
    SHIELDED = "shielded"
    """Not contacted at all: the gateways answer requests routed to it with retriable errors at once (and
    Metadata themselves), and no binding may be moved onto it."""
    DOWN = "down"


@dataclass(frozen=True)
class Binding:
    cluster: str
    epoch: int
    state: BindingState
    updated_at: datetime
    by: str

    def to_json(self) -> bytes:
        return _dump({**asdict(self), "updated_at": self.updated_at.isoformat()})

    @classmethod
    def from_json(cls, data: bytes) -> Binding:
        raw = json.loads(data)
        return cls(
            cluster=raw["cluster"],
            epoch=int(raw["epoch"]),
            state=BindingState(raw["state"]),
            updated_at=datetime.fromisoformat(raw["updated_at"]),
            by=raw["by"],
        )


@dataclass(frozen=True)
class Cluster:
    id: str
    bootstrap: str
    state: ClusterState
    epoch: int
    updated_at: datetime
    by: str

    def to_json(self) -> bytes:
        raw = asdict(self)
        del raw["id"]  # the node's name
        return _dump({**raw, "updated_at": self.updated_at.isoformat()})

    @classmethod
    def from_json(cls, cluster_id: str, data: bytes) -> Cluster:
        raw = json.loads(data)
        return cls(
            id=cluster_id,
            bootstrap=raw["bootstrap"],
            state=ClusterState(raw["state"]),
            epoch=int(raw["epoch"]),
            updated_at=datetime.fromisoformat(raw["updated_at"]),
            by=raw["by"],
        )


NEVER_COPIED = ("__", "switchyard.")
"""Topic name prefixes no link copies: the brokers' internal topics and Switchyard's own (offset maps)."""


class LinkState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    """Copying stops where it is and resumes from there; the target stays read-only to clients."""
    PROMOTED = "promoted"
    """Copying has stopped for good: the target is the writable copy now (final for this link)."""
    DELETED = "deleted"
    """The link was removed (its node emptied); seen only in the ledger, never on a live link."""


@dataclass(frozen=True)
class Link:
    """A mirror link: topics matching ``include`` and not ``exclude`` copied from source to target."""

    id: str
    source: str
    target: str
    include: tuple[str, ...]
    exclude: tuple[str, ...]
    state: LinkState
    epoch: int
    updated_at: datetime
    by: str
    reverse_of: str | None = None
    """The link this one reverses (started from the promoted side of ``reverse_of``)."""

    def copies(self, topic: str) -> bool:
        """Whether ``topic`` belongs to the link (patterns match the whole name; internal topics never).

        An invalid link (see :attr:`problem`) copies nothing.
        """
        patterns = self._patterns
        if patterns is None or topic.startswith(NEVER_COPIED):
            return False
        include, exclude = patterns
        return any(p.fullmatch(topic) for p in include) and not any(p.fullmatch(topic) for p in exclude)

    @property
    def problem(self) -> str | None:
        """Why this link cannot be followed (a pattern that is not a regular expression), or None.

        Only a link written before patterns were checked, or by hand, can have one; it is reported
        and ignored rather than allowed to break the processes that read it.
        """
        return pattern_problem((*self.include, *self.exclude))

    @functools.cached_property
    def _patterns(self) -> tuple[list[re.Pattern[str]], list[re.Pattern[str]]] | None:
        if self.problem is not None:
            return None
        return [re.compile(p) for p in self.include], [re.compile(p) for p in self.exclude]

    def to_json(self) -> bytes:
        raw = asdict(self)
        del raw["id"]  # the node's name
        return _dump(
            {
                **raw,
                "include": list(self.include),
                "exclude": list(self.exclude),
                "updated_at": self.updated_at.isoformat(),
            }
        )

    @classmethod
    def from_json(cls, link_id: str, data: bytes) -> Link:
        raw = json.loads(data)
        return cls(
            id=link_id,
            source=raw["source"],
            target=raw["target"],
            include=tuple(raw["include"]),
            exclude=tuple(raw["exclude"]),
            state=LinkState(raw["state"]),
            epoch=int(raw["epoch"]),
            updated_at=datetime.fromisoformat(raw["updated_at"]),
            by=raw["by"],
            reverse_of=raw.get("reverse_of"),
        )


_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True, order=True)
class PartitionId:
    """One partition of a topic: what a partition migration moves."""

    topic: str
    partition: int

    @property
    def path(self) -> str:
        return f"{self.topic}/{self.partition}"

    @classmethod
    def from_path(cls, path: str) -> PartitionId:
        """The partition at ``topic/partition``; ValueError for anything else."""
        topic, _, number = path.partition("/")
        if not number.isdigit() or str(int(number)) != number:
            raise ValueError(f"{path!r} is not topic/partition")
        return cls(topic, int(number))

    def check(self) -> None:
        """ValueError unless Kafka could name the topic and the partition number is one."""
        if not _TOPIC.fullmatch(self.topic) or self.topic in (".", ".."):
            raise ValueError(f"{self.topic!r} is not a Kafka topic name")
        if self.partition < 0:
            raise ValueError(f"{self} has a negative partition number")

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


class MigrationState(StrEnum):
    MIGRATING = "migrating"
    """Recorded, not in effect: the gateways hold the partition's writes while its end is read."""
    MIGRATED = "migrated"
    """Writes go to the target; reads below the end offset to the origin, at or above it to the target."""
    AGED = "aged"
    """The origin holds no record below the end offset any more: reads go only to the target (final)."""
    CALLED_OFF = "called-off"
    """Only in the ledger: a migration removed before it took effect (its node emptied)."""


class MigrationMode(StrEnum):
    SMOOTH = "smooth"
    """The origin answers: its exact end is read while writes are held."""
    FAULT = "fault"
    """The origin is unreachable: the end offset is chosen beyond anything it acknowledged."""


@dataclass(frozen=True)
class PartitionMigration:
    """One partition moved from ``origin`` to ``target`` at the gateways (seed 004), data left in place.

    A client offset below ``end_offset`` is the origin's offset; at or above it, it is the target's
    offset ``client - end_offset + target_base``. Once in effect neither number ever changes.
    """

    id: PartitionId
    origin: str
    target: str
    mode: MigrationMode
    state: MigrationState
    end_offset: int | None
    """None while ``migrating`` a smooth migration (the end is read when writes are held)."""
    target_base: int
    """The target's offset that client offset ``end_offset`` stands for: its end when the migration began."""
    origin_end: int | None
    """The origin's true end, once known: ``end_offset`` for a smooth migration; for a fault migration
    read when the origin is back. Client offsets from it up to ``end_offset`` are a gap: no record."""
    ignore_origin: bool
    """Reads never go to the origin: consumers below ``end_offset`` are sent to the target's start."""
    epoch: int
    updated_at: datetime
    by: str

    @property
    def in_effect(self) -> bool:
        return self.state in (MigrationState.MIGRATED, MigrationState.AGED)

    def to_json(self) -> bytes:
        raw = asdict(self)
        del raw["id"]  # the node's path
        return _dump({**raw, "updated_at": self.updated_at.isoformat()})

    @classmethod
    def from_json(cls, partition: PartitionId, data: bytes) -> PartitionMigration:
        raw = json.loads(data)
        return cls(
            id=partition,
            origin=raw["origin"],
            target=raw["target"],
            mode=MigrationMode(raw["mode"]),
            state=MigrationState(raw["state"]),
            end_offset=_number(raw.get("end_offset")),
            target_base=int(raw["target_base"]),
            origin_end=_number(raw.get("origin_end")),
            ignore_origin=bool(raw["ignore_origin"]),
            epoch=int(raw["epoch"]),
            updated_at=datetime.fromisoformat(raw["updated_at"]),
            by=raw["by"],
        )


def _number(value: Any) -> int | None:
    return None if value is None else int(value)


def pattern_problem(patterns: Iterable[str]) -> str | None:
    """The first pattern that is not a regular expression, and why; None when all are."""
    for pattern in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"pattern {pattern!r} is not a regular expression ({exc})"
    return None


def now() -> datetime:
    """Wall-clock time at millisecond precision, so ZooKeeper, the ledger and SQL round-trip it exactly."""
    t = datetime.now(UTC)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def _dump(raw: dict[str, Any]) -> bytes:
    return json.dumps(raw, sort_keys=True, separators=(",", ":")).encode()
