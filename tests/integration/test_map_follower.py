"""The saga worker's reader of a cluster's offset maps (``MapFollower``): each read takes only what was
stored since the last, and says what a fresh read of the whole map topic says — segments, final
positions, a link's records removed; and a read cut off by a step's cancellation loses nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Message
from temporalio.exceptions import CancelledError

from switchyard.config import Config
from switchyard.mirror.mapstore import (
    MapFollower,
    end_record,
    forget_link,
    read_link,
    segment_record,
    store_records,
)
from switchyard.mirror.offsets import OffsetMap
from switchyard.stack import Stack


def test_a_follower_reads_on_and_agrees_with_a_whole_read(stack: Stack, stack_config: Config) -> None:
    bootstrap = stack_config.clusters["primary"].bootstrap
    link, other = f"follow-{uuid.uuid4().hex[:6]}", f"other-{uuid.uuid4().hex[:6]}"
    store_records(
        bootstrap, [segment_record(link, "t", 0, 0, 0), segment_record(other, "t", 0, 0, 7)], "start"
    )
    follower = MapFollower(bootstrap)
    try:
        first = follower.link(link)
        assert first.maps == {("t", 0): OffsetMap([(0, 0)])}
        assert first.ends == {}
        store_records(bootstrap, [segment_record(link, "t", 0, 10, 12), segment_record(link, "t", 1, 0, 3),
                                  end_record(link, "t", 0, 20, 22)], "more")  # fmt: skip
        second = follower.link(link)
        assert second == read_link(bootstrap, link)
        assert second.maps[("t", 0)] == OffsetMap([(0, 0), (10, 12)])
        assert second.ends == {("t", 0): (20, 22)}
        assert follower.link(link) == second  # nothing new: nothing read, the same answer
        assert follower.link(other).maps == {("t", 0): OffsetMap([(0, 7)])}
        assert forget_link(bootstrap, link) == 4
        assert follower.link(link) == read_link(bootstrap, link)
        assert follower.link(link).maps == {}
        assert follower.link(link).ends == {}
    finally:
        follower.close()


class CancelledAfterTake:
    """The follower's reader, with a step's cancellation arriving in its thread the moment one take
    returned (Temporal raises CancelledError in a cancelled step's thread at whatever line it runs)."""

    def __init__(self, reader: Consumer) -> None:
        self.reader, self.cancelled = reader, False

    def consume(self, count: int, timeout: float) -> list[Message]:
        taken = self.reader.consume(count, timeout)
        if taken and not self.cancelled:
            self.cancelled = True
            raise CancelledError()
        return taken

    def __getattr__(self, name: str) -> Any:
        return getattr(self.reader, name)


def test_a_read_cancelled_after_a_take_loses_nothing_of_what_the_take_held(
    stack: Stack, stack_config: Config
) -> None:
    """The records of a take the cancellation cut off were fetched, but not applied: read on from the
    reader's position, the follower never reached the map topic's end again, and every later read of the
    worker's failed after 60 s ("not read to its end in time": a chaos sample's switches compensated).
    Read again from where the reading stood, they are not lost."""
    bootstrap = stack_config.clusters["primary"].bootstrap
    link = f"cut-{uuid.uuid4().hex[:6]}"
    store_records(bootstrap, [segment_record(link, "t", 0, 0, 0)], "start")
    follower = MapFollower(bootstrap)
    try:
        assert follower.link(link).maps == {("t", 0): OffsetMap([(0, 0)])}
        store_records(bootstrap, [segment_record(link, "t", 0, 10, 12)], "more")
        follower._reader = CancelledAfterTake(follower._reader)  # type: ignore[assignment]
        with pytest.raises(CancelledError):
            follower.link(link)
        assert follower.link(link) == read_link(bootstrap, link)
        assert follower.link(link).maps[("t", 0)] == OffsetMap([(0, 0), (10, 12)])
    finally:
        follower.close()
