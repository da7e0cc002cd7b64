"""Each cluster's own topic ids, for a consumer-protocol heartbeat's owned partitions and assignment."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterable

import pytest

from workers.gateway.brokers import real_ids
from workers.gateway.brokers.real_ids import RealIds
from workers.gateway.brokers.topic_identity import topic_id

A, B = uuid.uuid4(), uuid.uuid4()


class Cluster:
    """What a cluster answers when asked for all its topics; how often it was asked."""

    def __init__(self, topics: dict[str, uuid.UUID]) -> None:
        self.topics, self.asked = topics, 0

    async def __call__(self, cluster: str) -> Iterable[tuple[str, uuid.UUID]]:
        self.asked += 1
        await asyncio.sleep(0.01)
        return list(self.topics.items())


def test_ids_learnt_from_metadata_are_mapped_both_ways_without_asking() -> None:
    cluster = Cluster({})
    ids = RealIds(cluster)
    ids.learn("primary", [("orders", A), (None, B), ("empty", uuid.UUID(int=0))])

    async def both() -> tuple[uuid.UUID | None, uuid.UUID | None]:
        return await ids.real("primary", topic_id("orders")), await ids.presented("primary", A)

    assert asyncio.run(both()) == (A, topic_id("orders"))
    assert cluster.asked == 0


def test_a_miss_asks_the_cluster_once_for_all_who_miss_and_not_again_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Cluster({"orders": A})
    ids = RealIds(cluster)

    async def misses() -> list[uuid.UUID | None]:
        found = await asyncio.gather(*(ids.real("primary", topic_id("orders")) for _ in range(5)))
        found.append(await ids.real("primary", topic_id("nothing")))  # asked just now: not again
        return found

    assert asyncio.run(misses()) == [A] * 5 + [None]
    assert cluster.asked == 1
    monkeypatch.setattr(real_ids, "ASK_AGAIN_S", 0.0)
    assert asyncio.run(ids.real("primary", topic_id("nothing"))) is None
    assert cluster.asked == 2


def test_a_topic_deleted_and_created_again_is_known_by_its_new_id_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(real_ids, "ASK_AGAIN_S", 0.0)
    cluster = Cluster({"orders": B})
    ids = RealIds(cluster)
    ids.learn("primary", [("orders", A), ("gone", A)])
    assert (
        asyncio.run(ids.presented("primary", uuid.uuid4())) is None
    )  # a miss: the cluster's answer replaces
    assert asyncio.run(ids.real("primary", topic_id("orders"))) == B
    assert asyncio.run(ids.presented("primary", A)) is None


def test_a_cluster_that_cannot_be_asked_names_nothing() -> None:
    async def down(cluster: str) -> Iterable[tuple[str, uuid.UUID]]:
        raise ConnectionError("refused")

    assert asyncio.run(RealIds(down).real("primary", topic_id("orders"))) is None
