"""Which cluster issued each client's idempotent producer id, and the ids the gateway takes of its own
on other clusters when the producer's batches move there (see :mod:`workers.gateway.producers`)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.identity import Identity
from workers.gateway import apis
from workers.gateway.directory import BrokerDirectory
from workers.gateway.producers import ProducerRoute, Translation
from workers.gateway.upstream import UpstreamError

_REMEMBERED = 100_000


class ProducerIds:
    def __init__(self, brokers: BrokerDirectory) -> None:
        self.brokers = brokers
        self.routes: dict[tuple[Identity, int], ProducerRoute] = {}
        """Where each client's idempotent producer writes now, and as whom (from InitProducerId on)."""
        self._new_routes: dict[str, asyncio.Lock] = {}
        """One per cluster: a producer's first batches there take one id, and a slow cluster holds up
        only the producers moving to it."""

    def issued(self, identity: Identity, producer_id: int, cluster: str) -> None:
        remember(self.routes, (identity, producer_id), ProducerRoute(cluster, None))

    async def translation(self, identity: Identity, producer_id: int, cluster: str) -> Translation | None:
        """As whom a client's idempotent producer writes to ``cluster``: None for its own id (issued there,
        never moved, or unknown to this gateway); else the gateway's own id there, taken afresh each time
        the producer's batches move to another cluster (see :mod:`workers.gateway.producers`)."""
        key = (identity, producer_id)
        route = self.routes.get(key)
        if route is None or route.cluster == cluster:
            return route.translation if route else None
        async with self._new_routes.setdefault(cluster, asyncio.Lock()):
            route = self.routes[key]
            if route.cluster != cluster:
                route = ProducerRoute(cluster, await self.take(cluster))
                remember(self.routes, key, route)
        return route.translation

    async def take(self, cluster: str) -> Translation:
        """A producer id of the gateway's own on ``cluster``."""
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
            await upstream.close()
        if answer.error_code != ErrorCode.none:
            raise UpstreamError(f"{cluster}: InitProducerId failed: {answer.error_code.name}")
        return Translation(answer.producer_id, answer.producer_epoch)


def remember(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Insert, dropping the oldest entries past a bound (these tables grow with client restarts)."""
    table[key] = value
    while len(table) > _REMEMBERED:
        del table[next(iter(table))]
