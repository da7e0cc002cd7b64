"""Splitting partitions into offset ranges, so that a job's tasks follow the cluster's cores and one hot
partition does not become one long task.

A job aims at :data:`RANGES_PER_CORE` ranges per core over all its partitions (a few per core, so that a
slow range or a lost executor leaves the others busy), of at least ``minimum`` offsets each: a range
costs a task and two consumers, worth it only for enough records. A partition smaller than the range
size stays whole.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

from switchyard.mirror.offsets import OffsetMap

RANGES_PER_CORE = 3


def range_size(tasks: list[dict[str, Any]], cores: int, minimum: int) -> int:
    """Source offsets per range for these partition tasks on ``cores`` cores."""
    total = sum(int(t["source_to"]) - int(t["source_from"]) for t in tasks)
    return max(minimum, 1, -(-total // (max(1, cores) * RANGES_PER_CORE)))


def split(task: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """The task's source offsets in ranges of ``size``, in order. A verification task's target range is
    cut where the offset map puts each source cut, so every target record is read by exactly one range:
    the one whose source records belong there, or the last one for records beyond the copy's end."""
    start, end = task["source_from"], task["source_to"]
    cuts = [start, *range(start + size, end, size), max(start, end)]
    if "target_from" not in task:
        return [{**task, "source_from": a, "source_to": b} for a, b in pairwise(cuts)]
    offset_map = OffsetMap([(s, t) for s, t in task["segments"]])
    low, high = task["target_from"], task["target_to"]
    target_cuts = [low, *(min(max(offset_map.position(c), low), high) for c in cuts[1:-1]), max(low, high)]
    return [
        {**task, "source_from": a, "source_to": b, "target_from": ta, "target_to": tb}
        for (a, b), (ta, tb) in zip(pairwise(cuts), pairwise(target_cuts), strict=True)
    ]
