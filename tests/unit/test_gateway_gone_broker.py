"""Requests for a broker gone from its cluster's metadata (killed and fenced). A group's request goes on
to the broker that coordinates the group now, asked of the cluster, as when a live broker says it is not
the coordinator: answered NOT_COORDINATOR by the gateway instead, a KIP-848 consumer's commit was refused
to the application in a chaos trial (the standby's coordinator killed for 9.9 s). A moved producer's
write gets the retriable error, and nothing of its partitions goes before its resend: a later batch
sent first could set where the partition's sequences start on the new cluster, past it (the resend
then refused OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to librdkafka)."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import (
    Request,
    decode_response,
    parse_request,
    request_schema,
    response_schema,
)
from switchyard.keys import BindingKey
from switchyard.ledger.kinds import RoutingSnapshot
from switchyard.model import Binding, BindingState
from tests.helpers.batches import record_batch
from tests.helpers.sessions import Brokers, Gateway, answering_broker, commit_answer, raw
from workers.gateway import session
from workers.gateway.brokers.upstream import Unlisted, Upstream
from workers.gateway.brokers.vnodes import RealBroker
from workers.gateway.producers.translation import Translation
from workers.gateway.routing import apis
from workers.gateway.routing.holds import KIP848_HEARTBEAT_S
from workers.gateway.session import ClientSession, Listener
from workers.gateway.shared import Shared

GONE, NOW = 5, 7


class _Asker:
    """A connection to any broker of the cluster, which names ``coordinator`` for every group."""

    def __init__(self, coordinator: int | None) -> None:
        self.coordinator = coordinator
        self.meanwhile: Callable[[], None] = lambda: None
        """What happens while it is asked (a new routing epoch)."""
        self.cluster = "primary"
        self.closed = False

    async def ask(self, api_key: int, _version: int, **_: Any) -> Any:
        assert api_key == apis.FIND_COORDINATOR
        self.meanwhile()
        if self.coordinator is None:
            return SimpleNamespace(error_code=ErrorCode.coordinator_not_available, node_id=-1)
        return SimpleNamespace(error_code=ErrorCode.none, node_id=self.coordinator)

    def close(self) -> None:
        self.closed = True


class _Brokers(Brokers):
    """Broker ``GONE`` is not in the cluster's metadata; ``NOW`` listens at ``port``."""

    def __init__(self, port: int, coordinator: int | None) -> None:
        super().__init__()
        self.port = port
        self.asker = _Asker(coordinator)

    def version(self, _api_key: int, most: int) -> int:
        return most

    def real_address(self, cluster: str, node: int | None) -> tuple[str, int]:
        if node == GONE:
            raise Unlisted(f"broker {node} of cluster {cluster} is not in its metadata now")
        return "127.0.0.1", self.port

    def upstream(self, cluster: str, node: int | None, _credentials: Any = None) -> Any:
        if node is None:
            return self.asker
        self.real_address(cluster, node)
        return Upstream("127.0.0.1", self.port, max_frame_bytes=1 << 20, cluster=cluster, node=node)


async def _sent(frame: bytes, gateway: Gateway) -> bytes | None:
    """``frame`` sent to the gateway's virtual broker for ``GONE``: the gateway's own answer, if any."""
    listener = Listener(virtual_id=GONE, broker=RealBroker("primary", GONE))
    sessions = await asyncio.start_server(
        lambda r, w: ClientSession(cast(Shared, gateway), listener, r, w).run(), "127.0.0.1", 0
    )
    reader, client = await asyncio.open_connection("127.0.0.1", sessions.sockets[0].getsockname()[1])
    client.write(struct.pack(">i", len(frame)) + frame)
    answer = None
    with contextlib.suppress(TimeoutError):
        head = await asyncio.wait_for(reader.readexactly(4), 1.0)
        answer = await reader.readexactly(struct.unpack(">i", head)[0])
    client.close()
    sessions.close()
    return answer


async def _arrived(frame: bytes) -> list[int]:
    """The api keys that reached a broker when ``frame`` was sent to the virtual broker for ``GONE``, a
    connection to any broker of the cluster reaching the stand-in broker too."""
    arrived: list[int] = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                arrived.append(struct.unpack_from(">h", await reader.readexactly(size))[0])

    server = await asyncio.start_server(broker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    gateway = Gateway()
    gateway.brokers = _Brokers(port, NOW)
    gateway.brokers.asker = Upstream(  # type: ignore[assignment]
        "127.0.0.1", port, max_frame_bytes=1 << 20, cluster="primary", node=None
    )
    gateway.links = SimpleNamespace(  # type: ignore[attr-defined]
        mirrored=lambda *_: False, presenter=_no_presenter
    )
    await _sent(frame, gateway)
    server.close()
    return arrived


def test_metadata_asked_of_a_broker_gone_from_the_metadata_is_asked_of_any_broker() -> None:
    """Any broker answers it alike. The gateway closed such a connection once (the broker restarting, not
    yet listed): kafkajs's group leader lost the Metadata its assignment needed, never synced, and its
    group stalled for a minute (a chaos trial)."""
    metadata = raw(apis.METADATA, 12, topics=None)
    assert asyncio.run(_arrived(metadata)) == [apis.METADATA]


async def _committed(
    coordinator: int | None, *, flipped: bool = False
) -> tuple[list[int], bytes | None, bool]:
    """An OffsetCommit sent to the gateway's virtual broker for ``GONE``: the api keys that reached the
    broker at ``NOW``, the gateway's own answer if it gave one, and whether the connection that asked
    for the coordinator was closed."""
    arrived: list[int] = []

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                arrived.append(struct.unpack_from(">h", frame)[0])

    server = await asyncio.start_server(broker, "127.0.0.1", 0)
    gateway = Gateway()
    gateway.brokers = _Brokers(server.sockets[0].getsockname()[1], coordinator)
    gateway.links = SimpleNamespace(  # type: ignore[attr-defined]
        mirrored=lambda *_: False, presenter=_no_presenter
    )
    if flipped:  # the application is switched to the standby while its coordinator is looked up
        key = BindingKey.for_app("orders")
        gateway.view.snapshot = RoutingSnapshot(2, {key: _bound("primary", 2)})

        def flip() -> None:
            gateway.view.snapshot = RoutingSnapshot(3, {key: _bound("standby", 3)})
            gateway.changes.publish()

        gateway.brokers.asker.meanwhile = flip
    commit = raw(apis.OFFSET_COMMIT, 8, group_id="orders-readers", generation_id_or_member_epoch=-1)
    answer = await _sent(commit, gateway)
    server.close()
    return arrived, answer, gateway.brokers.asker.closed


async def _no_presenter(*_: Any) -> None:
    return None


def test_a_commit_to_a_coordinator_gone_from_the_metadata_goes_to_the_one_named_now() -> None:
    arrived, answer, closed = asyncio.run(_committed(NOW))
    assert arrived == [apis.OFFSET_COMMIT], f"reached the new coordinator: {arrived}; answered: {answer!r}"
    assert answer is None  # the stand-in broker does not answer: the gateway did not either
    assert closed, "the connection that asked for the coordinator was left open"


def test_a_commit_sent_on_to_a_coordinator_not_taken_over_yet_is_sent_again() -> None:
    """A KIP-848 commit whose broker was killed went on to the coordinator the cluster named, which
    answered NOT_COORDINATOR 16 ms later, not the coordinator yet itself; passed on, librdkafka failed the
    commit to the application (chaos run, 2026-12-05). It is sent again after a pause, within the time
    such a request may be held."""
    arrived: list[int] = []

    async def broker(request: Request) -> Any:
        """Names itself the coordinator of every group; refuses the first commit, takes the next."""
        arrived.append(request.api_key)
        if request.api_key == apis.FIND_COORDINATOR:
            schema = response_schema(request.api_key, request.api_version)
            return make(schema, error_code=ErrorCode.none, node_id=i32(NOW), host="127.0.0.1")
        first = arrived.count(apis.OFFSET_COMMIT) == 1
        return commit_answer(request, ErrorCode.not_coordinator if first else ErrorCode.none)

    async def run() -> tuple[bytes | None, set[ErrorCode]]:
        server = await answering_broker(broker)
        gateway = Gateway()
        gateway.brokers = _Brokers(server.sockets[0].getsockname()[1], NOW)
        gateway.links = SimpleNamespace(  # type: ignore[attr-defined]
            mirrored=lambda *_: False, presenter=_no_presenter
        )
        frame = raw(apis.OFFSET_COMMIT, 8, group_id="orders-readers", generation_id_or_member_epoch=-1)
        answer = await _sent(frame, gateway)
        server.close()
        assert answer is not None, f"not answered; reached the broker: {arrived}"
        commit = parse_request(frame)
        return answer, {p.error_code for t in decode_response(commit, answer).topics for p in t.partitions}

    _, codes = asyncio.run(run())
    assert codes == {ErrorCode.none}, f"answered {codes}; reached the broker: {arrived}"
    assert arrived.count(apis.OFFSET_COMMIT) == 2, arrived


def test_a_commit_whose_routing_moved_on_while_its_coordinator_was_sought_is_not_sent() -> None:
    """The epoch that moved it may be acknowledged already: sent the old way, it would reach the cluster
    the application left behind the saga's back."""
    arrived, answer, _ = asyncio.run(_committed(NOW, flipped=True))
    assert arrived == []
    assert answer is not None
    commit = parse_request(raw(apis.OFFSET_COMMIT, 8, group_id="orders-readers"))
    codes = {p.error_code for t in decode_response(commit, answer).topics for p in t.partitions}
    assert codes == {ErrorCode.not_coordinator}


def _bound(cluster: str, epoch: int) -> Binding:
    return Binding(cluster, epoch, BindingState.ACTIVE, datetime.now(UTC), "test")


def test_with_no_coordinator_named_the_commit_gets_the_retriable_error() -> None:
    arrived, answer, _ = asyncio.run(_committed(None))
    assert arrived == []
    assert answer is not None
    commit = parse_request(raw(apis.OFFSET_COMMIT, 8, group_id="orders-readers"))
    codes = {p.error_code for t in decode_response(commit, answer).topics for p in t.partitions}
    assert codes == {ErrorCode.not_coordinator}


def test_the_coordinator_is_sought_no_longer_than_a_kip848_heartbeat_waits() -> None:
    """The connection's requests wait behind the lookup; librdkafka gives a KIP-848 heartbeat up after the
    heartbeat interval, and the commit in flight with it (a chaos trial: asked 5 s, ``_TIMED_OUT``)."""
    assert session._FIND_WITHIN_S + 1.0 <= KIP848_HEARTBEAT_S


def test_a_moved_producers_write_to_a_gone_broker_holds_its_partitions_later_batches_back() -> None:
    schema = request_schema(apis.PRODUCE, 9)
    topic, partition = (
        element_type(schema, "topic_data"),
        element_type(element_type(schema, "topic_data"), "partition_data"),
    )
    batch = record_batch(11, 0, 40, [b"a", b"b", b"c"])
    body = {"topic_data": (make(topic, name="t", partition_data=(make(partition, index=0, records=batch),)),)}
    produce = raw(apis.PRODUCE, 9, acks=-1, timeout=timedelta(seconds=30), transactional_id=None, **body)
    moved = Translation(producer_id=900, epoch=0)
    gateway = Gateway()
    gateway.brokers = _Brokers(9, NOW)
    gateway.links = SimpleNamespace(mirrored=lambda *_: False, presenter=_no_presenter)  # type: ignore[attr-defined]
    gateway.producers = SimpleNamespace(translating=lambda *_: moved)  # type: ignore[attr-defined]
    answer = asyncio.run(_sent(produce, gateway))
    assert answer is not None
    codes = {
        p.error_code
        for t in decode_response(parse_request(produce), answer).responses
        for p in t.partition_responses
    }
    assert codes == {ErrorCode.not_leader_or_follower}
    assert moved.refused == {("t", 0): 40}, "a later batch of the partition could go before the resend"
