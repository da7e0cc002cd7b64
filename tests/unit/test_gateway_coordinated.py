"""Which group answers say their broker does not coordinate the group (the gateway then asks the
cluster for the coordinator and sends the request there: workers/gateway/groups/coordinated.py)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import response_schema
from workers.gateway.groups.coordinated import loading, not_coordinator
from workers.gateway.routing import apis

REFUSED, NONE = ErrorCode.not_coordinator, ErrorCode.none


def _commit(code: ErrorCode) -> Any:
    schema = response_schema(apis.OFFSET_COMMIT, 8)
    topic = element_type(schema, "topics")
    partition = make(element_type(topic, "partitions"), partition_index=0, error_code=code)
    return make(schema, topics=(make(topic, name="t", partitions=(partition,)),))


def _fetch_v1(code: ErrorCode) -> Any:
    schema = response_schema(apis.OFFSET_FETCH, 1)
    topic = element_type(schema, "topics")
    partition = make(element_type(topic, "partitions"), partition_index=0, error_code=code)
    return make(schema, topics=(make(topic, name="t", partitions=(partition,)),))


def _fetch_v7(code: ErrorCode) -> Any:
    return make(response_schema(apis.OFFSET_FETCH, 7), error_code=code)


def _heartbeat(code: ErrorCode) -> Any:
    return make(response_schema(apis.HEARTBEAT, 4), error_code=code)


@pytest.mark.parametrize(
    ("api_key", "answer"),
    [
        (apis.OFFSET_COMMIT, _commit),
        (apis.OFFSET_FETCH, _fetch_v1),
        (apis.OFFSET_FETCH, _fetch_v7),
        (apis.HEARTBEAT, _heartbeat),
    ],
)
def test_a_group_answer_says_not_coordinator_where_its_broker_refused_the_group(
    api_key: int, answer: Any
) -> None:
    assert not_coordinator(api_key, answer(REFUSED))
    assert not not_coordinator(api_key, answer(NONE))
    assert not not_coordinator(api_key, answer(ErrorCode.coordinator_load_in_progress))


@pytest.mark.parametrize(
    ("api_key", "answer", "asked_again"),
    [
        (apis.OFFSET_COMMIT, _commit, True),
        (apis.OFFSET_FETCH, _fetch_v1, True),
        (apis.OFFSET_FETCH, _fetch_v7, True),
        (apis.HEARTBEAT, _heartbeat, False),  # the client's own rounds handle it
    ],
)
def test_an_offsets_answer_says_its_coordinator_is_loading_them(
    api_key: int, answer: Any, asked_again: bool
) -> None:
    assert loading(api_key, answer(ErrorCode.coordinator_load_in_progress)) is asked_again
    assert not loading(api_key, answer(NONE))
    assert not loading(api_key, answer(REFUSED))
