"""What a gateway tells sagas through ZooKeeper besides its acknowledged epoch: what its clients used, and
how far their writes were acknowledged per partition. Both nodes are persistent, and a gateway takes up
its own again when it restarts: a plan counts an application idle since its gateway restarted as a user
of its topics, and a fault migration chooses its end offset after the gateway is gone."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import zlib

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from switchyard.acked import decode as decode_acked
from switchyard.acked import encode as encode_acked
from switchyard.routing.layout import Layout
from switchyard.usage import decode, encode
from workers.gateway.process.usage import UsageTracker
from workers.gateway.producers.acked import AckedEnds

log = logging.getLogger(__name__)
USAGE_REFRESH_S = 30.0
"""Published this often anyway, so that its last-seen times move on (the window is days)."""
ACKED_EVERY_S = 2.0
"""How often the acknowledged ends are written when they changed (a fault migration's ``fault_margin``
covers what this leaves unpublished)."""


class Publisher:
    def __init__(  # noqa: PLR0917 - the gateway's parts it publishes
        self, zk: KazooClient, layout: Layout, gateway_id: str, usage: UsageTracker, acked: AckedEnds,
        every_s: float,
    ) -> None:  # fmt: skip
        self.zk, self.layout, self.id = zk, layout, gateway_id
        self.usage, self.acked = usage, acked
        self.every_s = every_s
        """The least time between two usage reports (``gateway.usage_publish_s``)."""
        self._acked_lock = asyncio.Lock()
        self._usage_lock = asyncio.Lock()
        self._published: set[tuple[str, str | None, str, str, str | None]] = set()
        self._published_at = -math.inf  # monotonic time counts from boot: never is before any of it
        self._new = asyncio.Event()
        usage.on_new = self._new.set

    async def run(self) -> None:
        async with asyncio.TaskGroup() as both:  # one that ends by an error ends the other
            both.create_task(self._publish_usage())
            both.create_task(self._publish_acked())

    async def _publish_usage(self) -> None:
        """What the clients used, soon after they use something new: a plan that read the report before
        a topic's first write was in it split that topic off its application's link, and the
        application's writes to it were refused on the target. At once, unless the last report is
        younger than ``every_s``; and every ``USAGE_REFRESH_S`` anyway."""
        failures = 0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._new.wait(), USAGE_REFRESH_S)
            await asyncio.sleep(max(0.0, self._published_at + self.every_s - time.monotonic()))
            self._new.clear()
            try:
                await self.publish_usage()
                failures = 0
            except Exception:
                failures += 1
                if failures == 1 or failures % 10 == 0:
                    log.warning("gateway %s: usage not published (%d tries)", self.id, failures,
                                exc_info=True)  # fmt: skip
                self._new.set()  # tried again, less often while ZooKeeper stays away
                await asyncio.sleep(min(self.every_s * 2**failures, USAGE_REFRESH_S))

    async def _publish_acked(self) -> None:
        while True:
            await asyncio.sleep(ACKED_EVERY_S)
            try:
                await self.publish_acked()
            except Exception:
                log.warning("gateway %s: acknowledged ends not published", self.id, exc_info=True)

    async def publish_usage(self, *, new_only: bool = False) -> None:
        """What the clients used, if something is new since the last report or (unless ``new_only``: a
        routing change waits for this) the report is due its refresh."""
        async with self._usage_lock:  # one write at a time: a later one never carries older uses
            uses = self.usage.uses()
            seen = {use.key for use in uses}
            due = not new_only and time.monotonic() - self._published_at >= USAGE_REFRESH_S
            if seen == self._published and not due:
                return
            data = await asyncio.to_thread(encode, uses)  # off the loop: thousands of rows
            await asyncio.to_thread(self._write, self.layout.usage(self.id), data)
            self._published, self._published_at = seen, time.monotonic()

    async def publish_acked(self) -> None:
        """How far each partition's writes were acknowledged, if it changed: every few seconds, and before
        each epoch is acknowledged, so a saga that waited for the acknowledgements reads it whole (a
        smooth migration's end must reach it: acks=1 writes may run ahead of the high watermark)."""
        async with self._acked_lock:  # one write at a time: a later one never carries older ends
            if not self.acked.changed:
                return
            self.acked.changed = False
            try:
                await asyncio.to_thread(
                    self._write, self.layout.acked(self.id), encode_acked(self.acked.ends)
                )
            except BaseException:
                self.acked.changed = True
                raise

    def recall(self) -> None:
        """What this gateway published before a restart: the next publications start from it, so a
        restart never lowers the ends a fault migration chooses its end offset from, nor forgets who
        used which topics."""

        def acked_ends(data: bytes) -> None:
            self.acked.ends.update(decode_acked(data))

        def usage(data: bytes) -> None:
            self.usage.recall(decode(data))

        for what, path, take in (
            ("acknowledged ends", self.layout.acked(self.id), acked_ends),
            ("usage", self.layout.usage(self.id), usage),
        ):
            try:
                data, _ = self.zk.get(path)
                take(data)
            except NoNodeError:
                pass
            # unreadable: published afresh. (ZooKeeper out of reach is not caught: the start fails,
            # rather than overwrite what it could not read.)
            except (ValueError, TypeError, KeyError, AttributeError, zlib.error) as exc:
                log.warning(
                    "gateway %s: its published %s are unreadable (%r); starting afresh", self.id, what, exc
                )

    def _write(self, path: str, data: bytes) -> None:
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, makepath=True)
