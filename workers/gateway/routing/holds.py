"""Requests of a blocked identity wait for the block to end instead of being refused at once.

A refused request costs the client a retry. Clients give up after a few (kafkajs: 5, about 10 s of
backoff), so a block of several seconds answered with an error to every attempt ends in failed sends
the application sees. Held, each request costs at most one retry per hold: it is answered the moment
the identity's routing changes (the flip, or the block lifted), as the new routing says — forwarded,
carried, or the retriable error that sends the client where it is bound now — and at the latest when
its hold time runs out, with the retriable error, well within the time its client waits for an answer.

Held requests are not in flight to any broker, so they never hold an epoch's acknowledgement up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from switchyard.frames.protocol import Request
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.routing import apis

SHARE_OF_CLIENT_TIMEOUT = 0.5
"""A Produce is held at most this share of the time-out it names (its client's request time-out in
every library looked at), leaving the rest for the retry."""
SHARE_OF_SESSION = 1 / 3
"""A group request is held at most this share of its member's session time-out. librdkafka gives a
heartbeat that long to be answered, and a heartbeat waits behind the requests held before it on its
connection; a member without a successful heartbeat for that long drops its partitions itself."""
UNKNOWN_SESSION_S = 10.0
"""The session time-out assumed for a member whose join the gateway did not see: the shortest default
among the client libraries (kafka-python and aiokafka: 10 s; librdkafka 45 s, kafkajs 30 s)."""
KIP848_HEARTBEAT_S = 5.0
"""The heartbeat interval a broker gives members of the consumer protocol (KIP-848) by default.
librdkafka times a ConsumerGroupHeartbeat out after it, and with it everything in flight on the
coordinator's connection — a commit held before the heartbeat fails to the application (``_TIMED_OUT``).
Such a member's requests are held as an unseen member's, a third of ``UNKNOWN_SESSION_S``, well within
it: held 10 s (by the broker's 45 s session, tried once), a chaos run's KIP-848 consumer had two
commits time out through a 24 s block and processed four records again."""


def hold_limit(request: Request, most_s: float, session_s: float | None = None) -> float:
    """How long ``request`` may be held: ``most_s`` (``gateway.block_hold_s``), less for a Produce whose
    time-out is short, no longer than a Fetch's own wait (an empty answer is what it asked for after
    that), and well within the session time-out for a group request (``session_s``: its member's, as
    the gateway saw it join)."""
    body = request.body
    key = request.api_key
    if key == apis.PRODUCE:
        return min(most_s, float(body.timeout.total_seconds()) * SHARE_OF_CLIENT_TIMEOUT)
    if key == apis.FETCH:
        return min(most_s, float(body.max_wait.total_seconds()))
    if key in apis.GROUP_APIS:
        if key == apis.JOIN_GROUP:
            session_s = float(body.session_timeout.total_seconds())
        return min(most_s, (session_s or UNKNOWN_SESSION_S) * SHARE_OF_SESSION)
    return most_s


class RoutingChanges:
    """Wakes whoever waits for a routing snapshot newer than the one it decided with."""

    def __init__(self, current: Callable[[], RoutingSnapshot]) -> None:
        self._current = current
        self._changed = asyncio.Event()

    def publish(self) -> None:
        """A new snapshot is current (called on the event loop)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def after(
        self, seen: RoutingSnapshot, timeout_s: float, stop: asyncio.Event | None = None
    ) -> RoutingSnapshot:
        """The current snapshot once it is not ``seen``, or after ``timeout_s`` (or once ``stop`` is set)
        whatever it is."""
        if self._current() is not seen or timeout_s <= 0:
            return self._current()
        waits = [asyncio.ensure_future(self._changed.wait())]
        if stop is not None:
            waits.append(asyncio.ensure_future(stop.wait()))
        try:
            await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return self._current()
