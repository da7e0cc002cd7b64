"""Client offsets where a promoted link's copy does not keep the source's offsets."""

from __future__ import annotations

import pytest

from switchyard.mirror.control import reverse_maps
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


KEY = ("t", 0)


def switched_back(over: Presented, written: list[int], copy_end: int) -> Presented:
    """The home's offsets after a switch over promoted ``over`` and a switch back: the copy's records
    at ``written`` (its offsets; those written while switched over, which end at ``copy_end``) copied
    back after the home's end at the switch over, densely (the markers between them are not)."""
    maps, _ = reverse_maps({KEY: (over.copied, over.target_end)}, {KEY: over.offset_map}, {KEY: over.copied})
    back = maps[KEY]
    for n, offset in enumerate(written):
        if not back.continues(offset, over.copied + n):
            back.add(offset, over.copied + n)
    return Presented(back, copy_end, over.copied + len(written), through=over, returns=True)


def test_a_switch_back_of_records_alone_needs_no_translation_on_the_home() -> None:
    """Records written on the copy while switched over are copied back where clients saw them, whatever
    the first copy's offsets were (a log start above 0, markers)."""
    for over in (Presented(OffsetMap(), 10, 10), RETAINED, TRANSACTIONS):
        written = list(range(over.target_end, over.target_end + 5))
        back = switched_back(over, written, written[-1] + 1)
        assert back.identical, over
        assert [back.to_client(over.copied + n) for n in range(5)] == [over.to_client(w) for w in written]


def test_markers_written_while_switched_over_are_translated_on_the_home() -> None:
    """Switched over, the copy got records at 75-76, a marker at 77, records at 78-79 and a marker at 80
    (end 81); the way back copies the four records to the home's 100-103. Clients saw them at 100, 101,
    103, 104 (the copy's offsets, with the markers, presented in the home's): so they stay."""
    over = Presented(OffsetMap([(25, 0)]), copied=100, target_end=75)
    back = switched_back(over, [75, 76, 78, 79], 81)
    assert not back.identical
    assert [back.to_client(t) for t in (99, 100, 101, 102, 103)] == [99, 100, 101, 103, 104]
    positions = [back.to_target(c) for c in range(100, 107)]
    assert positions == [100, 101, 102, 102, 103, 104, 104]  # on a marker: the next record
    assert back.to_client(104) == over.to_client(81) == 106  # written since: after the copy's end
    assert back.spans(100, 101)
    assert not back.spans(101, 102)


def test_a_second_switch_over_presents_the_copy_through_both_links() -> None:
    """After the switch back above, the home got records at 104-105 (clients: 106-107); switched over
    again, they are copied to 81-82 on the copy, whose own records keep their client offsets."""
    over = Presented(OffsetMap([(25, 0)]), copied=100, target_end=75)
    back = switched_back(over, [75, 76, 78, 79], 81)
    maps, _ = reverse_maps({KEY: (81, 104)}, {KEY: back.offset_map}, {KEY: 81})
    assert maps[KEY].next_source(81) == 104  # the copy ended on a marker: the home's records go after it
    again = Presented(maps[KEY], copied=106, target_end=83, through=back, returns=True, earlier=over)
    assert [again.to_client(t) for t in (0, 74, 75, 76, 78, 79, 81, 82, 83)] == [
        25, 99, 100, 101, 103, 104, 106, 107, 108
    ]  # fmt: skip
    assert [again.to_target(c) for c in (25, 100, 103, 106, 107, 108)] == [0, 75, 78, 81, 82, 83]
    assert not again.identical


def test_a_transaction_aborted_while_switched_over_keeps_its_offsets_when_the_copy_is_used_again() -> None:
    """Kafka Streams restoring its changelog after a third switch stalled: the batch of a transaction
    that aborted on the copy while switched over, fetched there again, spanned two runs. The home holds
    records 0-3, a marker at 4, records 5-8, a marker at 9; switched over, the copy (records 0-7) got an
    aborted transaction (records 8-11, its marker at 12) and a committed one (13-14, marker 15); switched
    back, those two records went to the home's 10-11 and the home wrote 12-13 (marker 14); switched over
    again, they went to the copy's 16-17. The aborted records keep the offsets clients saw them at."""
    over = Presented(OffsetMap([(5, 4)]), copied=10, target_end=8)
    back = switched_back(over, [13, 14], 16)
    assert back.offset_map.segments == [(4, 5), (8, 10), (13, 10)]  # (8, 10) holds none: all aborted
    assert [back.to_client(t) for t in (9, 10, 11, 12)] == [9, 15, 16, 18]  # 9: the home's marker
    maps, _ = reverse_maps({KEY: (16, 12)}, {KEY: back.offset_map}, {KEY: 16})
    assert maps[KEY].target_of(9) is None  # the home's marker: not the copy's first aborted record
    again = Presented(maps[KEY], copied=15, target_end=18, through=back, returns=True, earlier=over)
    clients = [again.to_client(t) for t in range(20)]
    assert clients == [0, 1, 2, 3, 5, 6, 7, 8, *range(10, 20), 21, 22]  # 20: the home's marker at 14
    assert again.spans(8, 11)  # the aborted transaction's batch
    assert [again.position_to_client(p) for p in (8, 12, 13, 16)] == [9, 14, 15, 18]


# a failover: the copy had the source's records 0-21 (identical offsets); clients read on the source up
# to 29, its end once no gateway used it; the records since the flip are presented from there
FAILED_OVER = Presented(OffsetMap(), copied=22, target_end=22, resume=30)


def test_records_written_after_a_failover_are_presented_past_what_clients_read_on_the_old_cluster() -> None:
    """A chaos trial's kafkajs group, positioned at 23 by what it read on the primary, never processed
    the first record written on the standby: it was presented at 22, where the copy stood."""
    assert not FAILED_OVER.identical
    assert [FAILED_OVER.to_client(t) for t in (0, 21, 22, 23)] == [0, 21, 30, 31]
    # positions among the records the copy never got (the lost window) name the first written since
    assert [FAILED_OVER.to_target(c) for c in (21, 22, 23, 29, 30, 31)] == [21, 22, 22, 22, 22, 23]
    assert FAILED_OVER.position_to_client(22) == 22  # the end at the flip: after the last record copied
    assert FAILED_OVER.position_to_client(24) == 32
    assert FAILED_OVER.spans(0, 21)
    assert FAILED_OVER.spans(22, 40)
    assert not FAILED_OVER.spans(21, 22)


def test_a_resume_where_the_copy_stood_is_no_translation() -> None:
    assert Presented(OffsetMap(), copied=22, target_end=22, resume=22).identical
    assert Presented(OffsetMap(), copied=22, target_end=22, resume=None).identical


def test_a_switch_back_after_a_failover_keeps_the_offsets_clients_saw() -> None:
    """The old primary, back, still holds records 22-29 (the lost window, left in place); the records
    written on the standby since the failover are copied back after them, at 30 on: where clients saw
    them. Its own records keep their offsets, so nothing needs translating there."""
    over = FAILED_OVER
    maps, uncopied = reverse_maps({KEY: (22, 22)}, {KEY: over.offset_map}, {KEY: 30})
    assert uncopied == {KEY: 8}
    back = Presented(maps[KEY], copied=27, target_end=35, through=over, returns=True)  # 5 records back
    assert back.identical
    assert [back.to_client(t) for t in (0, 21, 22, 29, 30, 34, 35)] == [0, 21, 22, 29, 30, 34, 35]
