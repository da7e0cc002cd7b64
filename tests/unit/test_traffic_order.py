"""Judging the order a consumer received records in (``switchyard.traffic.first_out_of_order``)."""

from __future__ import annotations

from switchyard.traffic import Batch, first_out_of_order


def batches(*offsets: int, partition: int = 0) -> list[Batch]:
    return [Batch([(partition, o, o) for o in offsets])]


def test_each_record_the_next_and_a_step_back_to_one_seen_are_in_order() -> None:
    assert first_out_of_order(batches(7, 8, 9, 8, 9, 10)) is None  # a group begins anywhere; resumes back


def test_a_step_over_an_offset_is_out_of_order() -> None:
    assert first_out_of_order(batches(7, 8, 10)) == "partition 0: 10 after 8 (highest 8)"


def test_over_markers_a_step_forward_is_in_order_and_a_step_back_to_an_offset_never_read_is_not() -> None:
    assert first_out_of_order(batches(7, 8, 10, 11, 8, 10, 12), markers=True) is None
    assert first_out_of_order(batches(7, 8, 10, 9), markers=True) == "partition 0: 9 after 10 (highest 10)"


def test_partitions_are_judged_apart() -> None:
    assert first_out_of_order([*batches(5, 6), *batches(100, partition=1), *batches(7)]) is None
