"""Mirror status per partition, as the mirror processes publish it, and the drain check sagas rely on.

Each mirror process keeps an ephemeral node ``links/<id>/members/<member>`` with the status of the
partitions it copies, rewritten every ``mirror.status_interval_s``. A process that dies takes its node
with it, so a partition whose copier is gone shows up as unreported — never as drained.

"Drained" must rest on fresh data: every partition asked about is reported, copied up to the source's
high watermark, with that high watermark learnt from a fetch answered *after* the moment the caller
names (typically when the gateways acknowledged the block, so no write can have come in since).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from urllib.parse import quote

from kazoo.client import KazooClient

from switchyard.routing.layout import Layout
from switchyard.routing.zk import children_data

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    state: str
    """copying, paused, promoted or failed."""
    source_end: int
    """The source high watermark, from the latest fetch (-1 before the first)."""
    mirrored: int
    """The next source offset to copy: everything before it is acknowledged by the target."""
    target_end: int
    lag: int
    lag_s: float
    """Seconds since the partition was last fully copied (0 while it is)."""
    fetched_at: datetime | None
    """When the source last answered a fetch for this partition: how fresh ``source_end`` is."""
    error: str | None = None
    identical: bool = True
    """Target offsets equal source offsets for every record copied (the offset map has no shift)."""

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)


@dataclass(frozen=True)
class MemberStatus:
    member: str
    host: str
    updated_at: datetime
    partitions: tuple[PartitionStatus, ...] = ()
    link_error: str | None = None
    """A problem of the whole link on this member (source unreachable, ...), with its retry."""
    notes: tuple[str, ...] = ()
    """What is copied differently from the source while the records flow: a topic setting or ACLs the
    target refused."""
    listed_epoch: int = 0
    """The link's epoch when this member last listed the topics it copies (and subscribed to them): a
    change of the link's topics has reached it once this is at the change's epoch or later."""

    def to_json(self) -> bytes:
        raw = asdict(self)
        raw["updated_at"] = self.updated_at.isoformat()
        for p in raw["partitions"]:
            p["fetched_at"] = p["fetched_at"].isoformat() if p["fetched_at"] else None
        return json.dumps(raw, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> MemberStatus:
        raw = json.loads(data)
        partitions = tuple(
            PartitionStatus(
                **{**p, "fetched_at": datetime.fromisoformat(p["fetched_at"]) if p["fetched_at"] else None}
            )
            for p in raw["partitions"]
        )
        return cls(raw["member"], raw["host"], datetime.fromisoformat(raw["updated_at"]), partitions,
                   raw.get("link_error"), tuple(raw.get("notes", ())),
                   raw.get("listed_epoch", 0))  # fmt: skip


def members_path(layout: Layout, link_id: str) -> str:
    return f"{layout.link(link_id)}/members"


def member_path(layout: Layout, link_id: str, member: str) -> str:
    return f"{members_path(layout, link_id)}/{quote(member, safe='')}"


def default_member_id() -> str:
    return socket.gethostname()


def read_status(zk: KazooClient, layout: Layout, link_id: str) -> list[MemberStatus]:
    found = children_data(zk, members_path(layout, link_id)).values()
    return [MemberStatus.from_json(data) for data in found if data]


def still_copying(zk: KazooClient, layout: Layout, link_id: str, *, cut_off: bool = True) -> list[str]:
    """The partitions (``topic[partition]``) a live mirror process reports copying: what a pause has not
    reached yet. Without ``cut_off``, a member cut off from the source (its link error set) is left
    out: it copies nothing, whatever its partitions last said."""
    return [
        f"{p.topic}[{p.partition}]"
        for m in read_status(zk, layout, link_id) if cut_off or m.link_error is None
        for p in m.partitions if p.state == "copying"
    ]  # fmt: skip


@dataclass(frozen=True)
class DrainReport:
    drained: bool
    partitions: dict[TopicPartitionKey, PartitionStatus] = field(default_factory=dict)
    waiting: list[str] = field(default_factory=list)
    """Why not drained, one line per partition (empty when drained)."""


def drain_report(
    zk: KazooClient,
    layout: Layout,
    link_id: str,
    *,
    since: datetime,
    partitions: Iterable[TopicPartitionKey] | None = None,
) -> DrainReport:
    """Whether ``partitions`` (default: all reported) are copied up to a source end fetched after since."""
    reported: dict[TopicPartitionKey, PartitionStatus] = {}
    for member in read_status(zk, layout, link_id):
        for status in member.partitions:
            current = reported.get(status.key)
            if current is None or (status.fetched_at and (current.fetched_at or since) < status.fetched_at):
                reported[status.key] = status
    wanted = sorted(reported) if partitions is None else sorted(set(partitions))
    waiting = []
    for tp in wanted:
        name = f"{tp[0]}[{tp[1]}]"
        found = reported.get(tp)
        if found is None:
            waiting.append(f"{name}: no mirror process reports it")
        elif found.error:
            waiting.append(f"{name}: {found.state}: {found.error}")
        elif found.fetched_at is None or found.fetched_at < since:
            waiting.append(f"{name}: the source has not answered a fetch since {since.isoformat()}")
        elif found.mirrored < found.source_end:
            waiting.append(f"{name}: {found.source_end - found.mirrored} records still to copy")
    if not wanted:
        waiting.append(f"link {link_id}: no partition is reported")
    return DrainReport(not waiting, {tp: reported[tp] for tp in wanted if tp in reported}, waiting)
