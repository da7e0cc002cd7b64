"""Compensations: what undoes each step, registered before the step runs, run in reverse, shielded.

A compensation is registered *before* its step, because a step may take effect although its answer
is lost (the worker dies right after the write); every compensation is idempotent, so running one
for a step that never happened changes nothing. They run in reverse order, each to the end even when
the saga is being cancelled, and a compensation that fails does not stop the ones after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Undo = Callable[[], Awaitable[Any]]


@dataclass
class Compensations:
    _undo: list[tuple[str, Undo]] = field(default_factory=list)

    def add(self, name: str, undo: Undo) -> None:
        self._undo.append((name, undo))

    def replace(self, name: str, undo: Undo) -> None:
        """Register ``undo`` for ``name`` anew (what a step's result says it must undo)."""
        self._undo = [(n, undo if n == name else u) for n, u in self._undo]

    async def run(self) -> list[tuple[str, Any]]:
        """Run every compensation, newest first; each one's result, or the exception it raised."""
        return await asyncio.shield(asyncio.ensure_future(self._run()))

    async def _run(self) -> list[tuple[str, Any]]:
        done: list[tuple[str, Any]] = []
        for name, undo in reversed(self._undo):
            try:
                done.append((name, await undo()))
            except Exception as exc:  # the others still run; the caller reports it
                done.append((name, exc))
        self._undo.clear()
        return done
