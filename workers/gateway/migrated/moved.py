"""What the gateway keeps across connections for partitions a migration moved: each snapshot's
migrations indexed once, which broker leads each partition, and the producer ids idempotent producers
write to the migrations' targets as."""

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
from workers.gateway.producers.translation import Origin, Translation

_REMEMBERED = 100_000


class Moved:
    def __init__(
        self, ask_metadata: AskMetadata, producer_id: Callable[[str], Awaitable[Translation]]
    ) -> None:
        self.leaders = Leaders(ask_metadata)
        self._producer_id = producer_id
        self._index = Migrations(RoutingSnapshot(0))
        self._translations: dict[tuple[Identity, int, str, str], asyncio.Future[Translation]] = {}
        self.held_here: set[PartitionId] = set()
        """Partitions this process saw held while their migration's end was read: only for these is
        the origin's end where a producer's sequences go on. A process that first meets a migration in
        effect (started since) cannot tell whether its clients wrote to the target through another
        process's id, so there the first batch sets the start, as for a failover."""
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

    async def translation(
        self, identity: Identity, producer_id: int, cluster: str, origin: Origin
    ) -> Translation:
        """As whom a client's idempotent producer writes partitions migrated from ``origin.cluster`` to
        ``cluster``: an id of the gateway's own there, taken once. Each partition's sequences start at
        the client's next sequence by the origin (:mod:`workers.gateway.producers.sequences`); the
        partition is written only there from then on."""
        key = (identity, producer_id, cluster, origin.cluster)
        found = self._translations.get(key)
        if found is None or (found.done() and found.exception() is not None):
            found = self._translations[key] = asyncio.ensure_future(self._taken(cluster, origin))
            while len(self._translations) > _REMEMBERED:
                del self._translations[next(iter(self._translations))]
        return await asyncio.shield(found)

    async def _taken(self, cluster: str, origin: Origin) -> Translation:
        return dataclasses.replace(await self._producer_id(cluster), origin=origin)
