"""What the gateway does with each API, and what a request tells routing (its topics, its group).

- answered here: ApiVersions, SASL handshake/authenticate, Metadata with an empty topic list;
- blockable data, group and transaction requests: held while their identity is blocked, a retriable error when
  they reach a virtual broker of a cluster the identity is no longer bound to (see
  :mod:`workers.gateway.routing.decision`);
- everything else is forwarded to the cluster the identity is bound to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import Request
from workers.gateway.producers.translation import producer_of

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS = 11, 12, 13, 14, 15
SASL_HANDSHAKE, API_VERSIONS, INIT_PRODUCER_ID = 17, 18, 22
OFFSET_FOR_LEADER_EPOCH, SASL_AUTHENTICATE, DESCRIBE_CLUSTER, DESCRIBE_PRODUCERS = 23, 36, 60, 61
CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, DESCRIBE_TOPIC_PARTITIONS = 19, 20, 21, 75
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 24, 25, 26, 28
GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY = 71, 72

CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE = 68, 69
GROUP_APIS = frozenset(
    {OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT}
)
"""Requests of a group's members, classic (JoinGroup and the rest) and of the consumer protocol
(KIP-848: one heartbeat that joins, reconciles and leaves): routed by the group, held with it."""
MEMBERSHIP_APIS = frozenset({JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP})
"""Group APIs a broker refuses for an empty group id (INVALID_GROUP_ID). OffsetCommit and OffsetFetch
take one (Kafka keeps them for the empty group, for backward compatibility), as FindCoordinator does."""
PARTITION_APIS = frozenset({PRODUCE, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH})
TRANSACTION_APIS = frozenset({ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT})
"""A transactional producer's requests that begin, grow or end its transaction: held with its writes, so
that none of its transactions changes on the old cluster once a switch has blocked it (a marker written
there after the block would move the source's end, and a commit of offsets would come after the group
sync). A saga waits for the transactions open at the block to end (``activities/transactions.py``)."""
BLOCKABLE = GROUP_APIS | PARTITION_APIS | TRANSACTION_APIS
PRODUCER_APIS = frozenset({PRODUCE, INIT_PRODUCER_ID}) | TRANSACTION_APIS
"""Requests only a producer sends: a connection that carried one is a producer's (``from_a_producer``)."""
TELEMETRY_APIS = frozenset({GET_TELEMETRY_SUBSCRIPTIONS, PUSH_TELEMETRY})
"""Client metrics (KIP-714): librdkafka asks for its subscription after connecting and again while it
runs, over a connection that also carries its data."""
SHIELDABLE = BLOCKABLE | {FIND_COORDINATOR, INIT_PRODUCER_ID} | TELEMETRY_APIS
"""What a shielded cluster's identities get answered by the gateway, instead of a closed connection
(see :mod:`workers.gateway.routing.blocking`)."""
UNVOUCHED_HELD = BLOCKABLE | {INIT_PRODUCER_ID}
"""What a gateway that cannot vouch for its routing holds, and never writes to a broker: what writes
records, commits offsets, or begins, ends or fences a transaction (an InitProducerId aborts its
transactional id's open transaction) — each may be routed otherwise by a change it has not heard of."""
ANY_BROKER = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER, DESCRIBE_TOPIC_PARTITIONS})
"""Requests every broker of a cluster answers alike: one that came on the virtual broker of a broker
the cluster's metadata does not list now (restarting) goes to any broker, not a closed connection.
Closed, kafkajs's group leader lost the Metadata its assignment needed, never synced, and its group
stalled for a minute, its commits refused (a chaos trial: the broker back 0.5 s before, not yet listed)."""
LONG_POLLS = frozenset({FETCH, JOIN_GROUP, SYNC_GROUP})
"""Requests a broker may hold for long (a Fetch up to its max_wait, a join or sync until the rebalance
ends); a newer epoch that routes them elsewhere answers them at once (workers.gateway.routing.inflight)."""

WITHHELD = frozenset({
    CONSUMER_GROUP_DESCRIBE,  # an admin request naming topics by id: such groups are not described
    76, 77, 78, 79, 90, 91, 92,  # KIP-932's share groups: their heartbeats, reads, acknowledgements, offsets
    88, 89,  # KIP-1071's streams groups
})  # fmt: skip
"""APIs brokers offer and the gateway does not: the groups of the newer protocols, whose members, holds
and commits it does not handle (the Java client then fails at start, saying the cluster lacks the
protocol)."""

VERSION_CAPS = {
    PRODUCE: 12,  # v13+ names topics by id; routing needs names
    FETCH: 12,  # v13+ names topics by id, v16+ real brokers: its answers are not rewritten but for epochs
    OFFSET_COMMIT: 9,
    ADD_PARTITIONS_TO_TXN: 3,  # v4+ batches several producers' transactions: between brokers only
    OFFSET_FETCH: 7,  # v8+ batches several groups into one request
    FIND_COORDINATOR: 3,  # v4+ batches several keys into one request
    METADATA: 12,
}
"""The highest version the gateway offers, where it is lower than what kio and the brokers know."""


@dataclass(frozen=True)
class Context:
    """What routing needs to know about a request."""

    topics: tuple[str, ...] = ()
    group: str | None = None
    expects_response: bool = True
    producer: tuple[int, int] | None = None
    """(producer id, epoch) of an idempotent, non-transactional Produce; None otherwise."""


def from_a_producer(request: Request) -> bool:
    """Whether ``request`` is one only a producer sends (a transaction's coordinator looked up included)."""
    key = request.api_key
    return key in PRODUCER_APIS or (key == FIND_COORDINATOR and getattr(request.body, "key_type", 0) == 1)


def refusal(request: Request) -> ErrorCode | None:
    """The error a broker answers ``request`` with before routing could matter, if any, or the gateway
    refuses it with whatever the routing: the gateway gives that answer itself (held or not)."""
    if request.api_key in MEMBERSHIP_APIS and not request.body.group_id:
        return ErrorCode.invalid_group_id
    return None


def context_of(request: Request) -> Context:
    """Read the request body only as far as routing needs; other APIs carry no routing context.

    An empty group name is no group for routing (no binding key can name it): such a request follows
    its identity's other keys, to the broker that answers it."""
    key = request.api_key
    if key not in PARTITION_APIS and key not in GROUP_APIS and key not in (METADATA, FIND_COORDINATOR):
        return Context()
    body = request.body
    if key == PRODUCE:
        return Context(
            _names(t.name for t in body.topic_data),
            expects_response=body.acks != 0,
            producer=None if body.transactional_id else producer_of_body(body),
        )
    if key == FETCH:
        return Context(_names(t.topic for t in body.topics))
    if key == LIST_OFFSETS:
        return Context(_names(t.name for t in body.topics))
    if key == OFFSET_FOR_LEADER_EPOCH:
        return Context(_names(t.topic for t in body.topics))
    if key == METADATA:
        return Context(_names(t.name for t in body.topics or ()))
    if key == FIND_COORDINATOR:
        is_group = getattr(body, "key_type", 0) == 0  # v0 has no key type: always a group
        return Context(group=(body.key or None) if is_group else None)
    if key == OFFSET_COMMIT:
        return Context(_names(t.name for t in body.topics), group=body.group_id or None)
    return Context(group=body.group_id or None)


def _names(names: object) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n for n in names if n))  # type: ignore[attr-defined]


def producer_of_body(body: Any) -> tuple[int, int] | None:
    """(producer id, epoch) of a Produce's first idempotent batch (None: it has none)."""
    for topic in body.topic_data:
        for partition in topic.partition_data:
            found = producer_of(partition.records)
            if found is not None:
                return found[0], found[1]
    return None
