"""Which groups have members of the consumer protocol (KIP-848), kept in ZooKeeper
(``consumer-groups/g-<group>``) for every process of every gateway.

A blocked group's coordinator is not found while it is blocked if it is such a group
(``decision.Action.UNFOUND``): librdkafka's member then keeps its commit until the flip. A process
learns a group's protocol from its members' heartbeats, which go over the coordinator's connection;
librdkafka looks the coordinator up over any of its connections, and in a gateway of several processes
that is another process half the time. Known in one process only, the lookup was forwarded there, the
coordinator found, and the commit sent into the block again.

A node (its name the group's, URL-quoted) is written when a process first sees a member of the group
join or heartbeat, and again once a day while it does; nodes untouched for ``STALE_S`` are removed by
:meth:`ConsumerGroups.prune`. A group not found, or that ZooKeeper could not be asked about, is taken
for a classic one for ``_ABSENT_FOR_S`` before it is asked again: a lookup waits on ZooKeeper at most
once in that time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError

from switchyard.routing.layout import Layout
from workers.gateway.producers.store import prune_leaves

log = logging.getLogger(__name__)
STALE_S = 7 * 24 * 3600.0
"""A group's committed offsets outlive its last member by a week (``offsets.retention.minutes``)."""
_TOUCH_EVERY_S = 24 * 3600.0
_RETRY_WRITE_S = 60.0
"""A write that failed is made again at a heartbeat this much later (the group stays known here)."""
_ABSENT_FOR_S = 2.0
"""How long a group not found in ZooKeeper is taken for a classic one before it is asked again."""
_ASK_WITHIN_S = 1.0
_REMEMBERED = 100_000


class ConsumerGroups:
    def __init__(self, zk: KazooClient, layout: Layout) -> None:
        self.zk, self.layout = zk, layout
        self._known: dict[str, float] = {}
        """Groups known to be of the consumer protocol, and when each was last written."""
        self._absent: dict[str, float] = {}
        """Groups asked of ZooKeeper and not found there, and when."""
        self._writing: set[asyncio.Task[None]] = set()

    def note(self, group: str) -> None:
        """A member of the consumer protocol joins or heartbeats in ``group`` through this process (on
        the event loop)."""
        now = time.monotonic()
        written = self._known.get(group)
        due = written is None or now - written > _TOUCH_EVERY_S
        self._remember(self._known, group, now if written is None or due else written)
        self._absent.pop(group, None)
        if due:
            task = asyncio.ensure_future(self._write(group))
            self._writing.add(task)
            task.add_done_callback(self._writing.discard)

    async def of_consumer_protocol(self, group: str) -> bool:
        """Whether ``group`` has members of the consumer protocol, as this process or another saw; False
        where ZooKeeper cannot say within ``_ASK_WITHIN_S`` (the lookup is forwarded, as before)."""
        if group in self._known:
            return True
        asked = self._absent.get(group)
        if asked is not None and time.monotonic() - asked < _ABSENT_FOR_S:
            return False
        try:
            found = await asyncio.wait_for(
                asyncio.to_thread(self.zk.exists, self._path(group)), _ASK_WITHIN_S
            )
        except (KazooException, TimeoutError):
            found = None
        if found is None:
            self._remember(self._absent, group, time.monotonic())
            return False
        self._remember(self._known, group, time.monotonic())  # another's: not written from here soon
        return True

    def prune(self, older_than_s: float = STALE_S) -> int:
        """Remove the groups untouched for ``older_than_s``; how many."""
        return prune_leaves(self.zk, self.layout.folder("consumer-groups"), older_than_s)

    async def _write(self, group: str) -> None:
        path = self._path(group)

        def write() -> None:
            try:
                self.zk.create(path, b"", makepath=True)
            except NodeExistsError:
                self.zk.set(path, b"")  # touched: not pruned while the group lives

        try:
            await asyncio.to_thread(write)
        except KazooException as exc:  # known in this process, written again at a heartbeat later
            self._known[group] = time.monotonic() - _TOUCH_EVERY_S + _RETRY_WRITE_S
            log.warning("group %s: not stored as one of the consumer protocol: %r", group, exc)

    @staticmethod
    def _remember(table: dict[str, float], group: str, at: float) -> None:
        """Set ``group``'s time in ``table``, the oldest entries dropped past a bound."""
        table.pop(group, None)
        table[group] = at
        while len(table) > _REMEMBERED:
            del table[next(iter(table))]

    def _path(self, group: str) -> str:
        return f"{self.layout.folder('consumer-groups')}/g-{quote(group, safe='')}"
