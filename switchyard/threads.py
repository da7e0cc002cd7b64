"""Threads whose failures reach whoever waits for them: what a thread raised is raised again from
``join`` (a test's assertion in a client thread fails the test; the demo reports it), or from the
results of work done at once (a saga step's reads of several groups or clusters while clients are held).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

A = TypeVar("A")
R = TypeVar("R")
_MOST = 8
"""Threads of one ``at_once`` at most: each waits on a broker, and a few hundred groups need not be
asked all at the same instant."""


class Worker(threading.Thread):
    """A thread that keeps what its target raised and raises it again from :meth:`join`."""

    def __init__(self, target: Callable[..., Any], *args: Any, name: str | None = None) -> None:
        super().__init__(target=target, args=args, name=name, daemon=True)
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            super().run()
        except BaseException as exc:
            self.error = exc

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.is_alive():
            raise TimeoutError(f"thread {self.name} still running after {timeout}s")
        if self.error is not None:
            raise self.error


def at_once(work: Callable[[A], R], items: Iterable[A]) -> list[R]:
    """``work`` on every item, on threads, each in a copy of the caller's context (an activity's, whose
    heartbeats and info it reads); the results in the items' order, or the first item's failure raised
    once all are done."""
    items = list(items)
    if len(items) < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(min(_MOST, len(items)), thread_name_prefix="at-once") as pool:
        futures = [pool.submit(contextvars.copy_context().run, work, item) for item in items]
    return [future.result() for future in futures]
