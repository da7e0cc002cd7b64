"""What a drill makes of its canary's traffic (per partition, per switch, over time) and its verdict
against the objectives; and the durations drills are scheduled with. The canary's traffic here is a
stand-in with the attributes the judging reads (the real one runs in tests/integration/test_drills.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest

from switchyard.drills import canary
from switchyard.durations import format_clock, format_duration, parse_clock, parse_duration
from switchyard.sagas.drill_verdict import failures
from switchyard.sagas.drills import (
    CanaryFindings,
    DrillResult,
    GroupResume,
    Objectives,
    PartitionFigures,
    Timeline,
    VerifyFigures,
)
from switchyard.traffic import Batch, Traffic, again_after_commit

pytestmark = pytest.mark.unit


@dataclass
class _Sent:
    acked: list[int] = field(default_factory=list)
    acked_where: list[tuple[int, int]] = field(default_factory=list)
    acked_at: list[float] = field(default_factory=list)

    def ack(self, value: int, partition: int, at: float) -> None:
        self.acked.append(value)
        self.acked_where.append((partition, len([p for p, _ in self.acked_where if p == partition])))
        self.acked_at.append(at)

    def longest_silence(self, since: float, until: float) -> tuple[float, float]:
        return Traffic.longest_silence(cast("Traffic", self), since, until)


def test_partitions_count_lost_records_their_window_and_records_written_twice() -> None:
    sent = _Sent()
    for value, (partition, at) in enumerate([(0, 1.0), (1, 1.1), (0, 1.2), (0, 1.7), (1, 1.8)]):
        sent.ack(value, partition, at)
    held = {0: Counter({0: 1, 2: 2}), 1: Counter({1: 1, 4: 1})}  # 3 lost on 0, 2 there twice

    figures = canary.partition_figures(cast("Traffic", sent), held)

    assert figures == [
        PartitionFigures(partition=0, acked=3, lost=1, lost_window_ms=0, written_twice=1),
        PartitionFigures(partition=1, acked=2, lost=0, lost_window_ms=0, written_twice=0),
    ]
    held[0] = Counter({0: 1})  # 2 and 3 lost: acknowledged 0.5 s apart
    assert canary.partition_figures(cast("Traffic", sent), held)[0].lost_window_ms == 500


def test_a_canary_attempt_after_its_worker_died_takes_none_of_its_predecessors_records_for_its_own() -> None:
    """The first attempt left 0, 1, 2 on the topic and died with its account; the second sends values of
    its own, judged as acknowledged, while a record of either attempt there twice is still written twice."""
    assert canary.first_value(1) == 0
    first = canary.first_value(2)
    sent = _Sent()
    for i, partition in enumerate([0, 1, 0]):
        sent.ack(first + i, partition, 1.0 + i / 10)
    held = {0: Counter({0: 1, 1: 1, first: 1, first + 2: 1}), 1: Counter({2: 1, first + 1: 1})}

    figures = canary.partition_figures(cast("Traffic", sent), held)

    assert [(f.acked, f.lost, f.written_twice) for f in figures] == [(2, 0, 0), (1, 0, 0)]
    held[1][2] += 1
    assert canary.partition_figures(cast("Traffic", sent), held)[1].written_twice == 1


def test_a_switch_wait_runs_to_the_first_acknowledgement_after_it() -> None:
    sent = _Sent()
    for value, at in enumerate([0.0, 0.1, 0.2, 3.5, 3.6]):  # a 3.3 s gap during a switch from 1 to 2
        sent.ack(value, 0, at)
    traffic = cast("Traffic", sent)

    assert canary._longest_wait(traffic, 1.0, 2.0) == pytest.approx(2.5)  # 1.0 -> first ack at 3.5
    assert canary._longest_wait(traffic, 0.0, None) == pytest.approx(3.3)
    assert canary._longest_wait(traffic, 4.0, 5.0) == 0.0  # nothing acknowledged after: no wait measured


def test_a_canary_started_again_mid_drill_counts_no_wait_from_before_it_began() -> None:
    """A chaos trial killed the worker 5.9 s into a drill: the canary's next attempt began 30 s later,
    and its wait through the switch, counted from the switch's start, read 30.8 s, over the trial's
    bound, though no client of the gateway had waited so."""
    sent = _Sent()
    for value, at in enumerate([40.5, 40.6, 41.2, 44.0, 44.1]):  # began at 40.0
        sent.ack(value, 0, at)
    traffic = cast("Traffic", sent)

    waits = canary.switch_waits(traffic, [(5.0, 9.0), (12.0, 41.0), (42.0, 43.0)], began=40.0)

    assert waits == [0.0, pytest.approx(0.6), pytest.approx(2.0)]  # 35.5 and 28.5 s counted from the switch


def test_buckets_sum_events_per_tenth_of_a_second() -> None:
    assert canary.buckets([(10.0, 1), (10.05, 1), (10.25, 3)], 10.0) == [2, 0, 3]
    assert canary.buckets([], 10.0) == []


def _drill(**changes: object) -> DrillResult:
    switched = {"kind": "switchover", "outcome": "switched", "rto_ms": 4000, "pause_ms": 1500}
    back = {**switched, "kind": "switchback"}
    findings = CanaryFindings(
        sent=100, acked=100, failed=0, longest_wait_s=1.5, waits_s=[1.5, 1.2],
        partitions=[PartitionFigures(p, 50, 0, 0, 0) for p in (0, 1)],
        groups=[GroupResume("g", True, 0, 0, 3)], out_of_order=None,
        timeline=Timeline(
            datetime.now(UTC).isoformat(), 100, switches=[("switchover", 2, 6), ("switchback", 8, 12)]
        ),
        stopped_by="switches over",
    )  # fmt: skip
    result = DrillResult(
        "nightly", "d-1", "drill", "", sagas=[switched, back], canary=findings,
        verification=VerifyFigures("clean", 100, 0),
        objectives=Objectives(rto_s=10, pause_s=5, rpo_records=0),
    )  # fmt: skip
    for name, value in changes.items():
        target = findings if hasattr(findings, name) else result
        setattr(target, name, value)
    return result


def test_a_drill_that_met_everything_has_no_failures() -> None:
    assert failures(_drill()) == []


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"waits_s": [1.5, 6.0]}, "switchback: the producer waited 6.00s, over the objective 5s"),
        ({"partitions": [PartitionFigures(0, 50, 2, 30, 0)]}, "2 acknowledged records lost (partition 0: 2)"),
        ({"partitions": [PartitionFigures(0, 50, 0, 0, 1)]}, "1 records written twice"),
        ({"failed": 3}, "3 sends failed"),
        ({"groups": [GroupResume("g", False, 4, 0, 0)]}, "group g did not resume at its committed offset"),
        ({"stopped_by": "time limit"}, "the canary stopped at its time limit"),
        (
            {"verification": VerifyFigures("diverged", 100, 2, ["t[0]"])},
            "diverged: 2 duplicates; partitions t[0]",
        ),
        ({"verification": VerifyFigures("diverged", 100, 0)}, "verification diverged: see its report"),
        ({"canary": None}, "the canary left no findings"),
    ],
)
def test_each_missed_objective_is_named(change: dict[str, object], named: str) -> None:
    missed = failures(_drill(**change))
    assert len(missed) == 1, missed
    assert named in missed[0]


def test_a_slow_or_failed_switch_is_named() -> None:
    slow = {"kind": "switchover", "outcome": "switched", "rto_ms": 12_500}
    failed = {"kind": "switchback", "outcome": "compensated", "detail": "switch abandoned at drain"}
    assert failures(_drill(sagas=[slow, failed])) == [
        "switchover RTO 12.50s over the objective 10s",
        "switchback compensated: switch abandoned at drain",
    ]


def test_durations_and_times_of_day_as_operators_type_them() -> None:
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("1h30m") == timedelta(minutes=90)
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_clock("02:30") == timedelta(hours=2, minutes=30)
    for bad in ("", "0s", "5", "5x", "1h 30m", "-5m"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)
    for text in ("1d", "1h30m", "90s", "2d3h4m5s"):
        assert parse_duration(format_duration(parse_duration(text))) == parse_duration(text)
    assert format_duration(timedelta(seconds=90)) == "1m30s"
    assert format_clock(parse_clock("02:30")) == "02:30"
    for bad in ("24:00", "2:3", "noon"):
        with pytest.raises(ValueError, match="time of day"):
            parse_clock(bad)


def test_again_after_commit_counts_a_record_whose_own_batch_was_committed() -> None:
    batches = [
        Batch([(0, 0, 0), (0, 1, 1)]),  # committed
        Batch([(0, 2, 2)], commit_error="UNKNOWN_MEMBER_ID"),  # refused: a rebalance rewinds the consumer
        Batch([(1, 0, 5)]),  # committed: whether it covers 2 depends on that rewind, so 2 is not counted
        Batch([(0, 1, 1), (0, 2, 2)], commit_error="REBALANCE_IN_PROGRESS"),  # 1 again, after its commit
    ]
    assert again_after_commit(batches) == {1}
