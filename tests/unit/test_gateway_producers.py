"""Producer id translation rewrites batch headers only, and leaves batches a broker accepts (CRC)."""

from __future__ import annotations

import struct

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from workers.gateway.batches import batches
from workers.gateway.producers import Translation, producer_of, translate


def batch(producer_id: int, epoch: int, sequence: int, payload: bytes = b"records") -> bytes:
    """A v2 record batch header around ``payload`` (the gateway never looks inside records)."""
    after_crc = struct.pack(">hiqqqhii", 0, 0, 1000, 1000, producer_id, epoch, sequence, 1) + payload
    head = struct.pack(">qii", 0, 4 + 1 + 4 + len(after_crc), 0) + b"\x02"
    return head + struct.pack(">I", crc32c.crc32c(after_crc)) + after_crc


def header(data: bytes, start: int = 0) -> tuple[int, int, int]:
    producer_id, epoch, sequence = struct.unpack_from(">qhi", data, start + 43)
    return producer_id, epoch, sequence


def crc_ok(data: bytes, start: int, end: int) -> bool:
    (stored,) = struct.unpack_from(">I", data, start + 17)
    return stored == crc32c.crc32c(data[start + 21 : end])


def test_translation_shifts_sequences_to_start_at_zero_on_the_new_cluster() -> None:
    records = batch(7, 0, 120) + batch(7, 0, 125, b"more records")
    assert producer_of(records) == (7, 0, 120)
    translation = Translation(producer_id=4001, epoch=3)
    out = translate(records, translation, "orders", 2)
    spans = list(batches(out))
    assert [header(out, s) for s, _ in spans] == [(4001, 3, 0), (4001, 3, 5)]
    assert all(crc_ok(out, s, e) for s, e in spans)
    assert [out[s + 61 : e] for s, e in spans] == [b"records", b"more records"]  # payload untouched
    # The next request for that partition continues the same numbering; another partition starts at 0.
    assert header(translate(batch(7, 0, 130), translation, "orders", 2)) == (4001, 3, 10)
    assert header(translate(batch(7, 0, 40), translation, "orders", 0)) == (4001, 3, 0)


def test_sequences_wrap_like_kafkas() -> None:
    translation = Translation(producer_id=1, epoch=0, first_sequence={("t", 0): 2**31 - 2})
    assert header(translate(batch(9, 0, 1), translation, "t", 0))[2] == 3


def test_no_idempotent_producer() -> None:
    assert producer_of(batch(-1, -1, -1)) is None
    assert producer_of(b"") is None
    assert producer_of(None) is None


@given(st.binary(max_size=200))
def test_garbage_never_breaks_the_batch_walker(data: bytes) -> None:
    for start, end in batches(data):
        assert 0 <= start < end <= len(data)
    producer_of(data)
