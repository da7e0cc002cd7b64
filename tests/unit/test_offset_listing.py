"""A ListOffsets whose leader does not answer is sent again after a short try, the topics' leaders asked
for between (a killed leader is found out by the metadata, a slow one gets a second more each time),
and the call ends by its deadline. On real brokers:
``test_three_brokers.py::test_the_ends_of_partitions_whose_leader_was_killed_are_read_once_they_are_led_elsewhere``."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from switchyard import kafka
from switchyard.errors import KafkaOperationError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Leaders:
    """A consumer whose ListOffsets fails with ``errors``, one a try, each try costing its whole time-out
    as an unanswered request does, then answers; what it was asked, in order."""

    def __init__(self, clock: Clock, errors: list[int]) -> None:
        self.clock, self.errors, self.asked = clock, errors, list[str]()

    def offsets_for_times(self, asked: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        self.asked.append(f"list {timeout:.1f}")
        if self.errors:
            self.clock.now += timeout
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return [TopicPartition(tp.topic, tp.partition, 7) for tp in asked]

    def list_topics(self, topic: str, timeout: float) -> None:
        self.asked.append(f"metadata {topic}")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(kafka, "time", fake)
    return fake


def test_a_leader_that_does_not_answer_is_asked_for_anew_and_given_longer_each_try(clock: Clock) -> None:
    timed_out, dropped = KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER
    consumer = Leaders(clock, [timed_out, timed_out, dropped])
    answered = kafka._listed(consumer, [TopicPartition("t", 0, -1)], clock.now + 30)  # type: ignore[arg-type]
    assert [(tp.topic, tp.partition, tp.offset) for tp in answered] == [("t", 0, 7)]
    assert consumer.asked == [
        "list 2.0", "metadata t", "list 3.0", "metadata t", "list 4.0", "metadata t", "list 4.0",
    ]  # fmt: skip


def test_a_request_that_never_left_the_queue_for_a_dead_leader_is_tried_again(clock: Clock) -> None:
    """A broker killed before the consumer had connected to it: the ListOffsets waits in librdkafka's
    queue for a connection that never comes and fails ``_TIMED_OUT_QUEUE``, a leader as silent as one
    that was sent the request (a suite run raised it at the first try)."""
    consumer = Leaders(clock, [KafkaError._TIMED_OUT_QUEUE, KafkaError._TIMED_OUT_QUEUE])
    answered = kafka._listed(consumer, [TopicPartition("t", 0, -1)], clock.now + 30)  # type: ignore[arg-type]
    assert [tp.offset for tp in answered] == [7]
    assert consumer.asked == ["list 2.0", "metadata t", "list 3.0", "metadata t", "list 4.0"]


def test_a_leader_that_says_it_leads_no_more_is_not_asked_for(clock: Clock) -> None:
    """librdkafka drops the cached leader itself on such an answer."""
    consumer = Leaders(clock, [KafkaError.NOT_LEADER_FOR_PARTITION])
    kafka._listed(consumer, [TopicPartition("t", 0, -1)], clock.now + 30)  # type: ignore[arg-type]
    assert consumer.asked == ["list 2.0", "list 2.0"]


def test_the_tries_end_by_the_deadline_with_the_last_error(clock: Clock) -> None:
    consumer = Leaders(clock, [KafkaError._TIMED_OUT] * 10)
    start = clock.now
    with pytest.raises(KafkaOperationError, match="Timed out"):
        kafka._listed(consumer, [TopicPartition("t", 0, -1)], start + 5.25)  # type: ignore[arg-type]
    assert consumer.asked == ["list 2.0", "metadata t", "list 3.0", "metadata t", "list 0.1"]
    assert clock.now - start < 5.5
