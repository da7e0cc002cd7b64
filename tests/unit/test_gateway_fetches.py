"""A Fetch as the gateway sends it on, and its answer as the client gets it: no leader epochs, no fetch
session (``workers.gateway.brokers.fetches``)."""

from __future__ import annotations

import dataclasses
import io
import uuid
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from switchyard.frames.bounds import check_response_header
from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import (
    known_versions,
    request_schema,
    response_header_schema,
    response_schema,
)
from tests.unit.test_gateway_batches import built
from tests.unit.test_gateway_topic_identity import encodes
from workers.gateway.brokers.fetches import NO_EPOCH, answer_without_epochs, forwarded_fetch
from workers.gateway.framing import batches
from workers.gateway.routing import apis

VERSIONS = range(7, apis.VERSION_CAPS[apis.FETCH] + 1)
"""From the first with fetch sessions."""


def fetch(
    version: int, *epochs: tuple[int, int], session: tuple[int, int] = (0, -1), forget: bool = False
) -> Any:
    """A Fetch of orders' partitions 0.. with (current, last fetched) leader epochs each, in ``session``
    (id, epoch), forgetting partition 9 if ``forget``."""
    cls = request_schema(apis.FETCH, version)
    topic_cls = element_type(cls, "topics")
    partition_cls = element_type(topic_cls, "partitions")
    parts = tuple(
        make(partition_cls, partition=i, current_leader_epoch=c, last_fetched_epoch=f, fetch_offset=40 + i)
        for i, (c, f) in enumerate(epochs)
    )
    forgotten: tuple[Any, ...] = ()
    if forget:
        forgotten_cls = element_type(cls, "forgotten_topics_data")
        forgotten = (make(forgotten_cls, topic="orders", partitions=(9,)),)
    return make(
        cls,
        topics=(make(topic_cls, topic="orders", partitions=parts),),
        session_id=session[0],
        session_epoch=session[1],
        forgotten_topics_data=forgotten,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_fetch_naming_a_leader_epoch_is_sent_on_naming_none(version: int) -> None:
    """librdkafka, told of no epoch, fetches with epoch 0; a partition whose leadership has moved
    fences that for good, so the gateway sends the Fetch on without one."""
    if version < 9:
        pytest.skip("leader epochs in a Fetch from v9")
    sent = forwarded_fetch(fetch(version, (0, NO_EPOCH), (NO_EPOCH, NO_EPOCH), (5, 3)))
    assert sent is not None
    read = encodes(sent)
    assert [(p.partition, p.current_leader_epoch, p.fetch_offset) for p in read.topics[0].partitions] == [
        (0, NO_EPOCH, 40),
        (1, NO_EPOCH, 41),
        (2, NO_EPOCH, 42),
    ]
    if (
        version >= 12
    ):  # kafka-python names the epoch of the last batch it read, another cluster's after a switch
        assert {p.last_fetched_epoch for p in read.topics[0].partitions} == {NO_EPOCH}
        assert forwarded_fetch(fetch(version, (NO_EPOCH, 7))) is not None


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    ("session", "forget"),
    [((0, 0), False), ((1234, 5), False), ((1234, 5), True)],
    ids=["new session asked", "incremental", "incremental forgetting"],
)
def test_a_fetch_goes_on_outside_any_fetch_session(
    version: int, session: tuple[int, int], forget: bool
) -> None:
    """A session lets a client leave out partitions it does not move; through the gateway such a partition
    may since live on another cluster, where only a Fetch naming it can go. So no session is let through,
    and the broker, answering none, keeps the client on full fetches."""
    sent = forwarded_fetch(
        fetch(version, (NO_EPOCH, NO_EPOCH), (NO_EPOCH, NO_EPOCH), session=session, forget=forget)
    )
    assert sent is not None
    read = encodes(sent)
    assert (read.session_id, read.session_epoch, read.forgotten_topics_data) == (0, -1, ())
    assert [(p.partition, p.fetch_offset) for p in read.topics[0].partitions] == [(0, 40), (1, 41)]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_full_sessionless_fetch_without_epochs_goes_on_untouched(version: int) -> None:
    assert forwarded_fetch(fetch(version, (NO_EPOCH, NO_EPOCH), (NO_EPOCH, NO_EPOCH))) is None


def fetch_answer(version: int, *partitions: tuple[int, bytes | None]) -> bytes:
    """A broker's Fetch answer (a frame without its size) of "orders" and "refunds": for each given
    (partition, records), the partition in each topic, with an aborted transaction and, where the
    version has them, tagged fields after the records."""
    cls = response_schema(apis.FETCH, version)
    topic_cls = element_type(cls, "responses")
    partition_cls = element_type(topic_cls, "partitions")
    aborted_cls = element_type(partition_cls, "aborted_transactions")
    leader = getattr(make(partition_cls, partition_index=0), "current_leader", None)  # v12+, tagged
    tagged = (
        {} if leader is None else {"current_leader": dataclasses.replace(leader, leader_id=3, leader_epoch=9)}
    )
    parts = tuple(
        make(
            partition_cls,
            partition_index=i,
            high_watermark=900,
            last_stable_offset=800,
            log_start_offset=7,
            aborted_transactions=(make(aborted_cls, producer_id=4242, first_offset=55),),
            **tagged,
            preferred_read_replica=-1,
            records=records,
        )
        for i, records in partitions
    )
    topics = tuple(
        make(topic_cls, topic=name, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions=parts)
        for name in ("orders", "refunds")
    )
    out = io.BytesIO()
    header = response_header_schema(apis.FETCH, version)
    entity_writer(header)(out, header(correlation_id=i32(77)))
    entity_writer(cls)(out, make(cls, error_code=ErrorCode.none, session_id=0, responses=topics))
    return out.getvalue()


def read_answer(version: int, frame: bytes) -> Any:
    at = check_response_header(frame, flexible=version >= 12)
    body, end = entity_reader(response_schema(apis.FETCH, version))(frame, at)
    assert at + end == len(frame)  # kio gives how much it read
    return body


ANSWER_VERSIONS = range(known_versions(apis.FETCH)[0], known_versions(apis.FETCH)[1] + 1)  # type: ignore[index]
"""Every version kio knows, beyond the gateway's cap: the layout is read, not decoded."""


@pytest.mark.parametrize("version", ANSWER_VERSIONS)
def test_an_answers_record_batches_reach_the_client_with_no_leader_epoch(version: int) -> None:
    """A batch's header carries the epoch of the cluster that wrote it; librdkafka commits a position
    only when newer than its last commit, epochs compared first, so after a switch to a cluster of lower
    epochs it would commit nothing and read again from its last commit. Every batch goes with epoch -1,
    its CRC still good (the epoch lies outside it), and all else as the broker wrote it."""
    tail = built(4, 230, 3)[:70]  # cut short by the broker's size limit, its header whole
    two, cut = built(1, 100, 3) + built(0, 103, 2), built(3, 200, 4) + tail
    frame = fetch_answer(version, (0, two), (1, None), (2, b""), (3, cut))
    presented = answer_without_epochs(frame, version)[4:]  # given sized
    assert len(presented) == len(frame)

    sent, got = read_answer(version, frame), read_answer(version, presented)
    strip = {"records": None}
    assert [[dataclasses.replace(p, **strip) for p in t.partitions] for t in got.responses] == [
        [dataclasses.replace(p, **strip) for p in t.partitions] for t in sent.responses
    ]
    for topic in got.responses:
        records = [p.records for p in topic.partitions]
        assert [len(r) if r is not None else None for r in records] == [len(two), None, 0, len(cut)]
        for whole in (records[0], records[3]):
            assert whole is not None
            for start, end in batches.batches(whole):
                batch = DefaultRecordBatch(whole[start:end])
                assert batch.leader_epoch == NO_EPOCH
                assert batch.validate_crc()
        assert (records[3] or b"")[-len(tail) :][batches.EPOCH_AT : batches.EPOCH_AT + 4] == b"\xff" * 4
        assert batches.without_epochs(two) == records[0]


def test_an_answer_that_does_not_read_as_a_fetch_goes_as_written() -> None:
    frame = fetch_answer(12, (0, built(0, 0, 2)))
    assert answer_without_epochs(frame[:-30], 12)[4:] == frame[:-30]
    assert answer_without_epochs(frame, 12)[4:] != frame
