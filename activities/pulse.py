"""A step's heartbeat, sent for it every second while it runs, so Temporal notices a dead worker in
seconds and gives the step to another — while a slow call of a live worker (an admin request, a read
to a log end) never looks like a dead one.

A step's own code says how it is getting on with :func:`beat`; the pulse sends the latest of those
details each time, so the Web UI shows the step's progress rather than an empty heartbeat. A hung
call is bounded by the step's start-to-close time, never by the heartbeat.

A local activity (the steps run while clients are held) has no heartbeat: Temporal's core answers each
one with a warning ("Activity heartbeat failed … UnknownActivity"), twice a second into the worker's
log. Its worker's death ends its workflow task instead, so neither pulse nor beat sends one.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio import activity

EVERY_S = 1.0
"""Well inside the shortest heartbeat time-out a saga gives a step (see ``workflows/base.py``)."""

_current: contextvars.ContextVar[_Pulse | None] = contextvars.ContextVar("pulse", default=None)


class _Pulse:
    def __init__(self) -> None:
        self.details: tuple[Any, ...] = ()
        self.stopped = threading.Event()


@contextmanager
def pulsing() -> Iterator[None]:
    """Heartbeat the current activity every :data:`EVERY_S` until the block ends (a local one: never)."""
    if activity.info().is_local:
        yield
        return
    pulse = _Pulse()
    token = _current.set(pulse)
    context = contextvars.copy_context()  # the activity's context, for the heartbeats sent from the thread

    def send() -> None:
        while not pulse.stopped.wait(EVERY_S):
            context.run(activity.heartbeat, *pulse.details)

    sender = threading.Thread(target=send, name="step-pulse", daemon=True)
    activity.heartbeat()
    sender.start()
    try:
        yield
    finally:
        pulse.stopped.set()
        _current.reset(token)
        sender.join()


def beat(*details: Any) -> None:
    """Say how the step is getting on: sent now, and with every pulse after until the next ``beat``."""
    pulse = _current.get()
    if pulse is not None:
        pulse.details = details
    if not activity.info().is_local:
        activity.heartbeat(*details)
