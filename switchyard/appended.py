"""Each partition's log end at its leader: the records appended there, committed or not yet.

The high watermark, which ListOffsets and every Fetch report, counts committed records only. A record
a leader appended but its in-sync followers have not copied yet is above it, and is committed later,
when they copy it or the cluster drops them from the in-sync set: with a follower killed, records
appended 14 s before a switch's block were committed 8 s after it (a chaos trial at 5d520c9), though
their producer had been told they failed. A switch that fenced the source at its high watermark would
either find the source moved (and abandon the switch) or, had the records come in after the check, leave
them behind. No client API asks the leader's log end; OffsetForLeaderEpoch asked for the leader's own
epoch answers it (the broker's ``UnifiedLog.endOffsetForEpoch``), so that request is Switchyard's own
(:mod:`switchyard.wire`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_for_leader_epoch.v4.request import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from switchyard.wire import Again, Wire, asked_until, refused

Key = tuple[str, int]

MOVING = frozenset({
    ErrorCode.leader_not_available, ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch, ErrorCode.replica_not_available, ErrorCode.offset_not_available,
    ErrorCode.kafka_storage_error,
})  # fmt: skip
"""A partition whose leader is moving, or is not the one the metadata named: asked again, found anew."""
CONSUMER = BrokerId(-1)


def leader_ends(wire: Wire, keys: Iterable[Key], timeout_s: float) -> dict[Key, int]:
    """Each partition's log end at its leader (see the module). ``TimeoutError`` when some partition's
    leader did not answer within ``timeout_s``; a ``KafkaException`` for what the cluster refused (a
    topic it does not have, say)."""
    wanted = sorted(set(keys))

    def attempt(deadline: float) -> dict[Key, int]:
        leaders = _leaders(wire, wanted, deadline)
        ends: dict[Key, int] = {}
        for address, partitions in leaders.items():
            by_topic: dict[str, list[OffsetForLeaderPartition]] = defaultdict(list)
            for (topic, partition), epoch in partitions.items():
                by_topic[topic].append(OffsetForLeaderPartition(
                    partition=i32(partition), current_leader_epoch=i32(epoch), leader_epoch=i32(epoch)
                ))  # fmt: skip
            asked = OffsetForLeaderEpochRequest(
                replica_id=CONSUMER,
                topics=tuple(
                    OffsetForLeaderTopic(topic=TopicName(t), partitions=tuple(p)) for t, p in by_topic.items()
                ),
            )
            answer = wire.ask(address, asked, deadline)
            for result in answer.topics:
                for p in result.partitions:
                    refused(p.error_code, MOVING)
                    if p.end_offset < 0:  # an epoch the leader has not taken up yet
                        raise Again(f"{result.topic}[{p.partition}]: no end for epoch {p.leader_epoch}")
                    ends[result.topic, int(p.partition)] = int(p.end_offset)
        missing = [k for k in wanted if k not in ends]
        if missing:
            raise Again(f"no end said for {_named(missing)}")
        return ends

    return asked_until(timeout_s, f"no leader of {_named(wanted)}", attempt)


def _leaders(wire: Wire, wanted: list[Key], deadline: float) -> dict[tuple[str, int], dict[Key, int]]:
    """Each leader's address, with the partitions of ``wanted`` it leads and their leader epochs."""
    topics = sorted({t for t, _ in wanted})
    asked = MetadataRequest(
        topics=tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    metadata = wire.ask_any(asked, deadline)
    brokers = {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}
    leaders: dict[tuple[str, int], dict[Key, int]] = defaultdict(dict)
    wanted_set = set(wanted)
    for topic in metadata.topics:
        refused(topic.error_code, MOVING)
        for p in topic.partitions:
            key = (str(topic.name), int(p.partition_index))
            if key not in wanted_set:
                continue
            refused(p.error_code, MOVING)
            if int(p.leader_id) not in brokers:
                raise Again(f"{key[0]}[{key[1]}] has no leader the cluster lists")
            leaders[brokers[int(p.leader_id)]][key] = int(p.leader_epoch)
    return leaders


def _named(keys: list[Key]) -> str:
    named = ", ".join(f"{t}[{p}]" for t, p in keys[:5])
    return named + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
