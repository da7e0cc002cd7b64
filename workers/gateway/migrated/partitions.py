"""Requests that name partitions a migration moved (seed 004): split per cluster and broker, and
answered in client offsets.

A Produce, Fetch, ListOffsets or OffsetForLeaderEpoch naming a migrated partition cannot be forwarded
whole: its migrated partitions go where :mod:`workers.gateway.migrated.offsets` says (writes to the target,
reads to the origin below the limit, else to the target), the others to the cluster the request is
routed to. Each part goes to the broker that leads its partitions there, as a request of the gateway's
own at the client's API version; the answers are put together into the one the client expects, in its
order. Fetch sessions are not kept across a split (the answer says no session, and the client fetches
in full next time). A write to a migrating partition — its end being read — is held instead (``HELD``).

Only requests naming a migrated partition take this path; every other request is forwarded as before,
its bytes untouched.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make, replace_known
from switchyard.frames.protocol import Request, response_schema
from switchyard.model import PartitionMigration
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.brokers.upstream import Shielded
from workers.gateway.framing import batches
from workers.gateway.migrated.offsets import LATEST, Arithmetic, Fetched, Listed, Read, Side
from workers.gateway.routing import apis

log = logging.getLogger(__name__)
NOT_LEADER = ErrorCode.not_leader_or_follower
_STALE_LEADER = frozenset(
    {
        NOT_LEADER,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    }
)
"""Errors after which the gateway asks again which broker leads the partition."""
_SHARED_WAIT = timedelta(milliseconds=100)
"""The longest a part of a split Fetch waits for records when another part waits too: the answer waits
for every part."""
_MOST_WAIT = timedelta(seconds=5)
_ORIGIN_WAIT = timedelta(milliseconds=100)
"""The longest an origin read waits: the origin takes no more writes, so a broker holding it longer waits
for nothing; an empty answer below the origin's high watermark is asked again."""


class Touch(enum.Enum):
    NONE = "none"
    """No migrated partition: forwarded as usual."""
    HELD = "held"
    """A write to a partition whose migration is about to take effect: held until it has."""
    SPLIT = "split"


class Migrations:
    """One snapshot's migrations, by origin cluster and topic (built once per snapshot)."""

    def __init__(self, snapshot: RoutingSnapshot) -> None:
        self.snapshot = snapshot
        self._by_origin: dict[str, dict[str, dict[int, PartitionMigration]]] = {}
        for partition, migration in snapshot.migrations.items():
            topics = self._by_origin.setdefault(migration.origin, {})
            topics.setdefault(partition.topic, {})[partition.partition] = migration

    def of(self, cluster: str, topic: str) -> dict[int, PartitionMigration]:
        """The migrations of ``topic``'s partitions away from ``cluster``."""
        return self._by_origin.get(cluster, {}).get(topic, {})

    def touch(self, request: Request, cluster: str, topics: tuple[str, ...]) -> Touch:
        """What a request routed to ``cluster`` naming ``topics`` has to do with migrations."""
        if request.api_key not in apis.PARTITION_APIS or not self._by_origin.get(cluster):
            return Touch.NONE
        found = [
            migration
            for topic, partitions in named(request)
            if (moved := self.of(cluster, topic))
            for partition in partitions
            if (migration := moved.get(partition)) is not None
        ]
        if request.api_key == apis.PRODUCE and any(not m.in_effect for m in found):
            return Touch.HELD  # a write to a partition whose end is being read waits, whatever else it names
        if any(m.in_effect for m in found):
            return Touch.SPLIT
        return Touch.NONE

    def signature(self, cluster: str, topics: tuple[str, ...]) -> tuple[Any, ...]:
        """What of the migrations a request naming ``topics`` depends on: a request sent under one
        snapshot is routed the same under another with the same signature."""
        return tuple(tuple(sorted(self.of(cluster, t).items())) for t in topics)


def named(request: Request) -> list[tuple[str, list[int]]]:
    """(topic, partitions) a partition request names."""
    body, key = request.body, request.api_key
    if key == apis.PRODUCE:
        return [(t.name, [p.index for p in t.partition_data]) for t in body.topic_data]
    if key == apis.FETCH:
        return [(t.topic, [p.partition for p in t.partitions]) for t in body.topics]
    if key == apis.LIST_OFFSETS:
        return [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    return [(t.topic, [p.partition for p in t.partitions]) for t in body.topics]


class Brokers(Protocol):
    """How a split reaches the clusters (the session's broker connections, the gateway's leaders)."""

    async def send(
        self, cluster: str, node: int | None, request: Request, body: Any, *, long_poll: bool
    ) -> Awaitable[Any]:
        """Write ``body`` to the broker now, as a request of ``request``'s API and version, after what
        was sent before it; its answer to come (None when the request expects none)."""

    async def leader(self, cluster: str, topic: str, partition: int) -> int | None: ...

    def forget(self, cluster: str, topic: str) -> None:
        """The leaders of ``topic`` on ``cluster`` are to be asked again."""

    def reachable(self, cluster: str) -> bool:
        """Whether ``cluster`` may be contacted (not shielded, not down)."""

    async def written(
        self, bodies: dict[Part, Any]
    ) -> tuple[dict[Part, Any], dict[tuple[str, int], ErrorCode]]:
        """Each part's Produce body as it is written to its cluster (an idempotent producer's batches
        translated), the parts whose batches may not go now left out; and the error each of their
        partitions is answered with."""

    async def list_offsets(
        self, cluster: str, node: int, request: Request | None, key: tuple[str, int], timestamp: int
    ) -> Listed:
        """One partition's ListOffsets on a broker (as ``request``'s version, if given)."""


Moved = tuple[tuple[str, int], PartitionMigration, Any]
"""A migrated partition a request names: (topic, partition), its migration, the request's entry."""
Part = tuple[str, bool, int | None]
"""Where one part of a split request goes: (cluster, quick, real broker); a quick part waits for
nothing (an origin read)."""


class Split:
    """One request split across clusters; ``cluster`` is where the request is routed, ``node`` the
    broker of that cluster its connection stands for (None: ask which leads)."""

    def __init__(
        self,
        request: Request,
        migrations: Migrations,
        cluster: str,
        node: int | None,
        brokers: Brokers,
    ) -> None:
        self.request, self.body = request, request.body
        self.migrations = migrations
        self.cluster, self.node = cluster, node
        self.brokers = brokers

    async def sent(self) -> Awaitable[Any]:
        """The client's answer to come (None for a Produce with acks=0). A Produce's parts are written to
        their brokers before this returns, as a forwarded request is before the next is read: an
        idempotent producer's batches must reach a broker in the order it sent them, and a batch sent
        after its client's connection ended would be written ahead of the retry of one before it (the
        broker then refuses that retry as out of order, which is fatal to the client)."""
        if self.request.api_key == apis.PRODUCE:
            return await self._produce()
        return self._read()

    async def _read(self) -> Any:
        key = self.request.api_key
        if key == apis.FETCH:
            return await self._fetch()
        if key == apis.LIST_OFFSETS:
            return await self._list_offsets()
        return await self._offsets_for_epochs()

    # ---- the parts

    def _moved(self, topic: str, partition: int) -> PartitionMigration | None:
        migration = self.migrations.of(self.cluster, topic).get(partition)
        return migration if migration is not None and migration.in_effect else None

    def _arithmetic(self, migration: PartitionMigration) -> Arithmetic:
        return Arithmetic(migration, origin_up=self.brokers.reachable(migration.origin))

    async def _node(self, cluster: str, topic: str, partition: int, *, migrated: bool) -> int | None:
        """The broker to ask for a partition on ``cluster``: the one the client's connection stands for,
        for a partition not migrated; else the one that leads it; None for a cluster not to contact."""
        if not self.brokers.reachable(cluster):  # shielded, or known unreachable: not contacted
            return None
        if not migrated and cluster == self.cluster and self.node is not None:
            return self.node
        return await self.brokers.leader(cluster, topic, partition)

    async def _ask_parts(
        self, parts: dict[Part, list[tuple[str, Any]]], build: Callable[[list[tuple[str, Any]], Part], Any]
    ) -> dict[Part, Any]:
        """Send each part, then wait for every answer (``_send_parts``, ``_answers``)."""
        return await self._answers(await self._send_parts(parts, build))

    async def _send_parts(
        self, parts: dict[Part, list[tuple[str, Any]]], build: Callable[[list[tuple[str, Any]], Part], Any]
    ) -> dict[Part, Awaitable[Any] | Exception]:
        """Write each part (its (topic, partition entry) list, made a request body by ``build``) to its
        broker, one after the other; by part, its answer to come or the error its sending failed with. A
        quick part (one that waits for nothing) goes over a connection no long poll waits on."""
        sent: dict[Part, Awaitable[Any] | Exception] = {}
        for part, entries in parts.items():
            cluster, quick, node = part
            try:
                sent[part] = await self.brokers.send(
                    cluster, node, self.request, build(entries, part), long_poll=not quick
                )
            except Exception as exc:
                sent[part] = exc
        return sent

    async def _answers(self, sent: dict[Part, Awaitable[Any] | Exception]) -> dict[Part, Any]:
        """The answers to the parts sent, or the error a part failed with, by part."""

        async def one(answer: Awaitable[Any] | Exception) -> Any:
            if isinstance(answer, Exception):
                raise answer
            return await answer

        parts = list(sent)
        found = await asyncio.gather(*(one(sent[p]) for p in parts), return_exceptions=True)
        for part, answer in zip(parts, found, strict=True):
            if isinstance(answer, BaseException) and not isinstance(answer, Exception):
                raise answer  # a cancellation
            if isinstance(answer, Exception):
                log.warning("a part of a split request to %s broker %s failed: %r", part[0], part[2], answer)
        return dict(zip(parts, found, strict=True))

    def _noted(self, cluster: str, topic: str, error: ErrorCode) -> None:
        if error in _STALE_LEADER:
            self.brokers.forget(cluster, topic)

    # ---- Produce

    async def _produce(self) -> Awaitable[Any]:
        body = self.body
        parts: dict[Part, list[tuple[str, Any]]] = {}
        placed: dict[tuple[str, int], tuple[Part | None, PartitionMigration | None]] = {}
        for topic in body.topic_data:
            for given in topic.partition_data:
                key = (topic.name, given.index)
                migration = self._moved(*key)
                cluster = migration.target if migration is not None else self.cluster
                node = await self._node(cluster, *key, migrated=migration is not None)
                part: Part | None = None if node is None else (cluster, True, node)
                placed[key] = part, migration
                if part is not None:
                    parts.setdefault(part, []).append((topic.name, given))
        topic_cls = type(body.topic_data[0])
        bodies, refused = await self.brokers.written({
            part: dataclasses.replace(
                body, topic_data=_grouped(topic_cls, "partition_data", entries, name_field="name")
            )
            for part, entries in parts.items()
        })  # fmt: skip
        sending = {part: entries for part, entries in parts.items() if part in bodies}
        return self._produced(placed, await self._send_parts(sending, lambda _, part: bodies[part]), refused)

    async def _produced(
        self,
        placed: dict[tuple[str, int], tuple[Part | None, PartitionMigration | None]],
        sent: dict[Part, Awaitable[Any] | Exception],
        refused: dict[tuple[str, int], ErrorCode],
    ) -> Any:
        body = self.body
        answers = await self._answers(sent)
        for answer in answers.values():
            if isinstance(answer, Exception) and not isinstance(answer, Shielded):
                raise answer  # its outcome is unknown: as when a forward fails
        if body.acks == 0:
            return None
        got = {
            (t.name, p.index): p
            for answer in answers.values()
            if not isinstance(answer, Shielded)  # never sent: its partitions are answered NOT_LEADER
            for t in answer.responses
            for p in t.partition_responses
        }
        cls = response_schema(apis.PRODUCE, self.request.api_version)
        topic_cls = element_type(cls, "responses")
        partition_cls = element_type(topic_cls, "partition_responses")
        topics = []
        for topic in body.topic_data:
            answered = []
            for entry in topic.partition_data:
                key = (topic.name, entry.index)
                part, migration = placed[key]
                partition = got.get(key)
                if part is None or partition is None:
                    answered.append(
                        make(
                            partition_cls,
                            index=entry.index,
                            error_code=refused.get(key, NOT_LEADER),
                            base_offset=-1,
                            log_append_time=None,
                            log_start_offset=-1,
                        )
                    )
                    continue
                self._noted(part[0], topic.name, partition.error_code)
                if migration is not None and partition.error_code == ErrorCode.none:
                    arithmetic = self._arithmetic(migration)
                    partition = replace_known(
                        partition,
                        base_offset=_shifted(partition.base_offset, arithmetic),
                        log_start_offset=_shifted(getattr(partition, "log_start_offset", -1), arithmetic),
                    )
                if getattr(partition, "current_leader", None) is not None:  # a hint naming a real node:
                    hint = dataclasses.replace(partition.current_leader, leader_id=-1, leader_epoch=-1)
                    partition = dataclasses.replace(partition, current_leader=hint)  # Metadata says instead
                answered.append(partition)
            topics.append(make(topic_cls, name=topic.name, partition_responses=tuple(answered)))
        return make(cls, responses=tuple(topics))

    # ---- Fetch

    async def _fetch(self) -> Any:
        body = self.body
        plans: dict[tuple[str, int], tuple[Arithmetic, int, Side]] = {}
        """Per migrated partition read: its arithmetic, the client's offset, the side asked."""
        fetched: dict[tuple[str, int], Fetched] = {}
        parts: dict[Part, list[tuple[str, Any]]] = {}
        for topic in body.topics:
            for entry in topic.partitions:
                key = (topic.topic, entry.partition)
                migration = self._moved(*key)
                if migration is None:
                    await self._place(parts, (self.cluster, False), key, entry, fetched, migrated=False)
                    continue
                arithmetic = self._arithmetic(migration)
                read = arithmetic.read(entry.fetch_offset)
                if read is None:
                    fetched[key] = arithmetic.nothing()
                    continue
                plans[key] = arithmetic, entry.fetch_offset, read.side
                origin = read.side is Side.ORIGIN
                cluster = migration.origin if origin else migration.target
                await self._place(parts, (cluster, origin), key, _read_entry(entry, read), fetched)
        again: dict[Part, list[tuple[str, Any]]] = {}
        for part, answer in (await self._fetch_parts(parts)).items():
            for key, got in answer.items():
                plan = plans.get(key)
                if plan is None:
                    fetched[key] = got
                    continue
                outcome = self._answered(plan, got, origin_failed=part[2] is None)
                if isinstance(outcome, Fetched):
                    fetched[key] = outcome
                    continue
                plans[key] = plan[0], plan[1], Side.TARGET
                entry = _read_entry(_entry_for(body, key), outcome)
                await self._place(again, (self._target_of(key), False), key, entry, fetched)
        for answer in (await self._fetch_parts(again)).values():  # the origin has no more: on at the target
            for key, got in answer.items():
                fetched[key] = plans[key][0].from_target(got)
        for key, (arithmetic, _, _) in plans.items():  # a broker that left a partition out of its answer
            fetched.setdefault(key, arithmetic.nothing())
        return self._fetch_answer(fetched)

    @staticmethod
    def _answered(plan: tuple[Arithmetic, int, Side], got: Fetched, *, origin_failed: bool) -> Fetched | Read:
        """A migrated partition's answer in client offsets, or the target read to make instead."""
        arithmetic, client, side = plan
        if side is Side.TARGET:
            return arithmetic.from_target(got)
        if origin_failed:  # wait for the origin, as when it is down
            return arithmetic.nothing()
        return arithmetic.from_origin(client, got)

    def _target_of(self, key: tuple[str, int]) -> str:
        migration = self._moved(*key)
        assert migration is not None
        return migration.target

    async def _place(
        self,
        parts: dict[Part, list[tuple[str, Any]]],
        how: tuple[str, bool],
        key: tuple[str, int],
        entry: Any,
        fetched: dict[tuple[str, int], Fetched],
        *,
        migrated: bool = True,
    ) -> None:
        """Add a partition's read to the part for its broker (``how``: cluster, and whether it is an
        origin read, which waits for nothing); a partition no broker leads is answered NOT_LEADER."""
        cluster, quick = how
        node = await self._node(cluster, *key, migrated=migrated)
        if node is None:
            fetched[key] = Fetched(int(NOT_LEADER), -1, -1, -1, b"")
            return
        parts.setdefault((cluster, quick, node), []).append((key[0], entry))

    async def _fetch_parts(
        self, parts: dict[Part, list[tuple[str, Any]]]
    ) -> dict[Part, dict[tuple[str, int], Fetched]]:
        """Each part's answer by partition; a part whose broker failed answers NOT_LEADER, except an
        origin read, marked by a None node in its key (the caller waits for the origin)."""
        body = self.body
        waiting = sum(1 for quick in (p[1] for p in parts) if not quick)

        def build(entries: list[tuple[str, Any]], part: Part) -> Any:
            wait = min(body.max_wait, _MOST_WAIT)
            if part[1]:
                wait = min(wait, _ORIGIN_WAIT)  # an origin read: the origin takes no more writes
            elif waiting > 1:
                wait = min(wait, _SHARED_WAIT)
            topics = _grouped(type(body.topics[0]), "partitions", entries, name_field="topic")
            return _sessionless(body, topics, wait)

        out: dict[Part, dict[tuple[str, int], Fetched]] = {}
        for part, answer in (await self._ask_parts(parts, build)).items():
            if isinstance(answer, BaseException):
                failed = (part[0], part[1], None) if part[1] else part
                down = Fetched(int(NOT_LEADER), -1, -1, -1, b"")
                out[failed] = {(t, e.partition): down for t, e in parts[part]}
                self.brokers.forget(part[0], parts[part][0][0])
                continue
            got = out.setdefault(part, {})
            for topic in answer.responses:
                for partition in topic.partitions:
                    self._noted(part[0], topic.topic, partition.error_code)
                    got[topic.topic, partition.partition_index] = _fetched(partition)
        return out

    def _fetch_answer(self, fetched: dict[tuple[str, int], Fetched]) -> Any:
        cls = response_schema(apis.FETCH, self.request.api_version)
        topic_cls = element_type(cls, "responses")
        partition_cls = element_type(topic_cls, "partitions")
        aborted_cls = element_type(partition_cls, "aborted_transactions")
        topics = []
        for topic in self.body.topics:
            partitions = []
            for entry in topic.partitions:
                got = fetched.get((topic.topic, entry.partition), Fetched(NOT_LEADER, -1, -1, -1, b""))
                partitions.append(
                    make(
                        partition_cls,
                        partition_index=entry.partition,
                        error_code=ErrorCode(got.error),
                        high_watermark=got.high_watermark,
                        last_stable_offset=got.last_stable_offset,
                        log_start_offset=got.log_start_offset,
                        aborted_transactions=tuple(
                            make(aborted_cls, producer_id=p, first_offset=f) for p, f in got.aborted
                        ),
                        preferred_read_replica=-1,
                        records=got.records,
                    )
                )
            topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
        return make(cls, error_code=ErrorCode.none, session_id=0, responses=tuple(topics))

    # ---- ListOffsets and OffsetForLeaderEpoch

    async def _forwarded(
        self,
        name_field: str,
        index_field: str,
        migrated: list[tuple[tuple[str, int], PartitionMigration, Any]],
    ) -> dict[tuple[str, int], Any]:
        """A ListOffsets or OffsetForLeaderEpoch for the partitions not migrated, asked of their brokers:
        each one's answer entry, or the error it failed with. The migrated ones go to ``migrated``."""
        body = self.body
        parts: dict[Part, list[tuple[str, Any]]] = {}
        answered: dict[tuple[str, int], Any] = {}
        for topic in body.topics:
            for entry in topic.partitions:
                key = (getattr(topic, name_field), getattr(entry, index_field))
                migration = self._moved(*key)
                if migration is not None:
                    migrated.append((key, migration, entry))
                    continue
                node = await self._node(self.cluster, *key, migrated=False)
                if node is None:
                    answered[key] = NOT_LEADER
                else:
                    parts.setdefault((self.cluster, True, node), []).append((key[0], entry))

        def build(entries: list[tuple[str, Any]], _: Part) -> Any:
            topics = _grouped(type(body.topics[0]), "partitions", entries, name_field=name_field)
            return dataclasses.replace(body, topics=topics)

        for part, answer in (await self._ask_parts(parts, build)).items():
            if isinstance(answer, Exception):
                answered |= {(topic, getattr(e, index_field)): NOT_LEADER for topic, e in parts[part]}
                continue
            for topic in answer.topics:
                for partition in topic.partitions:
                    self._noted(part[0], getattr(topic, name_field), partition.error_code)
                    answered[getattr(topic, name_field), getattr(partition, index_field)] = partition
        return answered

    async def _list_offsets(self) -> Any:
        moved: list[Moved] = []
        answered = await self._forwarded("name", "partition_index", moved)
        found = await asyncio.gather(*(self._list_moved(m, e.timestamp) for _, m, e in moved))
        listed = {
            key: listed_of(a) if not isinstance(a, ErrorCode) else Listed(a, -1, -1)
            for key, a in answered.items()
        }
        listed |= {key: got for (key, _, _), got in zip(moved, found, strict=True)}
        cls = response_schema(apis.LIST_OFFSETS, self.request.api_version)
        topic_cls = element_type(cls, "topics")
        partition_cls = element_type(topic_cls, "partitions")
        topics = []
        for topic in self.body.topics:
            partitions = []
            for entry in topic.partitions:
                got = listed[topic.name, entry.partition_index]
                partitions.append(
                    make(
                        partition_cls,
                        partition_index=entry.partition_index,
                        error_code=ErrorCode(got.error),
                        timestamp=got.timestamp,
                        offset=got.offset,
                        leader_epoch=-1,
                    )
                )
            topics.append(make(topic_cls, name=topic.name, partitions=tuple(partitions)))
        return make(cls, topics=tuple(topics))

    async def _list_moved(self, migration: PartitionMigration, timestamp: int) -> Listed:
        """A migrated partition's ListOffsets, asking its clusters in the arithmetic's order."""
        arithmetic = self._arithmetic(migration)
        key = (migration.id.topic, migration.id.partition)
        for side in arithmetic.asks(timestamp):
            origin = side is Side.ORIGIN
            if origin and not arithmetic.origin_up:
                return arithmetic.unlisted()
            got = await self._list_one(migration.origin if origin else migration.target, key, timestamp)
            if got is None:
                return arithmetic.unlisted() if origin else Listed(NOT_LEADER, -1, -1)
            answer = arithmetic.listed(side, timestamp, got)
            if answer is not None:
                return answer
        return Listed(NOT_LEADER, -1, -1)

    async def _list_one(self, cluster: str, key: tuple[str, int], timestamp: int) -> Listed | None:
        """One partition's ListOffsets on ``cluster``, at the client's API version if it asked one, else
        at the newest the gateway offers; None when its leader cannot be reached."""
        node = await self.brokers.leader(cluster, *key)
        if node is None:
            return None
        request = self.request if self.request.api_key == apis.LIST_OFFSETS else None
        try:
            answer = await self.brokers.list_offsets(cluster, node, request, key, timestamp)
        except Exception:  # unreachable, timed out, refused: the caller decides what that means
            self.brokers.forget(cluster, key[0])
            return None
        self._noted(cluster, key[0], ErrorCode(answer.error))
        return answer

    async def _offsets_for_epochs(self) -> Any:
        """OffsetForLeaderEpoch: forwarded for partitions not migrated; for a migrated one (whose
        epochs clients were told are unknown) the client log's end, which no truncation ever lowers."""
        moved: list[Moved] = []
        answered = await self._forwarded("topic", "partition", moved)
        cls = response_schema(apis.OFFSET_FOR_LEADER_EPOCH, self.request.api_version)
        topic_cls = element_type(cls, "topics")
        partition_cls = element_type(topic_cls, "partitions")
        latest = await asyncio.gather(*(self._list_moved(m, LATEST) for _, m, _ in moved))
        for (key, _, entry), end in zip(moved, latest, strict=True):
            answered[key] = make(
                partition_cls,
                error_code=ErrorCode(end.error),
                partition=key[1],
                leader_epoch=entry.leader_epoch,
                end_offset=end.offset,
            )
        topics = []
        for topic in self.body.topics:
            partitions = []
            for e in topic.partitions:
                got = answered[topic.topic, e.partition]
                if isinstance(got, ErrorCode):
                    got = make(
                        partition_cls, error_code=got, partition=e.partition, leader_epoch=-1, end_offset=-1
                    )
                partitions.append(got)
            topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(partitions)))
        return make(cls, topics=tuple(topics))


def _grouped(
    topic_cls: Any, partitions_field: str, entries: list[tuple[str, Any]], *, name_field: str
) -> Any:
    """Partition entries, by topic in first-seen order, as a request's topics field."""
    by_topic: dict[str, list[Any]] = {}
    for topic, entry in entries:
        by_topic.setdefault(topic, []).append(entry)
    return tuple(
        topic_cls(**{name_field: topic, partitions_field: tuple(found)}) for topic, found in by_topic.items()
    )


def _sessionless(body: Any, topics: Any, wait: timedelta) -> Any:
    """A Fetch of ``topics`` outside any fetch session."""
    return replace_known(
        body, topics=topics, max_wait=wait, session_id=0, session_epoch=-1, forgotten_topics_data=()
    )


def _read_entry(entry: Any, read: Read) -> Any:
    """A fetch partition entry asking ``read``'s cluster at its offset, without the client's epochs
    (they are neither cluster's)."""
    return replace_known(
        entry, fetch_offset=read.offset, current_leader_epoch=-1, last_fetched_epoch=-1, log_start_offset=-1
    )


def _entry_for(body: Any, key: tuple[str, int]) -> Any:
    return next(p for t in body.topics if t.topic == key[0] for p in t.partitions if p.partition == key[1])


def _fetched(partition: Any) -> Fetched:
    return Fetched(
        int(partition.error_code),
        partition.high_watermark,
        getattr(partition, "last_stable_offset", -1),
        getattr(partition, "log_start_offset", -1),
        batches.without_epochs(partition.records or b""),
        tuple(
            (a.producer_id, a.first_offset) for a in getattr(partition, "aborted_transactions", None) or ()
        ),
    )


def listed_of(partition: Any) -> Listed:
    """A ListOffsets answer's partition (v1 on: kio knows no v0, so the gateway never offers it)."""
    return Listed(int(partition.error_code), partition.offset, partition.timestamp)


def _shifted(target_offset: int, arithmetic: Arithmetic) -> int:
    return target_offset if target_offset < 0 else max(target_offset, arithmetic.base) + arithmetic.delta
