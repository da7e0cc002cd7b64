"""Consumer group offsets, carried from a link's source to its target through the exact offset map.

A group's committed offset is a position: the next record to read. On the target it becomes the
position of that same record (``OffsetMap.position``), so a consumer moved to the target resumes at
exactly the next record — nothing skipped, nothing read twice. Two rules keep that true:

- an offset beyond what the mirror has copied is not translated yet (the record it points at is not
  on the target); the next sync carries it once the copy has caught up;
- a group that is active on the target (members joined there) is left alone: its own commits there
  are newer than anything the source can say;
- once the link is promoted, an offset beyond the copy's final position (a record of a failover's lost
  window, read on the source) is held to the target's end at the flip: the target's records from there
  on were written since, and a group resuming past them would skip them.

Used periodically by the mirror processes (each for the partitions it copies) and on demand by a
saga's final sync, after the drain — one at a time (:mod:`switchyard.mirror.writers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from typing import TypeVar

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from switchyard import kafka, offset_fetch
from switchyard.admins import GROUP_REQUEST_TIMEOUT_S, ClusterAdmin, failed_in_client
from switchyard.errors import KafkaOperationError
from switchyard.mirror.mapstore import LinkRecords
from switchyard.mirror.offsets import OffsetMap
from switchyard.model import Link, LinkState
from switchyard.threads import at_once

log = logging.getLogger(__name__)
Key = tuple[str, int]
T = TypeVar("T")
Turn = Callable[[str], AbstractContextManager[str | None]]
"""A writer's turn at a group's offsets on the target: yields None to write, else who holds them."""
MIRROR_GROUP_PREFIX = "switchyard-"
"""Switchyard's own groups (the mirror's, readers) are never synced."""


@dataclass(frozen=True)
class GroupOffset:
    group: str
    topic: str
    partition: int
    source: int
    target: int


@dataclass
class GroupSyncReport:
    written: list[GroupOffset] = field(default_factory=list)
    unchanged: int = 0
    skipped: list[str] = field(default_factory=list)
    """Why a group or partition was not synced this time (it is retried at the next sync)."""
    in_step: list[str] = field(default_factory=list)
    """The groups whose offsets on the target now match the source's, written or already so."""
    carried: set[str] = field(default_factory=set)
    """The groups with offsets committed on a copied topic, carried or not this time: the link's own."""
    failed_in_client: str | None = None
    """Why the sync stopped early: a request failed in the client (see :mod:`switchyard.admins`), and
    the groups after it would each wait out their time-out on the same client."""

    def add(self, other: GroupSyncReport) -> None:
        """Another group's report joined to this one."""
        self.written += other.written
        self.unchanged += other.unchanged
        self.skipped += other.skipped
        self.in_step += other.in_step
        self.carried |= other.carried


def sync_groups(
    source: ClusterAdmin,
    target: ClusterAdmin,
    copies: Callable[[str], bool],
    maps: Mapping[Key, OffsetMap],
    mirrored: Mapping[Key, int] | None = None,
    *,
    groups: Iterable[str] | None = None,
    timeout_s: float = 10.0,
    turn: Turn = lambda _: nullcontext(None),
    rewind: bool = False,
    flipped: Mapping[Key, int] | None = None,
) -> GroupSyncReport:
    """Write each group's translated offsets for the topics ``copies`` accepts.

    ``mirrored`` is how far the copy got per partition; with it, only those partitions are synced and
    offsets ahead of the copy wait. Without it (after a drain) every partition of a copied topic is.
    ``groups`` names the groups that must come over: one that cannot be read or written fails the sync,
    named. Without it (the mirror's periodic carry), every group on the source is tried, one that fails
    is skipped (with the reason) so that it never holds the others back. Unless ``rewind`` (a planned
    switch's sync, after the drain: the source is the truth), no offset is moved back: a group further
    along on the target than on the source reads there (one a switch left reading the promoted topics'
    copy on the old source, say, whose offsets the reverse link's carry would otherwise rewind to the
    flip as soon as it restarted; or one whose members' commits the gateways carried over after a
    failover's flip). Each group's target is read and written within its ``turn``, and left alone when
    someone else holds it. ``flipped``: a promoted link's target ends at its flip (:func:`ends_at_flip`),
    which no offset passes.
    """

    def one(group: str) -> GroupSyncReport:
        part = GroupSyncReport()
        with about(group):
            wanted = _wanted(source, group, copies, maps, mirrored, part, timeout_s, flipped or {})
            if wanted:
                with turn(group) as holder:
                    if holder is not None:
                        part.skipped.append(f"{group}: left to {holder}, which moves it")
                    else:
                        _write_group(target, group, wanted, part, timeout_s, rewind=rewind)
        return part

    report = GroupSyncReport()
    if groups is not None:  # a saga's, clients held: every group must come over, all asked at once
        for part in at_once(one, list(groups)):
            report.add(part)
        return report
    for group in list_groups(source, timeout_s):
        try:
            report.add(one(group))
        except KafkaOperationError as exc:
            report.skipped.append(str(exc))
            if failed_in_client(exc):
                report.failed_in_client = str(exc)
                break
    return report


@contextmanager
def about(group: str) -> Iterator[None]:
    """Whatever fails reading or writing ``group``, as one error that names it."""
    try:
        yield
    except (KafkaException, KafkaOperationError, TimeoutError) as exc:
        raise KafkaOperationError(f"group {group}: {_what(exc)}") from exc


def _wanted(  # noqa: PLR0917 - one group of sync_groups
    source: ClusterAdmin,
    group: str,
    copies: Callable[[str], bool],
    maps: Mapping[Key, OffsetMap],
    mirrored: Mapping[Key, int] | None,
    report: GroupSyncReport,
    timeout_s: float,
    flipped: Mapping[Key, int],
) -> dict[Key, GroupOffset]:
    """The group's offsets on the source, translated for the target."""
    committed = committed_offsets(source, group, timeout_s)
    if any(copies(topic) for topic, _ in committed):
        report.carried.add(group)
    wanted: dict[Key, GroupOffset] = {}
    for (topic, partition), offset in committed.items():
        key = (topic, partition)
        if offset < 0 or not copies(topic) or (mirrored is not None and key not in mirrored):
            continue
        if mirrored is not None and offset > mirrored[key]:
            report.skipped.append(
                f"{group}: {topic}[{partition}] at {offset} is ahead of the copy ({mirrored[key]})"
            )
            continue
        translated = maps.get(key, OffsetMap()).position(offset, flipped.get(key))
        wanted[key] = GroupOffset(group, topic, partition, offset, translated)
    return wanted


def ends_at_flip(link: Link, records: LinkRecords) -> dict[Key, int]:
    """The target's end per partition when ``link`` was promoted (none before): where the records
    written on the target since begin."""
    if link.state is not LinkState.PROMOTED:
        return {}
    return {key: target_end for key, (_, target_end) in records.ends.items()}


def _write_group(
    target: ClusterAdmin,
    group: str,
    wanted: dict[Key, GroupOffset],
    report: GroupSyncReport,
    timeout_s: float,
    *,
    rewind: bool,
) -> None:
    state, members = group_state(target, group, timeout_s)
    if not idle(state, members):
        report.skipped.append(f"{group}: active on the target ({members} members, {state.name})")
        return
    # within the target's ends (see OffsetMap.position): read here, where the target is asked anyway
    ends = kafka.listed_ends(target, wanted, timeout_s=timeout_s)
    wanted = {k: replace(o, target=min(o.target, ends.get(k, o.target))) for k, o in wanted.items()}
    current = committed_offsets(target, group, timeout_s)
    if not rewind:
        further = {k: o for k, o in wanted.items() if current.get(k, -1) > o.target}
        for (topic, partition), o in sorted(further.items()):
            report.skipped.append(
                f"{group}: {topic}[{partition}] at {current[(topic, partition)]} on the target, further than "
                f"the source's {o.target}: not moved back"
            )
        wanted = {k: o for k, o in wanted.items() if k not in further}
    changed = [o for key, o in wanted.items() if current.get(key) != o.target]
    report.unchanged += len(wanted) - len(changed)
    if changed:
        request = ConsumerGroupTopicPartitions(
            group, [TopicPartition(o.topic, o.partition, o.target) for o in changed]
        )
        errors = [
            tp.error
            for future in target.alter_consumer_group_offsets(
                [request], request_timeout=GROUP_REQUEST_TIMEOUT_S
            ).values()
            for tp in future.result(timeout_s).topic_partitions or ()
            if tp.error is not None
        ]
        if any(e.code() in _REFUSED_AS_ACTIVE for e in errors):
            raise KafkaOperationError(
                f"a member joined on the target as its offsets were written: {errors[0]}"
            )
        if errors:
            raise KafkaOperationError(f"offsets not written on the target: {errors[0]}")
        report.written.extend(changed)
    report.in_step.append(group)


def _what(exc: BaseException) -> str:
    """A Kafka error as an operator reads it (librdkafka's KafkaException wraps a KafkaError)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        error = exc.args[0]
        return f"{error.str()} ({error.name()})"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    return str(exc) or type(exc).__name__


_COORDINATOR_BUSY = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.NOT_COORDINATOR,
    }
)
_AGAIN_S = 0.2
_REFUSED_AS_ACTIVE = (
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
)


def list_groups(admin: AdminClient, timeout_s: float = 10.0) -> list[str]:
    """The consumer groups on a cluster, Switchyard's own left out."""
    listed = admin.list_consumer_groups(request_timeout=timeout_s).result(timeout_s)
    return sorted(g.group_id for g in listed.valid if not g.group_id.startswith(MIRROR_GROUP_PREFIX))


def committed_offsets(admin: ClusterAdmin, group: str, timeout_s: float = 10.0) -> dict[Key, int]:
    """A group's committed offset per partition (partitions without one are left out), asked of its
    coordinator directly: librdkafka's own request can crash the process (:mod:`switchyard.offset_fetch`)."""
    return offset_fetch.committed(admin.wire, group, timeout_s)


def group_state(admin: AdminClient, group: str, timeout_s: float = 10.0) -> tuple[ConsumerGroupState, int]:
    def ask(timeout_s: float) -> tuple[ConsumerGroupState, int]:
        for future in admin.describe_consumer_groups(
            [group], request_timeout=GROUP_REQUEST_TIMEOUT_S
        ).values():
            description = future.result(timeout_s)
            return description.state, len(description.members)
        return ConsumerGroupState.UNKNOWN, 0

    return _coordinated(ask, timeout_s)


def _coordinated(ask: Callable[[float], T], timeout_s: float) -> T:
    """``ask`` (given the time left) again while the group's coordinator loads or moves, within
    ``timeout_s``: librdkafka's admin results give up at once on COORDINATOR_LOAD_IN_PROGRESS, which a
    cluster answers for seconds after it started or a broker took over offsets partitions (a sync step
    there failed on its first group)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ask(max(deadline - time.monotonic(), _AGAIN_S))
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or error.code() not in _COORDINATOR_BUSY:
                raise
            if time.monotonic() + _AGAIN_S >= deadline:
                raise
        time.sleep(_AGAIN_S)


def idle(state: ConsumerGroupState, members: int) -> bool:
    """No member: nothing commits there that a carried offset would overwrite."""
    return not members
