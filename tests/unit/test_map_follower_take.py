"""The map reader's take, on a stand-in for librdkafka's consumer (pure logic): a reader assigned for good
hands over errors among records, and what came after an error in a take must not be applied past it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaError

from switchyard.errors import KafkaOperationError
from switchyard.mirror.mapstore import MapFollower, segment_record


@dataclass
class Message:
    at: int
    code: int | None = None

    def error(self) -> KafkaError | None:
        return None if self.code is None else KafkaError(self.code)

    def key(self) -> bytes:
        return segment_record("l", "t", 0, self.at, self.at)[0]

    def value(self) -> bytes:
        return segment_record("l", "t", 0, self.at, self.at)[1]

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self.at


class Reader:
    def __init__(self, *takes: list[Message]) -> None:
        self.takes = list(takes)

    def consume(self, _most: int, _wait_s: float) -> list[Message]:
        return self.takes.pop(0)


def follower(*takes: list[Message]) -> MapFollower:
    found = MapFollower("127.0.0.1:9")  # never asked: its clients connect only when used
    found._reader = Reader(*takes)  # type: ignore[assignment]
    found._reading = [0]
    return found


@pytest.mark.parametrize("code", [KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN])
def test_records_after_a_passing_error_are_read_again_not_skipped(code: int) -> None:
    taken = follower([Message(0), Message(1), Message(-1, code), Message(2)])
    taken._take()
    assert taken._read_to == {0: 2}  # offset 2 not applied: the reader is assigned again at 2
    assert sorted(taken._links["l"]) == sorted(segment_record("l", "t", 0, at, at)[0] for at in (0, 1))
    assert taken._reading == []


def test_any_other_error_is_raised_and_the_reader_assigned_again() -> None:
    taken = follower([Message(0), Message(-1, KafkaError.TOPIC_AUTHORIZATION_FAILED), Message(1)])
    with pytest.raises(KafkaOperationError, match="TOPIC_AUTHORIZATION_FAILED"):
        taken._take()
    assert taken._read_to == {0: 1}
    assert taken._reading == []
