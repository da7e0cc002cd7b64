"""Which requests speak for a transactional producer, and the error that has each client abort."""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode

from workers.gateway.brokers.upstream import UpstreamError
from workers.gateway.framing.protocol import Request, encode_request
from workers.gateway.producers.transactions import Described, TxnRequest, abortable, described, transactional
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


def test_the_producer_a_transactional_request_speaks_for() -> None:
    assert transactional(_add(3)) == TxnRequest("t", 7, 2)
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
