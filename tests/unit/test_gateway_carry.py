"""Commits carried across a switch, and how long blocked requests are held: the pure parts."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import pytest

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import encode_request, known_versions, parse_request, request_schema
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.groups.carry import carried_commit, held
from workers.gateway.routing import apis
from workers.gateway.routing.holds import RoutingChanges, hold_limit


def test_a_planned_switchs_commits_go_as_clients_see_them() -> None:
    """In the offsets clients see: the session puts them in the new cluster's (brokers/mapped.py)."""
    for offset in (420, 500, 900, -1):
        assert held(500, offset, planned=True) == offset
    assert held(None, 900, planned=False) == 900  # the end not known (a link still copying): as is


def test_beyond_the_copy_after_a_failover_nothing_new_is_skipped() -> None:
    assert held(500, 900, planned=False) == 500  # may be the lost window's: held at the end
    assert held(500, 420, planned=False) == 420


def offset_commit(version: int) -> bytes:
    schema = request_schema(apis.OFFSET_COMMIT, version)
    topic_cls = element_type(schema, "topics")
    partition_cls = element_type(topic_cls, "partitions")
    partition = make(
        partition_cls, partition_index=1, committed_offset=150, committed_leader_epoch=3,
        commit_timestamp=-1, committed_metadata="m",
    )  # fmt: skip
    fields = {
        "group_id": "g",
        "generation_id_or_member_epoch": 7,
        "member_id": "rdkafka-1234",
        "group_instance_id": "static-1",
        "retention_time": timedelta(milliseconds=-1),
        "topics": (make(topic_cls, name="t", partitions=(partition,)),),
    }
    present = {f.name for f in dataclasses.fields(schema)}
    given = {k: v for k, v in fields.items() if k in present}
    return encode_request(apis.OFFSET_COMMIT, version, given, client_id="c").frame


@pytest.mark.parametrize("version", range(known_versions(apis.OFFSET_COMMIT)[0], apis.VERSION_CAPS[8] + 1))  # type: ignore[index]
def test_a_carried_commit_comes_from_outside_the_group_at_every_version(version: int) -> None:
    body = carried_commit(parse_request(offset_commit(version)).body, lambda _t, _p: 120, planned=True)
    assert (body.group_id, body.generation_id_or_member_epoch, body.member_id) == ("g", -1, "")
    assert getattr(body, "group_instance_id", None) is None
    (partition,) = body.topics[0].partitions
    assert (partition.partition_index, partition.committed_offset, partition.committed_metadata) == (
        1,
        150,
        "m",
    )


def produce(timeout_ms: int) -> bytes:
    fields: dict[str, object] = {
        "transactional_id": None,
        "acks": -1,
        "timeout": timedelta(milliseconds=timeout_ms),
        "topic_data": [],
    }
    return encode_request(apis.PRODUCE, 9, fields, client_id="c").frame


def test_holds_end_within_what_the_client_waits() -> None:
    assert hold_limit(parse_request(produce(30_000)), 10.0) == 10.0
    assert hold_limit(parse_request(produce(4_000)), 10.0) == 2.0  # half a short produce time-out
    heartbeat = encode_request(
        apis.HEARTBEAT, 4, {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None},
        client_id="c",
    )  # fmt: skip
    assert hold_limit(parse_request(heartbeat.frame), 10.0, 45.0) == 10.0
    assert hold_limit(parse_request(heartbeat.frame), 10.0, 6.0) == 2.0  # a third of the member's session
    assert hold_limit(parse_request(heartbeat.frame), 10.0) == pytest.approx(10 / 3)  # unknown: 10 s
    join = encode_request(
        apis.JOIN_GROUP, 5,
        {"group_id": "g", "session_timeout": timedelta(seconds=9), "rebalance_timeout": timedelta(seconds=60),
         "member_id": "", "group_instance_id": None, "protocol_type": "consumer", "protocols": ()},
        client_id="c",
    )  # fmt: skip
    assert hold_limit(parse_request(join.frame), 10.0) == 3.0  # its own session time-out


def test_a_hold_wakes_on_a_new_snapshot_and_not_before() -> None:
    async def run() -> tuple[float, float]:
        current = [RoutingSnapshot(epoch=1)]
        changes = RoutingChanges(lambda: current[0])
        loop = asyncio.get_running_loop()
        began = loop.time()
        same = await changes.after(current[0], 0.2)  # nothing changes: the time runs out
        waited = loop.time() - began
        assert same is current[0]

        def flip() -> None:
            current[0] = RoutingSnapshot(epoch=2)
            changes.publish()

        loop.call_later(0.05, flip)
        began = loop.time()
        newer = await changes.after(same, 30)
        assert newer.epoch == 2
        return waited, loop.time() - began

    waited, woken = asyncio.run(run())
    assert waited >= 0.19
    assert woken < 5  # woken by the change, not by the 30 s limit
