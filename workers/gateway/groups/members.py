"""Group members as the gateway saw them join: where (which cluster), and their session time-out.

Where a member joined tells whether its commits must be carried to another cluster after a switch
(:mod:`workers.gateway.groups.carry`), and — with whose client it is — whether a routing change moved it,
so that the cluster it left forgets it at once (``moved``); its session time-out bounds how long its
requests may be held while its identity is blocked (:mod:`workers.gateway.routing.holds`). Learnt from
JoinGroup and ConsumerGroupHeartbeat answers; a classic member that joined through another gateway of a
pair, or before this one started, is looked up when it commits or heartbeats after a switch (see
``GroupHandling.find_member``).

What one of the process's connections must wait for on another is kept here too: commits carried into a
group and not answered yet, which a join entering the group waits for (``carrying``), and rejoins
answered and not synced yet, by the member id they gave (``rejoin_of``). A client's group requests go over
several connections: kafkajs commits on its old coordinator's while it joins on the new one's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from switchyard.identity import Identity
from workers.gateway.framing.sasl import Credentials
from workers.gateway.groups.rejoin import Rejoin


@dataclass(frozen=True)
class Member:
    cluster: str
    session_timeout_s: float | None
    """None: not seen joining (looked up), so not known."""
    left: bool = False
    """The gateway has had the cluster it joined on forget it (``Members.moved``, ``GroupHandling.moved``)."""
    rejoining: bool = False
    """Its client has asked to join the group again, on another cluster: told to rejoin once more (a
    Heartbeat of the old membership sent meanwhile), it would rebalance again after (``QUIET``)."""
    identity: Identity | None = None
    """Whose client it is (for one looked up, the client whose request named it): where a routing change
    sends its group (``moved``)."""
    credentials: Credentials | None = None
    """Its client's, for removing it on its behalf."""
    consumer: bool = False
    """A member of the consumer protocol (KIP-848), removed with a heartbeat that leaves."""
    rejoined_as: str | None = None
    """For a moved member: the member id the cluster it went to gave its join, which the gateway sent as a
    new member's (see ``Members.renaming``)."""
    synced: tuple[int, frozenset[tuple[str, int]] | None] | None = None
    """The generation and the partitions (None: not told in the consumer protocol's terms) of its last
    SyncGroup the gateway saw answered (see ``Members.successor``)."""
    looked_up: bool = False
    """Found on a cluster by asking it (``GroupHandling.find_member``), not seen joining: so nothing is
    known of its joins and syncs."""
    resent: bool = False
    """A commit of it, carried and refused, has been answered with the retriable error once
    (``GroupHandling._joined_elsewhere``): the next such refusal is the client's to see."""
    owns: bool | None = None
    """For a member of the consumer protocol: whether the latest assignment its coordinator gave it, as
    the gateway saw it, names any partition (None: none seen)."""
    releasing_since: float | None = None
    """For one moved by a switch: when it was first asked to give up its partitions (``RELEASE``)."""
    sync_refused: bool = False
    """Its last SyncGroup was refused: it joins again before it syncs, and its client may first commit
    its old membership's offsets, which wait for no sync of it (``syncing``; see
    :mod:`workers.gateway.groups.unsynced`)."""


class Members:
    """A bounded table: the oldest entries go first (members come and go with every client restart)."""

    def __init__(self, most: int = 100_000) -> None:
        self._most = most
        self._members: dict[tuple[str, str], Member] = {}
        self._groups: dict[str, dict[str, None]] = {}
        """Each group's member ids in ``_members``."""
        self._swept: dict[tuple[str, str], int] = {}
        self._renaming: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._syncs: dict[str, list[asyncio.Future[None]]] = {}
        """Per group, who waits for its next SyncGroup answered (``next_sync``)."""
        self._carried: dict[tuple[str, str], set[asyncio.Future[None]]] = {}
        """Per group and cluster, the commits carried there and not answered yet (``carrying``)."""
        self._rejoins: dict[tuple[str, str], Rejoin] = {}
        """Per group and member id, the rejoin that gave it, not synced yet (``rejoin_of``)."""
        self._entering: dict[tuple[str, str], int] = {}
        """Per group and cluster, the joins waiting to enter it for commits carried there (``entering``)."""

    def joined(self, group: str, member_id: str, member: Member) -> None:
        self._members.pop((group, member_id), None)
        self._members[(group, member_id)] = member
        self._groups.setdefault(group, {})[member_id] = None
        while len(self._members) > self._most:
            oldest, gone = next(iter(self._members))
            del self._members[(oldest, gone)]
            ids = self._groups[oldest]
            del ids[gone]
            if not ids:
                del self._groups[oldest]

    def synced(
        self, group: str, member_id: str, generation: int, assigned: frozenset[tuple[str, int]] | None
    ) -> None:
        """A SyncGroup of ``member_id`` was answered: its generation and assignment now."""
        member = self._members.get((group, member_id))
        if member is not None:
            self._members[(group, member_id)] = dataclasses.replace(
                member, synced=(generation, assigned), sync_refused=False
            )
        self._wake(group)

    def sync_refused(self, group: str, member_id: str) -> None:
        """A SyncGroup of ``member_id`` was refused: a commit waiting for its sync goes on (``syncing``)."""
        member = self._members.get((group, member_id))
        if member is not None:
            self._members[(group, member_id)] = dataclasses.replace(member, sync_refused=True)
        self._wake(group)

    def _wake(self, group: str) -> None:
        for waiting in self._syncs.pop(group, []):
            if not waiting.done():
                waiting.set_result(None)

    def syncing(self, group: str, cluster: str, identity: Identity, besides: str | None = None) -> bool:
        """Whether ``identity``'s client has a member of ``group`` on ``cluster``, other than ``besides``,
        that joined and has not synced yet, nor been refused its sync: a commit of its old membership may
        go as that member once it has (``successor``)."""
        return any(
            member.cluster == cluster and not member.left and member.identity == identity
            and member.synced is None and not member.sync_refused and member_id != besides
            and not member.looked_up
            for member_id, member in ((m, self._members[(group, m)]) for m in self._groups.get(group, {}))
        )  # fmt: skip

    async def next_sync(self, group: str, timeout_s: float) -> None:
        """Until a SyncGroup of ``group`` is answered (``synced``), a join waits to enter it
        (``before_entering``), or ``timeout_s``."""
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._syncs.setdefault(group, []).append(waiting)
        try:
            await asyncio.wait({waiting}, timeout=timeout_s)
        finally:
            if not waiting.done():
                waiting.cancel()
                left = [w for w in self._syncs.get(group, []) if w is not waiting]
                if left:
                    self._syncs[group] = left
                else:
                    self._syncs.pop(group, None)

    def successor(
        self, group: str, cluster: str, identity: Identity, partitions: set[tuple[str, int]]
    ) -> tuple[str, int] | None:
        """The member id and generation a commit of an old membership of ``identity``'s client goes as on
        ``cluster``: its one member of the group there, synced and assigned every one of ``partitions``
        (None: none such, or more than one). kafkajs commits as the member of its last completed sync,
        its old membership's after a switch, while its rejoin runs on its connection to the new
        coordinator: carried from outside the group, such a commit was refused UNKNOWN_MEMBER_ID once the
        group had that new member, and the records processed again (a chaos trial)."""
        found = []
        for member_id in self._groups.get(group, {}):
            member = self._members[(group, member_id)]
            if member.cluster != cluster or member.left or member.identity != identity or member.looked_up:
                continue
            if member.synced is None or member.synced[1] is None or not partitions <= member.synced[1]:
                return None  # one of its members there that cannot take it: which one is not known
            found.append((member_id, member.synced[0]))
        return found[0] if len(found) == 1 else None

    def carrying(self, group: str, cluster: str, answered: asyncio.Future[None]) -> None:
        """A commit is carried into ``group`` on ``cluster``; ``answered`` is done once that cluster has
        answered it. A join entering the group there on any connection waits for it first (``carried``):
        the group takes a commit from outside only while it has no member. kafkajs committed its old
        membership's offsets on its old coordinator's connection and joined on another 0.3 s later; the
        join, answered first, had the commit refused UNKNOWN_MEMBER_ID and a record processed again (a
        chaos trial)."""
        key = (group, cluster)
        self._carried.setdefault(key, set()).add(answered)

        def done(_: object) -> None:
            left = self._carried.get(key)
            if left is not None:
                left.discard(answered)
                if not left:
                    del self._carried[key]

        answered.add_done_callback(done)

    async def before_entering(self, group: str, cluster: str, timeout_s: float) -> None:
        """Until the commits carried into ``group`` on ``cluster`` now are answered (``carrying``), or
        ``timeout_s``: a join that enters the group waits so. Meanwhile the group has a join waiting to
        enter (``entering``), and a carried commit waiting for a member's sync goes at once from outside
        the group, which still takes it — that member's join may be this one, which waits for it."""
        carried = set(self._carried.get((group, cluster), ()))
        if not carried:
            return
        key = (group, cluster)
        self._entering[key] = self._entering.get(key, 0) + 1
        self._wake(group)
        try:
            await asyncio.wait(carried, timeout=timeout_s)
        finally:
            self._entering[key] -= 1
            if not self._entering[key]:
                del self._entering[key]

    def entering(self, group: str, cluster: str) -> bool:
        """Whether a join waits to enter ``group`` on ``cluster`` until the commits carried there are
        answered (``before_entering``)."""
        return (group, cluster) in self._entering

    def rejoining(self, group: str, member_id: str, rejoin: Rejoin) -> None:
        """``rejoin``'s join was answered with ``member_id``: until its sync, a commit of that member at
        the generation it passed, sent on another connection, can find it (``rejoin_of``)."""
        self._rejoins.pop((group, member_id), None)
        self._rejoins[(group, member_id)] = rejoin
        while len(self._rejoins) > self._most:
            del self._rejoins[next(iter(self._rejoins))]

    def rejoin_ended(self, group: str, member_id: str, rejoin: Rejoin) -> None:
        """``rejoin``, which gave ``member_id``, is over (synced, or its connection closed)."""
        if self._rejoins.get((group, member_id)) is rejoin:
            del self._rejoins[(group, member_id)]

    def rejoin_of(self, group: str, member_id: str) -> Rejoin | None:
        """The rejoin of ``member_id`` answered and not ended yet (synced, or sent to join again)."""
        rejoin = self._rejoins.get((group, member_id))
        if rejoin is None or rejoin.joined.done() or rejoin.given is None or rejoin.given[0] != member_id:
            self._rejoins.pop((group, member_id), None)
            return None
        return rejoin

    def get(self, group: str, member_id: str | None) -> Member | None:
        return self._members.get((group, member_id)) if member_id else None

    def renaming(self, group: str, member_id: str) -> asyncio.Future[None] | None:
        """The end of the join of moved member ``member_id`` the gateway sent as a new member's, if it is
        not answered yet (see ``rename``)."""
        pending = self._renaming.get((group, member_id))
        return pending if pending is not None and not pending.done() else None

    def rename(self, group: str, member_id: str) -> asyncio.Future[None]:
        """A join of moved member ``member_id`` goes as a new member's now: a join of it sent meanwhile
        waits for its answer (``renaming``), and joins as the member id it got (``rejoined_as``). kafkajs
        sends a join for each broker whose fetches were refused at a switch: each sent as a new member's,
        the group got a member for each, and waited for the one the client forgot until its session
        time-out — with that, offsets the old membership committed were refused, and their records
        processed again (a chaos trial). The future returned is this join's: ``renamed`` takes it."""
        pending = asyncio.get_running_loop().create_future()
        self._renaming.pop((group, member_id), None)
        self._renaming[(group, member_id)] = pending
        while len(self._renaming) > self._most:
            del self._renaming[next(iter(self._renaming))]
        return pending

    def renamed(self, group: str, member_id: str, new_id: str | None, pending: asyncio.Future[None]) -> None:
        """The join of ``member_id`` sent as a new member's (``pending``, from ``rename``) is answered: the
        member id it got (None: none, it was refused, or its connection ended first). A later join's
        rename, made while this one was awaited past its hold, stays for that join's own answer."""
        if self._renaming.get((group, member_id)) is pending:
            del self._renaming[(group, member_id)]
        member = self._members.get((group, member_id))
        if new_id and member is not None:
            self._members[(group, member_id)] = dataclasses.replace(member, rejoined_as=new_id)
        if not pending.done():
            pending.set_result(None)

    def sweeping(self, group: str, cluster: str, epoch: int) -> bool:
        """Whether the group's members left on ``cluster`` are to be looked for now: once per routing
        epoch (``GroupHandling.sweep``)."""
        if self._swept.get((group, cluster)) == epoch:
            return False
        self._swept.pop((group, cluster), None)
        self._swept[(group, cluster)] = epoch
        while len(self._swept) > self._most:
            del self._swept[next(iter(self._swept))]
        return True

    def still_there(self, group: str, member_id: str) -> None:
        """A member's removal failed: it counts as not left, so the next change or its next request
        tries again."""
        member = self._members.get((group, member_id))
        if member is not None and member.left:
            self._members[(group, member_id)] = dataclasses.replace(member, left=False)

    def moved(self, now_on: Callable[[Identity, str], str | None]) -> list[tuple[str, str, Member]]:
        """The members a routing change has moved — ``now_on(identity, group)``, the cluster the group
        goes to now (None: undecided, as while blocked), is not where they joined — as (group, member
        id, member); marked as left, for the caller to have that cluster forget them."""
        found, routed = [], {}
        for (group, member_id), member in list(self._members.items()):
            if member.left or member.identity is None:
                continue
            where = (member.identity, group)
            if where not in routed:
                routed[where] = now_on(member.identity, group)
            if routed[where] not in (None, member.cluster):
                self._members[(group, member_id)] = dataclasses.replace(member, left=True)
                found.append((group, member_id, member))
        return found
