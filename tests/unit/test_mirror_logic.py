"""The mirror's pure logic: the offset map against a plain model of copying, reverse maps, link topics."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchyard.errors import BindingRefused
from switchyard.mirror.control import reverse_maps
from switchyard.mirror.offsets import OffsetMap
from switchyard.model import Link, LinkState
from workers.mirror.progress import PartitionCopy

# a source log: a start offset, then the gaps between consecutive records (0 = adjacent)
logs = st.tuples(
    st.integers(0, 50), st.lists(st.integers(0, 3).map(lambda g: g if g < 3 else 7), min_size=0, max_size=60)
)


def offsets_of(start: int, gaps: list[int]) -> list[int]:
    out, at = [], start
    for gap in [0, *gaps]:
        at += gap
        out.append(at)
        at += 1
    return out


def copy(source: list[int]) -> OffsetMap:
    """What the mirror does: write records densely, add a segment whenever the source skips."""
    offset_map = OffsetMap()
    for target, s in enumerate(source):
        if not offset_map.continues(s, target):
            offset_map.add(s, target)
    return offset_map


@given(logs)
def test_every_record_and_position_translates_exactly(log: tuple[int, list[int]]) -> None:
    source = offsets_of(*log)
    offset_map = copy(source)
    copied = set(source)
    for target, s in enumerate(source):
        assert offset_map.target_of(s) == target
        assert offset_map.source_of(target) == s
        assert offset_map.position(s) == target
    for s in range(source[-1] + 1):
        if s not in copied:
            assert offset_map.target_of(s) is None
            # a position in a gap reads on from the next record that exists
            assert offset_map.position(s) == next(t for t, x in enumerate(source) if x > s)
    assert offset_map.position(source[-1] + 1) == len(source)  # fully consumed: the end
    # past offsets the copy never got at the source's end (a trailing marker): no further than the end
    assert offset_map.position(source[-1] + 3, len(source)) == len(source)
    assert offset_map.identical == (source == list(range(len(source))))
    assert (offset_map.segments == []) == offset_map.identical


@given(logs)
def test_the_inverse_map_copies_back_exactly(log: tuple[int, list[int]]) -> None:
    source = offsets_of(*log)
    back = copy(source).inverse()
    for target, s in enumerate(source):
        assert back.target_of(target) == s
        assert back.source_of(s) == target


def test_an_inverse_holds_nothing_where_the_map_holds_none() -> None:
    """Segments that hold no record (stored ahead of records that never came: a reverse link's start
    where the first transaction after the switch aborted) bound the runs around them once inverted."""
    between = OffsetMap([(32, 40), (36, 45), (41, 45)]).inverse()  # copy 32-35 -> 40-43; 36-40 never
    assert [between.target_of(s) for s in range(40, 47)] == [32, 33, 34, 35, None, 41, 42]
    first = OffsetMap([(0, 3), (4, 3)]).inverse()  # nothing copied before; the copy's 0-2 never came
    assert [first.target_of(s) for s in range(6)] == [None, None, None, 4, 5, 6]


def test_identical_offsets_need_no_segment() -> None:
    assert copy(list(range(100))).segments == []
    assert copy(list(range(100))).inverse().segments == []


def test_a_log_start_above_zero_is_one_segment() -> None:
    offset_map = copy(list(range(100, 200)))
    assert offset_map.segments == [(100, 0)]
    assert offset_map.position(0) == 0  # a group at the very beginning starts at the first copy
    assert offset_map.inverse().segments == [(0, 100)]


def test_segments_must_move_forward() -> None:
    offset_map = copy([0, 1, 5])
    with pytest.raises(ValueError, match="does not follow"):
        offset_map.add(5, 3)
    with pytest.raises(ValueError, match="does not follow"):
        offset_map.add(9, 1)


@given(logs)
def test_copying_resumes_right_after_the_last_record_copied(log: tuple[int, list[int]]) -> None:
    source = offsets_of(*log)
    offset_map = copy(source)
    for end in range(1, len(source) + 1):
        resume = offset_map.next_source(end)
        assert resume > source[end - 1]  # nothing copied twice
        if end < len(source):
            assert resume <= source[end]  # nothing skipped: the next record read is the next one due


def test_a_segment_stored_ahead_of_its_records_names_where_copying_resumes() -> None:
    offset_map = copy(list(range(10)))
    offset_map.add(25, 10)  # stored, then the process died before writing source 25 at target 10
    assert offset_map.next_source(10) == 25
    assert OffsetMap([(100, 0)]).next_source(0) == 100


@given(logs, st.data())
def test_a_copy_cut_off_after_storing_its_batchs_segments_resumes_exactly(
    log: tuple[int, list[int]], data: st.DataObject
) -> None:
    """The mirror stores every segment a batch needs before writing the batch: a copy cut off with
    ``landed`` records on the target has stored the segments of the records up to its batch's end.
    Taking out those past the target's end, it resumes at the next record due, and copying on makes
    the map a copy never cut off makes."""
    source = offsets_of(*log)
    whole = copy(source)
    landed = data.draw(st.integers(0, len(source)))
    batch_end = data.draw(st.integers(landed, len(source)))
    stored = copy(source[:batch_end])
    stored.drop_after(landed)
    if landed:
        assert source[landed - 1] < stored.next_source(landed)  # nothing copied twice
    if landed < len(source):
        assert stored.next_source(landed) <= source[landed]  # nothing skipped
    for target, s in enumerate(source[landed:], start=landed):  # the copy goes on, as the mirror does
        if not stored.continues(s, target):
            stored.add(s, target)
    assert stored == whole


def test_reverse_maps_continue_the_pairs_and_step_over_what_was_never_copied() -> None:
    key = ("orders", 0)
    forward = copy([0, 1, 2, 4, 5])  # a marker at 3: target 0..4 hold source 0, 1, 2, 4, 5
    planned, uncopied = reverse_maps({key: (6, 5)}, {key: forward}, {key: 6})
    assert uncopied == {}
    back = planned[key]
    assert [back.target_of(t) for t in range(5)] == [0, 1, 2, 4, 5]
    assert back.next_source(6) == 5  # the reverse copy resumes at the first record written to the target

    unplanned, uncopied = reverse_maps({key: (6, 5)}, {key: forward}, {key: 9})  # 3 never copied
    assert uncopied == {key: 3}
    assert unplanned[key].next_source(9) == 5
    assert unplanned[key].target_of(5) == 9  # the first new record lands after the three
    with pytest.raises(BindingRefused, match="truncated"):
        reverse_maps({key: (6, 5)}, {key: forward}, {key: 4})


@given(logs, st.data())
def test_a_reverse_map_ignores_segments_stored_past_the_target_end(
    log: tuple[int, list[int]], data: st.DataObject
) -> None:
    """A failover may promote a link whose map holds segments of records never written (a copy cut off
    between storing a batch's segments and writing it, or read between the two): the reverse link's
    map is the one of what the target holds."""
    source = offsets_of(*log)
    landed = data.draw(st.integers(0, len(source)))
    key, old_end = ("orders", 0), source[-1] + 1
    copied_to = source[landed - 1] + 1 if landed else 0
    exact, _ = reverse_maps({key: (copied_to, landed)}, {key: copy(source[:landed])}, {key: old_end})
    ahead, _ = reverse_maps({key: (copied_to, landed)}, {key: copy(source)}, {key: old_end})
    written = range(landed + 10)  # what the target held at the flip, and what clients wrote there since
    assert [ahead[key].target_of(t) for t in written] == [exact[key].target_of(t) for t in written]
    assert [ahead[key].position(t) for t in written] == [exact[key].position(t) for t in written]


def test_a_reverse_copy_after_a_source_that_ended_on_a_marker_resumes_at_the_first_new_record() -> None:
    """The source ended with a transaction's marker (records 0-5 copied to 0-4 around a marker at 3, a
    trailing marker at 6: end 7); the copy's first record after the flip is at 5. The way back must
    copy it, after the source's end, not step over it as if it were the marker's."""
    key = ("orders", 0)
    forward = copy([0, 1, 2, 4, 5])
    planned, uncopied = reverse_maps({key: (7, 5)}, {key: forward}, {key: 7})
    assert uncopied == {}
    assert planned[key].next_source(7) == 5
    assert planned[key].target_of(5) == 7


def test_links_never_copy_internal_or_switchyard_topics() -> None:
    link = Link("l", "a", "b", (".*",), (), LinkState.RUNNING, 1, datetime.now(UTC), "t")
    assert link.copies("orders")
    assert not link.copies("__consumer_offsets")
    assert not link.copies("switchyard.offset-map")


def test_a_link_with_a_pattern_that_does_not_compile_copies_nothing_and_says_why() -> None:
    link = Link("l", "a", "b", ("ord.*", "mir[("), (), LinkState.RUNNING, 1, datetime.now(UTC), "t")
    assert link.problem is not None
    assert link.problem.startswith("pattern 'mir[(' is not a regular expression")
    assert not link.copies("orders")  # not half a link: nothing at all
    good = Link("l", "a", "b", ("ord.*",), ("orders-x",), LinkState.RUNNING, 1, datetime.now(UTC), "t")
    assert good.problem is None
    assert good.copies("orders")
    assert not good.copies("orders-x")


def test_a_partitions_status_never_shows_its_source_ending_before_what_was_read() -> None:
    """librdkafka's statistics can carry a high watermark older than the fetch that delivered records
    past it; the status (and the gauges) must not show a copy ahead of its source."""
    copy = PartitionCopy("t", 0, OffsetMap(), next_target=500, acked_target=500, start=0, read_to=500)
    copy.source_end = 296
    status = copy.status("copying", now=0.0)
    assert (status.source_end, status.mirrored, status.lag) == (500, 500, 0)
    copy.source_end = 800  # the source holds more than was read: the lag says so
    assert copy.status("copying", now=0.0).lag == 300
    unknown = PartitionCopy("t", 1, OffsetMap(), next_target=0, acked_target=0, start=0, read_to=0)
    assert unknown.status("copying", now=0.0).source_end == -1
