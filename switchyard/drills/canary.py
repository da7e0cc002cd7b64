"""A drill's canary: an application of the drill's own producing and consuming through the gateway while
the drill switches it over and back, and what it saw — per partition, per switch, per consumer group.

The findings come from the application's side (every acknowledgement, every record processed) and from
the cluster the records end on (each acknowledged record there exactly once), never from offsets alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime

from switchyard.sagas.drills import CanaryFindings, GroupResume, PartitionFigures, Timeline
from switchyard.traffic import Traffic, account

BUCKET_MS = 100
"""The timeline's resolution: fine enough to show a pause of a few hundred milliseconds."""
ATTEMPT_VALUES = 1_000_000_000
"""Values each attempt of the canary has to itself: more than it sends in its longest run."""


def first_value(attempt: int) -> int:
    """The first value the canary's ``attempt`` (from 1) sends. An attempt after its worker died writes
    values of its own to the same topic, so the records its predecessor left there are not taken for
    its own written twice (a chaos trial's drill failed so); the records on the cluster are judged
    across attempts (any value twice is a record written twice), acknowledgements by the last."""
    return (attempt - 1) * ATTEMPT_VALUES


def findings(
    traffic: Traffic,
    *,
    began: tuple[datetime, float],
    switches: list[tuple[str, str, str]],
    held: dict[int, Counter[int]],
    stopped_by: str,
) -> CanaryFindings:
    """Judge ``traffic`` (stopped) by what the application saw. ``began``: the canary's start in wall
    time and in ``time.monotonic`` (the traffic's clock); ``switches``: (kind, ISO start, ISO end);
    ``held``: each partition's records on the cluster the canary ended on, counted by value."""
    start_wall, start_mono = began

    def mono(iso: str) -> float:
        return start_mono + (datetime.fromisoformat(iso) - start_wall).total_seconds()

    spans = [(kind, mono(a), mono(b)) for kind, a, b in switches]
    reader = traffic.readers[0]
    received_at = [(batch.at, len(batch.records)) for batch in reader.batches]
    consumer = account(reader, traffic.acked)
    again_uncommitted = len(consumer.twice & consumer.uncommitted)
    return CanaryFindings(
        sent=traffic.sent,
        acked=len(set(traffic.acked)),
        failed=len(traffic.failed),
        longest_wait_s=round(_longest_wait(traffic, start_mono, None), 3),
        waits_s=switch_waits(traffic, [(a, b) for _, a, b in spans], start_mono),
        partitions=partition_figures(traffic, held),
        groups=[
            GroupResume(
                group=reader.group,
                resumed_at_commit=not consumer.again_after_commit and not consumer.missing,
                again_after_commit=len(consumer.again_after_commit),
                skipped=len(consumer.missing),
                again_uncommitted=again_uncommitted,
            )
        ],
        out_of_order=consumer.out_of_order,
        timeline=Timeline(
            start=start_wall.isoformat(),
            bucket_ms=BUCKET_MS,
            acked=buckets(((t, 1) for t in traffic.acked_at), start_mono),
            processed=buckets(received_at, start_mono),
            switches=[(kind, round(a - start_mono, 3), round(b - start_mono, 3)) for kind, a, b in spans],
        ),
        stopped_by=stopped_by,
    )


def partition_figures(traffic: Traffic, held: dict[int, Counter[int]]) -> list[PartitionFigures]:
    """Per partition: acknowledged records, those not on the cluster (and over how long they were
    acknowledged: the RPO in time), those on it twice."""
    acked: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for value, (partition, _), at in zip(traffic.acked, traffic.acked_where, traffic.acked_at, strict=False):
        acked[partition].append((value, at))
    figures = []
    for partition in sorted(set(acked) | set(held)):
        there = held.get(partition, Counter())
        lost_at = [at for value, at in acked[partition] if there[value] == 0]
        figures.append(
            PartitionFigures(
                partition=partition,
                acked=len(acked[partition]),
                lost=len(lost_at),
                lost_window_ms=int((max(lost_at) - min(lost_at)) * 1000) if lost_at else 0,
                written_twice=sum(1 for times in there.values() if times > 1),
            )
        )
    return figures


def buckets(events: Iterable[tuple[float, int]], start: float) -> list[int]:
    """``(when, count)`` events summed per ``BUCKET_MS`` from ``start``."""
    counts: Counter[int] = Counter()
    for at, count in events:
        counts[max(0, int((at - start) * 1000) // BUCKET_MS)] += count
    return [counts[i] for i in range(max(counts) + 1)] if counts else []


def switch_waits(traffic: Traffic, spans: list[tuple[float, float]], began: float) -> list[float]:
    """The producer's longest wait through each switch (start, end), counted from the switch's start or
    the canary's own (``began``), whichever is later: a canary started again after its worker died did
    not exist before it, and a switch over before it began is one it never waited for (0)."""
    return [round(_longest_wait(traffic, max(a, began), b), 3) if b > began else 0.0 for a, b in spans]


def _longest_wait(traffic: Traffic, since: float, until: float | None) -> float:
    """The producer's longest wait for an acknowledgement from ``since``: over the whole run (``until``
    None), or through a switch ending at ``until`` — up to the first acknowledgement after it."""
    times = sorted(traffic.acked_at)
    later = [t for t in times if t >= (until if until is not None else since)]
    if not later:
        return 0.0
    end = later[0] if until is not None else later[-1]
    return traffic.longest_silence(since, end)[0]
