"""The mirror's delivery reports: each confirms its batch at the target offsets predicted, or stops the
partition's copy (something else writes to the target)."""

from __future__ import annotations

from types import SimpleNamespace

from switchyard.mirror.offsets import OffsetMap
from workers.mirror.copier import LinkCopier
from workers.mirror.progress import PartitionCopy

KEY = ("orders", 0)


def copier() -> LinkCopier:
    """A link's copier that has written 10 records of ``KEY``, none confirmed yet (no clients, no thread)."""
    made = object.__new__(LinkCopier)
    made._wanted = SimpleNamespace(id="link-1")  # type: ignore[assignment]
    made._partitions = {
        KEY: PartitionCopy("orders", 0, OffsetMap(), next_target=10, acked_target=0, start=0, read_to=10)
    }
    made._failed, made._failure, made._clients = {}, None, None
    return made


def report(offset: int | None) -> SimpleNamespace:
    return SimpleNamespace(offset=lambda: offset)


def test_a_report_at_the_offset_predicted_confirms_the_batch() -> None:
    made = copier()
    made._delivered(KEY, 9, None, report(9))  # type: ignore[arg-type]
    assert (made._partitions[KEY].acked_target, made._failed) == (10, {})


def test_a_report_elsewhere_stops_the_partition() -> None:
    made = copier()
    made._delivered(KEY, 9, None, report(12))  # type: ignore[arg-type]
    assert "something else writes to the target partition" in made._failed[KEY]


def test_a_batch_written_already_with_its_offset_not_told_is_taken_as_predicted() -> None:
    """librdkafka reports a batch it sent again, which the broker answered DUPLICATE_SEQUENCE_NUMBER, as
    written with no offset: read as offset 0, the copy stopped for good (a chaos run). The next report is
    checked as ever."""
    made = copier()
    made._delivered(KEY, 4, None, report(None))  # type: ignore[arg-type]
    assert (made._partitions[KEY].acked_target, made._failed) == (5, {})
    made._delivered(KEY, 9, None, report(8))  # type: ignore[arg-type]
    assert KEY in made._failed
