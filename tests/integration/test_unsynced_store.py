"""Members whose sync was refused, kept in ZooKeeper: the generation one gateway process saw refused,
another answers for (a client's join and its old membership's commit go over different connections, which
land on any process of a gateway)."""

from __future__ import annotations

import asyncio
import time

from kazoo.client import KazooClient

from switchyard.routing.layout import Layout
from workers.gateway.groups import unsynced
from workers.gateway.groups.unsynced import UnsyncedMembers


def test_a_refusal_one_process_saw_is_known_to_another(zk: KazooClient, zk_root: str) -> None:
    async def run() -> None:
        seen, other = UnsyncedMembers(zk, Layout(zk_root)), UnsyncedMembers(zk, Layout(zk_root))
        assert await other.generation("standby", "orders/é 1", "app@c-1") is None
        seen.refused("standby", "orders/é 1", "app@c-1", 24)
        assert await seen.generation("standby", "orders/é 1", "app@c-1") == 24  # at once, here
        await asyncio.gather(*seen._writing)
        assert await other.generation("standby", "orders/é 1", "app@c-1") == 24
        assert await other.generation("primary", "orders/é 1", "app@c-1") is None  # another cluster's
        other.refused("standby", "orders/é 1", "app@c-1", 26)  # refused again, later, through the other
        await asyncio.gather(*other._writing)
        assert await seen.generation("standby", "orders/é 1", "app@c-1") == 26  # the later one
        other.synced("standby", "orders/é 1", "app@c-1")  # answered since, where its refusal was kept
        await asyncio.gather(*other._writing)
        assert await seen.generation("standby", "orders/é 1", "app@c-1") == 24  # what it saw itself
        assert (
            await UnsyncedMembers(zk, Layout(zk_root)).generation("standby", "orders/é 1", "app@c-1") is None
        )

    asyncio.run(run())


def test_a_store_whose_zookeeper_cannot_be_asked_knows_its_own_and_says_none_at_once(zk_root: str) -> None:
    """Where ZooKeeper does not answer, a refusal this process saw is known all the same, and another is
    not waited for: the commit is answered the retriable error, as before the store."""
    unreachable = KazooClient(hosts="127.0.0.1:9", timeout=1.0)

    async def run() -> float:
        store = UnsyncedMembers(unreachable, Layout(zk_root))
        store.refused("standby", "orders", "app@c-1", 7)
        await asyncio.gather(*store._writing)
        assert await store.generation("standby", "orders", "app@c-1") == 7
        began = time.monotonic()
        assert await store.generation("standby", "orders", "app@c-2") is None
        return time.monotonic() - began

    assert asyncio.run(run()) < unsynced._ASK_WITHIN_S + 0.5


def test_refusals_untouched_for_long_are_pruned(zk: KazooClient, zk_root: str) -> None:
    async def run() -> None:
        store = UnsyncedMembers(zk, Layout(zk_root))
        store.refused("standby", "orders", "app@c-1", 3)
        await asyncio.gather(*store._writing)

    asyncio.run(run())
    store = UnsyncedMembers(zk, Layout(zk_root))
    assert store.prune(older_than_s=3600) == 0
    time.sleep(1.1)
    assert store.prune(older_than_s=1) == 1  # the member's node; its group's and cluster's go later
    assert asyncio.run(store.generation("standby", "orders", "app@c-1")) is None
