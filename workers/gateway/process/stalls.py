"""Where an answer that is long in coming waits, for the log.

A connection's answers are written in request order, so one answer that does not come holds back every
answer behind it, then the reading of the connection (``ClientSession._room``): its client's requests
age unread, time out, are sent again, and a producer that is not idempotent writes both copies once the
connection moves again (CI saw 855 records of one kafkajs connection written twice, all answered at once
after ~80 s, with nothing in the gateway's log). Nothing the gateway holds on purpose waits that long
(a held request at most ``gateway.block_hold_s``), so such a wait is a defect or a stalled broker, and
the log says which await it is stuck in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from switchyard.frames.protocol import Request, api_name
from workers.gateway.routing import apis

REPORT_AFTER_S = 20.0
"""An answer awaited longer than this is reported: twice the longest hold, and shorter than the 30 s
request time-out of the Java client and kafkajs, after which they send a request again."""
_DEPTH = 24


@dataclass(frozen=True)
class Waiting:
    """A connection's reader or writer waiting, on ``on``, over ``request``."""

    request: Request
    on: Awaitable[Any]
    since: float = field(default_factory=time.perf_counter)

    def report(self, stage: str, now: float) -> str | None:
        """What to log of it at ``now`` (``time.perf_counter``), if it is long (long polls wait on
        purpose); None: not (yet)."""
        waited = now - self.since
        if waited <= REPORT_AFTER_S or self.request.api_key in apis.LONG_POLLS:
            return None
        request = self.request
        what = f"{api_name(request.api_key)} (correlation id {request.correlation_id})"
        return f"{stage} {what} for {waited:.0f} s; waiting in {waiting_in(self.on)}"


def waiting_in(awaitable: Awaitable[Any]) -> str:
    """The chain of awaits ``awaitable`` is suspended in, outermost first (``function:line`` each), down
    to what it waits on at the bottom (a future, a sleep)."""
    steps: list[str] = []
    current: Any = awaitable
    for _ in range(_DEPTH):
        if isinstance(current, asyncio.Task):
            current = current.get_coro()
            continue
        frame = getattr(current, "cr_frame", None) or getattr(current, "gi_frame", None)
        if frame is None:
            steps.append(_named(current))
            break
        steps.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        current = getattr(current, "cr_await", None) or getattr(current, "gi_yieldfrom", None)
        if current is None:
            break
    return " > ".join(steps)


def _named(thing: Any) -> str:
    if isinstance(thing, asyncio.Future):
        return f"{type(thing).__name__}({'done' if thing.done() else 'pending'})"
    return type(thing).__name__
