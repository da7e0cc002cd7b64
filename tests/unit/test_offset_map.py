"""The offset map against a plain model: copy a source log with gaps densely, as the mirror does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from switchyard.mirror.offsets import OffsetMap

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
    assert offset_map.identical == (source == list(range(len(source))))
    assert (offset_map.segments == []) == offset_map.identical


@given(logs)
def test_the_inverse_map_copies_back_exactly(log: tuple[int, list[int]]) -> None:
    source = offsets_of(*log)
    back = copy(source).inverse()
    for target, s in enumerate(source):
        assert back.target_of(target) == s
        assert back.source_of(s) == target


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
