"""Which of a moved idempotent producer's batches may go to its new cluster (see
:mod:`workers.gateway.producers.translation`).

A partition's sequences start there at the client's next sequence by the cluster its batches left: the
origin's last sequence for the id they carried there, asked with DescribeProducers (the origin is
blocked by then, so it no longer changes). Where the origin cannot tell — shielded, unreachable, the id
unknown there — the first batch sets the start, as before; but not while the origin's shield is fresh.
A failover shields the origin with batches in flight there, answered with the retriable error once the
gateway gives up on them (``SHIELD_GRACE_S``), and resent in order; a later batch of the same partition,
sent to the new leader meanwhile, would otherwise arrive first, be written as the start, and have the
earlier ones refused as out of order for as long as the client resends them (a chaos trial's Java
producer: until its delivery time-out, 79 records failed). Until the process's wait is over, with a
margin for the others', counted again from the change that moves routes off the origin (the flip:
``Shields.settling``), a partition without a start is answered NOT_LEADER_OR_FOLLOWER, so the client's
resends come in order.

Until the new cluster holds the producer on a partition, only the batch at the start may go there: a
cluster takes any sequence as the first of a producer it does not know, so a later batch sent first
would be written with a gap before it. Once it holds it in the current epoch (an answer acknowledged
the start, or it says so, asked with DescribeProducers when a later batch comes), it checks that
partition's sequences itself and the gateway no longer judges them (past 2**30 records the start would
look ahead of them).

A request with a batch that may not go is answered whole without being sent: NOT_LEADER_OR_FOLLOWER,
which the client resends in order, except DUPLICATE_SEQUENCE_NUMBER for a batch the origin holds already
(a retry whose answer was lost; clients count it delivered — only where the origin was asked),
OUT_OF_ORDER_SEQUENCE_NUMBER for one cut across the start or before a start the first batch set, and
INVALID_PRODUCER_EPOCH for one of an epoch the client left, as a broker would answer each. Nothing on a
partition goes past a batch refused so until its resend comes or the new cluster shows it written: a
request pipelined behind it would leave a gap, which the cluster refuses and librdkafka answers by
bumping its epoch (or, for the first batch in flight, with a fatal error).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import request_schema
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.migrated.leaders import Leaders
from workers.gateway.producers.translation import SEQUENCES, Place, Translation, place, sequence_span
from workers.gateway.routing import apis

log = logging.getLogger(__name__)
Key = tuple[str, int]
ASK_WITHIN_S = 5.0
"""A broker that has not answered DescribeProducers by then counts as unable to tell."""


class Unsendable(Exception):
    """A Produce that may not go to the cluster now; ``codes``: the error for each partition that may
    not (the others are refused with NOT_LEADER_OR_FOLLOWER, and sent again by the client)."""

    def __init__(self, codes: dict[Key, ErrorCode]) -> None:
        super().__init__(", ".join(f"{t}[{p}] {c.name}" for (t, p), c in sorted(codes.items())))
        self.codes = codes


class Sequences:
    def __init__(self, brokers: BrokerDirectory, leaders: Leaders) -> None:
        self.brokers, self.leaders = brokers, leaders
        self._unled: set[tuple[str, str, int]] = set()
        """(cluster, topic, partition) said to have no known leader: said once."""

    async def check(
        self,
        body: Any,
        client_epoch: int,
        translation: Translation,
        cluster: str,
        reachable: Callable[[str], bool],
        *,
        told: Callable[[Key], bool] = lambda _: True,
        settling: Callable[[str], bool] = lambda _: False,
    ) -> None:
        """Set the start of each partition ``body`` (a Produce of the client's ``client_epoch``) writes
        first under ``translation`` on ``cluster``: where the client left off on the origin, for the
        partitions the origin can tell that of (``told``), else at the first batch — once no batch sent
        to the origin can still be waiting there (``settling``: a cluster shielded, or routes moved off
        it, a moment ago); :class:`Unsendable` if a batch may not go there now."""
        spans = _spans(body)
        if not translation.follow(client_epoch):  # as the broker answers a fenced epoch
            raise Unsendable(dict.fromkeys(spans, ErrorCode.invalid_producer_epoch))
        new = [key for key in spans if key not in translation.first_sequence]
        if new:
            found = await self._starts(translation, [key for key in new if told(key)], reachable)
            early = translation.origin is not None and settling(translation.origin.cluster)
            unstarted = []
            for key in new:
                if key in translation.first_sequence:
                    continue
                if key not in found and early:
                    unstarted.append(key)
                    continue
                translation.first_sequence[key] = found.get(key, spans[key][0])
                if key not in found:
                    translation.guessed.add(key)
                _said_start(translation, cluster, key, told=key in found)
            if unstarted:  # the whole request is answered: the batches with a start are to be resent
                _mark(translation, {k: s for k, s in spans.items() if k in translation.first_sequence})
                raise Unsendable(dict.fromkeys(unstarted, ErrorCode.not_leader_or_follower))
        unsure = [key for key, span in spans.items() if not self._goes(translation, key, *span)]
        if not unsure:
            return
        held = await self._last(cluster, translation.producer_id, unsure)  # the new cluster asked
        codes: dict[Key, ErrorCode] = {}
        for key in unsure:
            code = _judged(translation, key, *spans[key], held.get(key))
            if code is not None:
                codes[key] = code
        if codes:  # the whole request is answered: the batches not refused otherwise are to be resent
            resent = ErrorCode.not_leader_or_follower
            _mark(translation, {k: s for k, s in spans.items() if codes.get(k, resent) == resent})
            raise Unsendable(codes)

    @staticmethod
    def _goes(translation: Translation, key: Key, first: int, last: int) -> bool:
        """Whether the batches may go without asking the new cluster: none refused before them, and
        the cluster holds the producer there (it checks them itself) or they are at the start."""
        mark = translation.refused.get(key)
        if mark is not None:
            if place(first, last, mark) is Place.AHEAD:
                return False  # behind a refused batch: unless that was written since, its resend first
            if place(first, last, mark) is not Place.BEHIND:
                del translation.refused[key]  # the resend
        return (
            key in translation.established
            or place(first, last, translation.first_sequence[key]) is Place.START
        )

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
            if node is None and (cluster, topic, partition) not in self._unled:
                self._unled.add((cluster, topic, partition))
                log.warning("%s names no leader of %s[%d]: not asked which producers it holds there",
                            cluster, topic, partition)  # fmt: skip
            elif node is not None:
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
        except Exception as exc:  # unreachable, or an answer it cannot read: taken as holding nothing
            log.warning("cannot ask broker %d of %s which producers it holds: %r", node, cluster, exc)
            return None
        finally:
            upstream.close()


def _said_start(translation: Translation, cluster: str, key: Key, *, told: bool) -> None:
    """Log where a partition's sequences start on the new cluster, and how it was known."""
    origin = translation.origin
    how = "told by its origin" if told else "its first batch's"
    if not told and origin is not None and not translation.restarted:
        how += f": {origin.cluster} did not say (unreachable, unasked, or holding none of its batches there)"
    log.info("producer %d on %s: %s[%d] starts at the client's sequence %d (%s)",
             translation.producer_id, cluster, *key, translation.first_sequence[key], how)  # fmt: skip


def established(translation: Translation, client_epoch: int, answer: Any) -> None:
    """Note the partitions a Produce ``answer`` acknowledged under ``translation``, sent in the client's
    ``client_epoch``: the cluster holds the producer there, and checks its sequences itself from then on
    (an answer to a batch of an epoch the client has left since says nothing of the new one)."""
    if client_epoch != translation.client_epoch:
        return
    for topic in answer.responses:
        for partition in topic.partition_responses:
            if partition.error_code == ErrorCode.none:
                translation.established.add((topic.name, partition.index))


def mark_refused(translation: Translation, body: Any) -> None:
    """A Produce of a moved producer answered with the retriable error by the gateway otherwise (held
    behind one so answered): nothing goes past its batches before their resend."""
    _mark(translation, _spans(body))


def _mark(translation: Translation, spans: dict[Key, tuple[int, int]]) -> None:
    for key, (first, _) in spans.items():
        translation.refused.setdefault(key, first)


def _spans(body: Any) -> dict[Key, tuple[int, int]]:
    """Each partition's (first, last) sequence in a Produce (``body``) of an idempotent producer."""
    return {
        (t.name, p.index): span
        for t in body.topic_data
        for p in t.partition_data
        if (span := sequence_span(p.records)) is not None
    }


def _judged(
    translation: Translation, key: Key, first: int, last: int, held: tuple[int, int] | None
) -> ErrorCode | None:
    """What batches that could not go unasked get (None: they go), the new cluster holding the producer
    on the partition at ``held`` (its epoch and last sequence there; None: it does not)."""
    start = translation.first_sequence[key]
    if held is not None and held[0] != translation.epoch:
        held = None  # an older epoch's state: the start of this one is not written
    mark = translation.refused.get(key)
    if mark is not None and place(first, last, mark) is Place.AHEAD:
        if held is None or (held[1] + start - mark) % SEQUENCES >= SEQUENCES // 2:
            return ErrorCode.not_leader_or_follower  # the refused batch is not written yet
        del translation.refused[key]  # resent through another process
    if held is not None:
        translation.established.add(key)  # it checks them itself from now on
        return None
    where = place(first, last, start)
    if where is Place.START:
        return None
    if where is Place.AHEAD:
        return ErrorCode.not_leader_or_follower
    if where is Place.BEHIND and key not in translation.guessed:
        return ErrorCode.duplicate_sequence_number  # the cluster it left holds it
    return ErrorCode.out_of_order_sequence_number  # as the new cluster would answer
