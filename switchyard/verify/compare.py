"""Comparing one partition's copy with its source, record by record: the pure part of verification.

Each record is reduced to a digest of its key, value and headers, plus its timestamp. A source record
at offset ``s`` belongs at target offset ``map.target_of(s)`` (``s`` itself for identical offsets).
There it is **present**; with another content it is **mismatched**; found with the same content at
another target offset it is **misaligned** (the copy is there, the offset is wrong); nowhere, it is
**missing**. Target records that no source record accounts for are **extra**.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from switchyard.mirror.offsets import OffsetMap

MAX_EXAMPLES = 5


@dataclass(frozen=True)
class Digested:
    offset: int
    digest: bytes
    timestamp: int


def digest(key: Any, value: Any, headers: Any) -> bytes:
    """Of key, value and headers as a Kafka client hands them over (bytes or str; headers a list or dict).

    One hash call per record over length-prefixed parts (-1 for null), so no two different records
    share the bytes hashed; this is a large part of a verification's CPU time.
    """
    parts = [_part(key), _part(value)]
    for name, header_value in headers.items() if isinstance(headers, dict) else headers or ():
        parts += (_part(name), _part(header_value))
    return hashlib.blake2b(b"".join(parts), digest_size=16).digest()


def _part(data: Any) -> bytes:
    if data is None:
        return _NULL
    raw = data.encode() if isinstance(data, str) else data
    return len(raw).to_bytes(8, "big", signed=True) + raw


_NULL = (-1).to_bytes(8, "big", signed=True)


@dataclass
class PartitionFindings:
    topic: str
    partition: int
    source_from: int
    source_to: int
    target_from: int
    target_to: int
    records: int = 0
    """Source records compared."""
    present: int = 0
    missing: int = 0
    extra: int = 0
    mismatched: int = 0
    misaligned: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.extra or self.mismatched or self.misaligned)

    def note(self, text: str) -> None:
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(text)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RangeMatch:
    """One offset range's exact matches, and what is left for the partition as a whole to settle: the
    source records not found at their expected target offset, the target records nothing matched."""

    records: int = 0
    present: int = 0
    mismatched: int = 0
    """Found at the expected offset with the same content but another timestamp."""
    notes: list[tuple[int, str]] = field(default_factory=list)
    """(source offset, example) for those, the first MAX_EXAMPLES."""
    pending: list[Digested] = field(default_factory=list)
    """In source offset order."""
    unaccounted: list[Digested] = field(default_factory=list)
    """In target offset order."""


def match_range(source: Iterable[Digested], target: Iterable[Digested], offset_map: OffsetMap) -> RangeMatch:
    """Exact matching within one range: a source record and the target record at its expected offset."""
    at_target = {r.offset: r for r in target}
    match = RangeMatch()
    for record in source:
        match.records += 1
        expected = offset_map.target_of(record.offset)
        found = at_target.get(expected) if expected is not None else None
        if found is None or found.digest != record.digest:
            match.pending.append(record)
            continue
        del at_target[found.offset]
        if found.timestamp == record.timestamp:
            match.present += 1
            continue
        match.mismatched += 1
        if len(match.notes) < MAX_EXAMPLES:
            match.notes.append((record.offset, _timestamps_differ(record, found)))
    match.unaccounted = list(at_target.values())
    return match


def settle(
    findings: PartitionFindings, matches: Iterable[RangeMatch], offset_map: OffsetMap
) -> PartitionFindings:
    """Fill ``findings`` from its ranges' matches, given in offset order. Each range read the target
    offsets its source records map to (:func:`switchyard.verify.ranges.split`), so exact matches are all
    found within ranges; copies found elsewhere and extras are found here, across the partition: the
    findings are those of one range covering it."""
    ranges = list(matches)
    unaccounted = {r.offset: r for m in ranges for r in m.unaccounted}
    pending = [r for m in ranges for r in m.pending]
    for m in ranges:
        findings.records += m.records
        findings.present += m.present
        findings.mismatched += m.mismatched
    for _, text in [note for m in ranges for note in m.notes][:MAX_EXAMPLES]:
        findings.note(text)
    by_digest: dict[bytes, list[int]] = {}
    for r in unaccounted.values():  # in target offset order
        by_digest.setdefault(r.digest, []).append(r.offset)
    for record in pending:  # after every exact match is taken, so a copy elsewhere is not double-counted
        expected = offset_map.target_of(record.offset)
        elsewhere = [o for o in by_digest.get(record.digest, ()) if o in unaccounted]
        if elsewhere:
            del unaccounted[elsewhere[0]]
            findings.misaligned += 1
            findings.note(f"source {record.offset}: copy at target {elsewhere[0]}, expected at {expected}")
        elif expected is not None and expected in unaccounted:
            del unaccounted[expected]
            findings.mismatched += 1
            findings.note(f"source {record.offset} -> target {expected}: key, value or headers differ")
        else:
            findings.missing += 1
            findings.note(f"source {record.offset}: not on the target (expected at {expected})")
    for offset in sorted(unaccounted):
        findings.extra += 1
        findings.note(f"target {offset}: no source record accounts for it")
    return findings


def compare_partition(
    findings: PartitionFindings, source: Iterable[Digested], target: Iterable[Digested], offset_map: OffsetMap
) -> PartitionFindings:
    """Fill ``findings`` from the source records of its range and the target records of its range."""
    return settle(findings, [match_range(source, target, offset_map)], offset_map)


def _timestamps_differ(record: Digested, found: Digested) -> str:
    timestamps = f"timestamp {record.timestamp} != {found.timestamp}"
    return f"source {record.offset} -> target {found.offset}: {timestamps}"
