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
from dataclasses import dataclass, field

import crc32c

from workers.gateway.batches import ATTRIBUTES_AT, CRC_AT, MAGIC_AT, PRODUCER_ID_AT, batches

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


def producer_of(records: bytes | None) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of the first batch, or None without an idempotent producer."""
    for start, _ in batches(records or b""):
        if records is None or records[start + MAGIC_AT] != 2:
            return None
        producer_id, epoch, sequence = _ID_EPOCH_SEQUENCE.unpack_from(records, start + PRODUCER_ID_AT)
        return (producer_id, epoch, sequence) if producer_id >= 0 else None
    return None


def translate(records: bytes, translation: Translation, topic: str, partition: int) -> bytes:
    """The batches with the translated producer id, epoch and sequences, and their CRCs recomputed."""
    out = bytearray(records)
    for start, end in batches(records):
        _, _, sequence = _ID_EPOCH_SEQUENCE.unpack_from(records, start + PRODUCER_ID_AT)
        first = translation.first_sequence.setdefault((topic, partition), sequence)
        shifted = (sequence - first) % 2**31  # sequences wrap at the int32 maximum
        _ID_EPOCH_SEQUENCE.pack_into(
            out, start + PRODUCER_ID_AT, translation.producer_id, translation.epoch, shifted
        )
        _CRC.pack_into(out, start + CRC_AT, crc32c.crc32c(memoryview(out)[start + ATTRIBUTES_AT : end]))
    return bytes(out)
