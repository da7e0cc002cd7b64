"""A partition's offsets as clients see them where a promoted link's copy does not keep the source's.

Every client sees a topic's offsets as its *home* cluster numbers them: the source of the first link
that copied it (a reverse link's home is its origin's). On Apache Kafka a copy's offsets often differ
(:mod:`switchyard.mirror.offsets`): a log start above 0, transaction markers, aborted records and
compaction take source offsets and no target ones. So where an identity is bound to the target of a
promoted link whose map is not identical, the gateway translates — what a client sends from home
offsets to the target's, what the target answers back — and a consumer's live position, its committed
offset and a new group's reset all name the same record on either cluster, across any number of
switches. Promoted, a link's map is final; the target's records written since follow its final
position: the target's end at the promotion stands where the source was copied up to.

Positions (the next offset to read, a committed offset, an end) and record offsets are translated
alike: a target batch never spans two segments of the map (the mirror writes each segment's records
after everything before it is acknowledged), so rebasing its base offset moves all of its records.
"""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.mirror.offsets import OffsetMap


@dataclass(frozen=True)
class Presented:
    """One partition of a promoted link whose copy's offsets differ from the source's."""

    offset_map: OffsetMap
    copied: int
    """The source position the link was copied up to when promoted."""
    target_end: int
    """The target's end then: where the target's records written since the promotion begin."""

    @property
    def identical(self) -> bool:
        return self.offset_map.identical and self.copied == self.target_end

    def to_target(self, position: int) -> int:
        """The target position for a client's ``position`` (negative: a special value, kept)."""
        if position < 0:
            return position
        if position >= self.copied:
            return self.target_end + (position - self.copied)
        return self.offset_map.position(position, self.target_end)

    def to_client(self, offset: int) -> int:
        """The client offset of the target's record or position ``offset`` (negative: kept)."""
        if offset < 0:
            return offset
        if offset >= self.target_end:
            return self.copied + (offset - self.target_end)
        return self.offset_map.source_of(offset)

    def spans(self, base: int, last: int) -> bool:
        """Whether the target's batch ``base``..``last`` keeps its offsets' spacing in client offsets
        (it lies within one segment of the map, or after the promotion)."""
        return self.to_client(last) - self.to_client(base) == last - base
