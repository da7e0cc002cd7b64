"""Requests and answers of partitions whose copy's offsets differ, in the offsets clients see."""

from __future__ import annotations

import struct
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import request_schema, response_schema
from switchyard.mirror.offsets import OffsetMap
from switchyard.mirror.presented import Presented
from tests.helpers.batches import record_batch
from workers.gateway.brokers import mapped
from workers.gateway.framing import batches
from workers.gateway.routing import apis

# the source: records 0-4, a marker at 5, records 6-9 (end 10); the copy: records 0-8, end 9
PRESENTED = Presented(OffsetMap([(6, 5)]), copied=10, target_end=9)


NAMED = ("topics", "partitions", "partition_index", "name")
"""Where most answers keep their partitions."""


def lookup(topic: str, partition: int) -> Presented | None:
    return PRESENTED if (topic, partition) == ("orders", 0) else None


def at(batch: bytes, base: int) -> bytes:
    return struct.pack(">q", base) + batch[8:]


def fetch_answer(records: bytes) -> Any:
    cls = response_schema(apis.FETCH, 12)
    topic_cls = element_type(cls, "responses")
    partition_cls = element_type(topic_cls, "partitions")
    aborted_cls = element_type(partition_cls, "aborted_transactions")
    partitions = tuple(
        make(partition_cls, partition_index=i, high_watermark=9, last_stable_offset=9, log_start_offset=0,
             aborted_transactions=(make(aborted_cls, producer_id=7, first_offset=5),), records=records)
        for i in (0, 1)
    )  # fmt: skip
    return make(cls, responses=(make(topic_cls, topic="orders", partitions=partitions),))


def test_a_fetch_answer_is_in_client_offsets_batch_by_batch() -> None:
    records = at(record_batch(7, 0, 0, [b"a", b"b", b"c"]), 2) + at(record_batch(7, 0, 3, [b"d", b"e"]), 5)
    answer = mapped.answer(apis.FETCH, fetch_answer(records), lookup)
    translated, untouched = answer.responses[0].partitions
    assert [(b.base_offset, b.last_offset) for b in batches.read(translated.records)] == [(2, 4), (6, 7)]
    assert (translated.high_watermark, translated.last_stable_offset, translated.log_start_offset) == (
        10, 10, 0,
    )  # fmt: skip
    assert translated.aborted_transactions[0].first_offset == 6
    assert untouched.records == records  # another partition: its offsets are the clients'
    assert untouched.high_watermark == 9


def test_a_batch_across_a_gap_is_refused_not_misplaced(caplog: pytest.LogCaptureFixture) -> None:
    answer = mapped.answer(apis.FETCH, fetch_answer(at(record_batch(7, 0, 0, [b"x"] * 4), 3)), lookup)
    refused = answer.responses[0].partitions[0]
    assert (refused.error_code, refused.records) == (ErrorCode.not_leader_or_follower, b"")
    assert "spans two segments" in caplog.text


def test_a_fetch_and_a_commit_go_in_the_copys_offsets() -> None:
    schema = request_schema(apis.FETCH, 12)
    topic_cls = element_type(schema, "topics")
    partition_cls = element_type(topic_cls, "partitions")
    fetch = make(schema, topics=(make(topic_cls, topic="orders", partitions=(
        make(partition_cls, partition=0, fetch_offset=6, log_start_offset=-1),
        make(partition_cls, partition=1, fetch_offset=6, log_start_offset=-1),
    )),))  # fmt: skip
    sent = mapped.request(apis.FETCH, fetch, lookup)
    assert [p.fetch_offset for p in sent.topics[0].partitions] == [5, 6]
    assert sent.topics[0].partitions[0].log_start_offset == -1
    commit_schema = request_schema(apis.OFFSET_COMMIT, 9)
    commit_topic = element_type(commit_schema, "topics")
    commit_partition = element_type(commit_topic, "partitions")
    commit = make(commit_schema, group_id="g", topics=(make(commit_topic, name="orders", partitions=(
        make(commit_partition, partition_index=0, committed_offset=10),
    )),))  # fmt: skip
    assert mapped.request(apis.OFFSET_COMMIT, commit, lookup).topics[0].partitions[0].committed_offset == 9
    delete_schema = request_schema(apis.DELETE_RECORDS, 2)
    delete_topic = element_type(delete_schema, "topics")
    delete_partition = element_type(delete_topic, "partitions")
    purge = make(delete_schema, timeout=timedelta(seconds=30), topics=(make(delete_topic, name="orders",
                                                                            partitions=(
        make(delete_partition, partition_index=0, offset=10),  # up to the client's 10: the copy's 9
        make(delete_partition, partition_index=1, offset=10),
    )),))  # fmt: skip
    assert [p.offset for p in mapped.request(apis.DELETE_RECORDS, purge, lookup).topics[0].partitions] == [
        9,
        10,
    ]
    assert mapped.request(apis.FETCH, fetch, lambda _t, _p: None) is fetch  # nothing to translate


@pytest.mark.parametrize(
    ("api", "shape", "field", "real", "seen", "given"),
    [
        (apis.PRODUCE, ("responses", "partition_responses", "index", "name"), "base_offset", 9, 10, {}),
        # target 5 holds the record after the source's marker: a position there is the marker's, 5
        (apis.LIST_OFFSETS, NAMED, "offset", 5, 5, {}),
        (apis.LIST_OFFSETS, NAMED, "offset", 5, 6,
         {"timestamp": 1_700_000_000_000}),  # found by its time: the record's own offset
        (apis.OFFSET_FETCH, NAMED, "committed_offset", 5, 5, {}),
        (apis.OFFSET_FETCH, NAMED, "committed_offset", 7, 8, {}),
        (apis.OFFSET_FOR_LEADER_EPOCH, ("topics", "partitions", "partition", "topic"), "end_offset", 9, 10,
         {}),
        (apis.DELETE_RECORDS, NAMED, "low_watermark", 5, 5, {}),
    ],
)  # fmt: skip
def test_offsets_in_answers_are_the_clients(
    api: int, shape: tuple[str, str, str, str], field: str, real: int, seen: int, given: dict[str, int]
) -> None:
    topics_field, partitions_field, index_field, name_field = shape
    cls = response_schema(
        api,
        {apis.PRODUCE: 11, apis.LIST_OFFSETS: 8, apis.OFFSET_FETCH: 7, apis.DELETE_RECORDS: 2}.get(api, 4),
    )
    topic_cls = element_type(cls, topics_field)
    partition_cls = element_type(topic_cls, partitions_field)
    partition = make(partition_cls, **{index_field: 0, field: real, **given})
    body = make(
        cls, **{topics_field: (make(topic_cls, **{name_field: "orders", partitions_field: (partition,)}),)}
    )
    answered = mapped.answer(api, body, lookup)
    assert getattr(getattr(getattr(answered, topics_field)[0], partitions_field)[0], field) == seen


def test_an_end_after_a_marker_the_copy_lacks_is_where_a_reader_gets_to() -> None:
    """The source's last transaction's marker (10) was not copied: the copy's end at the promotion (9) is
    the clients' 10, where a consumer stands after the last record (9), not 11 — Kafka Streams restored a
    changelog until its position reached the end, and waited for ever one short of it. A record written
    on the copy since is the clients' 11, after the marker."""
    presented = Presented(OffsetMap([(6, 5)]), copied=11, target_end=9)
    assert presented.position_to_client(9) == 10
    assert presented.to_client(9) == 11  # the record written there since the promotion
    assert presented.position_to_client(10) == 12
    assert presented.to_target(10) == 9  # and back: a reader at 10 fetches what comes next
    answer = mapped.answer(apis.FETCH, fetch_answer(b""), lambda t, p: presented if p == 0 else None)
    ended = answer.responses[0].partitions[0]
    assert (ended.high_watermark, ended.last_stable_offset) == (10, 10)
