"""How far the copy of one partition got, in source and target offsets, and what its status says."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.status import PartitionStatus

Key = tuple[str, int]


@dataclass
class PartitionCopy:
    topic: str
    partition: int
    offset_map: OffsetMap
    next_target: int
    """The target offset the next record written will get."""
    acked_target: int
    """The target offset the next delivery report must confirm."""
    start: int
    """The source position this session started copying from."""
    read_to: int
    """The consumer's position: past every record and marker read so far."""
    begun: bool = False
    """Whether the target holds any record of this partition (else copying starts at the source's start)."""
    source_end: int = -1
    fetched_at: float | None = None
    caught_up_at: float = field(default_factory=time.time)
    error: str | None = None

    last_source: int = -1
    """The source offset of the last record written in this session (-1: none yet)."""

    def acked_source(self) -> int:
        """Every source offset below this is on the target, acknowledged (worked out when asked:
        translating on every delivery report would cost the copy loop a map lookup per record)."""
        return self.offset_map.source_of(self.acked_target - 1) + 1 if self.acked_target > 0 else self.start

    def mirrored(self) -> int:
        """Every source offset below this is on the target (markers after the last record included)."""
        idle = self.acked_target == self.next_target
        return max(self.acked_source(), self.read_to) if idle else self.acked_source()

    def status(self, state: str, now: float) -> PartitionStatus:
        mirrored = self.mirrored()
        # the source ends at least where it was read to: librdkafka's statistics can report a high
        # watermark older than the fetch that delivered records past it (seen in CI: 1,296 of 1,500)
        source_end = max(self.source_end, self.read_to) if self.source_end >= 0 else -1
        lag = max(0, source_end - mirrored) if source_end >= 0 else 0
        if lag == 0 and source_end >= 0:
            self.caught_up_at = now
        return PartitionStatus(
            topic=self.topic,
            partition=self.partition,
            state="failed" if self.error else state,
            source_end=source_end,
            mirrored=mirrored,
            target_end=self.acked_target,
            lag=lag,
            lag_s=round(now - self.caught_up_at, 3),
            fetched_at=datetime.fromtimestamp(self.fetched_at, UTC) if self.fetched_at else None,
            error=self.error,
            identical=self.offset_map.identical,
        )


def gone(position: int, low: int | None, end: int | None) -> str:
    where = f" (it holds {low} to {end})" if end is not None else ""
    return (
        f"source offset {position} is not on the source{where}: deleted by retention, or the topic was "
        "recreated; copying on from elsewhere would skip or repeat records, so this partition stops"
    )
