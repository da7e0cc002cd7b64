"""Record batches by their headers alone: found, rebased and cut without reading a record.

A records field (Produce, Fetch) is whole v2 record batches back to back; a fetch answer's last one
may be cut short by the broker's size limit. A batch begins with its base offset (8 bytes), its length
(4), its partition leader epoch (4) and its magic (1); its CRC covers only what follows the CRC, so the
base offset and the leader epoch change without it, and compressed payloads stay as they are. Magic 0
and 1 message sets (dropped by Kafka 4) carry offsets inside compressed wrappers and are not handled.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

LENGTH_AT, EPOCH_AT, MAGIC_AT, CRC_AT, ATTRIBUTES_AT = 8, 12, 16, 17, 21
LAST_DELTA_AT, PRODUCER_ID_AT = 23, 43
HEADER_END = 61
_OFFSET = struct.Struct(">q")
_INT = struct.Struct(">i")


class BatchError(ValueError):
    """A records field this module cannot take apart (an old message format, a broken header)."""


@dataclass(frozen=True)
class Batch:
    start: int
    end: int
    """Where the batch lies in the records field."""
    base_offset: int
    last_offset: int


def batches(records: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each whole record batch in a records field; a cut-short tail is left out."""
    at = 0
    while at + HEADER_END <= len(records):
        (length,) = _INT.unpack_from(records, at + LENGTH_AT)
        end = at + 12 + length
        if length < HEADER_END - 12 or end > len(records):
            return
        yield at, end
        at = end


def read(records: bytes) -> list[Batch]:
    """Every whole batch with its offsets; :class:`BatchError` for a batch that is not magic 2."""
    found = []
    for start, end in batches(records):
        if records[start + MAGIC_AT] != 2:
            raise BatchError(f"a record batch of magic {records[start + MAGIC_AT]} (only 2 is handled)")
        (base,) = _OFFSET.unpack_from(records, start)
        (delta,) = _INT.unpack_from(records, start + LAST_DELTA_AT)
        found.append(Batch(start, end, base, base + delta))
    return found


def rebased(records: bytes, found: list[Batch], delta: int, *, leader_epoch: int | None = None) -> bytes:
    """The batches ``found`` in ``records``, their base offsets moved by ``delta`` (and their leader
    epoch set to ``leader_epoch``, when given); anything after the last of them is left out."""
    if not found:
        return b""
    out = bytearray(records[found[0].start : found[-1].end])
    first = found[0].start
    for batch in found:
        _OFFSET.pack_into(out, batch.start - first, batch.base_offset + delta)
        if leader_epoch is not None:
            _INT.pack_into(out, batch.start - first + EPOCH_AT, leader_epoch)
    return bytes(out)


def rebased_each(records: bytes, found: list[Batch], base: Callable[[int], int]) -> bytes:
    """The batches ``found`` in ``records``, each at the base offset ``base`` gives for its own; anything
    after the last of them is left out."""
    if not found:
        return b""
    out = bytearray(records[found[0].start : found[-1].end])
    first = found[0].start
    for batch in found:
        _OFFSET.pack_into(out, batch.start - first, base(batch.base_offset))
    return bytes(out)


def unknown_epochs(records: bytearray, start: int = 0, end: int | None = None) -> None:
    """Set the leader epoch of each v2 batch in ``records[start:end]`` to unknown (-1), in place; a
    cut-short tail too, when its header is there. An older message's header has no epoch: left as is.
    (An entry's length is at the same place in every format.)"""
    end = len(records) if end is None else end
    at = start
    while at + MAGIC_AT < end:
        (length,) = _INT.unpack_from(records, at + LENGTH_AT)
        if records[at + MAGIC_AT] == 2:
            _INT.pack_into(records, at + EPOCH_AT, -1)
        if length <= 0:
            return
        at += 12 + length


def without_epochs(records: bytes) -> bytes:
    """``records`` with each batch's leader epoch unknown (see :func:`unknown_epochs`)."""
    if len(records) <= MAGIC_AT:
        return records
    out = bytearray(records)
    unknown_epochs(out)
    return bytes(out)


def below(found: list[Batch], limit: int) -> list[Batch]:
    """The leading batches that end below ``limit``: a batch reaching it, and all after, are left out."""
    kept = []
    for batch in found:
        if batch.last_offset >= limit:
            break
        kept.append(batch)
    return kept


def from_offset(found: list[Batch], offset: int) -> list[Batch]:
    """The batches from the first that reaches ``offset`` on."""
    return [b for b in found if b.last_offset >= offset]
