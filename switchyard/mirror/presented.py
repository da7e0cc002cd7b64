"""A partition's offsets as clients see them where a promoted link's copy does not keep the source's.

Every client sees a topic's offsets as its *home* cluster numbers them: the source of the first link
that copied it (a reverse link's home is its origin's). On Apache Kafka a copy's offsets often differ
(:mod:`switchyard.mirror.offsets`): a log start above 0, transaction markers, aborted records and
compaction take source offsets and no target ones. So where an identity is bound to the target of a
promoted link whose offsets differ from the clients', the gateway translates — what a client sends from
home offsets to the target's, what the target answers back — and a consumer's live position, its
committed offset and a new group's reset all name the same record on either cluster, across any number
of switches. Promoted, a link's map is final; the target's records written since follow its final
position: the target's end at the promotion stands where the source was copied up to — or, after a
failover, where the source's records that clients may have read end (``resume``): the copy stopped short
of them, and a consumer that read them on the old cluster is positioned past them; the first record
written on the new one presented where the copy stood would be skipped by it (a chaos trial's kafkajs
group never processed one so). Clients' positions between the two name the target's end at the
promotion: those records are the failover's lost window.

A link that reverses another copies from a cluster that is itself presented: its source offsets are
not the clients'. Its translation goes through the one it reverses (``through``), back to the home, and
so the home itself is translated after a switch back wherever that differs from its own offsets: the
records a transaction wrote while switched over sit there without the markers between them, which the
copy back does not write, so the clients' offsets for them (counted with the markers) are not the
home's.

A cluster clients come back to (the target of a link that reverses another) also holds records no link
copied: those of transactions that aborted there while it was theirs, and the markers. They keep the
offsets clients saw them at then (``earlier``: how that cluster was presented, or its own offsets).

Positions (the next offset to read, a committed offset, an end) and record offsets are translated
alike: a target batch never spans two segments of the map (the mirror writes each segment's records
after everything before it is acknowledged), so rebasing its base offset moves all of its records.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

from switchyard.mirror.offsets import OffsetMap


@dataclass(frozen=True)
class Presented:
    """One partition of a promoted link whose copy's offsets differ from the clients'."""

    offset_map: OffsetMap
    copied: int
    """The source position the link was copied up to when promoted."""
    target_end: int
    """The target's end then: where the target's records written since the promotion begin."""
    through: Presented | None = None
    """How the link's source is presented, where the link reverses another (None: its source is home)."""
    returns: bool = False
    """Whether the target is a cluster clients used before (the link reverses another): its records that
    no link copied keep the offsets clients saw them at then (``earlier``)."""
    earlier: Presented | None = None
    """Where ``returns``: how the target was presented while clients used it (None: as its own offsets,
    the home's, or a copy's that were identical)."""
    resume: int | None = None
    """The source position at which the target's records written since the promotion are presented, where
    it is past ``copied`` (a failover's: past what clients may have read on the source)."""

    @property
    def _resumed(self) -> int:
        return self.copied if self.resume is None else max(self.resume, self.copied)

    @cached_property
    def identical(self) -> bool:
        """Every record on the target has the offset clients see for it: nothing to translate."""
        return all(start == client for start, _, client in self._runs)

    def to_target(self, position: int) -> int:
        """The target position for a client's ``position`` (negative: a special value, kept)."""
        if position < 0:
            return position
        if self.through is not None:
            position = self.through.to_target(position)
        if position >= self._resumed:
            return self.target_end + (position - self._resumed)
        return self.offset_map.position(position, self.target_end)

    def to_client(self, offset: int) -> int:
        """The client offset of the target's record or position ``offset`` (negative: kept)."""
        if offset < 0:
            return offset
        runs = self._runs
        i = bisect.bisect_right(self._run_starts, offset) - 1
        if i >= 0 and offset < runs[i][1]:
            start, _, client = runs[i]
            return client + (offset - start)
        source = self._source_of(offset)
        return source if self.through is None else self.through.to_client(source)

    def position_to_client(self, position: int) -> int:
        """The client position for the target's ``position`` (an end, a committed offset, a log start):
        just after the client offset of the record before it, where one is (negative: kept).

        Not :meth:`to_client` of the offset: a position where two runs meet (the target's end at the
        promotion, say) would then name the next run's start, past the gap between them in client
        offsets — a transaction marker the copy does not have. A consumer reading up to that end never
        gets there: it moves past a record, not past a marker it is never sent, and Kafka Streams waited
        for ever to finish restoring a changelog whose last transaction's marker was not copied."""
        if position <= 0:
            return position
        runs = self._runs
        i = bisect.bisect_right(self._run_starts, position - 1) - 1
        if i >= 0 and position - 1 < runs[i][1]:
            start, _, client = runs[i]
            return client + (position - start)
        return self.to_client(position)

    def spans(self, base: int, last: int) -> bool:
        """Whether the target's batch ``base``..``last`` keeps its offsets' spacing in client offsets
        (it lies within one segment of the map, or after the promotion)."""
        return self.to_client(last) - self.to_client(base) == last - base

    def _source_of(self, offset: int) -> int:
        if offset >= self.target_end:
            return self._resumed + (offset - self.target_end)
        return self.offset_map.source_of(offset)

    @cached_property
    def _runs(self) -> tuple[tuple[int, int, int], ...]:
        """(start, stop, client start) of each run of target offsets that hold records whose client
        offsets follow one another: the records copied and those written since the promotion. Offsets
        that hold none (a marker's, one below the copy's first, a target's own before a reverse link)
        are left out: no client reads a record there. Both lists are in offset order, so composing
        them is one walk (a transactional topic has a run per marker).

        On a cluster clients used before, the records no link copied (a transaction's that aborted there,
        its markers) fill the gaps between the runs at the offsets clients saw them at then: a batch of an
        aborted transaction is fetched like any other (the client drops it), and translated through the
        runs around it, it spanned two of them and its partition stalled."""
        runs = self._composed()
        return tuple(_filled(runs, self.earlier) if self.returns else runs)

    def _composed(self) -> list[tuple[int, int, int]]:
        own = self._own_runs()
        if self.through is None:
            return own
        under, runs, j = self.through._runs, [], 0
        for start, stop, source in own:
            end = source + (stop - start)
            while j < len(under) and under[j][1] <= source:
                j += 1
            k = j
            while k < len(under) and under[k][0] < end:
                low, high, client = under[k]
                first, last = max(source, low), min(end, high)
                if first < last:
                    runs.append((start + first - source, start + last - source, client + first - low))
                k += 1
        return runs

    @cached_property
    def _run_starts(self) -> list[int]:
        return [start for start, _, _ in self._runs]

    def _own_runs(self) -> list[tuple[int, int, int]]:
        """(start, stop, source start) of each run of this link's copy, then of its records since."""
        segments = [(0, 0), *self.offset_map.segments]
        runs = []
        for i, (source, target) in enumerate(segments):
            source_end, target_end = segments[i + 1] if i + 1 < len(segments) else (_MAX, _MAX)
            length = min(min(target_end, self.target_end) - target, min(source_end, self.copied) - source)
            if length > 0:
                runs.append((target, target + length, source))
        return [*runs, (self.target_end, _MAX, self._resumed)]


def _filled(runs: list[tuple[int, int, int]], earlier: Presented | None) -> list[tuple[int, int, int]]:
    """``runs`` with each gap between them filled from ``earlier``'s runs (None: the offsets as they are).
    Both are in offset order: one walk (a transactional topic has a run per marker, on both)."""
    under = earlier._runs if earlier is not None else ((0, _MAX, 0),)
    filled: list[tuple[int, int, int]] = []
    at, j = 0, 0
    for run in runs:
        while j < len(under) and under[j][1] <= at:
            j += 1
        k = j
        while k < len(under) and under[k][0] < run[0]:
            low, high, client = under[k]
            first, last = max(low, at), min(high, run[0])
            if first < last:
                filled.append((first, last, client + first - low))
            k += 1
        filled.append(run)
        at = run[1]
    return filled


_MAX = 1 << 62
