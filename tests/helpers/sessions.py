"""A gateway session in this process, on a real socket, with a stand-in for the gateway it belongs to:
what a client gets for requests that never reach a broker (refused, answered here, held)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

import kio.index
from kio.schema.errors import ErrorCode

from switchyard.config import ClusterConfig, Config
from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import (
    Request,
    encode_response,
    known_versions,
    parse_request,
    response_schema,
)
from switchyard.keys import BindingKey
from switchyard.model import Binding
from switchyard.routing.snapshot import RoutingSnapshot
from tests.helpers.frames import Encoded, example
from workers.gateway.brokers.upstream import Upstream
from workers.gateway.framing.intake import ByteBudget
from workers.gateway.groups.members import Members
from workers.gateway.migrated.moved import Moved
from workers.gateway.process.metrics import Metrics
from workers.gateway.process.usage import UsageTracker
from workers.gateway.producers.acked import AckedEnds
from workers.gateway.routing import apis
from workers.gateway.routing.holds import RoutingChanges
from workers.gateway.routing.inflight import InFlight
from workers.gateway.session import ClientSession, Listener
from workers.gateway.shared import Shared

READ = sorted(apis.BLOCKABLE | {apis.METADATA, apis.FIND_COORDINATOR, apis.DELETE_TOPICS})
"""The APIs whose bodies the gateway reads."""


def offered(key: int) -> range:
    versions = known_versions(key)
    assert versions is not None
    return range(versions[0], min(versions[1], apis.VERSION_CAPS.get(key, versions[1])) + 1)


def raw(key: int, version: int, **changes: Any) -> bytes:
    """A request frame (without its size) of every field set, ``changes`` made."""
    schema = kio.index.load_request_schema(key, version)
    entity = dataclasses.replace(example(schema), **changes)
    return Encoded().request(schema, entity, client_id="orders@host-1")


class Gateway:
    """What a session asks of the gateway for requests that never reach a broker."""

    def __init__(self, bindings: dict[BindingKey, Binding] | None = None, **gateway: Any) -> None:
        self.config = Config(
            clusters={"primary": ClusterConfig(bootstrap="127.0.0.1:9")},
            default_cluster="primary",
            gateway=gateway,
        )
        self.view = SimpleNamespace(snapshot=RoutingSnapshot(1, bindings or {}))
        self.changes = RoutingChanges(lambda: self.view.snapshot)
        self.inflight = InFlight(self.config.gateway.limits.stale_request_grace_s)
        self.budget = ByteBudget(self.config.gateway.limits.buffer_bytes)
        self.metrics = Metrics.create()
        self.usage = UsageTracker(7 * 24 * 3600.0)
        self.acked = AckedEnds()
        self.members = Members()
        self.consumer_groups = NoConsumerGroups()
        self.unsynced = Unsynced()
        self.moved = Moved(_nowhere, _nowhere)
        self.brokers = Brokers()
        self.unvouched = False

    def vouched(self, _snapshot: Any = None) -> bool:
        return not self.unvouched

    def shield_fresh(self, _cluster: str) -> bool:
        return True

    def settling(self, _cluster: str) -> bool:
        return False


class NoConsumerGroups:
    """A store of consumer-protocol groups that knows none (the real one is ZooKeeper's)."""

    def note(self, _group: str) -> None:
        pass

    async def of_consumer_protocol(self, _group: str) -> bool:
        return False


class Unsynced:
    """Members refused their sync, kept in memory (the real store is ZooKeeper's)."""

    def __init__(self) -> None:
        self.refusals: dict[tuple[str, str, str], int] = {}

    def refused(self, cluster: str, group: str, member_id: str, generation: int) -> None:
        self.refusals[(cluster, group, member_id)] = generation

    def synced(self, cluster: str, group: str, member_id: str) -> None:
        self.refusals.pop((cluster, group, member_id), None)

    async def generation(self, cluster: str, group: str, member_id: str) -> int | None:
        return self.refusals.get((cluster, group, member_id))


class Brokers:
    """A broker directory that offers what the gateway reads, and knows no broker."""

    def __init__(self) -> None:
        self.offered = {key: (offered(key).start, offered(key).stop - 1) for key in READ}

    def offers(self, api_key: int, api_version: int) -> bool:
        return api_key in self.offered and api_version in offered(api_key)

    def upstream(self, *_: Any) -> Any:
        raise AssertionError("these requests go to no broker")


async def _nowhere(*_: Any) -> Any:
    raise AssertionError("these requests go to no broker")


class AtOneAddress(Brokers):
    """A broker directory whose every broker is one address (a stand-in broker's)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def real_address(self, _cluster: str, _node: int | None) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def version(self, _api_key: int, most: int) -> int:
        """The version the gateway asks its own requests in: the newest it speaks."""
        return most

    def upstream(self, cluster: str, node: int | None, _credentials: Any = None) -> Upstream:
        return Upstream("127.0.0.1", self.port, max_frame_bytes=1 << 20, cluster=cluster, node=node)


async def answering_broker(answer: Callable[[Request], Awaitable[Any]]) -> asyncio.Server:
    """A stand-in broker on a free port: each request it reads is answered ``answer(request)`` (a body of
    the request's response schema), one connection's requests in order."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                request = parse_request(await reader.readexactly(size))
                writer.write(encode_response(request, await answer(request)))

    return await asyncio.start_server(serve, "127.0.0.1", 0)


def commit_answer(request: Request, code: ErrorCode) -> Any:
    """An OffsetCommit answer to ``request``: ``code`` on every partition it names."""
    schema = response_schema(request.api_key, request.api_version)
    topic = element_type(schema, "topics")
    return make(schema, topics=tuple(
        make(topic, name=t.name, partitions=tuple(
            make(element_type(topic, "partitions"), partition_index=p.partition_index, error_code=code)
            for p in t.partitions
        ))
        for t in request.body.topics
    ))  # fmt: skip


async def serving(gateway: Gateway) -> tuple[asyncio.Server, int, asyncio.Event]:
    """A server whose connections are sessions of ``gateway``: it, its port, and an event set when a
    session ends."""
    ended = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await ClientSession(cast(Shared, gateway), Listener(), reader, writer).run()
        finally:
            ended.set()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], ended


async def exchange(gateway: Gateway, *frames: bytes) -> list[bytes]:
    """Send ``frames`` on one connection to a session; the answers until the session closes it."""
    server, port, ended = await serving(gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for frame in frames:
        writer.write(struct.pack(">i", len(frame)) + frame)
    writer.write_eof()
    answers = []
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
        while True:
            head = await asyncio.wait_for(reader.readexactly(4), 5)
            answers.append(await reader.readexactly(struct.unpack(">i", head)[0]))
    writer.close()
    await asyncio.wait_for(ended.wait(), 5)
    server.close()
    await server.wait_closed()
    return answers


async def answered_when(
    gateway: Gateway, frames: list[bytes], timeout_s: float = 30
) -> list[tuple[float, bytes]]:
    """Send ``frames`` at once on one connection that stays open; each answer, with when it came (seconds
    from the sending)."""
    server = await asyncio.start_server(
        lambda r, w: ClientSession(cast(Shared, gateway), Listener(), r, w).run(), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent = time.monotonic()
    writer.write(b"".join(struct.pack(">i", len(frame)) + frame for frame in frames))
    when = []
    for _ in frames:
        head = await asyncio.wait_for(reader.readexactly(4), timeout_s)
        answer = await reader.readexactly(struct.unpack(">i", head)[0])
        when.append((time.monotonic() - sent, answer))
    writer.close()
    server.close()
    return when
