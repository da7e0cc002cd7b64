"""How long a blocked identity's requests are held: never longer than their client waits for an answer,
even when the client sends more than the connection's answers can hold at once (kafkajs pipelines every
send on one connection). Past that, a resend would race the held copy, and both would be written."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from kio.schema.errors import ErrorCode

from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState
from tests.helpers.sessions import Gateway, answered_when, raw
from workers.gateway import apis
from workers.gateway.protocol import decode_response, parse_request

HOLD_S = 1.0
IN_FLIGHT = 4


def test_every_held_request_is_answered_within_its_hold_time_of_being_sent() -> None:
    """Six times more Produce requests than the connection has room for, all sent at once while their
    identity is blocked: each is answered with the retriable error within the hold time of its sending.
    (Once, the gateway stopped reading while its room was full of held requests: those behind waited
    unread, in waves of one hold time each, long past their client's time-out.)"""
    blocked = Binding("primary", 2, BindingState.BLOCKED, datetime.now(UTC), "test")
    gateway = Gateway(
        {BindingKey.for_app("orders"): blocked}, block_hold_s=HOLD_S, limits={"max_in_flight": IN_FLIGHT}
    )
    frames = [raw(apis.PRODUCE, 9, acks=-1, timeout=timedelta(seconds=30)) for _ in range(6 * IN_FLIGHT)]
    answers = asyncio.run(answered_when(gateway, frames))
    latest = max(when for when, _ in answers)
    assert latest < HOLD_S + 0.5, f"the last answer came {latest:.1f}s after it was sent"
    for frame, (_, answer) in zip(frames, answers, strict=True):
        produced = decode_response(parse_request(frame), answer)
        codes = {p.error_code for t in produced.responses for p in t.partition_responses}
        assert codes == {ErrorCode.not_leader_or_follower}
