"""Requests on their way to a broker, and the routing epoch each is known to agree with.

The gateway acknowledges epoch E once no request in flight could still take effect the way an older
epoch routed it. So when E arrives, each request in flight is looked at again under E:

- routed the same way under E (another identity's change, or none that matters to it): it agrees
  with E already and is dated E — an unrelated client's slow request never holds a switch up;
- routed differently, and a long poll — a Fetch waiting up to its ``max_wait`` (kafkajs: 5 s; the
  protocol allows ~24 days), a JoinGroup or SyncGroup waiting for a rebalance: it is answered at once,
  as E would answer it (the retriable error of a blocked request), and what the broker answers later
  is dropped. Long polls change nothing the switch relies on: a Fetch only reads, and a join or sync
  on the cluster being left touches a group that is about to be abandoned there;
- routed differently, anything else (a Produce, an OffsetCommit): waited for, since it may still land
  — but not for ever. A healthy broker answers within the request's own wait (a Produce's time-out;
  most requests have none) and a little more; one that does not has stalled, and its client gives up
  on it too. Past that wait plus ``grace_s`` the gateway gives up (``Ticket.give_up``: the broker
  connection is closed, the request answered with the retriable error, which its client retries where
  it is routed now).

How long E takes to be acknowledged thus depends on the requests E moves, never on any client's
settings, and one stalled broker request holds it up for a bounded time only.

A request is in flight from the moment it is decided: the session starts its ticket with the snapshot
that decided it, in the same turn of the event loop, and a request that waits before it is sent (its
turn behind a held request, a coordinator's answer) is decided again if the snapshot moved on meanwhile.
A ticket that still starts under an epoch older than one already looked at (a split request, begun a
turn later) is looked at under that epoch at once, as if it had been in flight then: left dated with the
old one, a JoinGroup among them would hold every later acknowledgement until its rebalance ended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from switchyard.frames.protocol import api_name
from switchyard.routing.snapshot import RoutingSnapshot

log = logging.getLogger(__name__)

StillRouted = Callable[[RoutingSnapshot], bool]
"""Whether a newer snapshot still routes a request the way it was routed."""


MOST_OWN_WAIT_S = 30.0
"""The most of a request's own wait that is honoured: clients' request time-outs default to 30 s, and a
client asking a broker to wait ~24 days (the protocol allows it) must not hold a switch up that long."""


def own_wait_s(body: Any) -> float:
    """How long a broker may take over a request by the request's own word (a Produce's ``timeout``)."""
    timeout = getattr(body, "timeout", None)
    if not isinstance(timeout, timedelta):
        return 0.0
    return min(max(timeout.total_seconds(), 0.0), MOST_OWN_WAIT_S)


class Ticket:
    """One request in flight."""

    __slots__ = ("epoch", "give_up", "overdue_at", "still_routed", "superseded", "timer", "what")

    def __init__(
        self,
        epoch: int,
        still_routed: StillRouted,
        *,
        long_poll: bool,
        what: object,
        overdue_at: float,
        give_up: Callable[[], None] | None,
    ) -> None:
        self.epoch = epoch
        self.still_routed = still_routed
        self.what = what
        """What the request is, for the log when it holds an acknowledgement up (formatted only then)."""
        self.superseded: asyncio.Future[None] | None = (
            asyncio.get_running_loop().create_future() if long_poll else None
        )
        """Set when a newer epoch routes this long poll elsewhere: answer it now."""
        self.overdue_at = overdue_at
        """Loop time past which a broker that has not answered has stalled."""
        self.give_up = give_up
        """Stop waiting for the broker's answer (None: the request is bounded otherwise)."""
        self.timer: asyncio.TimerHandle | None = None


class InFlight:
    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._tickets: set[Ticket] = set()
        self._changed = asyncio.Event()
        self._latest: RoutingSnapshot | None = None
        """The newest snapshot the requests in flight were looked at under."""

    def start(
        self,
        epoch: int,
        still_routed: StillRouted,
        *,
        long_poll: bool = False,
        what: object = None,
        own_wait_s: float = 0.0,
        give_up: Callable[[], None] | None = None,
    ) -> Ticket:
        """A request decided under ``epoch``, about to be sent."""
        overdue_at = asyncio.get_running_loop().time() + own_wait_s + self.grace_s
        ticket = Ticket(
            epoch, still_routed, long_poll=long_poll, what=what, overdue_at=overdue_at, give_up=give_up
        )
        self._tickets.add(ticket)
        if self._latest is not None and epoch < self._latest.epoch:
            self._judge(ticket, self._latest)
        return ticket

    def finish(self, ticket: Ticket) -> None:
        if ticket.timer is not None:
            ticket.timer.cancel()
        self._tickets.discard(ticket)
        self._changed.set()

    def supersede(self, snapshot: RoutingSnapshot) -> int:
        """Date every request ``snapshot`` routes as before with its epoch; wake the long polls it
        routes elsewhere, and give the others until they are overdue. Return how many were woken."""
        if self._latest is None or snapshot.epoch > self._latest.epoch:
            self._latest = snapshot
        woken = sum(self._judge(t, snapshot) for t in list(self._tickets) if t.epoch < snapshot.epoch)
        self._changed.set()
        return woken

    def _judge(self, ticket: Ticket, snapshot: RoutingSnapshot) -> bool:
        """Look at ``ticket`` under ``snapshot``; whether that woke a long poll."""
        if ticket.still_routed(snapshot):
            ticket.epoch = snapshot.epoch
            if ticket.timer is not None:  # routed back (a switch abandoned): nothing to give up on
                ticket.timer.cancel()
                ticket.timer = None
        elif ticket.superseded is not None:
            if not ticket.superseded.done():
                ticket.superseded.set_result(None)
                return True
        elif ticket.give_up is not None and ticket.timer is None:
            loop = asyncio.get_running_loop()
            ticket.timer = loop.call_at(max(ticket.overdue_at, loop.time()), self._overdue, ticket)
        return False

    def _overdue(self, ticket: Ticket) -> None:
        ticket.timer = None
        if ticket in self._tickets and ticket.give_up is not None:
            log.warning(
                "gave up on %s: a newer epoch routes it elsewhere and the broker has not answered within "
                "the request's own wait + %.1fs; that broker connection is closed, the client answered the "
                "retriable error", describe(ticket.what), self.grace_s,
            )  # fmt: skip
            ticket.give_up()

    async def drained_before(self, epoch: int) -> None:
        """Until no request dated before ``epoch`` is still in flight."""
        while any(ticket.epoch < epoch for ticket in self._tickets):
            self._changed.clear()
            await self._changed.wait()

    def holding(self, epoch: int) -> list[object]:
        """What the requests dated before ``epoch`` are."""
        return [ticket.what for ticket in self._tickets if ticket.epoch < epoch]


def describe(what: object) -> str:
    """A request in flight, as the log shows it."""
    if isinstance(what, tuple) and len(what) == 4:
        key, identity, cluster, node = what
        return f"{api_name(key)} of {identity} to {cluster}" + (f" broker {node}" if node is not None else "")
    return str(what)
