"""Producer id translation rewrites batch headers only, and leaves batches a broker accepts (CRC)."""

from __future__ import annotations

import struct

import crc32c
from hypothesis import given
from hypothesis import strategies as st

from workers.gateway.framing.batches import batches
from workers.gateway.producers.translation import (
    Origin,
    Place,
    Translation,
    place,
    producer_of,
    sequence_span,
    translate,
)


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


def test_where_batches_lie_against_the_start_of_a_partitions_sequences() -> None:
    assert place(10, 12, 10) is Place.START
    assert place(13, 15, 10) is Place.AHEAD  # an earlier batch is missing: it may not go first
    assert place(7, 9, 10) is Place.BEHIND  # written already where the batches went before
    assert place(8, 11, 10) is Place.ACROSS
    assert place(1, 3, 2**31 - 2) is Place.AHEAD  # sequences wrap
    assert place(2**31 - 3, 2**31 - 1, 0) is Place.BEHIND


def test_a_requests_sequences_run_from_its_first_batch_to_its_last_record() -> None:
    last_of_three = batch(7, 0, 120)[:23] + (2).to_bytes(4, "big") + batch(7, 0, 120)[27:]
    assert sequence_span(batch(7, 0, 100) + last_of_three) == (100, 122)
    assert sequence_span(batch(-1, -1, -1)) is None
    assert sequence_span(None) is None


def test_the_clients_next_sequence_follows_from_what_its_origin_holds() -> None:
    assert Origin("primary", 7).next_sequence(("t", 0), 2, 41, 2) == 42  # untranslated there
    assert Origin("primary", 7).next_sequence(("t", 0), 2, 41, 3) == 0  # it bumped its epoch since
    assert Origin("primary", 7).next_sequence(("t", 0), 2, 41, 1) is None
    translated = Origin("standby", 4001, {("t", 0): 100}, epoch_shift=2)  # seen there as epoch 0
    assert translated.next_sequence(("t", 0), 0, 5, 2) == 106
    assert translated.next_sequence(("t", 1), 0, 5, 2) is None  # never written there


def test_a_translation_follows_the_clients_epoch_bumps() -> None:
    translation = Translation(4001, 0, origin=Origin("primary", 7))
    assert translation.follow(3)
    translation.first_sequence[("t", 0)] = 500
    assert translation.follow(3)
    assert translation.first_sequence == {("t", 0): 500}
    assert translation.follow(4)  # bumped: numbered from 0 again, as the translated epoch's next
    assert (translation.epoch, translation.first_sequence, translation.origin) == (1, {}, None)
    assert translation.restarted
    assert not translation.follow(3)  # a batch of the epoch it left
    other = Translation(4001, 0, {("t", 1): 9}, client_epoch=3)
    other.merge(translation)  # a later epoch stored by another process wins whole
    assert (other.epoch, other.client_epoch, other.first_sequence) == (1, 4, {})


def test_no_idempotent_producer() -> None:
    assert producer_of(batch(-1, -1, -1)) is None
    assert producer_of(b"") is None
    assert producer_of(None) is None


@given(st.binary(max_size=200))
def test_garbage_never_breaks_the_batch_walker(data: bytes) -> None:
    for start, end in batches(data):
        assert 0 <= start < end <= len(data)
    producer_of(data)
