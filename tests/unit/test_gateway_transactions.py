"""Which requests speak for a transactional producer, and the error that has each client abort."""

from __future__ import annotations

import asyncio
import struct
import time
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import Request, encode_request
from workers.gateway.brokers.upstream import UpstreamError
from workers.gateway.producers.issuers import Issued, IssuerStore
from workers.gateway.producers.transactions import (
    Carrier,
    Described,
    TxnRequest,
    WhileBlocked,
    abortable,
    described,
    transactional,
    while_blocked,
)
from workers.gateway.routing import apis


def _request(key: int, version: int, **fields: object) -> Request:
    return encode_request(key, version, fields, client_id="c")


def _end(version: int, committed: bool) -> Request:
    return _request(apis.END_TXN, version, transactional_id="t", producer_id=7, producer_epoch=2,
                    committed=committed)  # fmt: skip


def _produce(version: int) -> Request:
    return _request(apis.PRODUCE, version, transactional_id="t", acks=-1, timeout=timedelta(seconds=30),
                    topic_data=())  # fmt: skip


def _add(version: int) -> Request:
    return _request(apis.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id="t",
                    v3_and_below_producer_id=7, v3_and_below_producer_epoch=2,
                    v3_and_below_topics=())  # fmt: skip


def _offsets(version: int) -> Request:
    return _request(apis.TXN_OFFSET_COMMIT, version, transactional_id="t", group_id="g", producer_id=7,
                    producer_epoch=2, generation_id=-1, member_id="", group_instance_id=None,
                    topics=())  # fmt: skip


def test_the_producer_a_transactional_request_speaks_for() -> None:
    assert transactional(_add(3)) == TxnRequest("t", 7, 2)
    nameless = _request(apis.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id="",
                        v3_and_below_producer_id=7, v3_and_below_producer_epoch=2,
                        v3_and_below_topics=())  # fmt: skip
    assert transactional(nameless) is None  # a broker refuses it: nothing of a producer to judge
    assert transactional(_end(5, committed=False)) == TxnRequest("t", 7, 2, aborting=True)
    assert transactional(_end(1, committed=True)) == TxnRequest("t", 7, 2)
    bump = _request(apis.INIT_PRODUCER_ID, 4, transactional_id="t", transaction_timeout=timedelta(minutes=1),
                    producer_id=7, producer_epoch=2)  # fmt: skip
    assert transactional(bump) == TxnRequest("t", 7, 2)
    first = _request(apis.INIT_PRODUCER_ID, 4, transactional_id="t", transaction_timeout=timedelta(minutes=1),
                     producer_id=-1, producer_epoch=-1)  # fmt: skip
    idempotent = _request(apis.INIT_PRODUCER_ID, 4, transactional_id=None,
                          transaction_timeout=timedelta(minutes=1), producer_id=-1,
                          producer_epoch=-1)  # fmt: skip
    assert transactional(first) is None  # a first start is any client's to make
    assert transactional(idempotent) is None


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        # the Java client 3.8+ aborts on TRANSACTION_ABORTABLE, at the versions that may carry it
        (_end(4, committed=True), ErrorCode.transaction_abortable),
        # librdkafka (EndTxn v0-1, Produce up to v10) does not know it: UNKNOWN_PRODUCER_ID, abort and bump
        (_end(1, committed=True), ErrorCode.unknown_producer_id),
        (_add(3), ErrorCode.transaction_abortable),
        (_produce(11), ErrorCode.invalid_producer_epoch),  # Streams fails on TRANSACTION_ABORTABLE there
        (
            _produce(10),
            ErrorCode.unknown_producer_id,
        ),  # UNKNOWN_PRODUCER_ID: closed by the documented pattern
        (_add(0), ErrorCode.unknown_producer_id),
        # a CommitFailedException, which Streams takes as its tasks migrated (TRANSACTION_ABORTABLE failed it)
        (_offsets(4), ErrorCode.illegal_generation),
        (_offsets(3), ErrorCode.unknown_producer_id),  # librdkafka's
    ],
)
def test_the_abortable_error_is_one_the_requests_client_knows(request_: Request, code: ErrorCode) -> None:
    assert abortable(request_) == code


def test_a_transactional_ids_state_is_read_though_no_transaction_ever_began() -> None:
    """An id with no transaction open has the start time -1, which kio's reader refuses."""

    def compact(text: str) -> bytes:
        return bytes([len(text) + 1]) + text.encode()

    state = (struct.pack(">h", 0) + compact("t") + compact("Empty")
             + struct.pack(">iqqh", 60_000, -1, 4001, 3) + b"\x01\x00")  # fmt: skip
    frame = struct.pack(">i", 7) + b"\x00" + struct.pack(">i", 0) + b"\x02" + state + b"\x00"
    assert described(frame) == Described(ErrorCode.none, "Empty", 60_000, 4001, 3)
    with pytest.raises(UpstreamError):
        described(frame[:20])


class _Issuers:
    """The issuer store's contract in memory (a dict per transactional id)."""

    def __init__(self) -> None:
        self.kept: dict[str, Issued] = {}

    def load(self, transactional_id: str) -> Issued | None:
        return self.kept.get(transactional_id)

    def save(self, transactional_id: str, issued: Issued) -> None:
        self.kept[transactional_id] = issued


class _Coordinators(Carrier):
    """A carrier whose coordinators all have producer id 6 for the id (ids are numbered per cluster), and
    whose fresh starts hand out the answers given, in turn."""

    def __init__(self, starts: list[tuple[int, int]]) -> None:
        super().__init__(cast(Any, None), ["primary", "standby"], cast(IssuerStore, _Issuers()))
        self.starts, self.described = starts, 0

    async def _describe(self, cluster: str, transactional_id: str) -> Described | None:
        self.described += 1
        return Described(ErrorCode.none, "Ongoing", 60_000, 6, 0)

    async def _retried(self, cluster: str, node: int | None, txn: str, ask: Any) -> Any:
        producer_id, epoch = self.starts.pop(0)
        return SimpleNamespace(error_code=ErrorCode.none, producer_id=producer_id, producer_epoch=epoch)


def test_a_producer_id_both_clusters_issued_is_judged_by_its_issuer_not_the_coordinators() -> None:
    """Both coordinators have producer id 6 for the id: only the issuer the gateway kept says whose it is
    (judged by the coordinators, a producer switched back stalled on a cluster that had fenced it)."""
    carrier, txn = _Coordinators([]), TxnRequest("t", 6, 0)

    async def judged() -> tuple[bool, bool, bool, bool]:
        await carrier.issued("t", Issued("primary", 6, 0), epoch=1)
        on_primary = await carrier.foreign(txn, "primary", epoch=1)
        on_standby = await carrier.foreign(txn, "standby", epoch=2)
        await carrier.issued("t", Issued("standby", 6, 1, carried_from=(6, 0), at=time.time()), epoch=2)
        carried = TxnRequest("t", 6, 1)
        return (
            on_primary,
            on_standby,
            await carrier.foreign(carried, "standby", 2),
            await carrier.foreign(carried, "primary", 3),
        )

    assert asyncio.run(judged()) == (False, True, False, True)
    assert carrier.described == 0


def test_a_producer_id_with_no_issuer_kept_is_judged_by_the_coordinator() -> None:
    carrier = _Coordinators([])
    assert asyncio.run(carrier.foreign(TxnRequest("t", 6, 0), "standby", epoch=1)) is False
    assert asyncio.run(carrier.foreign(TxnRequest("t", 9, 0), "standby", epoch=1)) is True
    assert carrier.described == 2


def test_a_carry_never_hands_the_client_the_id_and_epoch_it_holds() -> None:
    """librdkafka takes its own id and epoch back as no change and keeps its sequence numbers, which the
    new cluster refuses (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal): the id is started once more."""
    carrier = _Coordinators([(6, 2), (6, 3)])
    started = asyncio.run(carrier.start("standby", None, "t", timedelta(minutes=1), unlike=(6, 2)))
    assert (started.producer_id, started.producer_epoch) == (6, 3)
    carrier = _Coordinators([(6, 2)])
    started = asyncio.run(carrier.start("standby", None, "t", timedelta(minutes=1), unlike=(6, 1)))
    assert (started.producer_id, started.producer_epoch) == (6, 2)


def test_a_producer_told_of_partitions_never_added_writes_nothing_until_its_transaction_ends() -> None:
    """The Java client's AddPartitionsToTxn answered as done: its writes are refused (the session asks
    ``unadded``) whatever the routing, until its EndTxn; another epoch of the id is another producer."""
    carrier = _Coordinators([])
    told, write = TxnRequest("t", 6, 0), TxnRequest("t", 6, 0)
    assert not carrier.unadded(write)
    carrier.told_added(told)
    assert carrier.unadded(write)
    assert not carrier.unadded(TxnRequest("t", 6, 1))
    carrier.ended(TxnRequest("t", 6, 0, aborting=True))
    assert not carrier.unadded(write)


def _add_offsets(version: int) -> Request:
    return _request(apis.ADD_OFFSETS_TO_TXN, version, transactional_id="t", producer_id=7, producer_epoch=2,
                    group_id="g")  # fmt: skip


def _bump() -> Request:
    return _request(apis.INIT_PRODUCER_ID, 4, transactional_id="t", transaction_timeout=timedelta(minutes=1),
                    producer_id=7, producer_epoch=2)  # fmt: skip


_OPEN, _UNKNOWN, _NOT_OPEN = True, None, False
"""Whether the coordinator has a transaction of the producer open, as the session knows it."""


@pytest.mark.parametrize(
    ("request_", "open_", "does"),
    [
        # a write is made only to partitions registered: refused unless known not open
        (_produce(9), _OPEN, WhileBlocked.REFUSE),
        (_produce(9), _UNKNOWN, WhileBlocked.REFUSE),
        (_produce(9), _NOT_OPEN, WhileBlocked.HOLD),
        # a registration may be the transaction's first: refused only where known open
        (_add(0), _OPEN, WhileBlocked.REFUSE),
        (_add(0), _UNKNOWN, WhileBlocked.HOLD),
        (_add(0), _NOT_OPEN, WhileBlocked.HOLD),
        (_add(3), _OPEN, WhileBlocked.TELL_ADDED),
        (_add(3), _UNKNOWN, WhileBlocked.HOLD),
        (_add(3), _NOT_OPEN, WhileBlocked.HOLD),
        # the rest ends or bumps an open transaction where it began, or waits for one to begin
        (_add_offsets(0), _OPEN, WhileBlocked.FORWARD),
        (_add_offsets(0), _UNKNOWN, WhileBlocked.FORWARD),
        (_add_offsets(0), _NOT_OPEN, WhileBlocked.HOLD),
        (_offsets(3), _OPEN, WhileBlocked.FORWARD),
        (_offsets(3), _UNKNOWN, WhileBlocked.FORWARD),
        (_offsets(3), _NOT_OPEN, WhileBlocked.HOLD),
        (_end(1, committed=True), _OPEN, WhileBlocked.FORWARD),
        (_end(1, committed=True), _UNKNOWN, WhileBlocked.FORWARD),
        (_end(1, committed=True), _NOT_OPEN, WhileBlocked.HOLD),
        (_bump(), _OPEN, WhileBlocked.FORWARD),
        (_bump(), _UNKNOWN, WhileBlocked.FORWARD),
        (_bump(), _NOT_OPEN, WhileBlocked.HOLD),
        (_end(1, committed=False), _UNKNOWN, WhileBlocked.FORWARD),  # the coordinator is never asked
    ],
)
def test_while_blocked_an_open_transaction_ends_where_it_began_and_none_begins(
    request_: Request, open_: bool | None, does: WhileBlocked
) -> None:
    """Where the coordinator could not be asked, the first AddPartitionsToTxn of a transaction was
    refused; librdkafka aborted, and the coordinator, whose last transaction had committed, answered
    INVALID_TXN_STATE, fatal to the producer (CI, the evacuation test, 2026-12-07)."""
    txn = transactional(request_) or TxnRequest("t", 7, 2)  # a Produce of no records names no producer
    assert while_blocked(request_, txn, open_) is does


def test_a_coordinator_not_asked_leaves_open_what_this_process_registered_and_unknown_the_rest() -> None:
    class Unreachable(_Coordinators):
        async def _describe(self, cluster: str, transactional_id: str) -> Described | None:
            raise UpstreamError("primary: no coordinator for t: COORDINATOR_NOT_AVAILABLE")

    carrier, producer = Unreachable([]), TxnRequest("t", 7, 2)
    assert asyncio.run(_Coordinators([]).ongoing("primary", producer)) is True
    assert asyncio.run(carrier.ongoing("primary", producer)) is None
    carrier.sent(_produce(9), producer)
    assert asyncio.run(carrier.ongoing("primary", producer)) is None  # a write registers nothing
    carrier.sent(_add(0), producer)
    assert asyncio.run(carrier.ongoing("primary", producer)) is True
    assert asyncio.run(carrier.ongoing("primary", TxnRequest("t", 7, 3))) is None  # another epoch
    carrier.ended(TxnRequest("t", 7, 2, aborting=True))
    assert asyncio.run(carrier.ongoing("primary", producer)) is None
