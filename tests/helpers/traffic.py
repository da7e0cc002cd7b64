"""Judging a switch by what the application saw (:mod:`switchyard.traffic` runs the application)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from switchyard import kafka
from switchyard.traffic import Reader, Traffic, account

EXPECTED_COMMIT_FAILURES = {
    "NOT_COORDINATOR",
    "UNKNOWN_MEMBER_ID",
    "ILLEGAL_GENERATION",
    "REBALANCE_IN_PROGRESS",
}
"""Why commits fail across a switch the gateway cannot carry them over (no link copies the topic)."""


def topic_ids(bootstrap: str, topic: str) -> list[int]:
    """Every record value of the topic, read directly from one cluster."""
    return [int(r.value or b"-1") for rs in kafka.read_partitions(bootstrap, topic).values() for r in rs]


def judge_sends(traffic: Traffic, bootstrap: str) -> None:
    """Every send acknowledged, none failed, and the cluster holds exactly the acknowledged records, each
    once (after the traffic stopped)."""
    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    held = Counter(topic_ids(bootstrap, traffic.topic))
    assert set(held) == set(traffic.acked), f"lost: {sorted(set(traffic.acked) - set(held))[:10]}"
    assert max(held.values()) == 1, f"twice: {sorted(v for v, n in held.items() if n > 1)[:10]}"


def judge_consumer(traffic: Traffic, *, carried: bool = False, also: Sequence[int] = ()) -> str:
    """What each application received is complete, in order, and only repeated where a commit failed;
    ``carried``: a link copies the topic, so the gateway carries commits across: nothing is repeated;
    ``also``: records others wrote to the topic, in transactions, which must be received too (their
    markers take offsets no record holds, which a reader steps over)."""
    expected = [*traffic.acked, *also]
    return "; ".join(
        judge_reader(reader, expected, carried=carried, markers=bool(also)) for reader in traffic.readers
    )


def judge_reader(reader: Reader, acked: list[int], *, carried: bool = False, markers: bool = False) -> str:
    found = account(reader, acked, markers=markers)
    if carried:
        assert not found.commits_refused, f"{reader.app}: commits refused {dict(found.commits_refused)}"
        assert not found.twice, f"{reader.app}: processed twice: {sorted(found.twice)[:10]}"
    assert found.errors == []
    assert found.missing == [], (
        f"records {reader.app} never received: {len(found.missing)}, {spans(found.missing)}; "
        f"offsets it received by partition: {received_spans(reader)}; it was at {reader.doing[0]} since "
        f"{time.strftime('%H:%M:%S', time.localtime(reader.doing[1]))}"
    )
    assert found.out_of_order is None, found.out_of_order
    assert not found.again_after_commit, "processed again although their commit had succeeded: " + "; ".join(
        f"{value}: " + ", ".join(
            f"batch {i} ({b.commit_error or 'committed'})" for i, b in enumerate(reader.batches)
            if any(v == value for _, _, v in b.records)
        )
        for value in sorted(found.again_after_commit)[:5]
    )  # fmt: skip
    assert set(found.commits_refused) <= EXPECTED_COMMIT_FAILURES, found.commits_refused
    refused = f"{sum(found.commits_refused.values())} commits refused {dict(found.commits_refused)}"
    return f"{reader.app}: {found.processed} records, {len(found.twice)} twice, {refused}"


def spans(numbers: list[int]) -> str:
    """Sorted numbers as runs: ``0-9, 12, 15-20``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def received_spans(reader: Reader) -> str:
    """Which offsets of each partition the reader received, as runs (a gap is what it skipped)."""
    offsets: dict[int, set[int]] = {}
    for batch in reader.batches:
        for partition, offset, _ in batch.records:
            offsets.setdefault(partition, set()).add(offset)
    return "; ".join(f"[{p}] {spans(sorted(o))}" for p, o in sorted(offsets.items()))
