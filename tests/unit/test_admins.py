"""Which AdminClient a request is asked on, and at what time-out, after one failed (``switchyard.admins``;
a broker restarted under a kept client is in tests/integration/test_mirror.py)."""

from __future__ import annotations

from concurrent.futures import TimeoutError as FutureTimeout

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from switchyard.admins import KEPT_TIMEOUT_S, Admins, failed_in_client
from switchyard.errors import KafkaOperationError

NOWHERE = "127.0.0.1:9"  # clients are made, never asked


def test_failed_in_client_means_what_a_new_client_would_not_have_failed() -> None:
    assert failed_in_client(FutureTimeout())
    assert failed_in_client(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert failed_in_client(KafkaException(KafkaError(KafkaError._TIMED_OUT)))
    assert not failed_in_client(KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)))
    assert failed_in_client(KafkaException(KafkaError(KafkaError.FENCED_LEADER_EPOCH)))  # stale metadata
    assert failed_in_client(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)))  # a stale coordinator
    assert not failed_in_client(KafkaOperationError("a member joined on the target"))
    wrapped = KafkaOperationError("group g: no answer in time")
    wrapped.__cause__ = FutureTimeout()
    assert failed_in_client(wrapped)


def test_a_request_that_failed_in_the_client_is_asked_once_more_on_new_clients() -> None:
    admins = Admins(lambda _: NOWHERE)
    first = [admins.get("a"), admins.get("b")]
    asked: list[tuple[list[AdminClient], float]] = []

    def request(clients: list[AdminClient], timeout_s: float) -> str:
        asked.append((clients, timeout_s))
        if len(asked) == 1:
            raise FutureTimeout()
        return "answered"

    assert admins.retried(("a", "b"), request, timeout_s=7) == "answered"
    assert [t for _, t in asked] == [KEPT_TIMEOUT_S, 7]
    assert asked[0][0] == first
    assert all(new is not old for new, old in zip(asked[1][0], first, strict=True))
    assert [admins.get("a"), admins.get("b")] == asked[1][0]  # the new ones are kept


def test_an_error_the_broker_answered_is_raised_and_keeps_the_client() -> None:
    admins = Admins(lambda _: NOWHERE)
    kept = admins.get("a")
    refused = KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED))

    def request(clients: list[AdminClient], timeout_s: float) -> None:
        raise refused

    with pytest.raises(KafkaException):
        admins.retried(("a",), request)
    assert admins.get("a") is kept


def test_a_second_failure_is_raised() -> None:
    admins = Admins(lambda _: NOWHERE)

    def request(clients: list[AdminClient], timeout_s: float) -> None:
        raise FutureTimeout()

    with pytest.raises(TimeoutError):
        admins.retried(("a",), request)
