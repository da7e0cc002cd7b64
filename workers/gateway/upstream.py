"""One connection to a real broker, on behalf of one client connection.

Requests are pipelined; a broker answers a connection's requests in order, so each answer goes to the
oldest waiting request. Produce with acks=0 gets no answer and waits for none. Because the connection
serves a single client connection, the client's correlation ids pass through unchanged. Requests
sent in one turn of the event loop leave in one write (one system call), not one each.

A connection to a cluster that requires SASL logs in (``login``) before any request is written to it;
if the broker refuses, the connection fails with :class:`UpstreamError` like any other broken one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from workers.gateway.protocol import (
    FrameError,
    decode_response,
    encode_request,
    read_frame,
    response_correlation_id,
)

_SIZE = struct.Struct(">i")


class UpstreamError(Exception):
    """The broker connection failed; every request waiting on it fails with this."""


class Shielded(UpstreamError):
    """The broker's cluster is shielded: the connection was closed, or never made, on purpose. What
    waited on it gets the retriable error, its client connection kept."""


class Overdue(UpstreamError):
    """The broker did not answer a request a newer epoch routes elsewhere within the request's own wait
    and the gateway's grace (see :mod:`workers.gateway.inflight`): the connection was closed, and what
    waited on it gets the retriable error, its client connection kept."""


Ask = Callable[..., Awaitable[Any]]
"""``ask(api_key, version, **fields)``: send one request of the gateway's own, return the decoded answer."""
Login = Callable[[Ask], Awaitable[None]]


class Upstream:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        max_frame_bytes: int,
        login: Login | None = None,
        connect_timeout_s: float = 10.0,
        cluster: str = "",
        node: int | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.cluster, self.node = cluster, node
        """Which cluster and real broker (None: the bootstrap server) this connection was made for."""
        self.max_frame_bytes = max_frame_bytes
        self.login = login
        self.connect_timeout_s = connect_timeout_s
        self._ready = False
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: collections.deque[tuple[int, asyncio.Future[bytes]]] = collections.deque()
        self._reader_task: asyncio.Task[None] | None = None
        self._connecting = asyncio.Lock()
        self._outgoing: list[bytes] = []
        self.closed = False
        self._error: Exception | None = None
        self.retired = False
        """Takes no new requests; closes once the waiting ones are answered."""

    async def send(
        self, frame: bytes, correlation_id: int, *, expects_response: bool
    ) -> asyncio.Future[bytes] | None:
        await self._connect()
        return self._enqueue(frame, correlation_id, expects_response=expects_response)

    async def ask(self, api_key: int, version: int, **fields: Any) -> Any:
        await self._connect()
        return await self._ask(api_key, version, **fields)

    async def _ask(self, api_key: int, version: int, **fields: Any) -> Any:
        request = encode_request(api_key, version, fields, client_id="switchyard-gateway")
        future = self._enqueue(request.frame, request.correlation_id, expects_response=True)
        assert future is not None
        return decode_response(request, await asyncio.wait_for(future, self.connect_timeout_s))

    def _enqueue(
        self, frame: bytes, correlation_id: int, *, expects_response: bool
    ) -> asyncio.Future[bytes] | None:
        assert self._writer is not None
        future: asyncio.Future[bytes] | None = None
        if expects_response:
            future = asyncio.get_running_loop().create_future()
            self._waiting.append((correlation_id, future))
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing += (_SIZE.pack(len(frame)), frame)
        return future

    def _flush(self) -> None:
        if self._writer is not None and not self.closed:
            self._writer.writelines(self._outgoing)
        self._outgoing = []

    async def _connect(self) -> None:
        if self.closed:
            raise self._closed_by()
        if self._ready:
            return
        async with self._connecting:
            if self.closed:
                raise self._closed_by()
            if self._ready:
                return
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(self.host, self.port), self.connect_timeout_s
                )
            except (OSError, TimeoutError) as exc:
                raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
            if self.closed:  # given up on while it connected
                writer.close()
                raise self._closed_by()
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read(reader))
            if self.login is not None:
                try:
                    await self.login(self._ask)
                except Exception as exc:
                    if isinstance(self._error, Shielded | Overdue):  # given up on while it logged in
                        raise self._error from exc
                    error = UpstreamError(f"{self.host}:{self.port}: SASL login failed: {exc}")
                    self._fail(error)
                    raise error from exc
            self._ready = True

    async def _read(self, reader: asyncio.StreamReader) -> None:
        error: Exception = UpstreamError(f"{self.host}:{self.port} closed the connection")
        try:
            while True:
                frame = await read_frame(reader, self.max_frame_bytes)
                if frame is None:
                    break
                if not self._waiting:
                    error = UpstreamError(f"{self.host}:{self.port} answered a request nobody sent")
                    break
                correlation_id, future = self._waiting.popleft()
                if response_correlation_id(frame) != correlation_id:
                    error = UpstreamError(f"{self.host}:{self.port} answered out of order")
                    future.set_exception(error)
                    break
                if not future.done():
                    future.set_result(frame)
                if self.retired and not self._waiting:
                    error = UpstreamError(f"{self.host}:{self.port}: retired")
                    break
        except (OSError, FrameError) as exc:
            error = UpstreamError(f"{self.host}:{self.port}: {exc!r}")
        self._fail(error)

    def _closed_by(self) -> UpstreamError:
        """Why the connection is closed: the error it was closed with (Shielded, Overdue, ...)."""
        if isinstance(self._error, UpstreamError):
            return self._error
        return UpstreamError(f"connection to {self.host}:{self.port} is closed")

    def _fail(self, error: Exception) -> None:
        if not self.closed:
            self._error = error
        self.closed = True
        while self._waiting:
            _, future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()

    def abort(self, error: UpstreamError) -> None:
        """Close now, failing what waits with ``error``; the reader ends on its own."""
        self._fail(error)

    def retire(self) -> None:
        self.retired = True
        if not self._waiting:
            self._fail(UpstreamError(f"{self.host}:{self.port}: retired"))

    async def close(self, error: UpstreamError | None = None) -> None:
        self._fail(error or UpstreamError(f"connection to {self.host}:{self.port} closed by the gateway"))
        if self._reader_task is not None:
            self._reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader_task
