"""A write to a broker the gateway cannot reach waits for its partitions to be led elsewhere.

When a broker dies, its cluster moves the leadership of its partitions only once it gives up on the
broker (KRaft: ``broker.session.timeout.ms``, 9 s by default). Until then its Metadata still names the
dead broker, so a client told at once that its connection is gone comes straight back to it, and is
told again: kafkajs's default retries (five, ~9 s of back-off) ran out 7.6-12 s after a broker of three
was killed, and its sends failed (chaos run 10, trial 38). Held until the cluster names another leader
— at most as long as a blocked identity's write is held — the client's next attempt finds the new one.

Only a write of which nothing was sent to that broker waits: the connection to it was never made, so
nothing of what was to go there can have been written. (A request the gateway split may have had its
other parts written elsewhere; the client's resend writes those again, as it would had the connection
closed at once.)
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from switchyard.frames.protocol import FrameError
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.upstream import UpstreamError

POLL_S = 0.5
"""How often the cluster is asked who leads the partitions."""
_ASK_S = 2.0
"""How long one question may take: a broker that is slow to answer is asked again at the next poll."""


def produced_to(body: Any) -> dict[str, set[int]]:
    """The partitions a Produce ``body`` writes to, by topic."""
    return {t.name: {p.index for p in t.partition_data} for t in body.topic_data}


async def led_elsewhere(
    brokers: BrokerDirectory, cluster: str, node: int, partitions: dict[str, set[int]], until: float
) -> str:
    """Wait until ``cluster`` names a live leader other than ``node`` for every one of ``partitions``
    that it led, lists ``node`` no more, or takes connections to it again; or until ``until``
    (``time.perf_counter``). Why the wait ended, for the log."""
    while (left := until - time.perf_counter()) > 0:
        await asyncio.sleep(min(POLL_S, left))
        try:
            async with asyncio.timeout(_ASK_S):
                ended = await _ended(brokers, cluster, node, partitions)
        except (UpstreamError, FrameError, OSError, TimeoutError):
            continue  # asked again at the next poll
        if ended is not None:
            return ended
    return "its hold time ran out"


async def _ended(
    brokers: BrokerDirectory, cluster: str, node: int, partitions: dict[str, set[int]]
) -> str | None:
    answers = [await brokers.topic_metadata(cluster, topic) for topic in partitions]
    if not any(b.node_id == node for answer in answers for b in answer.brokers):
        return f"broker {node} is not in the cluster's metadata"
    leaders = {
        p.leader_id
        for answer in answers
        for t in answer.topics
        for p in t.partitions
        if p.partition_index in partitions.get(t.name or "", set())
    }
    if leaders and node not in leaders and -1 not in leaders:
        return "its partitions are led by other brokers"
    host, port = brokers.real_address(cluster, node)
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return None
    writer.close()
    return f"broker {node} takes connections again"
