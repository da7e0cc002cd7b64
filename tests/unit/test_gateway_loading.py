"""An offsets request answered that its coordinator is still loading the group's offsets is asked again
by the gateway, not failed to the client: librdkafka fails such a commit to the application after two
resends within some 300 ms, and a broker just made the leader of the group's offsets partition (another
killed, or it came back) answers so for seconds (a chaos trial's confluent-kafka consumer)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import (
    Request,
    decode_response,
    parse_request,
    request_schema,
)
from tests.helpers.sessions import AtOneAddress, Gateway, answered_when, answering_broker, commit_answer, raw
from workers.gateway import session
from workers.gateway.routing import apis

VERSION = 8


def _commit(loading_answers: int) -> tuple[list[ErrorCode], int]:
    """An OffsetCommit through a session to a coordinator that answers it "loading" ``loading_answers``
    times, then takes it: the codes the client was answered, and how many times the broker was asked."""

    async def scenario() -> tuple[list[ErrorCode], int]:
        asked = 0

        async def answer(request: Request) -> Any:
            nonlocal asked
            asked += 1
            return commit_answer(
                request,
                ErrorCode.coordinator_load_in_progress if asked <= loading_answers else ErrorCode.none,
            )

        server = await answering_broker(answer)
        gateway = Gateway()
        gateway.brokers = AtOneAddress(server.sockets[0].getsockname()[1])
        gateway.links = SimpleNamespace(  # type: ignore[attr-defined]
            mirrored=lambda *_: False, presents=lambda *_: False, presenter=_no_presenter
        )
        schema = request_schema(apis.OFFSET_COMMIT, VERSION)
        topic = element_type(schema, "topics")
        partition = make(element_type(topic, "partitions"), partition_index=0, committed_offset=5)
        frame = raw(
            apis.OFFSET_COMMIT, VERSION, group_id="orders", generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, topics=(make(topic, name="t", partitions=(partition,)),),
        )  # fmt: skip
        try:
            answers = [answer for _, answer in await answered_when(gateway, [frame], timeout_s=15)]
        finally:
            server.close()
        request = parse_request(frame)
        codes = [
            p.error_code for a in answers for t in decode_response(request, a).topics for p in t.partitions
        ]
        return codes, asked

    return asyncio.run(scenario())


async def _no_presenter(*_: object) -> None:
    return None  # no offsets of another cluster's to present


def test_a_commit_is_asked_again_while_its_coordinator_loads_the_groups_offsets() -> None:
    assert _commit(loading_answers=3) == ([ErrorCode.none], 4)


def test_a_commit_that_needs_no_second_asking_is_asked_once() -> None:
    assert _commit(loading_answers=0) == ([ErrorCode.none], 1)


def test_a_coordinator_loading_past_the_gateways_patience_is_reported_as_it_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asked again for a bounded time (well inside the client's own request time-out), then the client
    is told as the broker told it, and retries in its own way."""
    monkeypatch.setattr(session, "_LOADING_WITHIN_S", 0.5)
    codes, asked = _commit(loading_answers=1000)
    assert codes == [ErrorCode.coordinator_load_in_progress]
    assert asked <= 4  # every 0.2 s for 0.5 s, then given up
