"""The exact offset map of one mirrored partition: source offset <-> target offset, as constant shifts.

The mirror writes every copied record to the target in order, so target offsets are dense (0, 1, 2, ...)
while source offsets may skip (a log start above 0, compacted records, transaction markers). The map is
a list of segments ``(source_start, target_start)``: from ``source_start`` on, source offset ``s`` is at
target offset ``target_start + (s - source_start)``, for as many records as fit before the next
segment's ``target_start``; the source offsets after those, up to the next segment, were never copied
(a gap). An implicit segment ``(0, 0)`` comes first, so a link whose offsets come out identical stores
no segment at all.

Two kinds of question: where is *record* ``s`` (:meth:`OffsetMap.target_of`, None if never copied),
and where is *position* ``s`` — the next offset a consumer would read — (:meth:`OffsetMap.position`,
which moves a position inside a gap forward to the next record copied). Group offsets are positions.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field


@dataclass
class OffsetMap:
    segments: list[tuple[int, int]] = field(default_factory=list)
    """(source_start, target_start) after the implicit (0, 0); source starts strictly increasing,
    target starts non-decreasing (equal when the segment before holds no record)."""

    @property
    def identical(self) -> bool:
        """Source and target offsets are the same for every record copied."""
        return all(s == t for s, t in self.segments)

    def continues(self, source: int, target: int) -> bool:
        """Whether copying source ``source`` to ``target`` follows the last segment without a new one."""
        s, t = self.segments[-1] if self.segments else (0, 0)  # asked per gap: no copy of the list
        return source - s == target - t

    def drop_after(self, target_end: int) -> list[tuple[int, int]]:
        """Take out, and return, the segments that start past ``target_end``: the mirror stores the
        segments a batch needs before writing its records, so a copy cut off between the two leaves
        segments that no record on the target follows (one starting exactly at the end stays: it names
        where copying resumes)."""
        dropped = [(s, t) for s, t in self.segments if t > target_end]
        self.segments = [(s, t) for s, t in self.segments if t <= target_end]
        return dropped

    def add(self, source: int, target: int) -> None:
        """Start a segment: the next record copied is source ``source``, written at ``target``."""
        last_s, last_t = self._all()[-1]
        if source <= last_s or target < last_t or (source, target) == (last_s, last_t):
            raise ValueError(f"segment ({source}, {target}) does not follow ({last_s}, {last_t})")
        if not self.continues(source, target):
            self.segments.append((source, target))

    def target_of(self, source: int) -> int | None:
        """The target offset of source record ``source``, or None if it was never copied."""
        if not self.segments:
            return source  # identical offsets: the common case, asked once per record by verification
        segments = self._all()
        i = bisect.bisect_right(segments, (source, _MAX)) - 1
        s, t = segments[i]
        target = t + (source - s)
        if i + 1 < len(segments) and target >= segments[i + 1][1]:
            return None  # in a gap: the next segment's records took these target offsets
        return target

    def position(self, source: int, end: int | None = None) -> int:
        """The target position (next offset to read) for source position ``source``; ``end``: the
        target's end, which no position passes. The last segment runs on unbounded, so a position past
        source offsets the copy never got at the source's end (a transaction's marker, one a consumer
        reads past) maps beyond the target's end, and a consumer there would skip the next record
        written."""
        found = self.target_of(source)
        if found is None:
            segments = self._all()
            found = segments[bisect.bisect_right(segments, (source, _MAX))][1]
        return found if end is None else min(found, end)

    def source_of(self, target: int) -> int:
        """The source offset of the record the mirror wrote at ``target``."""
        segments = self._all()
        i = bisect.bisect_right([t for _, t in segments], target) - 1
        s, t = segments[i]
        return s + (target - t)

    def next_source(self, target_end: int) -> int:
        """Where copying resumes when the target holds ``target_end`` records of this partition.

        A segment that starts exactly at ``target_end`` was stored ahead of its first record (before a
        crash, or by a reverse link starting after records it does not copy): it names the source
        offset; otherwise copying goes on right after the source offset of the last record copied.
        """
        starting = [s for s, t in self.segments if t == target_end]
        if starting:
            return starting[-1]
        return self.source_of(target_end - 1) + 1 if target_end > 0 else 0

    def inverse(self) -> OffsetMap:
        """The map for copying back the other way: this link's target offsets become the source.

        A segment holds as many records as fit before the next one in both offsets. A segment that
        holds none (stored ahead of records that never came: a reverse link's start, where the first
        transaction after the switch aborted) is left out, and the run before it then ends with a
        segment of its own, at the end of its records: inverted without it, that run reached on into
        the gap, and a marker of the old source was taken for the first aborted record after it."""
        segments = [*self._all(), (_MAX, _MAX)]
        runs = [
            (s, t, length)
            for (s, t), (next_s, next_t) in itertools.pairwise(segments)
            if (length := min(next_s - s, next_t - t)) > 0
        ]
        inverse = []
        if runs and min(runs[0][:2]) > 0:  # records before the first run's were none of this link's
            inverse.append((0, runs[0][0]))  # holds none: else the implicit (0, 0) would hold some
        for (s, t, length), (next_s, next_t, _) in itertools.pairwise([*runs, (_MAX, _MAX, 0)]):
            inverse.append((t, s))
            if t + length < next_t and s + length < next_s < _MAX:
                inverse.append((t + length, next_s))  # holds none: the run ends here
        return OffsetMap([segment for segment in inverse if segment != (0, 0)])

    def _all(self) -> list[tuple[int, int]]:
        return [(0, 0), *self.segments]


_MAX = 1 << 62
