"""Record batches as an idempotent producer writes them, for tests that speak the protocol themselves."""

from __future__ import annotations

import struct
import time

import crc32c

from tests.helpers.frames import uvarint


def record_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """A v2 batch of ``values`` (no keys, no headers), its first record at ``sequence``."""
    records = b"".join(_record(delta, value) for delta, value in enumerate(values))
    now = int(time.time() * 1000)
    after_crc = (
        struct.pack(">hiqqqhii", 0, len(values) - 1, now, now, producer_id, epoch, sequence, len(values))
        + records
    )
    head = struct.pack(">qii", 0, 4 + 1 + 4 + len(after_crc), -1) + b"\x02"
    return head + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


def _record(offset_delta: int, value: bytes) -> bytes:
    body = (
        b"\x00"  # attributes
        + _varint(0)  # timestamp delta
        + _varint(offset_delta)
        + _varint(-1)  # no key
        + _varint(len(value))
        + value
        + _varint(0)  # no headers
    )
    return _varint(len(body)) + body


def _varint(value: int) -> bytes:
    return uvarint((value << 1) ^ (value >> 63))
