"""A Produce split by the gateway (it names a migrated partition) whose part for the routed cluster finds
that broker dead waits, as a whole Produce does, until the cluster leads the part's partitions
elsewhere, and only then has its client connection closed.

Closed at once, kafkajs came straight back to the dead broker, which its cluster's metadata still named
until it fenced it (~9 s), and its default retries ran out first: a chaos trial's partition migration
with a primary broker killed failed 3 sends so."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import (
    encode_request,
    encode_response,
    parse_request,
    request_schema,
    response_schema,
)
from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState, PartitionId
from switchyard.routing.snapshot import RoutingSnapshot
from tests.helpers.sessions import Brokers, Gateway, serving
from tests.unit.test_gateway_split_order import NODE, migrated
from workers.gateway.brokers import leaders
from workers.gateway.brokers.upstream import Upstream
from workers.gateway.migrated.moved import Moved
from workers.gateway.routing import apis

VERSION, TOPIC = 9, "t"
LED_ELSEWHERE_AFTER_S = 1.5
"""When the cluster names another leader for the dead broker's partition, from the Produce's sending."""


def _produce() -> bytes:
    """A Produce (acks=1, no idempotence) of partition 0 (migrated to the standby) and 1 (on the primary)."""
    schema = request_schema(apis.PRODUCE, VERSION)
    topic_cls = element_type(schema, "topic_data")
    partitions = tuple(make(element_type(topic_cls, "partition_data"), index=i, records=None) for i in (0, 1))
    fields = {
        "transactional_id": None,
        "acks": 1,
        "timeout": timedelta(seconds=30),
        "topic_data": (make(topic_cls, name=TOPIC, partition_data=partitions),),
    }
    return encode_request(apis.PRODUCE, VERSION, fields, client_id="orders", correlation_id=1).frame


def _written(request: Any) -> Any:
    """A broker's answer to ``request``: every partition written."""
    cls = response_schema(apis.PRODUCE, VERSION)
    topic_cls = element_type(cls, "responses")
    partition_cls = element_type(topic_cls, "partition_responses")
    topics = tuple(
        make(topic_cls, name=t.name, partition_responses=tuple(
            make(partition_cls, index=p.index, error_code=ErrorCode.none, base_offset=0, log_append_time=None,
                 log_start_offset=0)
            for p in t.partition_data
        ))
        for t in request.body.topic_data
    )  # fmt: skip
    return make(cls, responses=topics)


async def _standby(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            request = parse_request(await reader.readexactly(size))
            writer.write(encode_response(request, _written(request)))


class _Clusters(Brokers):
    """The primary's brokers at a port nobody listens on (killed), the standby's at a stand-in; the
    primary's metadata names the dead broker the partition's leader until ``led_elsewhere_at``."""

    def __init__(self, dead: int, standby: int, led_elsewhere_at: float) -> None:
        super().__init__()
        self.offered[apis.PRODUCE] = (VERSION, VERSION)
        self.ports = {"primary": dead, "standby": standby}
        self.led_elsewhere_at = led_elsewhere_at

    def offers(self, api_key: int, api_version: int) -> bool:
        return api_key == apis.PRODUCE or super().offers(api_key, api_version)

    def real_address(self, cluster: str, _node: int | None) -> tuple[str, int]:
        return "127.0.0.1", self.ports[cluster]

    def upstream(self, cluster: str, node: int | None, _credentials: Any = None) -> Upstream:
        return Upstream("127.0.0.1", self.ports[cluster], max_frame_bytes=1 << 20, cluster=cluster, node=node)

    async def topic_metadata(self, _cluster: str, topic: str) -> Any:
        leader = NODE + 1 if time.monotonic() >= self.led_elsewhere_at else NODE
        partitions = [  # the migrated partition still led by the dead broker on its origin: not waited for
            SimpleNamespace(partition_index=0, leader_id=NODE),
            SimpleNamespace(partition_index=1, leader_id=leader),
        ]
        brokers = [SimpleNamespace(node_id=n) for n in (NODE, NODE + 1)]
        return SimpleNamespace(brokers=brokers, topics=[SimpleNamespace(name=topic, partitions=partitions)])


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _leader(_cluster: str, topic: str) -> Any:
    partitions = [SimpleNamespace(partition_index=i, leader_id=NODE) for i in (0, 1)]
    return SimpleNamespace(topics=[SimpleNamespace(name=topic, partitions=partitions)])


async def _no_producer_ids(_cluster: str) -> Any:
    raise AssertionError("this producer is not idempotent")


def test_a_split_produce_whose_broker_is_dead_waits_until_its_partitions_are_led_elsewhere() -> None:
    async def scenario() -> float:
        standby = await asyncio.start_server(_standby, "127.0.0.1", 0)
        sent = time.monotonic()
        brokers = _Clusters(_dead_port(), standby.sockets[0].getsockname()[1], sent + LED_ELSEWHERE_AFTER_S)
        key = BindingKey.for_app("orders")
        gateway = Gateway({key: Binding("primary", 1, BindingState.ACTIVE, datetime.now(UTC), "test")})
        gateway.view.snapshot = RoutingSnapshot(
            2, dict(gateway.view.snapshot.bindings), migrations={PartitionId(TOPIC, 0): migrated(TOPIC)}
        )
        gateway.moved = Moved(_leader, _no_producer_ids)
        gateway.brokers = brokers
        gateway.links = SimpleNamespace(mirrored=lambda *_: False)  # type: ignore[attr-defined]
        server, port, _ = await serving(gateway)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        frame = _produce()
        writer.write(struct.pack(">i", len(frame)) + frame)
        try:
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, unanswered
            return time.monotonic() - sent
        finally:
            writer.close()
            server.close()
            standby.close()

    closed_after = asyncio.run(scenario())
    assert LED_ELSEWHERE_AFTER_S <= closed_after < LED_ELSEWHERE_AFTER_S + 2 * leaders.POLL_S + 0.5, (
        closed_after
    )
