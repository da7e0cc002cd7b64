"""What the gateway needs to know of mirror links: which topics are a mirror's copy (only the mirror
writes them until promoted), which link carries a group's commits from one cluster to another, that
link's offset map (read from its target; once per promoted link, whose map is final), and where a
promoted link's copy is presented in its source's offsets (:mod:`switchyard.mirror.presented`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from switchyard.config import Config
from switchyard.mirror.mapstore import LinkRecords, read_link
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.presented import Presented
from switchyard.model import Link, LinkState
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.brokers.mapped import Lookup

_LINKS_REMEMBERED = 100


class LinkLookup:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._mirrored: dict[tuple[str, str], bool] = {}
        self._mirrored_in: RoutingSnapshot | None = None
        self._records: dict[tuple[str, int], asyncio.Future[LinkRecords]] = {}
        self._presents: dict[str, bool] = {}
        self._presents_in: RoutingSnapshot | None = None
        self._latest: dict[tuple[str, str], Link | None] = {}
        self._latest_in: RoutingSnapshot | None = None
        self._tables: dict[tuple[str, int], dict[str, dict[int, Presented]]] = {}
        """Per promoted link (id, epoch): its partitions whose copy's offsets differ, by topic."""

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
        """The link that copies all of ``topics`` from ``source`` to ``target``, the latest where several
        have (a switch over, back and over again): the one whose final positions a commit made on
        ``source`` is carried over to ``target`` against (None: there is none)."""
        found = [
            link for link in snapshot.links.values()
            if link.source == source and link.target == target and all(link.copies(t) for t in topics)
        ]  # fmt: skip
        return max(found, key=lambda link: link.epoch, default=None)

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

    def presents(self, snapshot: RoutingSnapshot, cluster: str) -> bool:
        """Whether any topic on ``cluster`` may be presented in other offsets than its own: ``cluster`` is
        the target of a promoted link whose topics' home is known (cheap: asked of every answer)."""
        if snapshot is not self._presents_in:
            self._presents, self._presents_in = {}, snapshot
        found = self._presents.get(cluster)
        if found is None:
            found = self._presents[cluster] = any(
                link.target == cluster and link.state is LinkState.PROMOTED and _home(snapshot, link)
                for link in snapshot.links.values()
            )
        return found

    async def presenter(
        self, snapshot: RoutingSnapshot, cluster: str, topics: Iterable[str]
    ) -> Lookup | None:
        """How ``topics``' partitions on ``cluster`` are translated to the offsets clients see
        (:mod:`switchyard.mirror.presented`); None when none of them is. A topic is translated on the
        target of the latest promoted link that copies it, through the links it reverses back to the
        topic's home, wherever that gives its records other offsets than the cluster's own: on a copy,
        and on the home itself after a switch back of records that transactions wrote."""
        if not self.presents(snapshot, cluster):
            return None
        if snapshot is not self._latest_in:
            self._latest, self._latest_in = {}, snapshot
        tables: dict[str, dict[int, Presented]] = {}
        for topic in dict.fromkeys(topics):
            if (cluster, topic) not in self._latest:  # asked of every answer: once per snapshot
                self._latest[(cluster, topic)] = _latest_promoted(snapshot, cluster, topic)
            link = self._latest[(cluster, topic)]
            if link is None:
                continue
            table = (await self._presented(snapshot, link)).get(topic)
            if table:
                tables[topic] = table
        if not tables:
            return None
        return lambda topic, partition: tables.get(topic, {}).get(partition)

    async def _presented(self, snapshot: RoutingSnapshot, link: Link) -> dict[str, dict[int, Presented]]:
        """``link``'s partitions whose records clients see at other offsets, by topic: its own map,
        through that of the link it reverses (whose home :func:`_home` found, so it is there)."""
        key = (link.id, link.epoch)
        tables = self._tables.get(key)
        if tables is None:
            reversed_ = snapshot.links[link.reverse_of] if link.reverse_of is not None else None
            through = await self._presented(snapshot, reversed_) if reversed_ is not None else {}
            before = reversed_.reverse_of if reversed_ is not None else None  # the target, presented earlier
            earlier = await self._presented(snapshot, snapshot.links[before]) if before is not None else {}
            records = await self.link_records(link)
            tables = {}
            for (topic, partition), (copied, target_end) in records.ends.items():
                found = Presented(
                    records.maps.get((topic, partition), OffsetMap()), copied, target_end,
                    through=through.get(topic, {}).get(partition), returns=reversed_ is not None,
                    earlier=earlier.get(topic, {}).get(partition),
                )  # fmt: skip
                if not found.identical:
                    tables.setdefault(topic, {})[partition] = found
            self._tables[key] = tables
            if len(self._tables) > _LINKS_REMEMBERED:
                del self._tables[next(iter(self._tables))]
        return tables


def _latest_promoted(snapshot: RoutingSnapshot, cluster: str, topic: str) -> Link | None:
    """The latest promoted link that copies ``topic`` to ``cluster``, where its chain back to the home is
    known (None: none)."""
    copying = [
        link for link in snapshot.links.values()
        if link.target == cluster and link.state is LinkState.PROMOTED and link.copies(topic)
    ]  # fmt: skip
    link = max(copying, key=lambda found: found.epoch, default=None)
    return link if link is not None and _home(snapshot, link) is not None else None


def _home(snapshot: RoutingSnapshot, link: Link) -> str | None:
    """The cluster whose offsets clients see for ``link``'s topics: the source of the link it reverses,
    and so on back to the first (None: a link in that chain is gone, so it is not known)."""
    seen = set()
    while link.reverse_of is not None:
        if link.reverse_of in seen or link.reverse_of not in snapshot.links:
            return None
        seen.add(link.reverse_of)
        link = snapshot.links[link.reverse_of]
    return link.source
