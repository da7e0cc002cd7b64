"""Batch headers rebased and cut on real batches of every compression, built by another client library
(kafka-python): the batches still check (CRC) and read back with their records at the moved offsets."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from workers.gateway.framing import batches

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def built(codec: int, base: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, 4242, 0, 7, 1 << 20)
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v" * 300, headers=[])
    data = bytearray(builder.build())
    data[0:8] = base.to_bytes(8, "big", signed=True)  # where a broker put it
    return bytes(data)


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_rebased_batches_of_every_compression_still_check_and_read_at_their_new_offsets(codec: int) -> None:
    records = built(codec, 100, 3) + built(codec, 103, 4) + built(codec, 107, 2)[:40]  # a cut-short tail
    found = batches.read(records)
    assert [(b.base_offset, b.last_offset) for b in found] == [(100, 102), (103, 106)]
    moved = batches.rebased(records, found, 5_000, leader_epoch=-1)
    read_back = []
    at = 0
    for b in batches.read(moved):
        batch = DefaultRecordBatch(moved[at : b.end])
        assert batch.validate_crc()
        assert batch.leader_epoch == -1
        read_back += [(r.offset, r.key) for r in batch]
        at = b.end
    assert read_back == [(5_100 + i, b"k%d" % (i if i < 3 else i - 3)) for i in range(7)]
    assert batches.rebased(records, batches.below(found, 103), 0) == records[: found[0].end]
    assert batches.below(found, 106) == found[:1]  # a batch reaching the limit is left out, whole
    assert batches.from_offset(found, 103) == found[1:]


def test_old_message_formats_are_named_not_misread() -> None:
    legacy = bytearray(built(0, 0, 1))
    legacy[batches.MAGIC_AT] = 1
    with pytest.raises(batches.BatchError, match="magic 1"):
        batches.read(bytes(legacy))
