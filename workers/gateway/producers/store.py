"""Idempotent producers' routes, kept in ZooKeeper (``producers/<identity>/<producer id>``).

Which cluster issued a client's producer id, where its batches go now and as whom — the gateway's own
id there, and per partition the client's sequence the cluster saw as 0
(:mod:`workers.gateway.producers.translation`), and the same for its batches to partitions a migration
moved — must be known to every gateway a client reaches, to every process of one (``gateway.processes``: a
client's connections land on any of them) and to a gateway restarted. Kept in one process's memory only,
a restart after a switch sent the client's batches on untranslated: the cluster saw its own stale
sequences for the id, or an id it never issued, and the client stopped (OUT_OF_ORDER_SEQUENCE_NUMBER,
fatal to kafka-python; the soak found it).

A write is a compare-and-set on the node's version: two processes that move one producer at once agree
on one translation, and one that finds another's takes it. A node is written when a producer's id is
issued, when its batches move to another cluster, and when a partition's first batch there sets where
its sequences start; nodes untouched for ``STALE_S`` (a broker forgets an idle producer id after a day)
are removed by :func:`prune`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from switchyard.identity import Identity
from switchyard.routing.layout import Layout
from workers.gateway.producers.translation import Origin, ProducerRoute, Translation

log = logging.getLogger(__name__)
STALE_S = 24 * 3600.0
Migrated = tuple[str, str]
"""(origin, target) of partitions a migration moved: the route of a producer's writes to them is a node of
its own beside the producer's (``producers/<identity>/<[producer id, origin, target]>``)."""


class ProducerStore:
    def __init__(self, zk: KazooClient, layout: Layout) -> None:
        self.zk, self.layout = zk, layout

    def load(
        self, identity: Identity, producer_id: int, migrated: Migrated | None = None
    ) -> tuple[ProducerRoute | None, int]:
        """The stored route and the node's version (-1: none stored). ``migrated``: the route of the
        producer's writes to partitions migrated from one cluster to another, (origin, target)."""
        try:
            data, stat = self.zk.get(self._path(identity, producer_id, migrated))
        except NoNodeError:
            return None, -1
        return decode(data), stat.version

    def save(
        self, identity: Identity, producer_id: int, route: ProducerRoute, version: int,
        migrated: Migrated | None = None,
    ) -> bool:  # fmt: skip
        """Store ``route`` if the node is still at ``version`` (-1: absent); False if another wrote first."""
        path, data = self._path(identity, producer_id, migrated), encode(route)
        try:
            if version < 0:
                self.zk.create(path, data, makepath=True)
            else:
                self.zk.set(path, data, version=version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            return False
        return True

    def prune(self, older_than_s: float = STALE_S) -> int:
        """Remove the routes untouched for ``older_than_s``; how many."""
        return prune_leaves(self.zk, self.layout.folder("producers"), older_than_s)

    def _path(self, identity: Identity, producer_id: int, migrated: Migrated | None) -> str:
        key = quote(json.dumps([identity.app, identity.instance, identity.legacy_topic]), safe="")
        leaf = str(producer_id) if migrated is None else quote(json.dumps([producer_id, *migrated]), safe="")
        return f"{self.layout.folder('producers')}/{key}/{leaf}"


class Reached:
    """A :class:`ProducerStore` asked off the event loop by a long-lived process. ZooKeeper out of reach,
    a load or a save says None, what the process knows serves on, and the outage is said once: a
    producer's batches never wait for the store to come back."""

    def __init__(self, store: ProducerStore, what: str) -> None:
        self.store, self.what = store, what
        self._outage = False

    async def load(
        self, identity: Identity, producer_id: int, migrated: Migrated | None = None
    ) -> tuple[ProducerRoute | None, int] | None:
        """As :meth:`ProducerStore.load`; None: ZooKeeper out of reach."""
        try:
            found = await asyncio.to_thread(self.store.load, identity, producer_id, migrated)
        except KazooException:
            self.unreached(producer_id)
            return None
        self._outage = False
        return found

    async def save(
        self, identity: Identity, producer_id: int, route: ProducerRoute, version: int,
        migrated: Migrated | None = None,
    ) -> bool | None:  # fmt: skip
        """As :meth:`ProducerStore.save`; None: ZooKeeper out of reach (the route known here only)."""
        try:
            return await asyncio.to_thread(self.store.save, identity, producer_id, route, version, migrated)
        except KazooException:
            self.unreached(producer_id)
            return None

    def unreached(self, producer_id: int) -> None:
        if not self._outage:
            self._outage = True
            log.warning("producer %d: ZooKeeper out of reach, %s known here only", producer_id, self.what)


def prune_leaves(zk: KazooClient, folder: str, older_than_s: float) -> int:
    """Remove the nodes under ``folder`` that have no children and were untouched for ``older_than_s``;
    how many (one written meanwhile stays: the delete is at the version seen)."""
    cutoff_ms, removed = (time.time() - older_than_s) * 1000, 0
    try:
        children = zk.get_children(folder)
    except NoNodeError:
        return 0
    for child in children:
        path = f"{folder}/{child}"
        stat = zk.exists(path)
        if stat is None:
            continue
        if stat.numChildren:
            removed += prune_leaves(zk, path, older_than_s)
        elif stat.mtime < cutoff_ms:
            try:
                zk.delete(path, version=stat.version)
                removed += 1
            except (NoNodeError, BadVersionError):
                pass
    return removed


def encode(route: ProducerRoute) -> bytes:
    translation: dict[str, Any] | None = None
    if (t := route.translation) is not None:
        origin = t.origin
        translation = {
            "producer_id": t.producer_id,
            "epoch": t.epoch,
            "first_sequence": _keyed(t.first_sequence),
            "client_epoch": t.client_epoch,
            "restarted": t.restarted,
            "guessed": _keyed(dict.fromkeys(t.guessed, 0)),
            "origin": None
            if origin is None
            else {
                "cluster": origin.cluster,
                "producer_id": origin.producer_id,
                "shift": None if origin.shift is None else _keyed(origin.shift),
                "epoch_shift": origin.epoch_shift,
            },
        }
    return json.dumps({"cluster": route.cluster, "translation": translation}).encode()


def decode(data: bytes) -> ProducerRoute:
    raw = json.loads(data)
    found = raw.get("translation")
    translation = None
    if found is not None:
        origin = None
        if (was := found.get("origin")) is not None:
            shift = None if was["shift"] is None else _unkeyed(was["shift"])
            shifted = was["epoch_shift"]
            epoch_shift = None if shifted is None else int(shifted)
            origin = Origin(str(was["cluster"]), int(was["producer_id"]), shift, epoch_shift)
        translation = Translation(
            int(found["producer_id"]),
            int(found["epoch"]),
            _unkeyed(found["first_sequence"]),
            origin,
            int(found.get("client_epoch", -1)),  # absent in routes stored before epochs were followed
            bool(found.get("restarted", False)),
            set(_unkeyed(found.get("guessed", {}))),
        )
    return ProducerRoute(str(raw["cluster"]), translation)


def _keyed(sequences: dict[tuple[str, int], int]) -> dict[str, int]:
    return {f"{topic}\0{partition}": seq for (topic, partition), seq in sequences.items()}


def _unkeyed(stored: dict[str, Any]) -> dict[tuple[str, int], int]:
    found = {}
    for key, seq in stored.items():
        topic, _, partition = key.rpartition("\0")
        found[(topic, int(partition))] = int(seq)
    return found
