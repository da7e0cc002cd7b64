"""Threads whose failures reach whoever waits for them: what a thread raised is raised again from
``join`` (a test's assertion in a client thread fails the test; the demo reports it)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


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
