"""Client offsets where a promoted link's copy does not keep the source's offsets."""

from __future__ import annotations

import pytest

from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.presented import Presented

# source: records 0-4, a commit marker at 5, records 6-9, a marker at 10, records 11-12, a trailing
# marker at 13 (source end 14); the copy holds the 11 records at 0-10
TRANSACTIONS = Presented(OffsetMap([(6, 5), (11, 9)]), copied=14, target_end=11)
# retention took the source's first 1,000 records before the link began
RETAINED = Presented(OffsetMap([(1000, 0)]), copied=1500, target_end=500)


def test_records_keep_their_client_offsets_on_the_copy() -> None:
    source_records = [0, 1, 2, 3, 4, 6, 7, 8, 9, 11, 12]
    assert [TRANSACTIONS.to_client(t) for t in range(11)] == source_records
    assert [TRANSACTIONS.to_target(s) for s in source_records] == list(range(11))


@pytest.mark.parametrize(
    ("position", "target"),
    [(5, 5), (6, 5), (10, 9), (11, 9), (13, 11), (14, 11), (15, 12), (0, 0)],
)
def test_a_position_in_a_gap_goes_to_the_next_record(position: int, target: int) -> None:
    """A consumer's position on a marker (some stop before it, some after) names the next record."""
    assert TRANSACTIONS.to_target(position) == target


def test_records_written_after_the_promotion_follow_the_source_end() -> None:
    assert TRANSACTIONS.to_client(11) == 14  # the end at the promotion: the source's end
    assert TRANSACTIONS.to_client(20) == 23
    assert TRANSACTIONS.to_target(23) == 20


def test_a_log_start_above_zero_is_a_constant_shift() -> None:
    assert RETAINED.to_client(0) == 1000
    assert RETAINED.to_target(1000) == 0
    assert RETAINED.to_target(0) == 0  # before the log start: the copy's first record
    assert RETAINED.to_client(500) == 1500
    assert RETAINED.spans(0, 499)


def test_offsets_never_copied_at_the_sources_end_go_to_the_targets_end() -> None:
    """The source ends with records 11-12, an aborted record at 13 and its marker at 14: the copy holds
    records 11-12 at 9-10 and ends at 11."""
    aborted = Presented(OffsetMap([(6, 5), (11, 9)]), copied=15, target_end=11)
    assert [aborted.to_target(p) for p in (11, 12, 13, 14, 15, 16)] == [9, 10, 11, 11, 11, 12]
    assert aborted.to_client(11) == 15


def test_special_values_are_kept() -> None:
    assert TRANSACTIONS.to_target(-1) == -1
    assert TRANSACTIONS.to_client(-1) == -1


def test_a_batch_across_a_gap_is_found() -> None:
    assert TRANSACTIONS.spans(0, 4)
    assert not TRANSACTIONS.spans(3, 6)
    assert TRANSACTIONS.spans(11, 30)


def test_identical_offsets_need_no_translation() -> None:
    assert Presented(OffsetMap(), 10, 10).identical
    assert not RETAINED.identical
    assert not Presented(OffsetMap(), 11, 10).identical  # a trailing marker
