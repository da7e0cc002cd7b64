"""A group read asks again while the group's coordinator loads, and only then."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException

from switchyard.mirror.groups import _coordinated


def _failing(codes: list[int], answer: str = "read") -> tuple[list[float], Callable[[float], str]]:
    asked: list[float] = []

    def ask(timeout_s: float) -> str:
        asked.append(timeout_s)
        if codes:
            raise KafkaException(KafkaError(codes.pop(0), "ConsumerGroupDescribe: "))
        return answer

    return asked, ask


def test_a_loading_coordinator_is_asked_again_until_it_answers() -> None:
    asked, ask = _failing([KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR])
    assert _coordinated(ask, 10.0) == "read"
    assert len(asked) == 3
    assert asked[0] > asked[-1]  # each attempt is given what is left of the time-out


def test_any_other_error_is_raised_at_once() -> None:
    asked, ask = _failing([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException) as raised:
        _coordinated(ask, 10.0)
    assert raised.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert len(asked) == 1


def test_a_coordinator_loading_past_the_time_out_is_named() -> None:
    asked, ask = _failing([KafkaError.COORDINATOR_LOAD_IN_PROGRESS] * 100)
    started = time.monotonic()
    with pytest.raises(KafkaException) as raised:
        _coordinated(ask, 1.0)
    assert raised.value.args[0].code() == KafkaError.COORDINATOR_LOAD_IN_PROGRESS
    assert time.monotonic() - started < 1.5
    assert 2 <= len(asked) <= 6
