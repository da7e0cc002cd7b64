"""Offset ranges: a partition verified in pieces gets exactly the findings it gets in one piece."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from switchyard.mirror.offsets import OffsetMap
from switchyard.verify.compare import Digested, PartitionFindings, compare_partition, match_range, settle
from switchyard.verify.ranges import range_size, split

DIGESTS = [bytes([i]) * 16 for i in range(4)]  # few, so that equal records repeat as they do in real logs


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[Digested], list[Digested], OffsetMap, dict[str, object]]:
    """A source log (with gaps), an offset map, and a target copy of it with every kind of divergence."""
    offsets = sorted(draw(st.sets(st.integers(0, 80), max_size=50)))
    source = [Digested(o, draw(st.sampled_from(DIGESTS)), draw(st.integers(0, 1))) for o in offsets]
    offset_map = OffsetMap()
    s = t = 0
    for _ in range(draw(st.integers(0, 3))):  # segments: the mirror skipping source offsets
        s, t = s + draw(st.integers(1, 20)), t + draw(st.integers(0, 15))
        if not offset_map.continues(s, t):
            offset_map.add(s, t)
    source_from = offsets[0] if offsets else 0
    target_from = offset_map.position(source_from)
    target: dict[int, Digested] = {}
    for record in source:
        at = offset_map.target_of(record.offset)
        kind = draw(st.sampled_from(["copied", "copied", "retimed", "altered", "lost", "moved"]))
        if at is None or kind == "lost":
            continue
        if kind == "moved":
            at += draw(st.integers(-3, 3))
        digest = draw(st.sampled_from(DIGESTS)) if kind == "altered" else record.digest
        timestamp = record.timestamp + (kind == "retimed")
        if at >= target_from:
            target.setdefault(at, Digested(at, digest, timestamp))
    for at in draw(st.sets(st.integers(target_from, target_from + 90), max_size=8)):  # extras
        target.setdefault(at, Digested(at, draw(st.sampled_from(DIGESTS)), 0))
    source_to = offsets[-1] + 1 if offsets else 0
    target_to = max(target, default=target_from - 1) + 1 + draw(st.integers(0, 2))
    task = {"topic": "t", "partition": 0, "source_from": source_from, "source_to": source_to,
            "target_from": target_from, "target_to": target_to, "segments": offset_map.segments}  # fmt: skip
    return source, sorted(target.values(), key=lambda r: r.offset), offset_map, task


def findings_of(task: dict[str, object]) -> PartitionFindings:
    keys = ("topic", "partition", "source_from", "source_to", "target_from", "target_to")
    return PartitionFindings(*(task[k] for k in keys))  # type: ignore[arg-type]


@settings(max_examples=400)
@given(partitions(), st.integers(1, 30))
def test_any_split_finds_what_one_range_finds(
    partition: tuple[list[Digested], list[Digested], OffsetMap, dict[str, object]], size: int
) -> None:
    source, target, offset_map, task = partition
    whole = compare_partition(findings_of(task), source, target, offset_map)
    ranges = split(task, size)
    read = [r for piece in ranges for r in target if piece["target_from"] <= r.offset < piece["target_to"]]
    assert read == target  # every target record read once, by one range
    for piece in ranges:  # and each source record's expected offset read by its own range
        for r in source:
            at = offset_map.target_of(r.offset)
            if piece["source_from"] <= r.offset < piece["source_to"] and at is not None:
                assert at >= task["target_to"] or piece["target_from"] <= at < piece["target_to"]
    matches = [
        match_range(
            [r for r in source if piece["source_from"] <= r.offset < piece["source_to"]],
            [r for r in target if piece["target_from"] <= r.offset < piece["target_to"]],
            offset_map,
        )
        for piece in ranges
    ]
    assert settle(findings_of(task), matches, offset_map) == whole
    assert whole.records == len(source)


def test_ranges_follow_the_cores_and_leave_small_partitions_whole() -> None:
    hot = {"topic": "hot", "partition": 0, "source_from": 1_000, "source_to": 1_000_000}
    cold = {"topic": "cold", "partition": 0, "source_from": 0, "source_to": 5_000}
    size = range_size([hot, cold], cores=8, minimum=10_000)
    assert size == 41_834  # 1,004,000 offsets over 8 cores x 3, rounded up
    assert len(split(hot, size)) == 24
    assert len(split(cold, size)) == 1
    assert range_size([hot, cold], cores=2, minimum=10_000) == 167_334
    assert range_size([cold], cores=64, minimum=10_000) == 10_000  # never below the minimum
    pieces = split(hot, size)
    assert pieces[0]["source_from"] == 1_000
    assert pieces[-1]["source_to"] == 1_000_000
    assert all(a["source_to"] == b["source_from"] for a, b in pairwise(pieces))


def test_target_cuts_follow_the_offset_map() -> None:
    """Source 0-99 copied to target 0-99, then the mirror skipped 100-149: source 150 is at target 100."""
    task = {"topic": "t", "partition": 0, "source_from": 0, "source_to": 250, "target_from": 0,
            "target_to": 210, "segments": [(150, 100)]}  # fmt: skip
    assert cuts(task, 60) == [(0, 60, 0, 60), (60, 120, 60, 100), (120, 180, 100, 130), (180, 240, 130, 190),
                    (240, 250, 190, 210)]  # fmt: skip
    empty = {**task, "source_from": 250, "target_from": 200}
    assert cuts(empty, 60) == [(250, 250, 200, 210)]


def cuts(task: dict[str, object], size: int) -> list[tuple[object, ...]]:
    return [(p["source_from"], p["source_to"], p["target_from"], p["target_to"]) for p in split(task, size)]
