"""What the gateway keeps across connections for partitions a migration moved: each snapshot's
migrations indexed once, which broker leads each partition, and the producer ids idempotent producers
write to the migrations' targets as — those kept in ZooKeeper beside the producers' routes
(:mod:`workers.gateway.producers.store`): a client's connections land on any process of a gateway, and
one that took an id of its own there while another had written the client's first batches under its
id waited for ever for a batch already written (a chaos trial's Java producer, refused
NOT_LEADER_OR_FOLLOWER for 120 s after the process it wrote through was killed)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.identity import Identity
from switchyard.model import PartitionId
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.migrated.leaders import AskMetadata, Leaders
from workers.gateway.migrated.partitions import Migrations
from workers.gateway.producers.store import ProducerStore, Reached
from workers.gateway.producers.translation import Origin, ProducerRoute, Translation

_REMEMBERED = 100_000
Key = tuple[Identity, int, str, str]
"""(identity, the client's producer id, target, origin)."""


class Moved:
    def __init__(
        self,
        ask_metadata: AskMetadata,
        producer_id: Callable[[str], Awaitable[Translation]],
        store: ProducerStore | None = None,
    ) -> None:
        self.leaders = Leaders(ask_metadata)
        self._producer_id = producer_id
        self._routes = None if store is None else Reached(store, "migrated partitions' producer ids")
        self._index = Migrations(RoutingSnapshot(0))
        self._translations: dict[Key, asyncio.Future[Translation]] = {}
        self._versions: dict[Key, int] = {}
        """The stored node's version each translation was read or written at."""
        self.held_here: set[PartitionId] = set()
        """Partitions this process saw held while their migration's end was read: only for these is
        the origin's end where a producer's sequences go on. A process that first meets a migration in
        effect (started since) cannot tell whether its clients wrote to the target before the stored
        translation said where their sequences start, so there the first batch sets the start, as for
        a failover."""
        self._topics: dict[str, dict[str, tuple[int, ...]]] = {}
        """Per cluster, each topic's partitions' leaders (virtual ids), as its last Metadata answer through
        here said."""

    def learn(self, cluster: str, metadata: Any) -> None:
        """What a Metadata answer from ``cluster`` (virtual ids) says of its topics' partitions."""
        known = self._topics.setdefault(cluster, {})
        for topic in metadata.topics:
            if topic.name and topic.error_code == ErrorCode.none and topic.partitions:
                leaders = {p.partition_index: p.leader_id for p in topic.partitions}
                known[topic.name] = tuple(leaders.get(i, -1) for i in range(max(leaders) + 1))

    def topics(self, cluster: str) -> dict[str, tuple[int, ...]]:
        """The topics of ``cluster`` known here, each partition's last known leader (for when the cluster
        is shielded)."""
        return dict(self._topics.get(cluster, {}))

    def of(self, snapshot: RoutingSnapshot) -> Migrations:
        """``snapshot``'s migrations, indexed (once per snapshot)."""
        if self._index.snapshot is not snapshot:
            self._index = Migrations(snapshot)
        return self._index

    def note(self, snapshot: RoutingSnapshot) -> None:
        """``snapshot`` is applied here: the partitions whose writes it holds are seen held."""
        self.held_here.update(p for p, m in snapshot.migrations.items() if not m.in_effect)

    def seen_held(self, key: tuple[str, int]) -> bool:
        """Whether this process saw partition ``key`` (topic, partition) held (see ``held_here``)."""
        return PartitionId(*key) in self.held_here

    async def translation(
        self, identity: Identity, producer_id: int, cluster: str, origin: Origin
    ) -> Translation:
        """As whom a client's idempotent producer writes partitions migrated from ``origin.cluster`` to
        ``cluster``: an id of the gateway's own there, taken once by any of its processes and stored.
        Each partition's sequences start at the client's next sequence by the origin
        (:mod:`workers.gateway.producers.sequences`); the partition is written only there from then on."""
        key = (identity, producer_id, cluster, origin.cluster)
        found = self._translations.get(key)
        if found is None or (found.done() and found.exception() is not None):
            found = self._translations[key] = asyncio.ensure_future(self._taken(key, origin))
            while len(self._translations) > _REMEMBERED:
                oldest = next(iter(self._translations))
                del self._translations[oldest]
                self._versions.pop(oldest, None)
        return await asyncio.shield(found)

    async def remember(self, key: Key, translation: Translation) -> Translation:
        """Store where ``translation``'s partitions' sequences start (``key``: as for :meth:`translation`),
        a first batch having set one, before that batch is sent; where another process stored starts
        first, theirs are merged into it (the caller compares with what it used). Where another process
        stored another id (this one's was not stored: ZooKeeper was out of reach, or it was pruned), its
        is the one from then on: two ids on one partition, each process would wait for ever for batches
        written under the other."""
        while True:
            if await self._save(key, translation, self._versions.get(key, -1)):
                return translation
            stored = await self._load(key)
            if stored is None:
                self._versions.pop(key, None)  # removed meanwhile: stored afresh
                continue
            if stored.producer_id != translation.producer_id:
                future: asyncio.Future[Translation] = asyncio.get_running_loop().create_future()
                future.set_result(stored)
                self._translations[key] = future
                return stored
            translation.merge(stored)

    async def _taken(self, key: Key, origin: Origin) -> Translation:
        """The translation another process stored for the same producer and clusters (the client's
        batches may have reached the target through it); else an id taken here, stored — and where
        another process stored one first, its."""
        stored = await self._load(key)
        if stored is not None:
            return stored
        taken = dataclasses.replace(await self._producer_id(key[2]), origin=origin)
        if await self._save(key, taken, -1):
            return taken
        return await self._load(key) or taken

    async def _load(self, key: Key) -> Translation | None:
        """The stored translation (None: none, or ZooKeeper out of reach: what is known here serves)."""
        found = await self._routes.load(key[0], key[1], (key[3], key[2])) if self._routes else None
        if found is None or found[0] is None or found[0].translation is None:
            return None
        self._versions[key] = found[1]
        return found[0].translation

    async def _save(self, key: Key, translation: Translation, version: int) -> bool:
        """Store ``translation`` over ``version``; False if another wrote first. ZooKeeper out of reach, it
        is known here only (True), its version not moved."""
        if self._routes is None:
            return True
        saved = await self._routes.save(
            key[0], key[1], ProducerRoute(key[2], translation), version, (key[3], key[2])
        )
        if saved is None:
            return True
        if saved:
            self._versions[key] = version + 1
        return saved
