"""Idempotent producers across a switch.

An idempotent producer writes every record batch with a producer id, an epoch and a sequence number
per partition, and the cluster that issued the id checks them. Another cluster knows neither the id nor
its sequences, and refuses the batches (fatally, to the client). The gateway sees every InitProducerId
answer, so it knows which cluster issued a client's id; when that client's batches go to another
cluster, the gateway takes an id of its own from that cluster and rewrites each batch header: producer
id, epoch, and the base sequence shifted so that the first batch the new cluster sees starts at 0. The
batch CRC covers those fields, so it is computed again. Records themselves are never decoded.

A fresh id is taken each time the producer's batches move to another cluster, back to the one that
issued its id included: a cluster's idea of the producer's sequences dates from when its batches last
went there, and the producer has written on elsewhere since (a switchback would otherwise be refused
with OUT_OF_ORDER_SEQUENCE_NUMBER, which is fatal to the client).

This is safe because a switch blocks first and acknowledges only when nothing is in flight: every
batch the client sent before is acknowledged, so the next sequence per partition is exactly where the
new cluster starts. Transactional producers are not translated (a transaction cannot move between
clusters); they are forwarded unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import crc32c

# Offsets in a v2 record batch (magic 2), as the Kafka protocol defines it.
_LENGTH_AT, _MAGIC_AT, _CRC_AT, _ATTRIBUTES_AT = 8, 16, 17, 21
_PRODUCER_ID_AT, _EPOCH_AT, _SEQUENCE_AT = 43, 51, 53
_HEADER_END = 61
_ID_EPOCH_SEQUENCE = struct.Struct(">qhi")
_CRC = struct.Struct(">I")


@dataclass
class ProducerRoute:
    """Where a client's idempotent producer writes now, and as whom."""

    cluster: str
    translation: Translation | None
    """None: as itself (the cluster issued its id and its batches never left it)."""


@dataclass
class Translation:
    """A client's producer id, as it is known on one other cluster."""

    producer_id: int
    epoch: int
    first_sequence: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per (topic, partition): the client's sequence that the new cluster sees as 0."""


def batches(records: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each record batch in a records field."""
    at = 0
    while at + _HEADER_END <= len(records):
        (length,) = struct.unpack_from(">i", records, at + _LENGTH_AT)
        end = at + 12 + length
        if length < _HEADER_END - 12 or end > len(records):
            return
        yield at, end
        at = end


def producer_of(records: bytes | None) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of the first batch, or None without an idempotent producer."""
    for start, _ in batches(records or b""):
        if records is None or records[start + _MAGIC_AT] != 2:
            return None
        producer_id, epoch, sequence = _ID_EPOCH_SEQUENCE.unpack_from(records, start + _PRODUCER_ID_AT)
        return (producer_id, epoch, sequence) if producer_id >= 0 else None
    return None


def translate(records: bytes, translation: Translation, topic: str, partition: int) -> bytes:
    """The batches with the translated producer id, epoch and sequences, and their CRCs recomputed."""
    out = bytearray(records)
    for start, end in batches(records):
        _, _, sequence = _ID_EPOCH_SEQUENCE.unpack_from(records, start + _PRODUCER_ID_AT)
        first = translation.first_sequence.setdefault((topic, partition), sequence)
        shifted = (sequence - first) % 2**31  # sequences wrap at the int32 maximum
        _ID_EPOCH_SEQUENCE.pack_into(
            out, start + _PRODUCER_ID_AT, translation.producer_id, translation.epoch, shifted
        )
        _CRC.pack_into(out, start + _CRC_AT, crc32c.crc32c(memoryview(out)[start + _ATTRIBUTES_AT : end]))
    return bytes(out)
