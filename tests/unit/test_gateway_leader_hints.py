"""A Produce answer that hints at a partition's new leader (KIP-951) names real brokers: the client gets
virtual ones, or it would connect around the gateway."""

from __future__ import annotations

import io
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import response_schema
from workers.gateway.brokers.rewrite import leader_hints, real_nodes, rewrite
from workers.gateway.routing import apis

NOT_LEADER = ErrorCode.not_leader_or_follower


def produce_answer(version: int, *, hinted: bool) -> Any:
    cls = response_schema(apis.PRODUCE, version)
    topic_cls = element_type(cls, "responses")
    partition_cls = element_type(topic_cls, "partition_responses")
    fields: dict[str, Any] = {
        "index": 0,
        "error_code": NOT_LEADER if hinted else ErrorCode.none,
        "base_offset": -1,
    }
    endpoints = ()
    if hinted:
        leader_cls = type(make(partition_cls, index=0).current_leader)
        fields["current_leader"] = leader_cls(leader_id=3, leader_epoch=7)
        endpoint_cls = element_type(cls, "node_endpoints")
        endpoints = (make(endpoint_cls, node_id=3, host="10.0.0.3", port=9092, rack=None),)
    partitions = (make(partition_cls, **fields),)
    return make(cls, responses=(make(topic_cls, name="orders", partition_responses=partitions),),
                node_endpoints=endpoints)  # fmt: skip


@pytest.mark.parametrize("version", range(10, apis.VERSION_CAPS[apis.PRODUCE] + 1))
def test_a_new_leader_hint_names_its_virtual_broker(version: int) -> None:
    body = produce_answer(version, hinted=True)
    assert leader_hints(body)
    assert real_nodes(apis.PRODUCE, body) == {3}
    out = rewrite(apis.PRODUCE, body, {3: 12}, lambda v: ("127.0.0.1", 9000 + v), cluster_id="switchyard")
    buffer = io.BytesIO()
    entity_writer(type(out))(buffer, out)
    read, _ = entity_reader(type(out))(buffer.getvalue(), 0)
    (endpoint,) = read.node_endpoints
    assert (endpoint.node_id, endpoint.host, endpoint.port) == (12, "127.0.0.1", 9012)
    leader = read.responses[0].partition_responses[0].current_leader
    assert (leader.leader_id, leader.leader_epoch) == (12, -1)  # epochs are never shown (topic_identity)


def test_an_answer_without_a_hint_goes_back_untouched() -> None:
    assert not leader_hints(produce_answer(12, hinted=False))
    assert not leader_hints(produce_answer(9, hinted=False))
