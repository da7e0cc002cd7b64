"""A gateway's usage report in ZooKeeper: written as soon as a client uses something new, so that a
switch planned a moment later knows every topic its application writes (one it did not know was split
off the application's link, and the application's writes to it were refused on the target)."""

from __future__ import annotations

import asyncio
import time

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from switchyard.identity import Identity
from switchyard.routing.layout import Layout
from switchyard.usage import decode
from workers.gateway.process.publishing import Publisher
from workers.gateway.process.usage import UsageTracker
from workers.gateway.producers.acked import AckedEnds
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context

WEEK_S = 7 * 24 * 3600.0
HOUR_S = 3600.0


def test_a_new_sighting_is_written_at_once_and_more_no_sooner_than_usage_publish_s(
    zk: KazooClient, zk_root: str
) -> None:
    """With ``gateway.usage_publish_s`` an hour: the first topic a client writes is in the report within
    seconds (it waited for the next look, up to the whole interval, before); a second, right after,
    waits for the interval — or for a routing change's acknowledgement, which writes what is new."""
    layout = Layout(zk_root)
    usage = UsageTracker(WEEK_S)
    publisher = Publisher(zk, layout, "gw-test", usage, AckedEnds(), HOUR_S)
    node = layout.usage("gw-test")
    shop = Identity("shop", "i-1")

    def report() -> tuple[set[str], int]:
        """The topics the report names, and how often it was written (0: not yet)."""
        try:
            data, stat = zk.get(node)
        except NoNodeError:
            return set(), 0
        return {u.topic for u in decode(data)}, stat.version + 1

    async def scenario() -> None:
        running = asyncio.create_task(publisher.run())
        try:
            usage.note(shop, apis.PRODUCE, Context(topics=("orders",)))
            deadline = time.monotonic() + 10
            while (await asyncio.to_thread(report))[1] == 0:
                assert time.monotonic() < deadline, "the first sighting was not written within 10 s"
                await asyncio.sleep(0.05)
            assert await asyncio.to_thread(report) == ({"orders"}, 1)

            usage.note(shop, apis.PRODUCE, Context(topics=("orders", "receipts")))
            usage.note(shop, apis.FETCH, Context(topics=("orders",)))
            await asyncio.sleep(1)
            assert await asyncio.to_thread(report) == ({"orders"}, 1), "written again within the interval"

            await publisher.publish_usage(new_only=True)  # what an acknowledgement of an epoch does first
            assert await asyncio.to_thread(report) == ({"orders", "receipts"}, 2)
        finally:
            running.cancel()

    asyncio.run(scenario())
