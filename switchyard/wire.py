"""Kafka requests Switchyard sends itself, over blocking sockets, with kio's codec.

Some of what sagas and the mirror ask a cluster, librdkafka cannot ask safely or at all: a group's
committed offsets (its request can crash the process, :mod:`switchyard.offset_fetch`) and a leader's log
end beyond the high watermark (no client API asks it, :mod:`switchyard.appended`). A :class:`Wire`
keeps a few idle connections to each broker between asks: the mirror asks every group's offsets every
``mirror.group_sync_interval_s``.
"""

from __future__ import annotations

import io
import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32
from kio.static.protocol import Entity

from switchyard.config import split_hostport

Address = tuple[str, int]
Answer = TypeVar("Answer", bound=Entity)
T = TypeVar("T")

CLIENT_ID = "switchyard"
AGAIN_S = 0.2
"""How long an ask waits before it asks again, where the cluster is moving something."""
LARGEST_ANSWER = 64 << 20
KEPT_PER_BROKER = 4
"""Idle connections kept to one broker, at most: several threads of a saga's sync ask at once."""
_SIZE = struct.Struct(">i")


class Again(Exception):
    """The cluster answered as one that is moving what was asked about (a coordinator, a leader): ask
    again, found anew."""


class Wire:
    """Requests to one cluster's brokers; thread-safe: an ask has its connection to itself."""

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

    def ask_any(self, request: Any, answered_as: type[Answer], deadline: float) -> Answer:
        """``request`` asked of the bootstrap servers in turn, each given its share of the time left (a
        frozen broker takes a connection and never answers), starting with the one that answered last."""
        servers = list(self.servers)
        failed: OSError | EOFError | None = None
        for i, server in enumerate(servers):
            share = time.monotonic() + max(left(deadline) / (len(servers) - i), min(left(deadline), 1.0))
            try:
                answer = self.ask(server, request, answered_as, share)
            except (OSError, EOFError) as exc:
                failed = exc
                continue
            if i:
                self.servers = [server, *(s for s in servers if s != server)]
            return answer
        assert failed is not None
        raise failed

    def ask(self, address: Address, request: Any, answered_as: type[Answer], deadline: float) -> Answer:
        """``request`` (a flexible version's) to ``address``, and its answer: on a kept connection, or on a
        new one if there is none or the kept one fails (the broker closes idle ones)."""
        correlation = next(self._correlation)
        frame = _framed(request, correlation)
        kept = self._take(address)
        while True:
            connection = kept or socket.create_connection(address, timeout=left(deadline))
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


def asked_until(timeout_s: float, what: str, attempt: Callable[[float], T]) -> T:
    """``attempt(deadline)``, made again every ``AGAIN_S`` while the cluster moves what it asks about
    (:class:`Again`) or cannot be reached, until ``timeout_s``: then ``TimeoutError``, saying ``what``
    did not answer."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return attempt(deadline)
        except (Again, OSError, EOFError) as exc:  # OSError: refused, reset, a socket's time-out
            if time.monotonic() + AGAIN_S >= deadline:
                raise TimeoutError(f"{what} answered in {timeout_s:.1f} s: {exc}") from exc
        time.sleep(AGAIN_S)


def refused(code: ErrorCode, again: frozenset[ErrorCode]) -> None:
    """Nothing for ``none``; :class:`Again` for a code of ``again``; a ``KafkaException`` otherwise."""
    if code in again:
        raise Again(code.name)
    if code != ErrorCode.none:
        raise KafkaException(KafkaError(int(code)))


def left(deadline: float) -> float:
    """Seconds to ``deadline`` (monotonic); ``TimeoutError`` when none is left."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("no time left")
    return remaining


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
    connection.settimeout(left(deadline))
    connection.sendall(frame)
    (size,) = _SIZE.unpack(_exactly(connection, 4, deadline))
    if not 0 < size <= LARGEST_ANSWER:
        raise EOFError(f"an answer of {size} bytes")
    return _exactly(connection, size, deadline)


def _exactly(connection: socket.socket, size: int, deadline: float) -> bytes:
    data = bytearray()
    while len(data) < size:
        connection.settimeout(left(deadline))
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError(f"connection closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)
