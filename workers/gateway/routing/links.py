"""What the gateway needs to know of mirror links: which topics are a mirror's copy (only the mirror
writes them until promoted), which link carries a group's commits from one cluster to another, that
link's offset map (read from its target; once per promoted link, whose map is final), where a
promoted link's copy is presented in its source's offsets (:mod:`switchyard.mirror.presented`), and
how far a link's mirror has copied (a purge of its source deletes no further)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException

from switchyard.config import Config
from switchyard.errors import RoutingUnavailable
from switchyard.mirror.mapstore import LinkRecords, read_link
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.presented import Presented
from switchyard.mirror.status import read_status
from switchyard.model import Link, LinkState
from switchyard.routing.layout import Layout
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.brokers.mapped import Lookup

log = logging.getLogger(__name__)
_LINKS_REMEMBERED = 100


class LinkLookup:
    def __init__(self, config: Config, zk: KazooClient, layout: Layout) -> None:
        self.config, self.zk, self.layout = config, zk, layout
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

    async def purge_bound(self, snapshot: RoutingSnapshot, cluster: str, body: Any) -> Any:
        """A DeleteRecords ``body`` for ``cluster`` that deletes no record a running or paused link from
        ``cluster`` has yet to copy: each partition's offset at most where the mirror reports it has
        copied to (nothing, where no mirror reports the partition). Kafka Streams purges its
        repartition topics up to what it has committed, which a loaded mirror was 44 records behind;
        the copy stopped at the gap and the switch was refused (a fresh clone's suite). Streams purges
        again at its next interval, further."""
        copying = [
            link for link in snapshot.links.values()
            if link.source == cluster and link.state is not LinkState.PROMOTED
            and any(link.copies(t.name) for t in body.topics)
        ]  # fmt: skip
        if not copying:
            return body
        keys = [
            (t.name, p.partition_index) for t in body.topics for p in t.partitions
            if any(link.copies(t.name) for link in copying)
        ]  # fmt: skip
        try:
            copied = await asyncio.to_thread(self._copied, copying, keys)
        except (RoutingUnavailable, KazooException) as exc:  # ZooKeeper out: purge nothing this time
            log.warning(
                "purge of %s on %s held back: the mirror's progress is unknown: %s", keys, cluster, exc
            )
            copied = dict.fromkeys(keys, 0)
        topics = []
        for topic in body.topics:
            if not any(link.copies(topic.name) for link in copying):
                topics.append(topic)
                continue
            partitions = []
            for p in topic.partitions:
                most = copied[(topic.name, p.partition_index)]
                wanted = most if p.offset == -1 else min(p.offset, most)  # -1: up to the high watermark
                partitions.append(dataclasses.replace(p, offset=wanted))
            topics.append(dataclasses.replace(topic, partitions=tuple(partitions)))
        return dataclasses.replace(body, topics=tuple(topics))

    def _copied(self, links: list[Link], keys: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """For each of ``keys`` the least, over those of ``links`` that copy its topic, of the next source
        offset the link's mirror has copied it to (0 where no process of it reports the partition; each
        reports only what its target acknowledged)."""
        reported: list[tuple[Link, dict[tuple[str, int], int]]] = []
        for link in links:
            copied: dict[tuple[str, int], int] = {}
            for member in read_status(self.zk, self.layout, link.id):
                for status in member.partitions:
                    copied[status.key] = max(copied.get(status.key, 0), status.mirrored)
            reported.append((link, copied))
        return {
            key: min(copied.get(key, 0) for link, copied in reported if link.copies(key[0])) for key in keys
        }

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
                    resume=records.resumes.get((topic, partition)),
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
