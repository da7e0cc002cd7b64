"""Lone members whose SyncGroup their group's coordinator refused, and at what generation, kept in
ZooKeeper (``unsynced/<cluster>/g-<group>/m-<member>``, the generation its data), written by the process
that relayed the refusal and read by every process of every gateway.

Such a member is still its client's in the group, but its client does not know it as the member of a
completed sync, and may first commit what its old membership processed: kafkajs commits as the member of
its last completed sync, and joins again only once that commit is answered. Carried to the group from
outside it, the commit is refused UNKNOWN_MEMBER_ID (the group has a member); sent as the unsynced member
at its generation, a group that has loaded it (Stable) or waits for its rejoin (PreparingRebalance) takes
it. kafkajs's commit of its old membership came over its connection to the old coordinator while its join
and refused sync had gone over its connection to the new one — through another process of the gateway:
told to send it again, it sent it as the old member once more, and the refusal reached it (a chaos trial:
a switchover whose target lost the group's coordinator). Read by ``GroupHandling`` when such a commit is
refused.

Only a group of one's syncs are kept (the commit is sent as the group's only member, whose the partitions
are then): one write per refusal, none in a rebalance of many members. A sync answered since, seen by the
process that kept its refusal, removes it; nodes untouched for ``STALE_S`` are removed by
:meth:`UnsyncedMembers.prune`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any
from urllib.parse import quote

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from switchyard.routing.layout import Layout
from workers.gateway.producers.store import prune_leaves

log = logging.getLogger(__name__)
STALE_S = 24 * 3600.0
"""A member that has not synced for a day has long been removed by its session time-out."""
_ASK_WITHIN_S = 1.0
_REMEMBERED = 10_000


class UnsyncedMembers:
    def __init__(self, zk: KazooClient, layout: Layout) -> None:
        self.zk, self.layout = zk, layout
        self._known: dict[tuple[str, str, str], int] = {}
        """Refusals this process saw: (cluster, group, member id) to generation."""
        self._writing: set[asyncio.Task[None]] = set()

    def refused(self, cluster: str, group: str, member_id: str, generation: int) -> None:
        """``cluster`` refused the SyncGroup of ``member_id``, its group's only member, at ``generation``
        (on the event loop)."""
        key = (cluster, group, member_id)
        self._known.pop(key, None)
        self._known[key] = generation
        while len(self._known) > _REMEMBERED:
            del self._known[next(iter(self._known))]
        self._start(self._write(key, generation))

    def synced(self, cluster: str, group: str, member_id: str) -> None:
        """``cluster`` answered a SyncGroup of ``member_id``: a refusal of it this process kept is gone."""
        key = (cluster, group, member_id)
        if self._known.pop(key, None) is not None:
            self._start(self._delete(key))

    async def generation(self, cluster: str, group: str, member_id: str) -> int | None:
        """The latest generation at which ``member_id``'s sync on ``cluster`` was refused, as this process
        or another saw; None if none was. What this process saw, where ZooKeeper cannot say within
        ``_ASK_WITHIN_S``."""
        key = (cluster, group, member_id)

        def read() -> bytes | None:
            try:
                return bytes(self.zk.get(self._path(key))[0])
            except NoNodeError:
                return None

        seen = [self._known[key]] if key in self._known else []
        try:
            data = await asyncio.wait_for(asyncio.to_thread(read), _ASK_WITHIN_S)
        except (KazooException, TimeoutError):
            data = None
        if data is not None and data.isdigit():  # else not one of ours: as if absent
            seen.append(int(data))
        return max(seen, default=None)

    def prune(self, older_than_s: float = STALE_S) -> int:
        """Remove the members untouched for ``older_than_s``, and the groups and clusters left empty; how
        many nodes."""
        return prune_leaves(self.zk, self.layout.folder("unsynced"), older_than_s)

    async def _write(self, key: tuple[str, str, str], generation: int) -> None:
        path, data = self._path(key), str(generation).encode()

        def write() -> None:
            try:
                self.zk.create(path, data, makepath=True)
            except NodeExistsError:  # the same member refused again
                self.zk.set(path, data)

        try:
            await asyncio.to_thread(write)
        except KazooException as exc:  # known in this process all the same
            log.warning("group %s: member %s's refused sync not stored: %r", key[1], key[2], exc)

    async def _delete(self, key: tuple[str, str, str]) -> None:
        try:
            await asyncio.to_thread(self.zk.delete, self._path(key))
        except NoNodeError:  # removed already
            return
        except KazooException as exc:  # pruned in a day
            log.warning("group %s: member %s's refused sync not removed: %r", key[1], key[2], exc)

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._writing.add(task)
        task.add_done_callback(self._writing.discard)

    def _path(self, key: tuple[str, str, str]) -> str:
        cluster, group, member_id = key
        folder = self.layout.folder("unsynced")
        return f"{folder}/{quote(cluster, safe='')}/g-{quote(group, safe='')}/m-{quote(member_id, safe='')}"
