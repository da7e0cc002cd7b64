"""What clients see of a topic across clusters: one id per name, no leader epochs, only virtual nodes."""

from __future__ import annotations

import io
import uuid
from typing import Any

import pytest
from kio.serial import entity_reader, entity_writer

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import known_versions, request_schema, response_schema
from workers.gateway.brokers import topic_identity
from workers.gateway.brokers.rewrite import real_nodes, rewrite
from workers.gateway.brokers.topic_identity import NO_EPOCH, PRESENTED_FROM, ZERO, topic_id
from workers.gateway.routing import apis

REAL_IDS = {"primary": uuid.UUID(int=0xA1), "standby": uuid.UUID(int=0xB2)}
"""Each cluster's own id for topic "orders", as two clusters give them."""


def versions(api_key: int) -> range:
    """The versions the gateway may offer where the answer carries an id or an epoch."""
    low, high = known_versions(api_key) or (0, -1)
    return range(max(low, PRESENTED_FROM[api_key]), min(high, apis.VERSION_CAPS.get(api_key, high)) + 1)


def partitions_answer(api_key: int, version: int, cluster: str) -> Any:
    """A Metadata or DescribeTopicPartitions answer from ``cluster``: "orders" (two partitions, epochs 7
    and 3, its id on that cluster) and a topic the cluster does not know (no id)."""
    cls = response_schema(api_key, version)
    topic_cls = element_type(cls, "topics")
    partition_cls = element_type(topic_cls, "partitions")
    parts = tuple(
        make(partition_cls, partition_index=i, leader_id=111, leader_epoch=epoch, replica_nodes=(111, 112))
        for i, epoch in enumerate((7, 3))
    )
    topics = (
        make(topic_cls, name="orders", topic_id=REAL_IDS[cluster], partitions=parts),
        make(topic_cls, name="missing", topic_id=ZERO, partitions=()),
    )
    return make(cls, topics=topics)


def encodes(body: Any) -> Any:
    """``body`` after an encode and a decode: what the client reads."""
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    decoded, _ = entity_reader(type(body))(out.getvalue(), 0)
    return decoded


@pytest.mark.parametrize("api_key", [apis.METADATA, apis.DESCRIBE_TOPIC_PARTITIONS])
def test_a_topic_has_one_id_and_no_leader_epoch_whichever_cluster_answers(api_key: int) -> None:
    checked = 0
    for version in versions(api_key):
        seen = []
        for cluster in REAL_IDS:
            answer = encodes(topic_identity.present(api_key, partitions_answer(api_key, version, cluster)))
            orders, missing = answer.topics
            assert [p.leader_epoch for p in orders.partitions] == [NO_EPOCH, NO_EPOCH]
            assert [p.replica_nodes for p in orders.partitions] == [(111, 112)] * 2  # nothing else touched
            if hasattr(orders, "topic_id"):
                assert orders.topic_id not in REAL_IDS.values()
                assert missing.topic_id in (None, ZERO)  # "no such topic" stays that (kio reads 0 as None)
                seen.append(orders.topic_id)
        if seen:
            assert seen == [topic_id("orders")] * 2
        checked += 1
    assert checked >= 1


def test_ids_depend_on_the_name_only_and_are_never_the_reserved_ones() -> None:
    assert topic_id("orders") == topic_id("orders")
    names = [f"topic-{i}" for i in range(2000)] + ["__consumer_offsets", "orders", "Orders"]
    ids = {topic_id(n) for n in names}
    assert len(ids) == len(names)
    assert ZERO not in ids
    assert uuid.UUID(int=1) not in ids  # Kafka reserves 0, and 1 for its metadata topic


@pytest.mark.parametrize(
    ("api_key", "field"),
    [(apis.LIST_OFFSETS, "leader_epoch"), (apis.OFFSET_FETCH, "committed_leader_epoch")],
)
def test_epochs_in_offsets_answers_are_unknown(api_key: int, field: str) -> None:
    checked = 0
    for version in versions(api_key):
        cls = response_schema(api_key, version)
        topic_cls = element_type(cls, "topics")
        partition_cls = element_type(topic_cls, "partitions")
        part = make(partition_cls, partition_index=0, **{field: 9})
        body = make(cls, topics=(make(topic_cls, name="orders", partitions=(part,)),))
        answer = encodes(topic_identity.present(api_key, body))
        assert getattr(answer.topics[0].partitions[0], field) == NO_EPOCH
        checked += 1
    assert checked >= 3


def test_created_and_deleted_topics_are_reported_with_the_id_clients_see() -> None:
    for api_key, field in ((apis.CREATE_TOPICS, "topics"), (apis.DELETE_TOPICS, "responses")):
        for version in versions(api_key):
            cls = response_schema(api_key, version)
            result_cls = element_type(cls, field)
            body = make(cls, **{field: (make(result_cls, name="orders", topic_id=REAL_IDS["primary"]),)})
            answer = encodes(topic_identity.present(api_key, body))
            assert getattr(answer, field)[0].topic_id == topic_id("orders")


def test_a_request_naming_topics_by_presented_id_is_sent_by_name() -> None:
    for api_key in (apis.METADATA, apis.DELETE_TOPICS):
        _, high = known_versions(api_key) or (0, -1)
        newest = request_schema(api_key, high)
        topic_cls = element_type(newest, "topics")
        unknown = uuid.UUID(int=0xDEAD)
        body = make(
            newest,
            topics=(
                make(topic_cls, name=None, topic_id=topic_id("orders")),
                make(topic_cls, name=None, topic_id=unknown),
                make(topic_cls, name="payments", topic_id=ZERO),
            ),
        )
        assert topic_identity.ids_asked(api_key, body) == {topic_id("orders"), unknown}
        named = topic_identity.by_name(api_key, body, topic_identity.names_of(["orders", "other"]))
        assert [(t.name, t.topic_id) for t in named.topics] == [
            ("orders", ZERO),
            (None, unknown),  # no topic has it: the cluster answers UNKNOWN_TOPIC_ID
            ("payments", ZERO),
        ]
        assert topic_identity.ids_asked(api_key, named) == {unknown}
    all_topics = make(request_schema(apis.METADATA, 12), topics=None)
    assert topic_identity.ids_asked(apis.METADATA, all_topics) == set()


def test_describe_topic_partitions_names_virtual_brokers_only() -> None:
    body = partitions_answer(apis.DESCRIBE_TOPIC_PARTITIONS, 0, "primary")
    assert real_nodes(apis.DESCRIBE_TOPIC_PARTITIONS, body) == {111, 112}
    out = rewrite(
        apis.DESCRIBE_TOPIC_PARTITIONS,
        body,
        {111: 1, 112: 2},
        lambda v: ("127.0.0.1", 9000 + v),
        cluster_id="switchyard",
    )
    assert {(p.leader_id, p.replica_nodes) for p in out.topics[0].partitions} == {(1, (1, 2))}


def test_only_answers_with_ids_or_epochs_are_decoded() -> None:
    assert not topic_identity.presents(apis.FETCH, 12)
    assert not topic_identity.presents(apis.PRODUCE, 9)
    assert not topic_identity.presents(apis.METADATA, 6)
    assert topic_identity.presents(apis.METADATA, 7)
    assert not topic_identity.presents(apis.LIST_OFFSETS, 3)
