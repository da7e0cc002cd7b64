"""A migrated partition's offsets as clients see them: which cluster a read goes to, and its answer in
client offsets.

A partition migration (:class:`switchyard.model.PartitionMigration`, seed 004) leaves every record where
it is. Client offsets below the end offset ``E`` are the origin's own offsets; the target's offset ``t``
is client offset ``t - target_base + E``, so the target's records follow the origin's. The numbers never
change once the migration is in effect, whatever happens to the origin, so a client offset names one
record for good:

- a read below the *limit* — ``E``, or the origin's true end once recorded, when it is lower (a fault
  migration chose ``E`` beyond anything the origin acknowledged) — goes to the origin, and its answer is
  cut at the limit; a read at or above it goes to the target;
- client offsets from the limit up to ``E`` stand for no record: a gap that readers step over, as they
  step over a compacted topic's;
- when the origin has nothing more below the limit, or is not read at all (ignore-origin, aged), the
  read goes on at the target's first record, ``E``, like a read of a compacted gap;
- an origin that is down while it must be read answers nothing, and readers wait for it.

Batch headers are rewritten (base offsets, leader epochs), record payloads never read
(:mod:`workers.gateway.framing.batches`). Leader epochs are presented as unknown (-1): the partition's records
come from two clusters with unrelated epochs.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

from switchyard.model import MigrationState, PartitionMigration
from workers.gateway.framing import batches

NO_EPOCH = -1
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
"""ListOffsets' special timestamps (-4, -5: the earliest local or tiered offset, taken as earliest)."""
NONE, NOT_AVAILABLE = 0, 5
"""Error codes: none; LEADER_NOT_AVAILABLE (retriable: the client asks again)."""


class Side(enum.Enum):
    ORIGIN = "origin"
    TARGET = "target"


@dataclass(frozen=True)
class Read:
    """A partition's read as one cluster is asked it, in that cluster's offsets."""

    side: Side
    offset: int


@dataclass(frozen=True)
class Fetched:
    """One partition of a fetch answer: as a cluster gave it, or in client offsets."""

    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    aborted: tuple[tuple[int, int], ...] = ()
    """The aborted transactions: (producer id, first offset)."""


@dataclass(frozen=True)
class Listed:
    """One partition of a ListOffsets answer."""

    error: int
    offset: int
    timestamp: int


class Arithmetic:
    """The offsets of one migration in effect; ``origin_up``: whether its origin can be read now (not
    shielded, not known unreachable)."""

    def __init__(self, migration: PartitionMigration, *, origin_up: bool) -> None:
        if migration.end_offset is None:
            raise ValueError(f"migration of {migration.id} is not in effect")
        self.end = migration.end_offset
        self.base = migration.target_base
        self.delta = self.end - self.base
        """Client offset minus target offset, for the target's records."""
        self.limit = self.end if migration.origin_end is None else min(self.end, migration.origin_end)
        self.reads_origin = migration.state is MigrationState.MIGRATED and not migration.ignore_origin
        self.origin_up = origin_up

    def to_target(self, client: int) -> int:
        """The target offset a read at ``client`` starts from (the target's first record below ``E``)."""
        return max(client, self.end) - self.delta

    def read(self, client: int) -> Read | None:
        """Where a fetch at client offset ``client`` goes; None: nowhere now (answer nothing, the reader
        waits for the origin)."""
        if self.reads_origin and client < self.limit:
            return Read(Side.ORIGIN, client) if self.origin_up else None
        return Read(Side.TARGET, self.to_target(client))

    def nothing(self) -> Fetched:
        """The answer while the origin must be read and cannot be: no records, no error."""
        return Fetched(NONE, self.limit, self.limit, -1, b"")

    def from_origin(self, client: int, answer: Fetched) -> Fetched | Read:
        """The origin's answer to a read at ``client``, cut at the limit; or, when the origin has nothing
        more below it, the read to make at the target instead."""
        if answer.error != NONE:
            return answer
        found = batches.read(answer.records)
        kept = batches.below(found, self.limit)
        if not kept and (found or self._exhausted(client, answer)):
            return Read(Side.TARGET, self.base)
        capped = min(answer.high_watermark, self.limit)
        return dataclasses.replace(
            answer,
            high_watermark=capped,
            last_stable_offset=min(answer.last_stable_offset, capped),
            records=batches.rebased(answer.records, kept, 0, leader_epoch=NO_EPOCH),
            aborted=tuple(a for a in answer.aborted if a[1] < self.limit),
        )

    @staticmethod
    def _exhausted(client: int, answer: Fetched) -> bool:
        """Whether an origin answer without records says the origin holds nothing at or past ``client``:
        its high watermark is there. An empty answer below it is no proof — records may wait for a
        transaction's end or be cut short — so it is answered empty, and the reader asks again."""
        return not answer.records and answer.high_watermark <= client

    def from_target(self, answer: Fetched) -> Fetched:
        """The target's answer in client offsets (records it held before the migration left out)."""
        if answer.error != NONE:
            return dataclasses.replace(answer, high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
        kept = batches.from_offset(batches.read(answer.records), self.base)
        return Fetched(
            NONE,
            self._client(answer.high_watermark),
            self._client(answer.last_stable_offset),
            self._client(answer.log_start_offset),
            batches.rebased(answer.records, kept, self.delta, leader_epoch=NO_EPOCH),
            tuple((producer, max(first, self.base) + self.delta) for producer, first in answer.aborted),
        )

    def _client(self, target: int) -> int:
        return -1 if target < 0 else max(target, self.base) + self.delta

    def asks(self, timestamp: int) -> tuple[Side, ...]:
        """Which clusters a ListOffsets for ``timestamp`` asks, in order, until one answers it."""
        if not self.reads_origin or timestamp == LATEST:
            return (Side.TARGET,)
        if timestamp == MAX_TIMESTAMP:
            return (Side.TARGET, Side.ORIGIN)
        return (Side.ORIGIN, Side.TARGET)

    def listed(self, side: Side, timestamp: int, answer: Listed) -> Listed | None:
        """A cluster's ListOffsets answer in client offsets; None: not this cluster's, ask the next."""
        if answer.error != NONE:
            return answer
        if side is Side.ORIGIN:
            if 0 <= answer.offset < self.limit:
                return answer
            return None
        if answer.offset < self.base and timestamp == MAX_TIMESTAMP and self.reads_origin:
            return None  # nothing written to the target since: the origin's newest record
        if answer.offset < 0:
            return answer
        return dataclasses.replace(answer, offset=max(answer.offset, self.base) + self.delta)

    def unlisted(self) -> Listed:
        """The answer when no cluster could answer: the origin is down while it must be read."""
        return Listed(NOT_AVAILABLE, -1, -1)
