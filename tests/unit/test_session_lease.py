"""How long a process vouches for its ZooKeeper session: from the sending of the last request answered in
it, two thirds of its time-out; never for a session other than its own, nor one begun since."""

from __future__ import annotations

from typing import Any

from switchyard.routing.lease import SessionLease


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lease(clock: Clock, regained: list[int]) -> SessionLease:
    zk: Any = None  # never asked: the test confirms by hand
    return SessionLease(zk, "/epoch", 6.0, regained=lambda: regained.append(1), clock=clock)


def test_a_session_is_vouched_for_until_two_thirds_of_its_time_out_after_the_last_answered_send() -> None:
    clock, regained = Clock(), []
    held = lease(clock, regained)
    assert not held.vouches_for(7)  # nothing answered yet
    held.confirmed(sent_at=100.0, session=7)
    clock.now = 103.9
    assert held.vouches_for(7)
    assert not held.vouches_for(8)  # another session (one begun since): its routing is read again first
    assert not held.vouches_for(None)
    clock.now = 104.0  # 100 + 6 * 2/3
    assert not held.vouches_for(7)
    assert regained == [1]


def test_an_answer_to_an_older_request_never_shortens_the_lease_and_a_late_one_renews_it() -> None:
    clock, regained = Clock(), []
    held = lease(clock, regained)
    held.confirmed(sent_at=100.0, session=7)
    held.confirmed(sent_at=99.0, session=7)  # answered after a later one
    clock.now = 103.5
    assert held.vouches_for(7)
    assert regained == [1]
    clock.now = 110.0  # a freeze, or ZooKeeper out of reach: lapsed
    assert not held.vouches_for(7)
    held.confirmed(sent_at=105.0, session=7)  # answered too late to vouch for anything now
    assert not held.vouches_for(7)
    assert regained == [1]
    held.confirmed(sent_at=109.5, session=7)
    assert held.vouches_for(7)
    assert regained == [1, 1]  # those held look again


def test_a_new_session_is_vouched_for_from_its_own_answers_only() -> None:
    clock, regained = Clock(), []
    held = lease(clock, regained)
    held.confirmed(sent_at=100.0, session=7)
    clock.now = 101.0
    held.confirmed(sent_at=101.0, session=9)  # the old one expired and a new one began
    assert not held.vouches_for(7)
    assert held.vouches_for(9)
    clock.now = 105.0
    assert not held.vouches_for(9)
    assert regained == [1, 1]
