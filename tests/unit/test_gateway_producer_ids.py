"""Which translation a client's idempotent producer writes with: one per process, whatever the store says
meanwhile. Two copies would each start a partition's sequences at 0 — and the cluster takes the second
batch at sequence 0 for a duplicate of the first, acknowledging it without writing it."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any, cast

from switchyard.identity import Identity
from workers.gateway.producers.ids import ProducerIds
from workers.gateway.producers.store import ProducerStore, decode, encode
from workers.gateway.producers.translation import ProducerRoute, Translation

APP = Identity("payments")
CLIENT_ID = 7
T0 = ("orders", 0)


class MemoryStore:
    """The store's contract (a versioned node per producer, encoded as in ZooKeeper): each load
    decodes a fresh copy, as a read from ZooKeeper does."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[Identity, int], tuple[bytes, int]] = {}
        self._lock = threading.Lock()

    def load(
        self, identity: Identity, producer_id: int, migrated: object = None
    ) -> tuple[ProducerRoute | None, int]:
        assert migrated is None  # a producer's own route only
        with self._lock:
            found = self.nodes.get((identity, producer_id))
        return (None, -1) if found is None else (decode(found[0]), found[1])

    def save(
        self,
        identity: Identity,
        producer_id: int,
        route: ProducerRoute,
        version: int,
        migrated: object = None,
    ) -> bool:
        assert migrated is None
        with self._lock:
            current = self.nodes.get((identity, producer_id))
            if (current[1] if current else -1) != version:
                return False
            self.nodes[(identity, producer_id)] = (encode(route), version + 1)
            return True

    def stored(self) -> ProducerRoute | None:
        return self.load(APP, CLIENT_ID)[0]


_ids = itertools.count(1000)


def gateway(store: MemoryStore) -> ProducerIds:
    ids = ProducerIds(cast(Any, None), cast(ProducerStore, store))

    async def take(cluster: str) -> Translation:
        await asyncio.sleep(0.01)  # an InitProducerId round trip
        return Translation(next(_ids), 0)

    ids.take = take  # type: ignore[method-assign]
    return ids


def issued_on_primary(store: MemoryStore) -> None:
    assert store.save(APP, CLIENT_ID, ProducerRoute("primary", None), -1)


def test_requests_moving_a_producer_at_once_share_one_translation() -> None:
    store = MemoryStore()
    issued_on_primary(store)
    ids = gateway(store)

    async def run() -> tuple[Translation | None, ...]:
        return tuple(await asyncio.gather(*(ids.translation(APP, CLIENT_ID, "standby", 2) for _ in range(3))))

    first, *others = asyncio.run(run())
    assert first is not None
    assert all(other is first for other in others)
    stored = store.stored()
    assert stored is not None
    assert stored.cluster == "standby"
    assert stored.translation is not None
    assert stored.translation.producer_id == first.producer_id


def test_a_start_being_stored_survives_a_load_meanwhile() -> None:
    store = MemoryStore()
    issued_on_primary(store)
    ids = gateway(store)

    async def run() -> tuple[Translation, Translation, Translation]:
        moved = await ids.translation(APP, CLIENT_ID, "standby", 2)
        assert moved is not None
        moved.first_sequence[T0] = 500  # a first batch set it; not stored yet
        again = await ids.translation(APP, CLIENT_ID, "standby", 3)  # a newer routing epoch: read again
        assert again is not None
        return moved, again, await ids.remember(APP, CLIENT_ID, moved)

    moved, again, remembered = asyncio.run(run())
    assert again is moved
    assert again.first_sequence[T0] == 500
    assert remembered is moved
    stored = store.stored()
    assert stored is not None
    assert stored.translation is not None
    assert stored.translation.first_sequence == {T0: 500}


def test_another_gateways_stored_start_wins_and_is_merged_into_the_one_in_use() -> None:
    store = MemoryStore()
    issued_on_primary(store)
    ours, theirs = gateway(store), gateway(store)

    async def run() -> tuple[Translation, Translation]:
        mine = await ours.translation(APP, CLIENT_ID, "standby", 2)
        other = await theirs.translation(APP, CLIENT_ID, "standby", 2)
        assert mine is not None
        assert other is not None
        other.first_sequence[T0] = 510
        assert await theirs.remember(APP, CLIENT_ID, other) is other
        mine.first_sequence[T0] = 500
        mine.first_sequence[("orders", 1)] = 40
        return mine, await ours.remember(APP, CLIENT_ID, mine)

    mine, remembered = asyncio.run(run())
    assert remembered is mine
    assert mine.first_sequence == {T0: 510, ("orders", 1): 40}
    stored = store.stored()
    assert stored is not None
    assert stored.translation is not None
    assert stored.translation.first_sequence == {T0: 510, ("orders", 1): 40}
