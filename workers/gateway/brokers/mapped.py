"""Requests and answers of a partition whose copy's offsets differ, in the offsets clients see.

Where an identity is bound to the target of a promoted link whose offset map is not identical, clients
see the topic's home offsets (:mod:`switchyard.mirror.presented`): the offsets a client sends — where a
Fetch reads from, what it commits — go to the target as the target's, and those in the target's answers
— record batches, ends, listed offsets, committed offsets, where a write landed — come back as home
offsets. A DeleteRecords goes in the target's offsets too (Kafka Streams purges its repartition topics
up to what it committed): sent as the client numbered it, it named the wrong record there, beyond the end
(OFFSET_OUT_OF_RANGE) or, where the client's offsets run behind the target's, records not yet read.
Batches are rebased by their headers alone (:mod:`workers.gateway.framing.batches`): a copy's
batch never spans two segments of the map. One that does (written otherwise) would be misplaced, so its
partition is answered with the retriable error instead, and logged.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.mirror.presented import Presented
from workers.gateway.framing import batches
from workers.gateway.routing import apis

log = logging.getLogger(__name__)
Lookup = Callable[[str, int], Presented | None]
"""The translation of a topic's partition on the cluster asked (None: its offsets are the clients')."""

_REQUESTS = {
    # API: (topics field, topic name field, partitions field, partition index field, offset fields)
    apis.FETCH: ("topics", "topic", "partitions", "partition", ("fetch_offset", "log_start_offset")),
    apis.OFFSET_COMMIT: ("topics", "name", "partitions", "partition_index", ("committed_offset",)),
    apis.TXN_OFFSET_COMMIT: ("topics", "name", "partitions", "partition_index", ("committed_offset",)),
    apis.DELETE_RECORDS: ("topics", "name", "partitions", "partition_index", ("offset",)),
}
_ANSWERS = {
    apis.FETCH: ("responses", "topic", "partitions", "partition_index",
                 ("high_watermark", "last_stable_offset", "log_start_offset")),
    apis.LIST_OFFSETS: ("topics", "name", "partitions", "partition_index", ("offset",)),
    apis.OFFSET_FETCH: ("topics", "name", "partitions", "partition_index", ("committed_offset",)),
    apis.PRODUCE: ("responses", "name", "partition_responses", "index", ("base_offset", "log_start_offset")),
    apis.OFFSET_FOR_LEADER_EPOCH: ("topics", "topic", "partitions", "partition", ("end_offset",)),
    apis.DELETE_RECORDS: ("topics", "name", "partitions", "partition_index", ("low_watermark",)),
}  # fmt: skip
_ASKED = {
    apis.FETCH: ("topics", "topic"),
    apis.LIST_OFFSETS: ("topics", "name"),
    apis.OFFSET_FETCH: ("topics", "name"),
    apis.PRODUCE: ("topic_data", "name"),
    apis.OFFSET_FOR_LEADER_EPOCH: ("topics", "topic"),
    apis.DELETE_RECORDS: ("topics", "name"),
}
"""Where a request whose answer is translated names its topics (an OffsetFetch may name none: all)."""
TRANSLATED_REQUESTS, TRANSLATED_ANSWERS = frozenset(_REQUESTS), frozenset(_ANSWERS)
"""The APIs whose requests, and whose answers, name offsets of partitions."""


def topics_of(api_key: int, body: Any, *, answer: bool) -> list[str] | None:
    """The topics a request names whose offsets may need translating, in the request (``answer``
    False) or in its answer (True); None: all of them (an OffsetFetch naming none)."""
    shape = (_ASKED if answer else _REQUESTS).get(api_key)
    if shape is None:
        return []
    topics_field, name_field = shape[0], shape[1]
    topics = getattr(body, topics_field, None)
    if topics is None:
        return None
    return [getattr(t, name_field) for t in topics if getattr(t, name_field)]


def answered_topics(api_key: int, body: Any) -> list[str]:
    """The topics an answer names."""
    shape = _ANSWERS[api_key]
    return [getattr(t, shape[1]) for t in getattr(body, shape[0], None) or () if getattr(t, shape[1])]


def request(api_key: int, body: Any, lookup: Lookup) -> Any:
    """``body`` with the offsets it names on translated partitions as the cluster asked numbers them."""
    shape = _REQUESTS.get(api_key)
    if shape is None:
        return body
    return _each(body, shape, lookup, lambda presented, offset, *_: presented.to_target(offset), None)


def answer(api_key: int, body: Any, lookup: Lookup) -> Any:
    """``body`` (a decoded answer) with the offsets it names on translated partitions as clients see
    them."""
    shape = _ANSWERS.get(api_key)
    if shape is None:
        return body
    extra = _fetched if api_key == apis.FETCH else None
    return _each(body, shape, lookup, _to_client, extra)


def _to_client(presented: Presented, offset: int, field: str, partition: Any) -> int:
    """A position (an end, a committed offset, a log start) as clients see it; a record's offset (where a
    Produce's batch landed, the record a ListOffsets found by its time) as its record's."""
    if field == "base_offset" or getattr(partition, "timestamp", -1) >= 0:
        return presented.to_client(offset)
    return presented.position_to_client(offset)


def _each(
    body: Any,
    shape: tuple[str, str, str, str, tuple[str, ...]],
    lookup: Lookup,
    move: Callable[[Presented, int, str, Any], int],
    extra: Callable[[Presented, str, int, Any], Any] | None,
) -> Any:
    topics_field, name_field, partitions_field, index_field, offset_fields = shape
    changed = False
    topics = []
    for topic in getattr(body, topics_field, None) or ():
        name = getattr(topic, name_field)
        partitions = []
        for given in getattr(topic, partitions_field):
            index = getattr(given, index_field)
            presented = lookup(name, index) if name else None
            if presented is None:
                partitions.append(given)
                continue
            moved = {
                f: move(presented, getattr(given, f), f, given) for f in offset_fields if hasattr(given, f)
            }
            partition = dataclasses.replace(given, **moved)
            partitions.append(extra(presented, name, index, partition) if extra is not None else partition)
            changed = True
        topics.append(dataclasses.replace(topic, **{partitions_field: tuple(partitions)}))
    if not changed:
        return body
    return dataclasses.replace(body, **{topics_field: tuple(topics)})


def _fetched(presented: Presented, topic: str, index: int, partition: Any) -> Any:
    """A Fetch answer's partition: its batches rebased, its aborted transactions' first offsets moved."""
    aborted = tuple(
        dataclasses.replace(a, first_offset=presented.to_client(a.first_offset))
        for a in partition.aborted_transactions or ()
    )
    records = partition.records or b""
    try:
        found = batches.read(records)
    except batches.BatchError as exc:
        log.error("%s[%d]: a fetched batch cannot be translated: %s", topic, index, exc)
        return _refused(partition)
    for batch in found:
        if not presented.spans(batch.base_offset, batch.last_offset):
            log.error(
                "%s[%d]: the batch at %d-%d spans two segments of the link's offset map: not translated",
                topic, index, batch.base_offset, batch.last_offset,
            )  # fmt: skip
            return _refused(partition)
    rebased = batches.rebased_each(records, found, presented.to_client)
    return dataclasses.replace(
        partition,
        aborted_transactions=aborted if partition.aborted_transactions is not None else None,
        records=rebased,
    )


def _refused(partition: Any) -> Any:
    return dataclasses.replace(
        partition, error_code=ErrorCode.not_leader_or_follower, records=b"", aborted_transactions=()
    )
