"""A consumer group's committed offsets, asked of its coordinator over Kafka's protocol directly.

librdkafka's ListConsumerGroupOffsets (2.16, and its master in late 2026) hands a coordinator's
NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE answer to the asking client's own consumer group, which an
AdminClient does not have: the process dies of a segfault (confluentinc/librdkafka#5040, open; the cores
of a worker and of mirrors that died so in a chaos run show ``rd_kafka_cgrp_op`` under
``rd_kafka_handle_OffsetFetch``). A broker's restart moves coordinators: one 100-trial run lost the
worker three times and the mirror twice so, and a switch's clients were held past their bound while the
worker came back. So these two requests, FindCoordinator and OffsetFetch, are Switchyard's own
(:mod:`switchyard.wire`), asked again while the group's coordinator moves, loads or cannot be reached,
until the caller's time-out.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.offset_fetch.v6.request import OffsetFetchRequest
from kio.schema.types import GroupId

from switchyard.wire import Wire, asked_until, refused

Key = tuple[str, int]

MOVING = frozenset(
    {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator}
)
"""A coordinator that is loading the group, moving, or not elected yet: asked again, found anew."""


def committed(wire: Wire, group: str, timeout_s: float) -> dict[Key, int]:
    """``group``'s committed offset per partition (partitions without one are left out).
    ``TimeoutError`` when no coordinator answered within ``timeout_s``; a ``KafkaException`` for anything
    else it refused (an unauthorised group, say)."""

    def attempt(deadline: float) -> dict[Key, int]:
        found = wire.ask_any(FindCoordinatorRequest(key=group), deadline)
        refused(found.error_code, MOVING)
        asked = OffsetFetchRequest(group_id=GroupId(group), topics=None)
        answer = wire.ask((found.host, int(found.port)), asked, deadline)
        refused(answer.error_code, MOVING)
        return {
            (topic.name, int(p.partition_index)): int(p.committed_offset)
            for topic in answer.topics
            for p in topic.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0
        }

    return asked_until(timeout_s, f"no coordinator of {group}", attempt)
