"""One writer of a link's group offsets at a time.

Two things carry consumer groups' offsets over a link: the mirror, every ``group_sync_interval_s``,
and a switching saga's group sync, after the drain. Kafka has no compare-and-set for a group's offsets,
so if both wrote one group at once, a carry that read the source before the clients' last commits could
land after the saga's write and move the group back — its consumers would process records twice after
the flip. So they take turns:

- the saga's lock names the link and the groups it moves (:class:`~switchyard.routing.locks.SagaLocks`),
  and the mirror's carry leaves those groups alone while it is held;
- each write of a group's offsets to the target happens inside a ZooKeeper lock per link, and the
  carry reads the saga locks again inside it. A saga's sync takes the same lock, so a carry that
  started before the saga's lock ends before the saga writes, and one that starts after sees the lock.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError
from kazoo.recipe.lock import Lock

from switchyard.errors import RoutingUnavailable
from switchyard.routing.layout import Layout
from switchyard.routing.locks import SagaLocks

log = logging.getLogger(__name__)
TURN_WAIT_S = 15.0
"""How long a writer waits for its turn: a turn lasts one group's read and write (the mirror's), or one
saga's sync of its groups."""


class GroupWriters:
    def __init__(self, zk: KazooClient, layout: Layout, link_id: str, writer: str) -> None:
        self.zk, self.layout, self.link_id, self.writer = zk, layout, link_id, writer

    @contextmanager
    def turn(self, timeout_s: float = TURN_WAIT_S, *, after_own_attempt: bool = False) -> Iterator[None]:
        """Write the link's group offsets alone; RoutingUnavailable when the turn does not come.

        ``after_own_attempt``: this writer is a retried activity whose earlier attempt may have died
        holding the turn (a worker killed mid-sync). Its ZooKeeper node would stay until that session
        expires (``zookeeper.session_timeout_s``), with clients held meanwhile; but Temporal retries an
        activity only once it has given the attempt up, so the turn is ended now. An attempt that is
        still running somewhere (a stalled worker) is the same saga writing the same offsets, read from
        a source its block keeps still; the mirror's carry still waits, for the saga's lock on the groups.
        """
        path = self.layout.group_writer(self.link_id)
        if after_own_attempt:
            self._end_own_turns(path)
        lock = self.zk.Lock(path, self.writer)
        try:
            try:
                got = lock.acquire(timeout=timeout_s)
            except LockTimeout:
                got = False
            if not got:
                kept = f"another writer of its group offsets kept its turn for {timeout_s:g}s"
                raise RoutingUnavailable(f"link {self.link_id}: {kept}")
            yield
        finally:
            try:
                lock.release()
            finally:
                self._withdraw(lock)

    def _withdraw(self, lock: Lock) -> None:
        """Make sure this writer's place is out of the queue, whatever ended its turn. Kazoo takes it out
        only on its own errors, not on the CancelledError Temporal raises in a cancelled step's thread, at
        whatever line it runs: left, the place becomes the turn when the writers before it end, and is
        kept while this session lives."""
        try:
            for name in self.zk.get_children(lock.path):
                if name.startswith(lock.prefix):  # this lock's own node, whether it learned its name or not
                    self.zk.delete(f"{lock.path}/{name}")
        except NoNodeError:
            pass
        except KazooException as exc:  # the session's end takes the place out; the turn's outcome stands
            log.warning("link %s: a place in the group writers' queue not withdrawn: %r", self.link_id, exc)

    def _end_own_turns(self, path: str) -> None:
        mine = self.zk.client_id[0] if self.zk.client_id else None
        try:
            contenders = self.zk.get_children(path)
        except NoNodeError:
            return
        for name in contenders:
            try:
                data, stat = self.zk.get(f"{path}/{name}")
                if data.decode() == self.writer and stat.ephemeralOwner != mine:
                    self.zk.delete(f"{path}/{name}", version=stat.version)
            except NoNodeError:
                continue  # gone meanwhile: its session ended, or it released

    def sagas_own(self) -> dict[str, str]:
        """The link's groups held by sagas now, and which saga holds each."""
        return {
            group: lock.owner
            for lock in SagaLocks(self.zk, self.layout).held()
            if lock.link == self.link_id
            for group in lock.groups
        }

    @contextmanager
    def carry(self, group: str, timeout_s: float = TURN_WAIT_S) -> Iterator[str | None]:
        """The mirror's turn at ``group``: yields None when it may write, else the saga that holds it."""
        with self.turn(timeout_s):
            yield self.sagas_own().get(group)
