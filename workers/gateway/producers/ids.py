"""Which cluster issued each client's idempotent producer id, and the ids the gateway takes of its own
on other clusters when the producer's batches move there (see :mod:`workers.gateway.producers.translation`).

What is known here is a cache of what :class:`ProducerStore` keeps in ZooKeeper for every gateway: read
there on a miss (the id was issued through another gateway or process, or before a restart) and at the
first batch after a routing epoch changed (another process may have moved the producer meanwhile),
written there before anything relies on it (the answer to InitProducerId, a batch sent as whom or from
which sequence)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from datetime import timedelta

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from switchyard.identity import Identity
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.upstream import UpstreamError
from workers.gateway.producers.store import ProducerStore, Reached
from workers.gateway.producers.translation import Origin, ProducerRoute, Translation
from workers.gateway.routing import apis

_REMEMBERED = 100_000
_NOT_YET = frozenset(
    {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator}
)
_TAKE_WITHIN_S = 10.0
"""Well inside a client's request time-out (30 s by default in the Java client and librdkafka)."""
_UNREADY_SPELL_S = 60.0
"""A cluster last unready longer ago than this is given the whole time again."""
Key = tuple[Identity, int]


@dataclass
class _Known:
    route: ProducerRoute
    version: int
    """The stored node's version it was read or written at."""
    epoch: int
    """The routing epoch it was known at: a producer moves only at a flip, so within one epoch it holds."""


class ProducerIds:
    def __init__(self, brokers: BrokerDirectory, store: ProducerStore) -> None:
        self.brokers, self.store = brokers, store
        self._routes = Reached(store, "producer routes")
        self._known: dict[Key, _Known] = {}
        self._new_routes: dict[str, asyncio.Lock] = {}
        """One per cluster: a producer's first batches there take one id, and a slow cluster holds up
        only the producers moving to it."""
        self._unready: dict[str, float] = {}
        """Per cluster: since when it has answered InitProducerId with "not yet" (``take``)."""

    async def issued(self, identity: Identity, producer_id: int, cluster: str, epoch: int) -> None:
        """``cluster`` issued ``producer_id`` to the client (its InitProducerId answer): stored before
        the client hears of it, so that any gateway its batches reach knows."""
        route, key = ProducerRoute(cluster, None), (identity, producer_id)
        try:
            _, version = await asyncio.to_thread(self.store.load, identity, producer_id)
            if await asyncio.to_thread(self.store.save, identity, producer_id, route, version):
                self._keep(key, _Known(route, version + 1, epoch))
        except KazooException:  # known here only, as before there was a store: said once per outage
            self._keep(key, _Known(route, -1, epoch))
            self._routes.unreached(producer_id)

    async def translation(
        self, identity: Identity, producer_id: int, cluster: str, epoch: int
    ) -> Translation | None:
        """As whom a client's idempotent producer writes to ``cluster`` under routing ``epoch``: None for
        its own id (issued there, never moved, or unknown to every gateway); else the gateway's own id
        there, taken afresh each time the producer's batches move to another cluster."""
        key = (identity, producer_id)
        known = self._known.get(key)
        if known is None or known.epoch != epoch or known.route.cluster != cluster:
            known = await self._load(key, epoch)
        if known is None or known.route.cluster == cluster:
            return known.route.translation if known else None
        async with self._new_routes.setdefault(cluster, asyncio.Lock()):
            while (known := await self._load(key, epoch)) is not None and known.route.cluster != cluster:
                taken = await self.take(cluster)
                origin = origin_of(known.route, producer_id)
                moved = ProducerRoute(cluster, dataclasses.replace(taken, origin=origin))
                if await self._save(key, moved, known.version):
                    self._keep(key, _Known(moved, known.version + 1, epoch))
                    return moved.translation
        return known.route.translation if known else None

    def translating(self, identity: Identity, producer_id: int, cluster: str) -> Translation | None:
        """The translation this process writes the producer's batches to ``cluster`` with (None: none)."""
        known = self._known.get((identity, producer_id))
        return known.route.translation if known is not None and known.route.cluster == cluster else None

    async def remember(self, identity: Identity, producer_id: int, translation: Translation) -> Translation:
        """Store where ``translation``'s partitions' sequences start, a first batch having set one, before
        that batch is sent. Another process that stored a start for a partition first wins (its starts
        are merged into ``translation``, which the caller compares with what it used); another process
        that moved the producer to another id wins too: the translation to send with is returned."""
        key = (identity, producer_id)
        while (known := self._known.get(key)) is not None and known.route.translation is translation:
            if await self._save(key, known.route, known.version):
                known.version += 1
                return translation
            stored = await self._load(key, known.epoch)  # theirs merged into ours where the same id
            if stored is None or stored.route.cluster != known.route.cluster:
                return translation  # moved on meanwhile: the cluster's answer to this batch says so
            if stored.route.translation is not translation:
                return stored.route.translation or translation
        return translation

    async def take(self, cluster: str) -> Translation:
        """A producer id of the gateway's own on ``cluster``, asked again while the broker is still
        getting a block of ids from its controller: a broker that never issued an id answers its first
        InitProducerId with COORDINATOR_LOAD_IN_PROGRESS, and failing there closed the client's
        connection at the first batch a switch moved. The time allowed is the cluster's, not each
        take's: producers queued behind one that gave up ask once each, not for as long again."""
        now = time.monotonic()
        since = self._unready.get(cluster)
        if since is None or now - since > _UNREADY_SPELL_S:
            since = now
        deadline, pause = since + _TAKE_WITHIN_S, 0.05
        while True:
            upstream = self.brokers.upstream(cluster, None)
            try:
                answer = await upstream.ask(
                    apis.INIT_PRODUCER_ID,
                    self.brokers.version(apis.INIT_PRODUCER_ID),
                    transactional_id=None,
                    transaction_timeout=timedelta(minutes=1),
                    producer_id=-1,
                    producer_epoch=-1,
                )
            finally:
                upstream.close()
            if answer.error_code == ErrorCode.none:
                self._unready.pop(cluster, None)
                return Translation(answer.producer_id, answer.producer_epoch)
            if answer.error_code in _NOT_YET:
                self._unready[cluster] = since
            if answer.error_code not in _NOT_YET or time.monotonic() + pause > deadline:
                raise UpstreamError(f"{cluster}: InitProducerId failed: {answer.error_code.name}")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def _load(self, key: Key, epoch: int) -> _Known | None:
        found = await self._routes.load(*key)
        if found is None:  # ZooKeeper out of reach: what is known here goes on serving
            return self._known.get(key)
        route, version = found
        if route is None:
            self._known.pop(key, None)
            return None
        known = _Known(self._shared(key, route), version, epoch)
        self._keep(key, known)
        return known

    def _shared(self, key: Key, route: ProducerRoute) -> ProducerRoute:
        """``route`` as read from the store, with the translation this process already writes with where
        it is the same one, the stored starts added to it (theirs win): every request of the process
        shares one translation. With a copy, a start one request set and is storing would be unseen by
        the next, which would start that partition's sequences at 0 again — a batch the cluster then
        takes for a duplicate of the first and acknowledges without writing it."""
        current = self._known.get(key)
        mine = current.route.translation if current is not None else None
        theirs = route.translation
        if (
            mine is None
            or theirs is None
            or current is None
            or current.route.cluster != route.cluster
            or mine.producer_id != theirs.producer_id
        ):
            return route
        mine.merge(theirs)
        return dataclasses.replace(route, translation=mine)

    async def _save(self, key: Key, route: ProducerRoute, version: int) -> bool:
        """Store ``route`` over ``version``; False if another wrote first. ZooKeeper out of reach, it is
        known here only (True)."""
        return await self._routes.save(*key, route, version) is not False

    def _keep(self, key: Key, known: _Known) -> None:
        """Insert, dropping the oldest entries past a bound (the table grows with client restarts)."""
        self._known[key] = known
        while len(self._known) > _REMEMBERED:
            del self._known[next(iter(self._known))]


def origin_of(route: ProducerRoute, producer_id: int) -> Origin:
    """Where ``route`` sent the client's batches, and as whom (``producer_id``: the client's own id)."""
    if (t := route.translation) is None:
        return Origin(route.cluster, producer_id)
    epoch_shift = t.client_epoch - t.epoch if t.client_epoch >= 0 else None  # stored before epochs were
    return Origin(route.cluster, t.producer_id, dict(t.first_sequence), epoch_shift)
