"""What the gateway needs to know of mirror links: which topics are a mirror's copy (only the mirror
writes them until promoted), which link carries a group's commits from one cluster to another, and that
link's offset map (read from its target; once per promoted link, whose map is final)."""

from __future__ import annotations

import asyncio

from switchyard.config import Config
from switchyard.mirror.mapstore import LinkRecords, read_link
from switchyard.model import Link, LinkState
from switchyard.routing.snapshot import RoutingSnapshot

_LINKS_REMEMBERED = 100


class LinkLookup:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._mirrored: dict[tuple[str, str], bool] = {}
        self._mirrored_in: RoutingSnapshot | None = None
        self._records: dict[tuple[str, int], asyncio.Future[LinkRecords]] = {}

    def mirrored(self, snapshot: RoutingSnapshot, cluster: str, topic: str) -> bool:
        """Whether ``topic`` on ``cluster`` is a mirror's copy: only the mirror writes it until promoted."""
        if snapshot is not self._mirrored_in:
            self._mirrored, self._mirrored_in = {}, snapshot
        found = self._mirrored.get((cluster, topic))
        if found is None:
            found = self._mirrored[(cluster, topic)] = any(
                link.target == cluster and link.state is not LinkState.PROMOTED and link.copies(topic)
                for link in snapshot.links.values()
            )
        return found

    def carrying_link(
        self, snapshot: RoutingSnapshot, source: str, target: str, topics: tuple[str, ...]
    ) -> Link | None:
        """The link that copies all of ``topics`` from ``source`` to ``target``: the one whose offset map
        carries a commit made on ``source`` over to ``target`` (None: there is none)."""
        for link in snapshot.links.values():
            if link.source == source and link.target == target and all(link.copies(t) for t in topics):
                return link
        return None

    async def link_records(self, link: Link) -> LinkRecords:
        """A link's offset map and final positions, from its target. Read once per promoted link (its
        map is final then); a link still copying is read each time."""
        bootstrap = self.config.clusters[link.target].bootstrap
        if link.state is not LinkState.PROMOTED:
            return await asyncio.to_thread(read_link, bootstrap, link.id)
        key = (link.id, link.epoch)
        found = self._records.get(key)
        if found is None or (found.done() and found.exception() is not None):
            found = self._records[key] = asyncio.ensure_future(
                asyncio.to_thread(read_link, bootstrap, link.id)
            )
            if len(self._records) > _LINKS_REMEMBERED:
                del self._records[next(iter(self._records))]
        return await asyncio.shield(found)
