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
- routed differently, anything else (a Produce, an OffsetCommit): waited for, since it may still land.

How long E takes to be acknowledged thus depends on the requests E moves, never on any client's
settings.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from switchyard.routing.snapshot import RoutingSnapshot

StillRouted = Callable[[RoutingSnapshot], bool]
"""Whether a newer snapshot still routes a request the way it was routed."""


class Ticket:
    """One request in flight."""

    __slots__ = ("epoch", "still_routed", "superseded", "what")

    def __init__(self, epoch: int, still_routed: StillRouted, *, long_poll: bool, what: object) -> None:
        self.epoch = epoch
        self.still_routed = still_routed
        self.what = what
        """What the request is, for the log when it holds an acknowledgement up (formatted only then)."""
        self.superseded: asyncio.Future[None] | None = (
            asyncio.get_running_loop().create_future() if long_poll else None
        )
        """Set when a newer epoch routes this long poll elsewhere: answer it now."""


class InFlight:
    def __init__(self) -> None:
        self._tickets: set[Ticket] = set()
        self._changed = asyncio.Event()

    def start(
        self, epoch: int, still_routed: StillRouted, *, long_poll: bool = False, what: object = None
    ) -> Ticket:
        ticket = Ticket(epoch, still_routed, long_poll=long_poll, what=what)
        self._tickets.add(ticket)
        return ticket

    def finish(self, ticket: Ticket) -> None:
        self._tickets.discard(ticket)
        self._changed.set()

    def supersede(self, snapshot: RoutingSnapshot) -> int:
        """Date every request ``snapshot`` routes as before with its epoch; wake the long polls it
        routes elsewhere. Return how many were woken."""
        woken = 0
        for ticket in list(self._tickets):
            if ticket.epoch >= snapshot.epoch:
                continue
            if ticket.still_routed(snapshot):
                ticket.epoch = snapshot.epoch
            elif ticket.superseded is not None and not ticket.superseded.done():
                ticket.superseded.set_result(None)
                woken += 1
        self._changed.set()
        return woken

    async def drained_before(self, epoch: int) -> None:
        """Until no request dated before ``epoch`` is still in flight."""
        while any(ticket.epoch < epoch for ticket in self._tickets):
            self._changed.clear()
            await self._changed.wait()

    def holding(self, epoch: int) -> list[object]:
        """What the requests dated before ``epoch`` are."""
        return [ticket.what for ticket in self._tickets if ticket.epoch < epoch]
