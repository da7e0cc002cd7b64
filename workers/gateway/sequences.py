"""Which of a moved idempotent producer's batches may go to its new cluster (see
:mod:`workers.gateway.producers`).

A partition's sequences start there at the client's next sequence by the cluster its batches left: the
origin's last sequence for the id they carried there, asked with DescribeProducers (the origin is
blocked by then, so it no longer changes). Where the origin cannot tell — shielded, unreachable, the id
unknown there — the first batch sets the start, as before.

Until the new cluster holds the producer on a partition, only the batch at the start may go there: a
cluster takes any sequence as the first of a producer it does not know, so a later batch sent first
would be written with a gap before it. Once it holds it (an answer acknowledged the start, or it says
so, asked with DescribeProducers when a later batch comes), it checks sequences itself.

A request with a batch that may not go is answered whole without being sent: NOT_LEADER_OR_FOLLOWER,
which the client resends in order, except DUPLICATE_SEQUENCE_NUMBER for a batch the origin holds already
(a retry whose answer was lost; clients count it delivered), OUT_OF_ORDER_SEQUENCE_NUMBER for one cut
across the start and INVALID_PRODUCER_EPOCH for one of an epoch the client left, as a broker would
answer each. Nothing on a partition goes past a batch refused so until its resend comes: a request
pipelined behind it would leave a gap, which the cluster refuses and librdkafka answers by bumping its
epoch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from workers.gateway import apis
from workers.gateway.directory import BrokerDirectory
from workers.gateway.entities import element_type, make
from workers.gateway.leaders import Leaders
from workers.gateway.producers import Place, Translation, place, sequence_span
from workers.gateway.protocol import request_schema
from workers.gateway.upstream import UpstreamError

log = logging.getLogger(__name__)
Key = tuple[str, int]
ASK_WITHIN_S = 5.0
"""A broker that has not answered DescribeProducers by then counts as unable to tell."""
_REFUSED = {
    Place.AHEAD: ErrorCode.not_leader_or_follower,
    Place.BEHIND: ErrorCode.duplicate_sequence_number,
    Place.ACROSS: ErrorCode.out_of_order_sequence_number,
}


class Unsendable(Exception):
    """A Produce that may not go to the cluster now; ``codes``: the error for each partition that may
    not (the others are refused with NOT_LEADER_OR_FOLLOWER, and sent again by the client)."""

    def __init__(self, codes: dict[Key, ErrorCode]) -> None:
        super().__init__(", ".join(f"{t}[{p}] {c.name}" for (t, p), c in sorted(codes.items())))
        self.codes = codes


class Sequences:
    def __init__(self, brokers: BrokerDirectory, leaders: Leaders) -> None:
        self.brokers, self.leaders = brokers, leaders

    async def check(
        self,
        body: Any,
        client_epoch: int,
        translation: Translation,
        cluster: str,
        reachable: Callable[[str], bool],
    ) -> None:
        """Set the start of each partition ``body`` (a Produce of the client's ``client_epoch``) writes
        first under ``translation`` on ``cluster``; :class:`Unsendable` if a batch may not go there now."""
        spans = {
            (t.name, p.index): span
            for t in body.topic_data
            for p in t.partition_data
            if (span := sequence_span(p.records)) is not None
        }
        if not translation.follow(client_epoch):  # as the broker answers a fenced epoch
            raise Unsendable(dict.fromkeys(spans, ErrorCode.invalid_producer_epoch))
        new = [key for key in spans if key not in translation.first_sequence]
        if new:
            found = await self._starts(translation, new, reachable)
            for key in new:
                translation.first_sequence.setdefault(key, found.get(key, spans[key][0]))
        codes: dict[Key, ErrorCode] = {}
        unsure = []
        for key, (first, last) in spans.items():
            refused = translation.refused.get(key)
            if refused is not None and place(first, last, refused) is Place.AHEAD:
                codes[key] = _REFUSED[Place.AHEAD]  # behind a refused batch: its resend goes first
                continue
            translation.refused.pop(key, None)
            where = place(first, last, translation.first_sequence[key])
            if where is Place.AHEAD and key not in translation.established:
                unsure.append(key)
            elif where in (Place.BEHIND, Place.ACROSS):
                codes[key] = _REFUSED[where]
        if unsure:  # the start written there (through another process, or just now)?
            holds = await self._last(cluster, translation.producer_id, unsure)
            translation.established.update(k for k in unsure if k in holds)
            codes |= {k: _REFUSED[Place.AHEAD] for k in unsure if k not in holds}
        if codes:  # the whole request is answered: every batch not refused otherwise is to be resent
            for key, (first, _) in spans.items():
                if codes.get(key, _REFUSED[Place.AHEAD]) == _REFUSED[Place.AHEAD]:
                    translation.refused.setdefault(key, first)
            raise Unsendable(codes)

    async def _starts(
        self, translation: Translation, keys: list[Key], reachable: Callable[[str], bool]
    ) -> dict[Key, int]:
        """The client's next sequence on each partition (those that cannot be told left out)."""
        if translation.restarted:
            return dict.fromkeys(keys, 0)
        origin = translation.origin
        if origin is None or not reachable(origin.cluster):
            return {}
        starts = {}
        for key, (epoch, sequence) in (await self._last(origin.cluster, origin.producer_id, keys)).items():
            start = origin.next_sequence(key, epoch, sequence, translation.client_epoch)
            if start is not None:
                starts[key] = start
        return starts

    async def _last(self, cluster: str, producer_id: int, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        """``producer_id``'s epoch and last sequence on each partition of ``cluster`` that holds it
        (partitions that do not, or that cannot be asked within ``ASK_WITHIN_S``, left out)."""
        try:
            return await asyncio.wait_for(self._asked(cluster, producer_id, keys), ASK_WITHIN_S)
        except TimeoutError:
            log.warning("%s did not say within %.0fs which producers it holds", cluster, ASK_WITHIN_S)
            return {}

    async def _asked(self, cluster: str, producer_id: int, keys: Iterable[Key]) -> dict[Key, tuple[int, int]]:
        by_leader: dict[int, dict[str, list[int]]] = {}
        for topic, partition in keys:
            node = await self.leaders.leader(cluster, topic, partition)
            if node is not None:
                by_leader.setdefault(node, {}).setdefault(topic, []).append(partition)
        asked = await asyncio.gather(*(self._ask(cluster, n, t) for n, t in by_leader.items()))
        found = {}
        for answer in asked:
            for topic in answer.topics if answer is not None else ():
                for partition in topic.partitions:
                    if partition.error_code != ErrorCode.none:
                        self.leaders.forget(cluster, topic.name)  # moved, most likely: asked again next time
                    for state in partition.active_producers:
                        if state.producer_id == producer_id and state.last_sequence >= 0:
                            key = (topic.name, partition.partition_index)
                            found[key] = (int(state.producer_epoch), int(state.last_sequence))
        return found

    async def _ask(self, cluster: str, node: int, topics: dict[str, list[int]]) -> Any:
        schema = request_schema(apis.DESCRIBE_PRODUCERS, 0)
        topic_cls = element_type(schema, "topics")
        asked = tuple(make(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in topics.items())
        upstream = self.brokers.upstream(cluster, node)
        try:
            return await upstream.ask(apis.DESCRIBE_PRODUCERS, 0, topics=asked)
        except (UpstreamError, OSError) as exc:
            log.warning("cannot ask broker %d of %s which producers it holds: %r", node, cluster, exc)
            return None
        finally:
            upstream.close()


def established(translation: Translation, answer: Any) -> None:
    """Note the partitions a Produce ``answer`` acknowledged under ``translation``: the cluster holds the
    producer there, and checks its sequences itself from then on."""
    for topic in answer.responses:
        for partition in topic.partition_responses:
            if partition.error_code == ErrorCode.none:
                translation.established.add((topic.name, partition.index))
