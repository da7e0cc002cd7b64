"""Kafka requests Switchyard sends itself, over blocking sockets, framed as the gateway frames its own
(:mod:`switchyard.frames.protocol`).

Some of what sagas and the mirror ask a cluster, librdkafka cannot ask safely or at all: a group's
committed offsets (its request can crash the process, :mod:`switchyard.offset_fetch`) and a leader's log
end beyond the high watermark (no client API asks it, :mod:`switchyard.appended`). A :class:`Wire`
keeps a few idle connections to each broker between asks: the mirror asks every group's offsets every
``mirror.group_sync_interval_s``.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException
from kio.schema.errors import ErrorCode

from switchyard.config import split_hostport
from switchyard.frames.protocol import (
    FrameError,
    decode_response,
    request_of,
    response_correlation_id,
    with_size,
)

Address = tuple[str, int]
T = TypeVar("T")

CLIENT_ID = "switchyard"
AGAIN_S = 0.2
"""How long an ask waits before it asks again, where the cluster is moving something."""
LARGEST_ANSWER = 64 << 20
KEPT_PER_BROKER = 4
"""Idle connections kept to one broker, at most: several threads of a saga's sync ask at once."""
_SIZE = struct.Struct(">i")
_CORRELATIONS = 2**31 - 1


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

    def ask_any(self, request: Any, deadline: float) -> Any:
        """``request`` (a kio request) asked of the bootstrap servers in turn, each given its share of the
        time left (a frozen broker takes a connection and never answers), starting with the one that
        answered last; its answer, decoded."""
        servers = list(self.servers)
        failed: OSError | EOFError | None = None
        for i, server in enumerate(servers):
            share = time.monotonic() + max(left(deadline) / (len(servers) - i), min(left(deadline), 1.0))
            try:
                answer = self.ask(server, request, share)
            except (OSError, EOFError) as exc:
                failed = exc
                continue
            if i:
                self.servers = [server, *(s for s in servers if s != server)]
            return answer
        assert failed is not None
        raise failed

    def ask(self, address: Address, body: Any, deadline: float) -> Any:
        """``body`` (a kio request) sent to ``address``, and its answer, decoded: on a kept connection, or
        on a new one if there is none or the kept one fails (the broker closes idle ones). An answer that
        does not read as one is an ``EOFError``, as a connection lost."""
        correlation = next(self._correlation) % _CORRELATIONS + 1  # an int32, however long the process runs
        request = request_of(body, client_id=CLIENT_ID, correlation_id=correlation)
        frame = with_size(request.frame)
        kept = self._take(address)
        while True:
            connection = kept or socket.create_connection(address, timeout=left(deadline))
            try:
                answer = _exchange(connection, frame, deadline)
                if _answered(answer, address) != correlation:
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
                return decode_response(request, answer)
            except FrameError as exc:
                raise EOFError(f"an answer from {address} that does not read: {exc}") from exc

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


def _answered(answer: bytes, address: Address) -> int:
    """The correlation id ``answer`` carries; an answer too short to carry one is an ``EOFError``."""
    try:
        return response_correlation_id(answer)
    except FrameError as exc:
        raise EOFError(f"an answer from {address} that does not read: {exc}") from exc


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
