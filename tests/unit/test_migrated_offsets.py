"""The offset arithmetic of a migrated partition, as properties over random logs and migrations.

Two simulated clusters hold real v2 batch headers (the gateway reads and rewrites only those); a
simulated consumer fetches through :class:`Arithmetic` exactly as the gateway asks the clusters, from
random offsets, with random fetch sizes, commits and resumes, asks ListOffsets, and reads again after
the origin comes back and its true end is recorded. Whatever happens, every client offset stands for one
record and every record for one client offset (the seed's first open problem), and a reader from the
earliest offset gets every record the migration keeps, once, in order.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from switchyard.model import MigrationMode, MigrationState, PartitionId, PartitionMigration
from workers.gateway.framing import batches
from workers.gateway.migrated.offsets import (
    EARLIEST,
    LATEST,
    MAX_TIMESTAMP,
    NONE,
    Arithmetic,
    Fetched,
    Listed,
    Read,
    Side,
)

OUT_OF_RANGE = 1
Record = tuple[str, int]
"""A record as its cluster knows it: (cluster, offset)."""


def batch(cluster: str, base: int, last: int) -> bytes:
    """A v2 batch header with a payload naming its cluster and base offset (never rewritten)."""
    payload = struct.pack(">cq", cluster[0].encode(), base) + b"\x00" * 7
    header = struct.pack(">qiibIhiqqqhii", base, 49 + len(payload), 17, 2, 0, 0, last - base, base * 10,
                         last * 10, -1, -1, -1, last - base + 1)  # fmt: skip
    return header + payload


def records_of(data: bytes) -> list[tuple[int, Record]]:
    """(offset as written in the header, the record it is) for every record of every whole batch."""
    out = []
    for b in batches.read(data):
        tag, base = struct.unpack_from(">cq", data, b.start + batches.HEADER_END)
        cluster = "origin" if tag == b"o" else "target"
        out += [(b.base_offset + i, (cluster, base + i)) for i in range(b.last_offset - b.base_offset + 1)]
    return out


@dataclass
class Log:
    name: str
    spans: list[tuple[int, int]]
    """Batches as (base, last), ascending, gaps between them (a compacted log) allowed."""
    start: int
    end: int
    hiccups: bool = False
    """Every other fetch answers no records though some wait (Tansu, asked to wait 1 ms, may)."""
    fetches: int = 0

    @property
    def newer(self) -> int:
        """Added to an offset, a record's timestamp: the target's records are newer than the origin's."""
        return 100_000 if self.name == "target" else 0

    def fetch(self, offset: int, most: int) -> Fetched:
        if offset < self.start or offset > self.end:
            return Fetched(OUT_OF_RANGE, -1, -1, -1, b"")
        self.fetches += 1
        if self.hiccups and self.fetches % 2:
            return Fetched(NONE, self.end, self.end, self.start, b"")
        after = [s for s in self.spans if s[1] >= offset]
        data = b"".join(batch(self.name, b, last) for b, last in after[:most])
        tail = b"\x00" * 5 if len(after) > most else b""  # the next batch, cut short by the size limit
        return Fetched(NONE, self.end, self.end, self.start, data + tail)

    def list(self, timestamp: int) -> Listed:
        if timestamp == LATEST:
            return Listed(NONE, self.end, -1)
        if timestamp == EARLIEST:
            return Listed(NONE, self.start, -1)
        if timestamp == MAX_TIMESTAMP:
            last = self.spans[-1][1] if self.spans else -1
            return Listed(NONE, last, last + self.newer)
        found = [o for b, last in self.spans for o in range(b, last + 1) if o + self.newer >= timestamp]
        return Listed(NONE, found[0], found[0] + self.newer) if found else Listed(NONE, -1, -1)


@st.composite
def logs(draw: st.DrawFn, name: str, start: int) -> Log:
    spans, at = [], start + draw(st.integers(0, 3))
    for _ in range(draw(st.integers(0, 6))):
        at += draw(st.sampled_from([0, 0, 0, 1, 4]))  # compaction gaps, sometimes
        size = draw(st.integers(1, 5))
        spans.append((at, at + size - 1))
        at += size
    if not spans:  # everything removed (retention): the log starts at its end
        return Log(name, [], at, at)
    return Log(name, spans, start, at)  # compaction keeps a log's last batch


@dataclass
class Case:
    origin: Log
    target: Log
    migration: PartitionMigration
    late: list[tuple[int, int]]
    """Batches written on the origin around the gateway once the migration took effect."""


@st.composite
def cases(draw: st.DrawFn) -> Case:
    origin = draw(logs("origin", draw(st.integers(0, 5))))
    origin.hiccups = draw(st.booleans())
    target = draw(logs("target", 0))  # records before the migration's base are not the partition's
    base = target.end
    after = draw(logs("target", base))
    target = Log("target", target.spans + after.spans, target.start, after.end)
    smooth = draw(st.booleans())
    end = origin.end if smooth else origin.end + draw(st.integers(0, 12))
    late: list[tuple[int, int]] = []
    if not smooth:
        at = origin.end
        for _ in range(draw(st.integers(0, 3))):
            size = draw(st.integers(1, 6))  # may run past the end offset: a margin too small
            late.append((at, at + size - 1))
            at += size
    state = draw(st.sampled_from([MigrationState.MIGRATED, MigrationState.MIGRATED, MigrationState.AGED]))
    migration = PartitionMigration(
        PartitionId("t", 0), "o", "d", MigrationMode.SMOOTH if smooth else MigrationMode.FAULT, state, end,
        base, end if smooth else None, draw(st.booleans()), 3, datetime(2026, 1, 1, tzinfo=UTC), "t",
    )  # fmt: skip
    return Case(origin, target, migration, late)


def fetch(arithmetic: Arithmetic, case: Case, client: int, most: int) -> Fetched | None:
    """One partition's fetch as the gateway makes it (None: nothing to ask now)."""
    read = arithmetic.read(client)
    if read is None:
        return None
    if read.side is Side.ORIGIN:
        got = arithmetic.from_origin(client, case.origin.fetch(read.offset, most))
        if not isinstance(got, Read):
            return got
        read = got
    return arithmetic.from_target(case.target.fetch(read.offset, most))


def consume(arithmetic: Arithmetic, case: Case, start: int, most: int) -> list[tuple[int, Record]]:
    """What a consumer at ``start`` processes until it catches up: (client offset, record)."""
    got: list[tuple[int, Record]] = []
    at, idle = start, 0
    for _ in range(400):
        answer = fetch(arithmetic, case, at, most)
        if answer is None or answer.error != NONE:
            break
        new = [(o, r) for o, r in records_of(answer.records) if o >= at]  # as clients skip within a batch
        idle = 0 if new else idle + 1
        if idle == 3:  # caught up
            break
        if not new:
            continue
        assert [o for o, _ in new] == sorted({o for o, _ in new}), "offsets go back or repeat"
        got += new
        at = new[-1][0] + 1
    return got


def list_offset(arithmetic: Arithmetic, case: Case, timestamp: int) -> Listed:
    for side in arithmetic.asks(timestamp):
        if side is Side.ORIGIN and not arithmetic.origin_up:
            return arithmetic.unlisted()
        log = case.origin if side is Side.ORIGIN else case.target
        answer = arithmetic.listed(side, timestamp, log.list(timestamp))
        if answer is not None:
            return answer
    raise AssertionError("the target always answers")


def kept(case: Case, arithmetic: Arithmetic) -> list[Record]:
    """Every record a reader from the earliest offset must get, in order."""
    origin = [
        ("origin", o) for b, last in case.origin.spans for o in range(b, last + 1) if o < arithmetic.limit
    ]
    target = [
        ("target", o) for b, last in case.target.spans for o in range(b, last + 1) if o >= arithmetic.base
    ]
    return (origin if arithmetic.reads_origin else []) + target


class Meanings:
    """Every (client offset, record) pair ever seen: each must be one-to-one."""

    def __init__(self) -> None:
        self.record: dict[int, Record] = {}
        self.offset: dict[Record, int] = {}

    def add(self, seen: list[tuple[int, Record]]) -> None:
        for offset, record in seen:
            assert self.record.setdefault(offset, record) == record, f"offset {offset} changed meaning"
            assert self.offset.setdefault(record, offset) == offset, f"{record} seen at two offsets"


@settings(max_examples=400, deadline=None)
@given(cases(), st.data())
def test_every_client_offset_keeps_one_record_before_and_after_the_origin_returns(
    case: Case, data: st.DataObject
) -> None:
    migration = case.migration
    meanings = Meanings()
    down = Arithmetic(migration, origin_up=False)  # a fault migration: the origin frozen
    for _ in range(3):
        start = data.draw(st.integers(0, down.end + 30))
        meanings.add(consume(down, case, start, data.draw(st.integers(1, 4))))
    waiting = down.read(0)
    if down.reads_origin and down.limit > 0:
        assert waiting is None  # without ignore-origin, readers below the end wait for the origin
    back = Arithmetic(migration, origin_up=True)  # the origin is back, its true end not yet recorded
    case.origin.spans += case.late  # and writers around the gateway wrote on it
    case.origin.end = case.late[-1][1] + 1 if case.late else case.origin.end
    for _ in range(3):
        meanings.add(
            consume(back, case, data.draw(st.integers(0, back.end + 30)), data.draw(st.integers(1, 4)))
        )
    recorded = dataclasses.replace(migration, origin_end=min(case.origin.end, migration.end_offset or 0))
    known = Arithmetic(recorded, origin_up=True)
    for _ in range(3):
        meanings.add(
            consume(known, case, data.draw(st.integers(0, known.end + 30)), data.draw(st.integers(1, 4)))
        )
    for offset, (cluster, _) in meanings.record.items():
        if cluster == "target":
            assert offset >= migration.end_offset  # type: ignore[operator]
        else:
            assert offset < migration.end_offset  # type: ignore[operator]


@settings(max_examples=400, deadline=None)
@given(cases(), st.integers(1, 4), st.data())
def test_a_reader_from_the_earliest_offset_gets_every_kept_record_once_and_resumes_where_it_committed(
    case: Case, most: int, data: st.DataObject
) -> None:
    arithmetic = Arithmetic(case.migration, origin_up=True)
    earliest = list_offset(arithmetic, case, EARLIEST)
    assert earliest.error == NONE
    everything = consume(arithmetic, case, earliest.offset, most)
    assert [r for _, r in everything] == kept(case, arithmetic)
    offsets = [o for o, _ in everything]
    assert offsets == sorted(set(offsets))
    gap = range(arithmetic.limit, arithmetic.end)
    assert not any(o in gap for o in offsets)  # the skipped gap stands for no record
    latest = list_offset(arithmetic, case, LATEST).offset
    assert latest == arithmetic.end + case.target.end - arithmetic.base
    assert not offsets or offsets[-1] < latest
    if everything:  # a commit anywhere, then a restart from it: the same records from there on
        cut = data.draw(st.integers(0, len(everything) - 1))
        committed = everything[cut][0]
        assert consume(arithmetic, case, committed, data.draw(st.integers(1, 4))) == everything[cut:]
    timestamp = data.draw(st.integers(0, 40) | st.integers(100_000, 100_040))
    by_time = list_offset(arithmetic, case, timestamp)
    stamps = {"origin": 0, "target": 100_000}
    wanted = [(o, r) for o, r in everything if r[1] + stamps[r[0]] >= timestamp]
    if by_time.offset == -1:
        assert not wanted
    else:  # a reader from there gets the first kept record of that time or later first
        assert consume(arithmetic, case, by_time.offset, most)[:1] == wanted[:1]


def test_the_origin_down_and_not_ignored_is_waited_for_in_fetches_and_list_offsets() -> None:
    migration = PartitionMigration(
        PartitionId("t", 0), "o", "d", MigrationMode.FAULT, MigrationState.MIGRATED, 100, 0, None, False, 3,
        datetime(2026, 1, 1, tzinfo=UTC), "t",
    )  # fmt: skip
    arithmetic = Arithmetic(migration, origin_up=False)
    assert arithmetic.read(99) is None
    assert arithmetic.read(100) == Read(Side.TARGET, 0)
    assert arithmetic.nothing().records == b""
    case = Case(Log("origin", [], 0, 0), Log("target", [(0, 4)], 0, 5), migration, [])
    assert list_offset(arithmetic, case, EARLIEST) == arithmetic.unlisted()
    assert list_offset(arithmetic, case, LATEST) == Listed(NONE, 105, -1)
    ignoring = Arithmetic(dataclasses.replace(migration, ignore_origin=True), origin_up=False)
    assert ignoring.read(3) == Read(Side.TARGET, 0)  # reset to the target, as the seed says
    assert list_offset(ignoring, case, EARLIEST) == Listed(NONE, 100, -1)
