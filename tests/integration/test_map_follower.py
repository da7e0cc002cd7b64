"""The saga worker's reader of a cluster's offset maps (``MapFollower``): each read takes only what was
stored since the last, and says what a fresh read of the whole map topic says — segments, final
positions, a link's records removed."""

from __future__ import annotations

import uuid

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
