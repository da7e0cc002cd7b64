"""Where a wait's time went, by part: a slow step that says which of its reads held it can be acted on
(a switch's drain held clients 20 s after a broker was killed, and its log did not say on what)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator


class Stopwatch:
    """Seconds since it was made, and those spent in each named part (``part``)."""

    def __init__(self) -> None:
        self.began = time.monotonic()
        self.parts: dict[str, float] = {}

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.parts[name] = self.parts.get(name, 0.0) + time.monotonic() - began

    def total(self) -> float:
        return time.monotonic() - self.began

    def __str__(self) -> str:
        parts = ", ".join(f"{name} {s:.1f} s" for name, s in sorted(self.parts.items(), key=lambda p: -p[1]))
        return f"{self.total():.1f} s: {parts}" if parts else f"{self.total():.1f} s"
