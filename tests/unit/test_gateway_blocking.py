"""Every blockable request, at every version the gateway offers, gets a well-formed retriable error."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import (
    Request,
    decode_response,
    encode_response,
    known_versions,
    parse_request,
    request_schema,
)
from tests.helpers.sessions import raw
from workers.gateway.routing import apis, blocking

# API key -> (topics field, partitions field, partition index field or None for a list of ints)
SHAPES = {
    apis.PRODUCE: ("topic_data", "partition_data", "index"),
    apis.FETCH: ("topics", "partitions", "partition"),
    apis.LIST_OFFSETS: ("topics", "partitions", "partition_index"),
    apis.OFFSET_FOR_LEADER_EPOCH: ("topics", "partitions", "partition"),
    apis.OFFSET_COMMIT: ("topics", "partitions", "partition_index"),
    apis.OFFSET_FETCH: ("topics", "partition_indexes", None),
    apis.ADD_PARTITIONS_TO_TXN: ("v3_and_below_topics", "partitions", None),
    apis.TXN_OFFSET_COMMIT: ("topics", "partitions", "partition_index"),
}


def offered(key: int) -> list[int]:
    versions = known_versions(key)
    assert versions is not None
    low, high = versions
    return list(range(low, min(high, apis.VERSION_CAPS.get(key, high)) + 1))


CASES = [(key, version) for key in sorted(apis.BLOCKABLE) for version in offered(key)]


def request_body(key: int, version: int) -> Any:
    schema = request_schema(key, version)
    given: dict[str, Any] = {}
    if key in SHAPES:
        topics_field, partitions_field, index_field = SHAPES[key]
        topic = blocking.element_type(schema, topics_field)
        if index_field is None:
            partitions: tuple[Any, ...] = (0, 1)
        else:
            partition = blocking.element_type(topic, partitions_field)
            partitions = tuple(blocking.make(partition, **{index_field: i}) for i in (0, 1))
        name_field = "topic" if blocking._has(topic, "topic") else "name"
        given[topics_field] = (blocking.make(topic, **{name_field: "orders", partitions_field: partitions}),)
    if blocking._has(schema, "group_id"):
        given["group_id"] = "billing"
    return blocking.make(schema, **given)


def error_codes(entity: Any) -> list[ErrorCode]:
    """Every error code in a response, depth first."""
    found = []
    for name in getattr(entity, "__dataclass_fields__", {}):
        value = getattr(entity, name)
        if isinstance(value, ErrorCode):
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                found.extend(error_codes(item))
    return found


@pytest.mark.parametrize(("key", "version"), CASES)
def test_blocked_response_round_trips_and_carries_the_error(key: int, version: int) -> None:
    request = Request(b"", key, version, 42, "orders", 0)
    response = blocking.blocked_response(request, request_body(key, version))
    frame = encode_response(request, response)
    assert decode_response(request, frame[4:]) == response
    codes = set(error_codes(response)) - {ErrorCode.none}
    coordinated = apis.GROUP_APIS | apis.TRANSACTION_APIS
    expected = blocking.NOT_COORDINATOR if key in coordinated else blocking.NOT_LEADER
    assert codes == {expected}
    assert expected.retriable
    per_partition = key in SHAPES and not (key == apis.OFFSET_FETCH and version >= 2)
    if per_partition:
        assert error_codes(response).count(expected) == 2  # both partitions named by the request


def test_every_blockable_api_is_covered() -> None:
    assert {key for key, _ in CASES} == apis.BLOCKABLE
    assert len(CASES) > 60


@pytest.mark.parametrize("version", offered(apis.FETCH))
def test_a_blocked_fetch_carries_an_empty_record_set_not_a_null_one(version: int) -> None:
    """librdkafka cannot parse a null record set ("invalid MessageSetSize -1") and logs it at every fetch;
    brokers send an empty one with an error."""
    request = Request(b"", apis.FETCH, version, 42, "orders", 0)
    response = blocking.blocked_response(request, request_body(apis.FETCH, version))
    frame = encode_response(request, response)
    for topic in decode_response(request, frame[4:]).responses:
        assert [p.records for p in topic.partitions] == [b"", b""]


@pytest.mark.parametrize("instance", [None, uuid.UUID(int=7)])
def test_a_shielded_clusters_client_is_told_no_metrics_are_wanted(instance: uuid.UUID | None) -> None:
    """librdkafka asks for its metrics subscription (KIP-714) while it runs; answered here, its connection
    stays open and it asks again later. A first ask (no instance id) is given one, as a broker would."""
    request = Request(b"", apis.GET_TELEMETRY_SUBSCRIPTIONS, 0, 42, "orders", 0)
    body = blocking.make(request_schema(request.api_key, 0), client_instance_id=instance)
    response = blocking.blocked_response(request, body)
    assert decode_response(request, encode_response(request, response)[4:]) == response
    assert response.error_code == ErrorCode.none
    assert response.requested_metrics == ()
    assert response.push_interval == blocking.TELEMETRY_ASK_AGAIN
    assert (response.client_instance_id is None) is (instance is not None)


def test_a_push_for_a_shielded_clusters_subscription_makes_the_client_ask_again() -> None:
    request = Request(b"", apis.PUSH_TELEMETRY, 0, 42, "orders", 0)
    body = blocking.make(request_schema(request.api_key, 0), client_instance_id=uuid.UUID(int=7))
    response = blocking.blocked_response(request, body)
    assert decode_response(request, encode_response(request, response)[4:]) == response
    assert response.error_code == ErrorCode.unknown_subscription_id


@pytest.mark.parametrize("version", offered(apis.CONSUMER_GROUP_HEARTBEAT))
def test_a_released_member_is_answered_without_error_its_own_id_and_epoch_and_an_assignment_of_nothing(
    version: int,
) -> None:
    """The answer a coordinator gives a member it takes every partition from (``Action.RELEASE``): the
    client revokes what it owns, and heartbeats on at an interval above nothing (the Java client takes
    any interval it is given, and 0 would have it heartbeat without pause)."""
    request = parse_request(raw(
        apis.CONSUMER_GROUP_HEARTBEAT, version, group_id="billing", member_id="m-1", member_epoch=7,
        topic_partitions=None, subscribed_topic_names=None,
    ))  # fmt: skip
    frame = blocking.OwnAnswer(ErrorCode.none, release=True).encoded(request)
    answer = decode_response(request, frame[4:])
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (ErrorCode.none, "m-1", 7)
    assert answer.assignment is not None
    assert answer.assignment.topic_partitions == ()
    assert answer.heartbeat_interval.total_seconds() > 0
