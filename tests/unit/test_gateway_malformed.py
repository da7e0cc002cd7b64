"""Well-framed requests that are wrong: a null array where the protocol allows none, an empty group id.

A broker answers an empty group id on the group-membership APIs with INVALID_GROUP_ID and closes the
connection of a request whose non-nullable array is null (its parser throws); the gateway does the
same, with one warning line and no traceback, instead of failing in its own code on what it read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import kio.index
import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import (
    FrameError,
    Request,
    decode_response,
    encode_response,
    parse_request,
)
from switchyard.identity import identify
from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState
from switchyard.resolution import resolve
from tests.helpers.frames import Encoded, emptied, example
from tests.helpers.sessions import READ, Gateway, exchange, offered, raw
from workers.gateway.brokers import topic_identity
from workers.gateway.routing import apis
from workers.gateway.routing.blocking import blocked_response
from workers.gateway.routing.holds import hold_limit

MEMBERSHIP = [apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP]
"""Where Kafka refuses an empty group id (GroupCoordinator.isValidGroupId): not OffsetCommit and
OffsetFetch, which it keeps for the empty group."""


def requests_emptied() -> Iterator[tuple[str, bool, bytes]]:
    for key in READ:
        for version in offered(key):
            schema = kio.index.load_request_schema(key, version)
            for what, allowed, entity in emptied(example(schema)):
                yield f"{schema.__name__} v{version} {what}", allowed, Encoded().request(schema, entity)


CASES = list(requests_emptied())


def test_each_case_is_one_field_changed() -> None:
    assert len(CASES) > 500
    assert any(what.startswith("ProduceRequest v9 .topic_data=null") for what, _, _ in CASES)
    assert any(what.startswith('JoinGroupRequest v5 .group_id=""') for what, _, _ in CASES)


@pytest.mark.parametrize(("what", "allowed", "frame"), CASES, ids=[c[0] for c in CASES])
def test_what_the_gateway_reads_of_a_request_fails_only_as_a_frame_error(
    what: str, allowed: bool, frame: bytes
) -> None:
    """Null where the schema allows none is a FrameError (one warning, the connection closed); and
    whatever decodes, routing reads without failing, empty names included. (kio refuses a few nulls
    the schema allows, in tagged fields: a FrameError too.)"""
    try:
        request = parse_request(frame)
        body = request.body
    except FrameError:
        return
    assert allowed, f"{what}: taken although the schema allows no null there"
    topic_identity.ids_asked(request.api_key, body)
    context = apis.context_of(request)
    identity = identify(sasl_user=None, client_id="orders@host-1")
    resolve(identity, {}, "primary", topics=context.topics, group=context.group)
    hold_limit(request, 10.0, 30.0)
    if request.api_key in apis.BLOCKABLE:
        encode_response(request, blocked_response(request, body))


def group_request(key: int, version: int, group: str) -> Request:
    return parse_request(raw(key, version, group_id=group))


@pytest.mark.parametrize("key", MEMBERSHIP)
def test_an_empty_group_id_is_refused_by_the_membership_apis(key: int) -> None:
    for version in offered(key):
        assert apis.refusal(group_request(key, version, "")) == ErrorCode.invalid_group_id
        assert apis.refusal(group_request(key, version, "billing")) is None


@pytest.mark.parametrize("key", [apis.OFFSET_COMMIT, apis.OFFSET_FETCH])
def test_offset_apis_take_the_empty_group_as_kafka_does_routed_without_it(key: int) -> None:
    for version in offered(key):
        request = group_request(key, version, "")
        assert apis.refusal(request) is None
        assert apis.context_of(request).group is None


# ---- a session in this process: what the client gets, what the log says


def problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize(
    ("key", "version", "field"),
    [
        (apis.PRODUCE, 9, "topic_data"),
        (apis.PRODUCE, 3, "topic_data"),
        (apis.FETCH, 12, "topics"),
        (apis.LIST_OFFSETS, 7, "topics"),
        (apis.OFFSET_FOR_LEADER_EPOCH, 4, "topics"),
        (apis.OFFSET_COMMIT, 8, "topics"),
    ],
)
def test_a_null_topics_array_closes_the_connection_with_one_warning(
    key: int, version: int, field: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    answers = asyncio.run(exchange(Gateway(), raw(key, version, **{field: None})))
    assert answers == []
    (warning,) = problems(caplog)
    assert warning.levelno == logging.WARNING
    assert "null array at" in warning.getMessage(), warning.getMessage()
    assert warning.exc_info is None
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("key", MEMBERSHIP)
def test_an_empty_group_id_is_answered_invalid_group_id_and_the_connection_stays(
    key: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    low, high = offered(key).start, offered(key).stop - 1
    frames = [raw(key, version, group_id="") for version in (low, high)]
    answers = asyncio.run(exchange(Gateway(), *frames))
    assert len(answers) == 2  # the connection stayed open for the second one
    for frame, answer in zip(frames, answers, strict=True):
        assert decode_response(parse_request(frame), answer).error_code == ErrorCode.invalid_group_id
    assert problems(caplog) == []


def test_an_empty_group_id_of_a_blocked_identity_is_answered_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Refused as a broker refuses it, not held: no routing could make it valid."""
    caplog.set_level(logging.INFO)
    blocked = Binding("primary", 2, BindingState.BLOCKED, datetime.now(UTC), "test")
    gateway = Gateway({BindingKey.for_app("orders"): blocked})
    frame = raw(apis.HEARTBEAT, 4, group_id="")
    started = time.monotonic()
    (answer,) = asyncio.run(exchange(gateway, frame))
    assert time.monotonic() - started < 1.0  # a Heartbeat would be held 10 s / 3
    assert decode_response(parse_request(frame), answer).error_code == ErrorCode.invalid_group_id
    assert problems(caplog) == []
