"""Which groups have members of the consumer protocol, kept in ZooKeeper: what one gateway process saw
join, another answers for (librdkafka looks its coordinator up over any of its connections, which land
on any process of a gateway)."""

from __future__ import annotations

import asyncio
import time

from kazoo.client import KazooClient

from switchyard.routing.layout import Layout
from workers.gateway.groups import protocols
from workers.gateway.groups.protocols import ConsumerGroups


def test_a_group_one_process_saw_join_is_one_of_the_consumer_protocol_for_another(
    zk: KazooClient, zk_root: str
) -> None:
    async def run() -> None:
        seen, other = ConsumerGroups(zk, Layout(zk_root)), ConsumerGroups(zk, Layout(zk_root))
        assert not await other.of_consumer_protocol("orders/é 1")  # nobody saw it: classic, as far as known
        seen.note("orders/é 1")
        assert await seen.of_consumer_protocol("orders/é 1")
        await asyncio.gather(*seen._writing)
        assert not await other.of_consumer_protocol("orders/é 1")  # its "not found" is kept a moment...
        await asyncio.sleep(protocols._ABSENT_FOR_S)
        assert await other.of_consumer_protocol("orders/é 1")  # ...then asked again
        assert not await other.of_consumer_protocol("audit")

    asyncio.run(run())


def test_a_store_whose_zookeeper_cannot_be_asked_says_no_at_once(zk_root: str) -> None:
    """Where ZooKeeper does not answer, the lookup is forwarded as before the store: never held up."""
    unreachable = KazooClient(hosts="127.0.0.1:9", timeout=1.0)

    async def run() -> float:
        began = time.monotonic()
        assert not await ConsumerGroups(unreachable, Layout(zk_root)).of_consumer_protocol("orders")
        return time.monotonic() - began

    assert asyncio.run(run()) < protocols._ASK_WITHIN_S + 0.5


def test_groups_untouched_for_long_are_pruned(zk: KazooClient, zk_root: str) -> None:
    async def run() -> None:
        store = ConsumerGroups(zk, Layout(zk_root))
        store.note("orders")
        await asyncio.gather(*store._writing)

    asyncio.run(run())
    store = ConsumerGroups(zk, Layout(zk_root))
    assert store.prune(older_than_s=3600) == 0
    time.sleep(1.1)
    assert store.prune(older_than_s=1) == 1


def test_a_group_stays_known_where_its_node_could_not_be_written(zk_root: str) -> None:
    """A member seen while ZooKeeper is out of reach: its group is of the consumer protocol in this process
    all the same (its lookups are not forwarded here), and written again at a later heartbeat."""
    unreachable = KazooClient(hosts="127.0.0.1:9", timeout=1.0)

    async def run() -> None:
        store = ConsumerGroups(unreachable, Layout(zk_root))
        store.note("orders")
        await asyncio.gather(*store._writing)
        assert await store.of_consumer_protocol("orders")

    asyncio.run(run())
