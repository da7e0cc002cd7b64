"""Error answers for blocked requests (and those of a shielded cluster): correct for the request's API
version, retriable, never silence.

Partition requests get NOT_LEADER_OR_FOLLOWER on every partition they name, which makes a stock client
refresh its metadata and retry; group and transaction requests get NOT_COORDINATOR, which makes it look
up the coordinator again. Both lead the client to the cluster its identity is bound to once the binding is
active there. Produce to a mirror topic is refused with TOPIC_AUTHORIZATION_FAILED, which is final.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import Request, encode_response, response_schema
from workers.gateway.routing import apis

NOT_LEADER = ErrorCode.not_leader_or_follower
NOT_COORDINATOR = ErrorCode.not_coordinator
COORDINATOR_NOT_AVAILABLE = ErrorCode.coordinator_not_available
TOPIC_AUTHORIZATION_FAILED = ErrorCode.topic_authorization_failed
TELEMETRY_ASK_AGAIN = datetime.timedelta(seconds=30)
"""How long a client told that no metrics are wanted waits before asking again: librdkafka's own wait
after a failed ask."""


@dataclass(frozen=True)
class OwnAnswer:
    """The gateway's answer to a request it does not send on, as a value: what decides it (the routing
    decision, a hold, a carry, a split) says only which, and the session's writer alone encodes it."""

    error: ErrorCode | None = None
    """None: the API's retriable error (see above); else this code in the same places."""
    codes: typing.Mapping[tuple[str, int], ErrorCode] = field(default_factory=dict)
    """For a Produce: per partition, a code in place of the retriable one (see ``produce_refused``)."""
    release: bool = False
    """For a ConsumerGroupHeartbeat: no error, and an assignment of nothing (``released``)."""

    def encoded(self, request: Request) -> bytes:
        if self.codes:
            return encode_response(request, produce_refused(request, self.codes))
        if self.release:
            return encode_response(request, released(request))
        return encode_response(request, blocked_response(request, request.body, self.error))


Reply = bytes | OwnAnswer | None
"""A request's answer: a broker's (bytes), the gateway's own (encoded by the session's writer alone), or
none (a request that expects no answer)."""


def blocked_response(request: Request, body: Any, error: ErrorCode | None = None) -> Any:
    """The response that refuses ``request`` (its decoded ``body``) with a retriable error, or with
    ``error`` in the same places."""
    cls = response_schema(request.api_key, request.api_version)
    key = request.api_key
    if key in (apis.FIND_COORDINATOR, apis.INIT_PRODUCER_ID):  # answered by a coordinator
        code = COORDINATOR_NOT_AVAILABLE if error is None else error
        return make(cls, error_code=code, node_id=-1, producer_id=-1, producer_epoch=-1)
    if key in apis.GROUP_APIS:
        return _group(cls, key, body, NOT_COORDINATOR if error is None else error)
    if key in apis.TRANSACTION_APIS:
        return _transaction(cls, key, body, NOT_COORDINATOR if error is None else error)
    if key == apis.PUSH_TELEMETRY:
        return make(cls, error_code=ErrorCode.unknown_subscription_id if error is None else error)
    if key == apis.GET_TELEMETRY_SUBSCRIPTIONS:
        return make(
            cls,
            error_code=ErrorCode.none if error is None else error,
            client_instance_id=uuid.uuid4() if body.client_instance_id is None else None,  # a first ask
            push_interval=TELEMETRY_ASK_AGAIN,
            requested_metrics=(),
        )
    code = NOT_LEADER if error is None else error
    if key == apis.PRODUCE:
        return _per_partition(
            cls, ("responses", "partition_responses", "index"),
            ((t.name, [p.index for p in t.partition_data]) for t in body.topic_data),
            code, base_offset=-1,
        )  # fmt: skip
    if key == apis.FETCH:  # records empty, never null: librdkafka fails to parse a null record set
        return _per_partition(
            cls, ("responses", "partitions", "partition_index"),
            ((t.topic, [p.partition for p in t.partitions]) for t in body.topics),
            code, high_watermark=-1, aborted_transactions=(), records=b"",
        )  # fmt: skip
    if key == apis.LIST_OFFSETS:
        return _per_partition(
            cls, ("topics", "partitions", "partition_index"),
            ((t.name, [p.partition_index for p in t.partitions]) for t in body.topics),
            code,
        )  # fmt: skip
    if key == apis.OFFSET_FOR_LEADER_EPOCH:
        return _per_partition(
            cls, ("topics", "partitions", "partition"),
            ((t.topic, [p.partition for p in t.partitions]) for t in body.topics),
            code,
        )  # fmt: skip
    raise ValueError(f"API {key} is not blockable")


RELEASE_HEARTBEAT = datetime.timedelta(seconds=5)
"""The heartbeat interval a released member is told (the coordinator's default): it acknowledges its
revocation at once, and heartbeats this often until it polls."""


def released(request: Request) -> Any:
    """A ConsumerGroupHeartbeat answered as a coordinator asks a member to give up every partition it owns:
    no error, the member's own id and epoch, an assignment of nothing. The client revokes them as in
    any rebalance (its application's callback, at its next poll), and may commit meanwhile."""
    cls = response_schema(request.api_key, request.api_version)
    body = request.body
    return make(
        cls, error_code=ErrorCode.none, member_id=body.member_id, member_epoch=body.member_epoch,
        heartbeat_interval=RELEASE_HEARTBEAT, assignment=make(element_type(cls, "assignment")),
    )  # fmt: skip


def produce_refused(request: Request, codes: typing.Mapping[tuple[str, int], ErrorCode]) -> Any:
    """A Produce answered without being sent: ``codes`` for the partitions it names, the retriable
    NOT_LEADER_OR_FOLLOWER for the others."""
    refused = blocked_response(request, request.body)
    return dataclasses.replace(
        refused,
        responses=tuple(
            dataclasses.replace(
                t,
                partition_responses=tuple(
                    dataclasses.replace(p, error_code=codes.get((t.name, p.index), p.error_code))
                    for p in t.partition_responses
                ),
            )
            for t in refused.responses
        ),
    )


def _group(cls: Any, key: int, body: Any, code: ErrorCode) -> Any:
    if key == apis.CONSUMER_GROUP_HEARTBEAT:  # an error's answer: the member keeps its epoch, asks again
        return make(cls, error_code=code, member_id=body.member_id, member_epoch=body.member_epoch)
    if key == apis.OFFSET_COMMIT:
        return _commits(cls, body, code)
    if key == apis.OFFSET_FETCH and not _has(cls, "error_code"):  # v0-1: errors per partition only
        return _per_partition(
            cls, ("topics", "partitions", "partition_index"),
            ((t.name, list(t.partition_indexes)) for t in body.topics or ()),
            code, committed_offset=-1,
        )  # fmt: skip
    return make(cls, error_code=code, generation_id=-1)


def _transaction(cls: Any, key: int, body: Any, code: ErrorCode) -> Any:
    if key == apis.ADD_PARTITIONS_TO_TXN:  # v0-3 (the gateway offers no more): errors per partition
        return _per_partition(
            cls, ("results_by_topic_v3_and_below", "results_by_partition", "partition_index"),
            ((t.name, list(t.partitions)) for t in body.v3_and_below_topics),
            code, error_field="partition_error_code",
        )  # fmt: skip
    if key == apis.TXN_OFFSET_COMMIT:
        return _commits(cls, body, code)
    return make(cls, error_code=code, producer_id=-1, producer_epoch=-1)


def _commits(cls: Any, body: Any, code: ErrorCode) -> Any:
    """An OffsetCommit or TxnOffsetCommit answer: ``code`` for each partition committed."""
    return _per_partition(
        cls, ("topics", "partitions", "partition_index"),
        ((t.name, [p.partition_index for p in t.partitions]) for t in body.topics),
        code,
    )  # fmt: skip


def _per_partition(
    cls: Any,
    shape: tuple[str, str, str],
    topics: typing.Iterable[tuple[str, list[int]]],
    code: ErrorCode,
    error_field: str = "error_code",
    **partition_values: Any,
) -> Any:
    """A response naming each (topic, partitions) with ``code`` in ``error_field``; ``shape`` names the
    response's topics field, its partitions field and the partition index field."""
    topics_field, partitions_field, index_field = shape
    topic_cls = element_type(cls, topics_field)
    partition_cls = element_type(topic_cls, partitions_field)
    name_field = "topic" if _has(topic_cls, "topic") else "name"
    partition_values = {k: v for k, v in partition_values.items() if _has(partition_cls, k)}
    return make(
        cls,
        **{
            topics_field: tuple(
                make(
                    topic_cls,
                    **{
                        name_field: name,
                        partitions_field: tuple(
                            make(partition_cls, **{index_field: i, error_field: code}, **partition_values)
                            for i in indexes
                        ),
                    },
                )
                for name, indexes in topics
            )
        },
    )


def _has(cls: Any, field_name: str) -> bool:
    return field_name in {f.name for f in dataclasses.fields(cls)}
