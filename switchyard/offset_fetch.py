"""A consumer group's committed offsets, asked of its coordinator over Kafka's protocol directly.

librdkafka's ListConsumerGroupOffsets (2.16, and its master in late 2026) hands a coordinator's
NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE answer to the asking client's own consumer group, which an
AdminClient does not have: the process dies of a segfault (confluentinc/librdkafka#5040, open; the cores
of a worker and of mirrors that died so in a chaos run show ``rd_kafka_cgrp_op`` under
``rd_kafka_handle_OffsetFetch``). A broker's restart moves coordinators: one 100-trial run lost the
worker three times and the mirror twice so, and a switch's clients were held past their bound while the
worker came back. So these two requests,
FindCoordinator and OffsetFetch, are Switchyard's own: blocking sockets, asked again while the group's
coordinator moves, loads or cannot be reached, until the caller's time-out. The mirror asks every group's
offsets every ``mirror.group_sync_interval_s``, so a connection to each broker is kept between asks.
"""

from __future__ import annotations

import io
import itertools
import socket
import struct
import threading
import time
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse
from kio.schema.offset_fetch.v6.request import OffsetFetchRequest
from kio.schema.offset_fetch.v6.response import OffsetFetchResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import GroupId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from switchyard.config import split_hostport

Key = tuple[str, int]
Address = tuple[str, int]
Answer = TypeVar("Answer", FindCoordinatorResponse, OffsetFetchResponse)

CLIENT_ID = "switchyard"
AGAIN_S = 0.2
MOVING = frozenset(
    {ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator}
)
"""A coordinator that is loading the group, moving, or not elected yet: asked again, found anew."""
LARGEST_ANSWER = 64 << 20
KEPT_PER_BROKER = 4
"""Idle connections kept to one broker, at most: several threads of a saga's sync ask at once."""
_SIZE = struct.Struct(">i")


class _Moving(Exception):
    """The group's coordinator answered (or was named) as one that is moving: ask again."""


class OffsetFetcher:
    """One cluster's groups' committed offsets; thread-safe: an ask has its connection to itself."""

    def __init__(self, bootstrap: str) -> None:
        self.servers = [split_hostport(s) for s in bootstrap.split(",") if s.strip()]
        """In the order they are asked: the one that last answered first."""
        if not self.servers:
            raise ValueError(f"no bootstrap server in {bootstrap!r}")
        self._idle: dict[Address, list[socket.socket]] = {}
        self._closed = False
        self._lock = threading.Lock()
        self._correlation = itertools.count(1)

    def close(self) -> None:
        """Close the kept connections, and any given back from now on (a retired client's)."""
        with self._lock:
            self._closed = True
            idle = [c for kept in self._idle.values() for c in kept]
            self._idle.clear()
        for connection in idle:
            connection.close()

    def committed(self, group: str, timeout_s: float) -> dict[Key, int]:
        """``group``'s committed offset per partition (partitions without one are left out).
        ``TimeoutError`` when no coordinator answered within ``timeout_s``; a ``KafkaException`` for
        anything else it refused (an unauthorised group, say)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                coordinator = self._coordinator(group, deadline)
                asked = OffsetFetchRequest(group_id=GroupId(group), topics=None)
                answer = self._ask(coordinator, asked, OffsetFetchResponse, deadline)
                _refused(answer.error_code)
                return {
                    (topic.name, int(p.partition_index)): int(p.committed_offset)
                    for topic in answer.topics
                    for p in topic.partitions
                    if p.error_code == ErrorCode.none and p.committed_offset >= 0
                }
            except (_Moving, OSError, EOFError) as exc:  # OSError: refused, reset, a socket's time-out
                if time.monotonic() + AGAIN_S >= deadline:
                    raise TimeoutError(
                        f"no coordinator of {group} answered in {timeout_s:.1f} s: {exc}"
                    ) from exc
            time.sleep(AGAIN_S)

    def _coordinator(self, group: str, deadline: float) -> Address:
        """Where ``group``'s coordinator is, asked of the bootstrap servers in turn, each given its share
        of the time left (a frozen broker takes a connection and never answers), starting with the one
        that answered last."""
        servers = list(self.servers)
        failed: OSError | EOFError | None = None
        for i, server in enumerate(servers):
            share = time.monotonic() + max(_left(deadline) / (len(servers) - i), min(_left(deadline), 1.0))
            try:
                found = self._ask(server, FindCoordinatorRequest(key=group), FindCoordinatorResponse, share)
            except (OSError, EOFError) as exc:
                failed = exc
                continue
            if i:
                self.servers = [server, *(s for s in servers if s != server)]
            _refused(found.error_code)
            return found.host, int(found.port)
        assert failed is not None
        raise failed

    def _ask(self, address: Address, request: Any, answered_as: type[Answer], deadline: float) -> Answer:
        """``request`` (a flexible version's) to ``address``, and its answer: on a kept connection, or on a
        new one if there is none or the kept one fails (the broker closes idle ones)."""
        correlation = next(self._correlation)
        frame = _framed(request, correlation)
        kept = self._take(address)
        while True:
            connection = kept or socket.create_connection(address, timeout=_left(deadline))
            try:
                answer = _exchange(connection, frame, deadline)
                header, at = entity_reader(ResponseHeader)(answer, 0)
                if header.correlation_id != correlation:
                    raise EOFError(f"an answer to another request from {address}")
            except (OSError, EOFError):
                connection.close()
                if kept is None:
                    raise
                kept = None
                continue
            except BaseException:
                connection.close()
                raise
            self._give(address, connection)
            try:
                body, _ = entity_reader(answered_as)(answer, at)
            except Exception as exc:  # kio's reader on an answer it cannot read
                raise EOFError(f"an answer from {address} that is not {answered_as.__name__}: {exc}") from exc
            return body

    def _take(self, address: Address) -> socket.socket | None:
        with self._lock:
            idle = self._idle.get(address)
            return idle.pop() if idle else None

    def _give(self, address: Address, connection: socket.socket) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if not self._closed and len(idle) < KEPT_PER_BROKER:
                idle.append(connection)
                return
        connection.close()


def _refused(code: ErrorCode) -> None:
    if code in MOVING:
        raise _Moving(code.name)
    if code != ErrorCode.none:
        raise KafkaException(KafkaError(int(code)))


def _framed(request: Any, correlation: int) -> bytes:
    """``request`` (a flexible version's) with its header and size."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header = RequestHeader(
        request_api_key=request.__api_key__,
        request_api_version=request.__version__,
        correlation_id=i32(correlation),
        client_id=CLIENT_ID,
    )
    entity_writer(RequestHeader)(out, header)
    entity_writer(type(request))(out, request)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def _exchange(connection: socket.socket, frame: bytes, deadline: float) -> bytes:
    """The answer's frame (without its size) to ``frame``, sent on ``connection``."""
    connection.settimeout(_left(deadline))
    connection.sendall(frame)
    (size,) = _SIZE.unpack(_exactly(connection, 4, deadline))
    if not 0 < size <= LARGEST_ANSWER:
        raise EOFError(f"an answer of {size} bytes")
    return _exactly(connection, size, deadline)


def _exactly(connection: socket.socket, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        connection.settimeout(_left(deadline))
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError(f"connection closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no time left")
    return left
