"""Reading a client's frames within the gateway's limits: time-outs, frame sizes, byte budgets.

A client must not hold the gateway's memory or a connection for free:
- a connection with nothing in flight and no request for ``idle_timeout_s`` is closed, as a broker
  closes idle connections; with ``sasl.mode: required`` one that has not logged in within
  ``login_timeout_s`` is closed too, and its frames may not exceed ``unauthenticated_max_frame_bytes``;
- once a frame has begun, the rest of it must arrive within ``frame_read_timeout_s`` (a frame waiting
  for room in a budget counts as begun: a client cannot hold others up for longer than that);
- every request's bytes are counted from the moment its size is read until it is answered, against the
  connection's budget and the process's. A reader that finds no room waits (the client's TCP window
  fills up and it slows down) rather than reading on: memory is bounded by the budgets, whatever the
  clients send.

Error handling: a frame too large raises :class:`FrameError`; a time-out run past is reported by
:meth:`Intake.overdue` and the gateway's watchdog ends the connection. Either way, only that one.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from collections.abc import Callable

from switchyard.config import GatewayLimitsConfig
from switchyard.frames.protocol import FrameError

_SIZE = struct.Struct(">i")


class ByteBudget:
    """Bytes that may be held at once; ``take`` waits, first come first served, until there is room."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def take(self, size: int) -> None:
        if not self._waiting and self.held + size <= self.capacity:
            self.held += size
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((size, granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.give_back(size)  # granted just as the wait was cancelled
            else:
                self._grant()  # it may have been first in line
            raise

    def give_back(self, size: int) -> None:
        self.held -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            wanted, granted = self._waiting[0]
            if not granted.done():
                if self.held + wanted > self.capacity:
                    return
                self.held += wanted
                granted.set_result(None)
            self._waiting.popleft()


class Lease:
    """One request's bytes, held in both budgets until the request is answered."""

    def __init__(self, size: int, budgets: tuple[ByteBudget, ...]) -> None:
        self.size = size
        self._budgets: tuple[ByteBudget, ...] = budgets

    def release(self) -> None:
        budgets, self._budgets = self._budgets, ()
        for budget in budgets:
            budget.give_back(self.size)


class Intake:
    """The frames of one client connection, read under the limits.

    Time-outs cost nothing per frame: reading only notes when a frame began and when the last one
    ended, and :meth:`overdue`, asked about every connection a few times a second by the gateway's
    watchdog, says whether one has been broken (the watchdog then ends that connection).
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        limits: GatewayLimitsConfig,
        *,
        max_frame_bytes: int,
        process_budget: ByteBudget,
        busy: Callable[[], bool],
        login_required: bool,
    ) -> None:
        self.reader = reader
        self.limits = limits
        self.max_frame_bytes = max_frame_bytes
        self.budget = ByteBudget(limits.connection_buffer_bytes)
        self.process_budget = process_budget
        self.busy = busy
        """Whether the connection has requests in flight (then it is not idle)."""
        self.logged_in = not login_required
        self._loop = asyncio.get_running_loop()
        self._connected_at = self._last_frame_at = self._loop.time()
        self._frame_began: float | None = None
        self._frame_size: int | None = None

    def end(self, transport: asyncio.Transport) -> None:
        """Read no further request, whatever the socket and the buffer still hold: ``next_frame`` gives
        None from now on. An end-of-stream mark would not do: the reader resumes a socket it paused
        itself (its buffer full) as the buffer empties, and bytes arriving after the mark fail the
        transport, with the answers on their way (the soak's 655 records written twice at a gateway's
        graceful restart)."""
        transport.pause_reading()
        self.reader.set_exception(asyncio.IncompleteReadError(b"", None))

    async def next_frame(self) -> tuple[bytes, Lease] | None:
        """The next whole frame and its lease on the budgets; None at a clean end of stream."""
        try:
            first = await self.reader.readexactly(1)
        except asyncio.IncompleteReadError:
            return None
        self._frame_began = self._loop.time()
        try:
            (size,) = _SIZE.unpack(first + await self.reader.readexactly(3))
        except asyncio.IncompleteReadError as exc:
            raise FrameError("connection closed inside a frame size") from exc
        largest = self.max_frame_bytes if self.logged_in else self.limits.unauthenticated_max_frame_bytes
        if size < 8 or size > largest:
            raise FrameError(f"frame size {size} outside 8..{largest}")
        self._frame_size = size
        lease = await self._lease(size)
        try:
            frame = await self.reader.readexactly(size)
        except BaseException as exc:
            lease.release()
            if isinstance(exc, asyncio.IncompleteReadError):
                raise FrameError(f"connection closed after {len(exc.partial)} of {size} frame bytes") from exc
            raise
        self._frame_began = self._frame_size = None
        self._last_frame_at = self._loop.time()
        return frame, lease

    def overdue(self, now: float) -> str | None:
        """Which time-out this connection has run past, if any."""
        limits = self.limits
        if self._frame_began is not None:
            if now - self._frame_began > limits.frame_read_timeout_s:
                what = "a frame size" if self._frame_size is None else f"a frame of {self._frame_size} bytes"
                return f"{what} was not sent whole in {limits.frame_read_timeout_s:g}s"
        elif not self.logged_in and now - self._connected_at > limits.login_timeout_s:
            return f"no SASL login within {limits.login_timeout_s:g}s"
        elif now - self._last_frame_at > limits.idle_timeout_s and not self.busy():
            return f"idle for {limits.idle_timeout_s:g}s"
        return None

    async def _lease(self, size: int) -> Lease:
        await self.budget.take(size)
        try:
            await self.process_budget.take(size)
        except BaseException:
            self.budget.give_back(size)
            raise
        return Lease(size, (self.budget, self.process_budget))
