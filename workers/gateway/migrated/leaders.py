"""Which real broker leads each partition of a cluster, for the requests the gateway splits itself
(:mod:`workers.gateway.migrated.partitions`): a forwarded request goes to the broker its connection
stands for, a split one to each partition's leader.

Asked of the cluster when first needed, per topic, and again after an answer says the leader moved
(``forget``) or after ``ttl_s``; concurrent askers of one topic share one question.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

log = logging.getLogger(__name__)
AskMetadata = Callable[[str, str], Awaitable[Any]]
"""(cluster, topic) -> that cluster's Metadata answer for the topic (real node ids)."""


class Leaders:
    def __init__(self, ask: AskMetadata, *, ttl_s: float = 30.0) -> None:
        self._ask = ask
        self.ttl_s = ttl_s
        self._known: dict[tuple[str, str], tuple[float, dict[int, int]]] = {}
        self._asking: dict[tuple[str, str], asyncio.Future[dict[int, int]]] = {}

    async def leader(self, cluster: str, topic: str, partition: int) -> int | None:
        """The real node id leading the partition on ``cluster``; None if none does or none answers."""
        key = (cluster, topic)
        now = asyncio.get_running_loop().time()
        known = self._known.get(key)
        if known is None or now - known[0] > self.ttl_s:
            try:
                leaders = await self._asked(key)
            except Exception as exc:
                log.warning("cannot tell which broker of %s leads %s: %r", cluster, topic, exc)
                return None
            known = self._known[key] = (now, leaders)
        node = known[1].get(partition)
        return node if node is not None and node >= 0 else None

    def forget(self, cluster: str, topic: str) -> None:
        self._known.pop((cluster, topic), None)

    async def _asked(self, key: tuple[str, str]) -> dict[int, int]:
        asking = self._asking.get(key)
        if asking is None:
            asking = self._asking[key] = asyncio.ensure_future(self._question(*key))
            asking.add_done_callback(lambda _: self._asking.pop(key, None))
        return await asyncio.shield(asking)

    async def _question(self, cluster: str, topic: str) -> dict[int, int]:
        answer = await self._ask(cluster, topic)
        found = [t for t in answer.topics if t.name == topic]
        return {p.partition_index: p.leader_id for t in found for p in t.partitions}
