"""The id a gateway writes a producer's batches to migrated partitions as, shared by its processes
through the store (a stand-in for ZooKeeper's compare-and-set here; the real one in
tests/integration/test_producer_routes.py)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from kazoo.exceptions import KazooException

from switchyard.identity import Identity
from workers.gateway.migrated.moved import Moved
from workers.gateway.producers.translation import Origin, ProducerRoute, Translation

CLIENT = Identity("app")
ORIGIN = Origin("primary", 7)
KEY = (CLIENT, 7, "standby", "primary")


class Store:
    """Nodes by path, written at a version; ``failing`` saves raise as ZooKeeper out of reach does."""

    def __init__(self) -> None:
        self.nodes: dict[Any, tuple[ProducerRoute, int]] = {}
        self.failing = 0

    def load(
        self, identity: Identity, producer_id: int, migrated: Any = None
    ) -> tuple[ProducerRoute | None, int]:
        route, version = self.nodes.get((identity, producer_id, migrated), (None, -1))
        return route, version

    def save(
        self, identity: Identity, producer_id: int, route: ProducerRoute, version: int, migrated: Any = None
    ) -> bool:
        if self.failing:
            self.failing -= 1
            raise KazooException("out of reach")
        path = (identity, producer_id, migrated)
        if self.nodes.get(path, (None, -1))[1] != version:
            return False
        self.nodes[path] = (route, version + 1)
        return True


def process(store: Store, ids: itertools.count[int]) -> Moved:
    async def taken(_: str) -> Translation:
        return Translation(next(ids), 0)

    async def no_metadata(*_: Any) -> Any:
        raise AssertionError("not asked")

    return Moved(no_metadata, taken, store)  # type: ignore[arg-type]


def test_a_second_process_writes_as_the_id_the_first_took() -> None:
    store, ids = Store(), itertools.count(100)
    first, second = process(store, ids), process(store, ids)

    async def both() -> tuple[Translation, Translation]:
        one = await first.translation(CLIENT, 7, "standby", ORIGIN)
        one.first_sequence[("t", 0)] = 17
        await first.remember(KEY, one)
        return one, await second.translation(CLIENT, 7, "standby", ORIGIN)

    one, two = asyncio.run(both())
    assert (one.producer_id, two.producer_id) == (100, 100)
    assert two.first_sequence == {("t", 0): 17}
    assert two.origin == ORIGIN


def test_a_process_whose_id_was_never_stored_takes_the_stored_one() -> None:
    """ZooKeeper out of reach as the first process stored its id: it wrote as it, known to it alone;
    another took and stored its own. At its next start to store, the first takes the stored id."""
    store, ids = Store(), itertools.count(100)
    first, second = process(store, ids), process(store, ids)

    async def run() -> tuple[Translation, Translation, Translation]:
        store.failing = 1
        mine = await first.translation(CLIENT, 7, "standby", ORIGIN)
        theirs = await second.translation(CLIENT, 7, "standby", ORIGIN)
        mine.first_sequence[("t", 0)] = 17
        adopted = await first.remember(KEY, mine)
        return mine, theirs, adopted

    mine, theirs, adopted = asyncio.run(run())
    assert (mine.producer_id, theirs.producer_id) == (100, 101)
    assert adopted is not mine
    assert adopted.producer_id == 101
    assert asyncio.run(first.translation(CLIENT, 7, "standby", ORIGIN)).producer_id == 101
