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

Where a partition's sequences start is not simply the first batch that arrives there. A batch the old
cluster refused, or whose answer was lost, waits for its retry in the client while the batches behind
it may reach the new cluster first. A cluster takes any sequence as the first of a producer it does not
know, so such a later batch would be written at 0, the earlier one never — and librdkafka, seeing the
later one acknowledged, reports the earlier one delivered too (``rd_kafka_dr_implicit_ack``): records
lost without an error. So the start is the client's next sequence by the cluster its batches left
(:class:`Origin`, asked with DescribeProducers, :mod:`workers.gateway.producers.sequences`), and until the new
cluster holds the producer on a partition, only the batch at the start goes there (:func:`place`). A
batch the old cluster holds already is answered as a duplicate, as a broker would. Only where the old
cluster cannot be asked (a failover) does the first batch set the start, as before.

Transactional producers are not translated (a transaction cannot move between clusters); they are
forwarded unchanged.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

import crc32c

from workers.gateway.framing.batches import (
    ATTRIBUTES_AT,
    CRC_AT,
    LAST_DELTA_AT,
    MAGIC_AT,
    PRODUCER_ID_AT,
    batches,
)

_ID_EPOCH_SEQUENCE = struct.Struct(">qhi")
_CRC = struct.Struct(">I")


@dataclass
class ProducerRoute:
    """Where a client's idempotent producer writes now, and as whom."""

    cluster: str
    translation: Translation | None
    """None: as itself (the cluster issued its id and its batches never left it)."""


@dataclass(frozen=True)
class Origin:
    """Where a moved producer's batches went before, and as whom: what the client wrote there ends its
    sequences, so the new cluster's start is read there."""

    cluster: str
    producer_id: int
    shift: dict[tuple[str, int], int] | None = None
    """Per partition, the client's sequence the origin saw as 0 (None: untranslated there, so 0 for
    every partition); a partition missing from it was never written there."""
    epoch_shift: int | None = 0
    """The client's producer epoch less the one the origin saw (None: not known, taken as the same)."""

    def next_sequence(self, key: tuple[str, int], epoch: int, sequence: int, client_epoch: int) -> int | None:
        """The client's next sequence on partition ``key`` under ``client_epoch``, the origin holding its
        batches up to ``sequence`` in ``epoch`` (its own numbering); None: unknown."""
        seen = epoch + (self.epoch_shift or 0)
        if self.epoch_shift is not None and client_epoch > seen:  # it bumped since: every partition from 0
            return 0
        if self.epoch_shift is not None and client_epoch < seen:
            return None
        first = 0 if self.shift is None else self.shift.get(key)
        return None if first is None else (sequence + first + 1) % SEQUENCES


@dataclass
class Translation:
    """A client's producer id, as it is known on one other cluster."""

    producer_id: int
    epoch: int
    first_sequence: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per (topic, partition): the client's sequence that the new cluster sees as 0."""
    origin: Origin | None = None
    """Where the client's batches went before this translation (None: not known, a failover's)."""
    client_epoch: int = -1
    """The client's producer epoch the starts are for (-1: no batch seen yet)."""
    restarted: bool = False
    """The client bumped its epoch under this translation: its sequences start at 0 on every partition."""
    guessed: set[tuple[str, int]] = field(default_factory=set)
    """Partitions whose start the first batch set, the cluster the batches left not asked (a failover's):
    a batch before it is not known to be written there."""
    established: set[tuple[str, int]] = field(default_factory=set, compare=False)
    """Partitions the new cluster is known to hold this id on (it then checks sequences itself); known
    in this process only, and asked of the cluster when a batch needs it."""
    refused: dict[tuple[str, int], int] = field(default_factory=dict, compare=False)
    """Per partition, the first sequence the gateway refused to send on (in this process): what comes
    after it waits for its resend, or the cluster would see a gap (and the client bump its epoch)."""

    def follow(self, client_epoch: int) -> bool:
        """Follow the client's producer epoch; False for a batch of an epoch it has left. An idempotent
        client bumps its own epoch after a gap (librdkafka: "skipped sequence numbers") and numbers
        every partition from 0 again: the translated epoch is bumped with it, which the cluster takes
        with sequence 0 (kept, the new numbering would look like the old one's duplicates)."""
        if client_epoch < self.client_epoch:
            return False
        if self.client_epoch >= 0 and client_epoch > self.client_epoch:
            self.epoch += client_epoch - self.client_epoch
            self.first_sequence, self.origin, self.restarted, self.guessed = {}, None, True, set()
            self.established, self.refused = set(), {}
        self.client_epoch = client_epoch
        return True

    def merge(self, stored: Translation) -> None:
        """Take in what another process stored for the same id: its starts win; a later client epoch
        wins whole."""
        if stored.client_epoch > self.client_epoch:
            self.epoch, self.client_epoch = stored.epoch, stored.client_epoch
            self.first_sequence, self.origin = dict(stored.first_sequence), stored.origin
            self.restarted, self.guessed = stored.restarted, set(stored.guessed)
            self.established, self.refused = set(), {}
        elif stored.client_epoch == self.client_epoch:
            self.first_sequence.update(stored.first_sequence)
            self.guessed = (self.guessed - stored.first_sequence.keys()) | stored.guessed

    def kept(self) -> Kept:
        """What of it is stored and relied on."""
        return Kept(self.client_epoch, self.epoch, dict(self.first_sequence), frozenset(self.guessed))


@dataclass(frozen=True)
class Kept:
    client_epoch: int
    epoch: int
    starts: dict[tuple[str, int], int]
    guessed: frozenset[tuple[str, int]]

    def covers(self, used: Kept) -> bool:
        """Whether this (stored) holds what a request ``used`` (another process may have added starts)."""
        same = (self.client_epoch, self.epoch) == (used.client_epoch, used.epoch)
        guessed_alike = all((k in self.guessed) == (k in used.guessed) for k in used.starts)
        return same and self.starts.items() >= used.starts.items() and guessed_alike


SEQUENCES = 2**31
"""Sequences wrap at the int32 maximum, as Kafka's do."""


class Place(enum.Enum):
    """Where a partition's batches lie against the start of its sequences on the new cluster."""

    START = "start"
    AHEAD = "ahead"
    """Past the start: it may go once the cluster holds the producer there (the start was written)."""
    BEHIND = "behind"
    """Wholly before the start: the old cluster holds it already (a retry whose answer was lost)."""
    ACROSS = "across"
    """Begins before the start and ends at or past it: batches cut differently from those written."""


def place(first: int, last: int, start: int) -> Place:
    """Where the batches with sequences ``first``..``last`` lie against ``start`` (sequences wrap)."""
    ahead = (first - start) % SEQUENCES
    if ahead == 0:
        return Place.START
    if ahead < SEQUENCES // 2:
        return Place.AHEAD
    return Place.BEHIND if (last - start) % SEQUENCES >= SEQUENCES // 2 else Place.ACROSS


def sequence_span(records: bytes | None) -> tuple[int, int] | None:
    """(first, last) sequence of an idempotent producer's batches, or None without one."""
    found = list(batches(records or b""))
    if records is None or not found or producer_of(records) is None:
        return None
    (_, _, first) = _ID_EPOCH_SEQUENCE.unpack_from(records, found[0][0] + PRODUCER_ID_AT)
    start = found[-1][0]
    (_, _, sequence) = _ID_EPOCH_SEQUENCE.unpack_from(records, start + PRODUCER_ID_AT)
    (delta,) = struct.unpack_from(">i", records, start + LAST_DELTA_AT)
    return first, (sequence + delta) % SEQUENCES


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
        shifted = (sequence - first) % SEQUENCES
        _ID_EPOCH_SEQUENCE.pack_into(
            out, start + PRODUCER_ID_AT, translation.producer_id, translation.epoch, shifted
        )
        _CRC.pack_into(out, start + CRC_AT, crc32c.crc32c(memoryview(out)[start + ATTRIBUTES_AT : end]))
    return bytes(out)
