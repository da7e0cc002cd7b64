"""A Produce naming a migrated partition (split by the gateway) is written before the next request is
read, so it reaches its broker in the order its client sent it, and never after the client left.

Once, the second of two such Produce requests waited for its partition's leader in a task of its own
while the first was sent; the client closed its connection, the session closed its broker connections
(failing the first), and then the second was sent over a new one. The client's retry of the first then
came behind it, and the broker refused that as out of order: fatal to a librdkafka producer (a partition
migration test in CI met this)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import encode_request, request_schema
from switchyard.keys import BindingKey
from switchyard.model import (
    Binding,
    BindingState,
    MigrationMode,
    MigrationState,
    PartitionId,
    PartitionMigration,
)
from switchyard.routing.snapshot import RoutingSnapshot
from tests.helpers.sessions import AtOneAddress, Gateway, serving
from workers.gateway.migrated.moved import Moved
from workers.gateway.routing import apis

NODE = 7


def migrated(topic: str) -> PartitionMigration:
    return PartitionMigration(
        PartitionId(topic, 0), "primary", "standby", MigrationMode.SMOOTH, MigrationState.MIGRATED,
        end_offset=10, target_base=0, origin_end=10, ignore_origin=False, epoch=2,
        updated_at=datetime.now(UTC), by="test",
    )  # fmt: skip


def produce(topic: str, correlation_id: int) -> bytes:
    schema = request_schema(apis.PRODUCE, 9)
    topic_cls = element_type(schema, "topic_data")
    partition = make(element_type(topic_cls, "partition_data"), index=0, records=None)
    fields = {
        "transactional_id": None,
        "acks": 1,
        "timeout": timedelta(seconds=30),
        "topic_data": (make(topic_cls, name=topic, partition_data=(partition,)),),
    }
    return encode_request(apis.PRODUCE, 9, fields, client_id="orders", correlation_id=correlation_id).frame


class StandInBroker:
    """A broker that answers no Produce: it notes which of its connections each one came over."""

    def __init__(self) -> None:
        self.arrived: list[int] = []
        """Over which connection (numbered from 1) each request came, in the order they came."""
        self.senders: list[str] = []
        """The client id in each request's header, in the order they came."""
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                self.arrived.append(number)
                (length,) = struct.unpack_from(">h", frame, 8)  # after key, version, correlation id
                self.senders.append(frame[10 : 10 + length].decode())
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


class ToStandIn(AtOneAddress):
    def offers(self, api_key: int, api_version: int) -> bool:
        return api_key == apis.PRODUCE or super().offers(api_key, api_version)


async def _gateway(broker: StandInBroker) -> tuple[Gateway, asyncio.Event]:
    """A gateway whose topics ``quick`` and ``slow`` (partition 0 of each migrated, primary to standby)
    and ``plain`` (not migrated) are all at ``broker``; the leader of ``slow`` is told once the event is
    set."""
    port = await broker.start()
    slow_topic_answered = asyncio.Event()

    async def metadata(_cluster: str, topic: str) -> Any:
        if topic == "slow":
            await slow_topic_answered.wait()
        partition = SimpleNamespace(partition_index=0, leader_id=NODE)
        return SimpleNamespace(topics=[SimpleNamespace(name=topic, partitions=[partition])])

    async def no_producer_ids(_cluster: str) -> Any:
        raise AssertionError("these producers are not idempotent")

    key = BindingKey.for_app("orders")
    gateway = Gateway({key: Binding("primary", 1, BindingState.ACTIVE, datetime.now(UTC), "test")})
    gateway.view.snapshot = RoutingSnapshot(
        2, dict(gateway.view.snapshot.bindings),
        migrations={PartitionId(t, 0): migrated(t) for t in ("quick", "slow")},
    )  # fmt: skip
    gateway.moved = Moved(metadata, no_producer_ids)
    gateway.brokers = ToStandIn(port)
    gateway.links = SimpleNamespace(mirrored=lambda *_: False)  # type: ignore[attr-defined]
    return gateway, slow_topic_answered


async def _sent(
    broker: StandInBroker, *topics: str
) -> tuple[asyncio.Server, asyncio.Event, asyncio.StreamWriter, asyncio.Event]:
    """``_gateway``'s sessions served (the server, and an event set when a session ends), and a client
    connection that sent a Produce to each of ``topics``; with ``_gateway``'s event."""
    gateway, slow_topic_answered = await _gateway(broker)
    server, port, ended = await serving(gateway)
    _, client = await asyncio.open_connection("127.0.0.1", port)
    for number, topic in enumerate(topics, 1):
        frame = produce(topic, number)
        client.write(struct.pack(">i", len(frame)) + frame)
    return server, ended, client, slow_topic_answered


async def _until(check: Callable[[], bool]) -> None:
    async def done() -> None:
        while not check():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(done(), 5)


def test_a_split_produce_waiting_for_its_leader_is_sent_in_order_and_never_after_its_client_left() -> None:
    async def scenario() -> StandInBroker:
        broker = StandInBroker()
        server, ended, client, slow_topic_answered = await _sent(broker, "quick", "slow")
        await _until(lambda: len(broker.arrived) == 1)  # the first is there; the second waits for its leader
        client.close()  # the client gives up on both (it sends them again on a new connection)
        await asyncio.sleep(0.2)
        slow_topic_answered.set()
        await asyncio.wait_for(ended.wait(), 15)  # (a request sent late waits 10 s for its answer)
        await asyncio.sleep(0.2)  # time for anything sent late to arrive
        server.close()
        assert broker.server is not None
        broker.server.close()
        return broker

    broker = asyncio.run(scenario())
    assert broker.arrived in ([1], [1, 1])  # the second right behind the first, if at all
    assert broker.connections == 1  # never over another connection, after the client left


def test_a_split_produce_is_written_before_the_next_request_is_read() -> None:
    """A Produce split by the gateway waits for its partition's leader; the plain Produce the client sent
    after it reaches the broker after it, as it would behind a forwarded one."""

    async def scenario() -> list[str]:
        broker = StandInBroker()
        server, _, client, slow_topic_answered = await _sent(broker, "slow", "plain")
        await asyncio.sleep(0.2)
        slow_topic_answered.set()
        await _until(lambda: len(broker.senders) == 2)
        client.close()
        server.close()
        assert broker.server is not None
        broker.server.close()
        return broker.senders

    assert asyncio.run(scenario()) == ["switchyard-gateway", "orders"]  # the split one (the gateway's own)
