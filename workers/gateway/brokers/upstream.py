"""One connection to a real broker, on behalf of one client connection.

Requests are pipelined; a broker answers a connection's requests in order, so each answer goes to the
oldest waiting request. Produce with acks=0 gets no answer and waits for none. Because the connection
serves a single client connection, the client's correlation ids pass through unchanged. Requests
sent in one turn of the event loop leave in one write (one system call), not one each; answers are
handed on as their bytes arrive (a protocol, not a stream reader and a task: no turn of the event loop
between a broker's answer and the request that waits for it).

A connection to a cluster that requires SASL logs in (``login``) before any request is written to it;
if the broker refuses, the connection fails with :class:`UpstreamError` like any other broken one.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from switchyard.frames.protocol import (
    FrameError,
    FrameSplitter,
    decode_response,
    encode_request,
    response_correlation_id,
)

_SIZE = struct.Struct(">i")


class UpstreamError(Exception):
    """The broker connection failed; every request waiting on it fails with this."""


class Shielded(UpstreamError):
    """The broker's cluster is shielded: the connection was closed, or never made, on purpose. What
    waited on it gets the retriable error, its client connection kept."""


class Unlisted(UpstreamError):
    """The broker is not in its cluster's metadata now (stopped, fenced, restarting): no connection is
    made to it."""


class Overdue(UpstreamError):
    """The broker did not answer a request a newer epoch routes elsewhere within the request's own wait
    and the gateway's grace (see :mod:`workers.gateway.routing.inflight`): the connection was closed, and what
    waited on it gets the retriable error, its client connection kept."""


class Unvouched(Shielded):
    """The gateway could not vouch for its routing when the request was to go (its ZooKeeper session
    may have ended, a switch gone on without it: :meth:`Gateway.vouched`): never sent, it gets the
    retriable error, its client connection kept."""


Check = Callable[[], None]
"""Raises (:class:`Unvouched`) if a request may not be written now, called right before it is."""
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
        others: tuple[tuple[str, int], ...] = (),
        reached: Callable[[tuple[str, int]], None] = lambda _address: None,
    ) -> None:
        self.host, self.port = host, port
        self.cluster, self.node = cluster, node
        """Which cluster and real broker (None: any of its brokers) this connection was made for."""
        self.others = others
        """For a connection to any broker: where else to connect, in turn, if ``host`` refuses."""
        self.reached = reached
        """Told where the connection was made, when that was one of ``others``."""
        self.max_frame_bytes = max_frame_bytes
        self.login = login
        self.connect_timeout_s = connect_timeout_s
        self._ready = False
        self._transport: asyncio.Transport | None = None
        self._waiting: collections.deque[tuple[int, asyncio.Future[bytes]]] = collections.deque()
        self._connecting = asyncio.Lock()
        self._in_line = 0
        """Requests waiting for the connection (or making it): while there are any, others queue behind."""
        self._outgoing: list[bytes] = []
        self.closed = False
        self._error: Exception | None = None
        self.retired = False
        """Takes no new requests; closes once the waiting ones are answered."""
        self._winding: UpstreamError | None = None
        """Why it is winding down (``wind_down``): what a request sent now is refused with."""
        self.unreached = False
        """It could not be made: nothing was ever sent over it."""
        self.broke = False
        """It failed under requests (waiting for answers, or for the connection): their outcome unknown
        or they were never sent, those sent after them must not go out over another connection either
        (:meth:`ClientSession._upstream`)."""

    async def send(
        self, frame: bytes, correlation_id: int, *, expects_response: bool, check: Check = lambda: None
    ) -> asyncio.Future[bytes] | None:
        """Write a client's request once connected; ``check`` raises if it may not go by then."""
        if self._winding is not None:
            raise self._winding
        await self._connect()
        check()
        return self._enqueue(frame, correlation_id, expects_response=expects_response)

    async def ask(self, api_key: int, version: int, **fields: Any) -> Any:
        await self._connect()
        return await self._ask(api_key, version, **fields)

    async def request(
        self, api_key: int, version: int, *, check: Check = lambda: None, **fields: Any
    ) -> asyncio.Task[Any]:
        """Write a request of the gateway's own now, after those sent before it (once ``check``, called
        when connected, has not raised); its decoded answer to come (``ask`` waits for it at once)."""
        await self._connect()
        check()
        return self._ask(api_key, version, **fields)

    def _ask(self, api_key: int, version: int, **fields: Any) -> asyncio.Task[Any]:
        request = encode_request(api_key, version, fields, client_id="switchyard-gateway")
        future = self._enqueue(request.frame, request.correlation_id, expects_response=True)
        assert future is not None

        async def answer() -> Any:
            return decode_response(request, await asyncio.wait_for(future, self.connect_timeout_s))

        task = asyncio.ensure_future(answer())
        task.add_done_callback(_seen)
        return task

    def _enqueue(
        self, frame: bytes, correlation_id: int, *, expects_response: bool
    ) -> asyncio.Future[bytes] | None:
        assert self._transport is not None
        future: asyncio.Future[bytes] | None = None
        if expects_response:
            future = asyncio.get_running_loop().create_future()
            self._waiting.append((correlation_id, future))
        if not self._outgoing:
            asyncio.get_running_loop().call_soon(self._flush)
        self._outgoing += (_SIZE.pack(len(frame)), frame)
        return future

    def _flush(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.writelines(self._outgoing)
        self._outgoing = []

    async def _connect(self) -> None:
        """Connected, in turn: a request sent while others wait for the connection waits behind them, so
        requests leave in the order they were sent. (Past the waiters, one sent just as the connection came
        up would be written before them: for an idempotent producer's batches, a gap the broker refuses
        with OUT_OF_ORDER_SEQUENCE_NUMBER, which is fatal to the client.)"""
        if self.closed:
            raise self.closed_by()
        if self._ready and not self._in_line:
            return
        self._in_line += 1
        try:
            await self._connected()
        finally:
            self._in_line -= 1

    async def _connected(self) -> None:
        async with self._connecting:
            if self.closed:
                raise self.closed_by()
            if self._ready:
                return
            loop = asyncio.get_running_loop()
            wire = _Wire(self, FrameSplitter(self.max_frame_bytes))
            try:
                transport = await self._reach(loop, wire)
            except (OSError, TimeoutError) as exc:
                if self.closed:  # closed on purpose (shielded, overdue) while it connected
                    raise self.closed_by() from exc
                error = UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc!r}")
                self._fail(error)
                self.broke = self.unreached = True  # those in line were never sent
                raise error from exc
            if self.closed:  # given up on while it connected
                transport.close()
                raise self.closed_by()
            self._transport = transport
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

    async def _reach(self, loop: asyncio.AbstractEventLoop, wire: _Wire) -> asyncio.Transport:
        """A transport to ``host``, else to the first of ``others`` that takes it (nothing was sent yet:
        any broker serves a request meant for any of them); the last refusal if none does."""
        addresses = [(self.host, self.port), *self.others]
        while True:
            address = addresses.pop(0)
            try:
                transport, _ = await asyncio.wait_for(
                    loop.create_connection(lambda: wire, *address), self.connect_timeout_s
                )
            except (OSError, TimeoutError):
                if not addresses or self.closed:
                    raise
                continue
            if address != (self.host, self.port):
                self.host, self.port = address
                self.reached(address)
            return transport

    def _answered(self, frame: bytes) -> None:
        """A broker's answer: the oldest waiting request's."""
        if not self._waiting:
            self._fail(UpstreamError(f"{self.host}:{self.port} answered a request nobody sent"))
            return
        correlation_id, future = self._waiting.popleft()
        if response_correlation_id(frame) != correlation_id:
            error = UpstreamError(f"{self.host}:{self.port} answered out of order")
            future.set_exception(error)
            self._fail(error)
            self.broke = True  # that request's outcome is unknown too
            return
        if not future.done():
            future.set_result(frame)
        if self.retired and not self._waiting:
            self._fail(UpstreamError(f"{self.host}:{self.port}: retired"))

    def closed_by(self) -> UpstreamError:
        """Why the connection is closed: the error it was closed with (Shielded, Overdue, ...)."""
        if self._winding is not None:
            return self._winding
        if isinstance(self._error, UpstreamError):
            return self._error
        return UpstreamError(f"connection to {self.host}:{self.port} is closed")

    def _fail(self, error: Exception) -> None:
        if not self.closed:
            self._error = error
            self.broke = bool(self._waiting) and not isinstance(error, Shielded | Overdue)
        self.closed = True
        while self._waiting:
            _, future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        if self._transport is not None:
            self._transport.close()

    def retire(self) -> None:
        self.retired = True
        if not self._waiting:
            self._fail(UpstreamError(f"{self.host}:{self.port}: retired"))

    def wind_down(self, error: UpstreamError, within_s: float) -> None:
        """Take no new request; close once those sent are answered, or after ``within_s``, failing what
        still waits with ``error``. Requests not sent yet (the connection is being made) fail now."""
        self._winding = error
        if not self._ready or self._in_line or not self._waiting:
            self.close(error)
            return
        self.retire()
        asyncio.get_running_loop().call_later(within_s, self.close, error)

    def close(self, error: UpstreamError | None = None) -> None:
        """Close now, failing what waits with ``error`` (by default: closed by the gateway)."""
        self._fail(error or UpstreamError(f"connection to {self.host}:{self.port} closed by the gateway"))


def _seen(task: asyncio.Task[Any]) -> None:
    """An answer nobody waits for any more (its request given up on): its failure is not news."""
    if not task.cancelled():
        task.exception()


class _Wire(asyncio.Protocol):
    """The broker connection's bytes: frames to :meth:`Upstream._answered`, its end to ``_fail``."""

    def __init__(self, upstream: Upstream, frames: FrameSplitter) -> None:
        self.upstream, self.frames = upstream, frames

    def data_received(self, data: bytes) -> None:
        upstream = self.upstream
        try:
            frames = self.frames.feed(data)
        except FrameError as exc:
            upstream._fail(UpstreamError(f"{upstream.host}:{upstream.port}: {exc!r}"))
            return
        for frame in frames:  # each holds a correlation id: the splitter's frames have 4 bytes or more
            if upstream.closed:
                return
            upstream._answered(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        upstream = self.upstream
        cut, where = self.frames.cut(), f"{upstream.host}:{upstream.port}"
        why = (f" ({cut})" if cut else "") + (f": {exc!r}" if exc is not None else "")
        upstream._fail(UpstreamError(f"{where} closed the connection{why}"))


def dropped(future: asyncio.Future[bytes]) -> None:
    """A broker's late answer to a request already answered otherwise: nobody wants it."""
    if not future.cancelled():
        future.exception()
