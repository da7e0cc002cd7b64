"""Each cluster's own topic ids, for the requests and answers that name topics by id alone.

Clients see one id per topic, derived from its name (:mod:`workers.gateway.brokers.topic_identity`);
each cluster has its own. Most answers carry the name beside the id, and most requests the gateway
offers name topics by name; a consumer-protocol heartbeat (KIP-848) does neither: the member's owned
partitions and its assignment name topics by id only. Those ids are put in the cluster's or the
client's terms through this table: learnt from every Metadata answer that passes (the client asked
for its topics' metadata before it subscribed), and on a miss — a topic created since, a gateway
restarted — from one Metadata request for all of the cluster's topics, which replaces what was known.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable

from workers.gateway.brokers.topic_identity import ZERO, topic_id

log = logging.getLogger(__name__)
AskNames = Callable[[str], Awaitable[Iterable[tuple[str, uuid.UUID]]]]
"""Every topic of a cluster, as (name, the cluster's id)."""


ASK_AGAIN_S = 1.0
"""How soon after asking a cluster for its topics a miss asks again: ids no topic has (a client's
mistake, a topic deleted) cost one Metadata request a second at most, not one per heartbeat."""


class RealIds:
    def __init__(self, ask: AskNames) -> None:
        self._ask = ask
        self._real: dict[str, dict[str, uuid.UUID]] = {}
        """Per cluster: each topic's id there, by name."""
        self._named: dict[str, dict[uuid.UUID, str]] = {}
        """Per cluster: the name of each id there, and of each id clients see."""
        self._asking: dict[str, tuple[float, asyncio.Future[None]]] = {}
        """Per cluster: when it was last asked for all its topics, and that asking (one at a time)."""

    def learn(self, cluster: str, topics: Iterable[tuple[str | None, uuid.UUID | None]]) -> None:
        """Note (name, the cluster's id) pairs, as a Metadata answer gives them."""
        real, named = self._real.setdefault(cluster, {}), self._named.setdefault(cluster, {})
        for name, found in topics:
            if name and found is not None and found != ZERO and real.get(name) != found:
                stale = real.get(name)
                if stale is not None:  # deleted and created again: the old id names nothing now
                    named.pop(stale, None)
                real[name] = found
                named[found] = named[topic_id(name)] = name

    async def name(self, cluster: str, given: uuid.UUID) -> str | None:
        """The topic that ``given`` — the cluster's id or the one clients see — names (None: none, or the
        cluster could not be asked; logged)."""
        found = self._named.get(cluster, {}).get(given)
        if found is None:
            await self._refresh(cluster)
            found = self._named.get(cluster, {}).get(given)
        return found

    async def real(self, cluster: str, presented: uuid.UUID) -> uuid.UUID | None:
        """The cluster's id of the topic clients know as ``presented`` (None: no topic there)."""
        name = await self.name(cluster, presented)
        return self._real.get(cluster, {}).get(name) if name is not None else None

    async def presented(self, cluster: str, real: uuid.UUID) -> uuid.UUID | None:
        """The id clients see for the topic the cluster knows as ``real`` (None: no topic there)."""
        name = await self.name(cluster, real)
        return topic_id(name) if name is not None else None

    async def _refresh(self, cluster: str) -> None:
        """The cluster's topics, asked for at most once per ``ASK_AGAIN_S`` and one asking at a time; its
        answer replaces what was known (topics deleted since are forgotten)."""
        asked = self._asking.get(cluster)
        if asked is None or (asked[1].done() and time.monotonic() - asked[0] > ASK_AGAIN_S):
            asked = self._asking[cluster] = (time.monotonic(), asyncio.ensure_future(self._replace(cluster)))
        await asyncio.shield(asked[1])

    async def _replace(self, cluster: str) -> None:
        try:
            topics = list(await self._ask(cluster))
        except Exception as exc:
            log.warning("cannot list the topics of %s to name a topic id: %s", cluster, exc)
            return
        self._real[cluster], self._named[cluster] = {}, {}
        self.learn(cluster, topics)
