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


def compare_partition(
    findings: PartitionFindings, source: Iterable[Digested], target: Iterable[Digested], offset_map: OffsetMap
) -> PartitionFindings:
    """Fill ``findings`` from the source records of its range and the target records of its range."""
    at_target = {r.offset: r for r in target}
    by_digest: dict[bytes, list[int]] = {}
    for r in at_target.values():
        by_digest.setdefault(r.digest, []).append(r.offset)
    accounted: set[int] = set()
    pending: list[Digested] = []
    for record in source:
        findings.records += 1
        expected = offset_map.target_of(record.offset)
        found = at_target.get(expected) if expected is not None else None
        if found is not None and found.digest == record.digest:
            accounted.add(found.offset)
            if found.timestamp != record.timestamp:
                findings.mismatched += 1
                findings.note(f"source {record.offset} -> target {found.offset}: timestamp "
                              f"{record.timestamp} != {found.timestamp}")  # fmt: skip
            else:
                findings.present += 1
        else:
            pending.append(record)
    for record in pending:  # after every exact match is taken, so a copy elsewhere is not double-counted
        expected = offset_map.target_of(record.offset)
        elsewhere = [o for o in by_digest.get(record.digest, ()) if o not in accounted]
        if elsewhere:
            accounted.add(elsewhere[0])
            findings.misaligned += 1
            findings.note(f"source {record.offset}: copy at target {elsewhere[0]}, expected at {expected}")
        elif expected is not None and expected in at_target and expected not in accounted:
            accounted.add(expected)
            findings.mismatched += 1
            findings.note(f"source {record.offset} -> target {expected}: key, value or headers differ")
        else:
            findings.missing += 1
            findings.note(f"source {record.offset}: not on the target (expected at {expected})")
    for offset in sorted(set(at_target) - accounted):
        findings.extra += 1
        findings.note(f"target {offset}: no source record accounts for it")
    return findings
