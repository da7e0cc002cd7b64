"""A gateway reads a link's records as the snapshot that promotes it arrives, not at the first request.

The first commit carried over a promoted link comes within a second of the flip; read then, the map
topic took long enough for its client's join on another connection to enter the group first, and the
commit was refused (a chaos trial).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from switchyard.model import LinkState
from workers.gateway.routing.links import LinkLookup


def snapshot(*links: tuple[str, int, LinkState]) -> Any:
    found = {i: SimpleNamespace(id=i, epoch=e, state=s) for i, e, s in links}
    return SimpleNamespace(links=found)


def test_each_link_is_read_once_as_the_snapshot_that_promotes_it_arrives() -> None:
    async def run() -> list[tuple[str, int]]:
        lookup = LinkLookup(None, None, None)  # type: ignore[arg-type]
        read: list[tuple[str, int]] = []

        async def link_records(link: Any) -> None:
            read.append((link.id, link.epoch))
            if link.id == "bad":
                raise OSError("the map topic's cluster is down")

        lookup.link_records = link_records  # type: ignore[method-assign,assignment]
        lookup.read_ahead(snapshot(("old", 3, LinkState.PROMOTED), ("copying", 4, LinkState.RUNNING)))
        lookup.read_ahead(snapshot(("old", 3, LinkState.PROMOTED), ("copying", 5, LinkState.PROMOTED)))
        lookup.read_ahead(snapshot(("old", 3, LinkState.PROMOTED), ("copying", 5, LinkState.PROMOTED)))
        lookup.read_ahead(snapshot(("bad", 6, LinkState.PROMOTED)))  # a failed read is only logged
        await asyncio.sleep(0.05)
        return read

    # not the first snapshot's (a gateway starting reads a link as a request needs it), each once
    assert asyncio.run(run()) == [("copying", 5), ("bad", 6)]


def test_a_change_promoting_many_links_reads_two_at_a_time() -> None:
    async def run() -> int:
        lookup = LinkLookup(None, None, None)  # type: ignore[arg-type]
        reading, most = 0, 0

        async def link_records(link: Any) -> None:
            nonlocal reading, most
            reading += 1
            most = max(most, reading)
            await asyncio.sleep(0.02)
            reading -= 1

        lookup.link_records = link_records  # type: ignore[method-assign,assignment]
        lookup.read_ahead(snapshot())
        lookup.read_ahead(snapshot(*((f"l{n}", 1, LinkState.PROMOTED) for n in range(6))))
        await asyncio.sleep(0.2)
        return most

    assert asyncio.run(run()) == 2
