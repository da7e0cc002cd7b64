"""One client connection's consumer-group requests: what the session asks of them, in one unit.

The session decides each request (:mod:`workers.gateway.routing.decision`) and forwards it; what it needs to
know of groups, and the group work around a switch, are here: where the sending member joined
(``joined_on``), whether the connection's consumer is rejoining (``rejoining``), having the cluster a
moved member left forget it (``moved``), carrying its commits to the new cluster (``carry``, see
:mod:`workers.gateway.groups.carry`) or sending them as the member it rejoined as (``adopt``), and
what the gateway learns from group answers (``learn``). The session is seen through
:class:`Connection` and a ``Send`` for each commit it hands over.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NamedTuple, Protocol, cast

from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import (
    FrameError,
    Request,
    decode_response,
    encode_response,
    replace_body,
)
from switchyard.identity import Identity, identify
from switchyard.model import BindingState, ClusterState
from switchyard.resolution import resolve
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.brokers.upstream import Upstream, UpstreamError
from workers.gateway.framing.sasl import Credentials
from workers.gateway.groups import consumer_protocol
from workers.gateway.groups.carry import carried_commit
from workers.gateway.groups.coordinator import Coordinators, coordinator
from workers.gateway.groups.members import Member
from workers.gateway.groups.rejoin import Rejoin, commit_partitions
from workers.gateway.routing import apis
from workers.gateway.routing.blocking import OwnAnswer, Reply
from workers.gateway.routing.holds import hold_limit
from workers.gateway.shared import Shared

log = logging.getLogger(__name__)
RELEASE_WITHIN_S = 15.0
"""How long a member moved by a switch is asked to give its partitions up before it is fenced (three of
its heartbeat intervals while it does not poll): see ``GroupHandling.owning``."""
MEMBER_APIS = frozenset(
    {apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.OFFSET_COMMIT, apis.CONSUMER_GROUP_HEARTBEAT}
)
"""Requests naming the member that sends them (LeaveGroup v3+ names members in a list)."""
_REJOIN_NEEDS = frozenset({apis.METADATA, apis.FIND_COORDINATOR, apis.JOIN_GROUP, apis.SYNC_GROUP})
"""Requests a client may need answered to finish a rejoin (see ``GroupHandling.came``)."""
_SYNC_NEEDS = _REJOIN_NEEDS - {apis.SYNC_GROUP}
"""Those it may need answered before it sends its join's SyncGroup (a group leader's Metadata for its
assignment, a coordinator looked up, a join): a SyncGroup's own answer is learned as it comes."""
_COMMITS_REMEMBERED = 64
"""Commits a connection keeps the ``_behind`` of (``GroupHandling.came``): more than clients send at once."""
_NO_LONGER_A_MEMBER = frozenset({ErrorCode.unknown_member_id, ErrorCode.illegal_generation})
"""A SyncGroup refused so leaves nothing a commit could go as (``UnsyncedMembers``)."""

Send = Callable[[Any, int | None], Awaitable[Awaitable[Reply]]]
"""The session's sending of an OffsetCommit ``body`` to a broker (None: the coordinator) of the cluster
the commit is routed to: the answer-to-be, or the retriable error if the routing moved on meanwhile."""


class Behind(NamedTuple):
    """Done once a request a rejoin may need comes on a connection after a commit (``GroupHandling.came``)."""

    rejoin: asyncio.Future[None]
    """One of ``_REJOIN_NEEDS``: a rejoin on another connection may wait for its answer."""
    sync: asyncio.Future[None]
    """One of ``_SYNC_NEEDS``: the connection's own rejoin may wait for its answer before it syncs."""


class Connection(Protocol):
    """What group handling needs of the client session it serves."""

    credentials: Credentials | None

    def upstream(self, cluster: str, node: int | None, *, long_poll: bool) -> Upstream: ...

    def later(self, answer: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...


class GroupHandling:
    def __init__(self, gateway: Shared, connection: Connection) -> None:
        self.gateway, self.connection = gateway, connection
        self._carrying = asyncio.Lock()
        self._carries = 0
        """Carried commits this connection sent: one is sent again only if none went since."""
        self._rejoins: dict[str, Rejoin] = {}
        """Per group this connection's consumer is (re)joining (see :class:`Rejoin`)."""
        self._behind: dict[frozenset[int], asyncio.Future[None]] = {}
        """Per kind (``_REJOIN_NEEDS``, ``_SYNC_NEEDS``), set when a request of it comes on this connection
        (``came``): a commit held for a join stops waiting then, as that request's answer queues behind
        its own."""
        self._behind_of: dict[int, Behind] = {}
        """By correlation id, the ``_behind`` of each commit as it came (``came``)."""
        self._renames: dict[int, tuple[str, str, asyncio.Future[None]]] = {}
        """By correlation id, this connection's joins of moved members sent as new members' and not
        answered yet: group, member id, and their ``Members.rename``."""
        self._given: dict[str, str] = {}
        """Per group, the member id this connection's latest JoinGroup answer gave."""
        self._commits: dict[str, set[asyncio.Future[Any]]] = {}
        """Per group, this connection's commits written to a broker and not answered yet (``commit_sent``)."""

    def joined_on(
        self, request: Request, snapshot: RoutingSnapshot, cluster: str, topics: tuple[str, ...]
    ) -> tuple[str | None, bool]:
        """For a request routed to ``cluster``: the other cluster its member joined on, where that
        matters (a Heartbeat to be told to rejoin, an OffsetCommit a link can carry), and whether the
        connection's consumer (or the member) is already rejoining (see ``rejoining``)."""
        joined_on, member = None, None
        key = request.api_key
        if (key in (apis.OFFSET_COMMIT, apis.HEARTBEAT) and request.api_version >= 1) or (
            key == apis.CONSUMER_GROUP_HEARTBEAT and consumer_protocol.heartbeating(request.body)
        ):
            member = self.gateway.members.get(request.body.group_id, request.body.member_id)
            joined_on = member.cluster if member is not None else None
            if member is not None and member.left and joined_on == cluster:
                # had the cluster forget it at a switch, and back before it rejoined anywhere (a switch
                # back within its heartbeat interval): a member of no cluster, which read last where a
                # link copies from. Forwarded, its commits and heartbeats would be refused
                # (UNKNOWN_MEMBER_ID), and what it processed since its last commit processed again.
                joined_on = self._copied_from(snapshot, cluster, topics)
            if joined_on == cluster or (
                joined_on is not None
                and request.api_key == apis.OFFSET_COMMIT
                and self.gateway.links.carrying_link(snapshot, joined_on, cluster, topics) is None
            ):
                joined_on = None
        return joined_on, self._rejoining(request, member)

    def session_s(self, request: Request) -> float | None:
        """The session time-out of the member a group request comes from, if the gateway saw it join
        (None for one of the consumer protocol: see ``KIP848_HEARTBEAT_S``)."""
        if request.api_key not in apis.GROUP_APIS:
            return None
        member = self.gateway.members.get(request.body.group_id, getattr(request.body, "member_id", None))
        return member.session_timeout_s if member is not None else None

    @staticmethod
    def names_a_member(request: Request) -> bool:
        """Whether ``request`` speaks for a member that may have joined where this gateway did not see
        it (see ``find_member``): a commit, a heartbeat, or a rejoin under its old id — as the Java
        client's classic consumer rejoins, and a consumer of the consumer protocol (KIP-848) after it
        was told its member is unknown."""
        key, body = request.api_key, request.body
        if key in (apis.OFFSET_COMMIT, apis.HEARTBEAT):
            return request.api_version >= 1
        if key == apis.JOIN_GROUP:
            return bool(body.member_id)
        return key == apis.CONSUMER_GROUP_HEARTBEAT and bool(body.member_id) and int(body.member_epoch) >= 0

    async def find_member(
        self, request: Request, snapshot: RoutingSnapshot, cluster: str, topics: tuple[str, ...],
        identity: Identity,
    ) -> bool:  # fmt: skip
        """Where a member this gateway did not see join did join, if its commits could need carrying: it
        joined through the other gateway of a pair, or before this gateway started (a gateway killed and
        started again mid-switch knows none of its clients' members). A member the group's coordinator
        on the bound cluster does not list, in a group settled there, joined on the cluster a link
        copies its topics from; in a group rebalancing there it may be one that has not rejoined yet, so
        that cluster is asked too, as it is for a join (a new member names itself as well). Remembered
        either way; left unknown if the answer is unclear. False where the coordinator on the bound
        cluster cannot say (loading the group, moving): forwarded as it was, a KIP-848 member's commit
        reached that coordinator once it had loaded the group, empty, and was refused UNKNOWN_MEMBER_ID
        (a chaos trial: a switch back whose target lost the group's coordinator; the member had joined
        the standby through the other process). Not where the cluster it left cannot say: it may be gone
        for good (a failover). A consumer-protocol member seen on another cluster is asked for where its
        request goes (``_rejoined_here``): False if that cannot be told.

        A member found so is taken for one of ``identity``'s client (whose request named it), so that a
        routing change that moves its group has it leave there, as one seen joining (``Members.moved``).
        Kept for no one's, it stayed a member of that cluster in the process's eyes after a switch away
        and back, its client meanwhile a member of the other through the other process: the client's
        commit, sent again through this process, went to the group as it was, and was refused
        UNKNOWN_MEMBER_ID (chaos run, 2026-12-05)."""
        body = request.body
        group, member_id = body.group_id, body.member_id
        gateway = self.gateway
        if not member_id:
            return True
        known = gateway.members.get(group, member_id)
        if known is not None:
            if known.consumer and (known.cluster != cluster or known.left):
                return await self._rejoined_here(group, member_id, known, cluster)
            return True
        source = self._copied_from(snapshot, cluster, topics)
        if source is None:
            return True
        here = await self._coordinators().members(cluster, group)
        if here is None:  # the request's own coordinator, loading or moving: the client retries
            return False
        listed, settled, consumer = here
        joining = request.api_key == apis.JOIN_GROUP or (
            request.api_key == apis.CONSUMER_GROUP_HEARTBEAT and int(body.member_epoch) == 0
        )  # a new member names itself too (KIP-394's second join, a client-made KIP-848 id): only the
        # cluster it left listing it says it joined there
        if member_id in listed:
            where = cluster
        elif settled and not joining:
            where = source
        else:  # left behind by a switch, the cluster it joined on still lists it
            there = await self._coordinators().members(source, group)
            if there is None:
                return True
            if member_id not in there[0]:
                if not _rejoins_removed(request, consumer):
                    return True
                log.info(
                    "group %s: member %s, listed on neither %s nor %s, rejoins as one moved from %s",
                    group, member_id, cluster, source, source,
                )  # fmt: skip
                gateway.members.joined(group, member_id, Member(source, None, left=True))
                # a member the cluster just named and not listed yet (KIP-394), its join asked again as a
                # new member's through a process that never saw it: gone from there too, else its
                # group's rebalance would wait for it
                self.connection.later(self._coordinators().leave(Member(cluster, None), group, member_id))
                return True
            where = source
        if where != cluster:
            log.info(
                "group %s: member %s, not listed on %s (%d members there), joined on %s",
                group, member_id, cluster, len(listed), where,
            )  # fmt: skip
        found = Member(
            where, None, identity=identity, credentials=self.connection.credentials, consumer=consumer,
            looked_up=True,
        )  # fmt: skip
        gateway.members.joined(group, member_id, found)
        return True

    async def _rejoined_here(self, group: str, member_id: str, known: Member, cluster: str) -> bool:
        """A member of the consumer protocol keeps its id when it joins again on another cluster, and may
        have done so through another process or gateway (this one's entry, from before its switch, then
        names the cluster it left): if ``cluster``'s coordinator lists it, it is one of ``cluster``'s.
        Else, not rejoined yet, it is told to, and its commits are carried. Trusted as it was, the entry
        had its commits sent member-less to the group it is in, refused UNKNOWN_MEMBER_ID, and its
        heartbeats fenced: what it had processed since its last commit, processed again (a chaos trial
        that killed the gateway process it was connected to, of two). So too where the entry names
        ``cluster`` itself, as left: this process had it forget the member at a switch away, and a switch
        back since had it join there again through another process (chaos runs 10 and 11). False where
        ``cluster``'s coordinator cannot say (gone, loading): fenced on the entry's word, a member that
        had joined there lost its partitions, and what it had processed since its last commit it
        processed again (chaos run 14: its coordinator killed, the client's new connection reached the
        process whose entry was from before a switch back)."""
        here = await self._coordinators().members(cluster, group)
        if here is None:
            return False
        if member_id not in here[0] or self.gateway.members.get(group, member_id) is not known:
            return True  # not joined again; or learnt otherwise meanwhile
        log.info("group %s: member %s, seen on %s, has joined %s", group, member_id, known.cluster, cluster)
        moved = dataclasses.replace(known, cluster=cluster, left=False, rejoining=False, releasing_since=None)
        self.gateway.members.joined(group, member_id, moved)
        return True

    def moved(self, request: Request, snapshot: RoutingSnapshot, now_on: str) -> bool:
        """Whether the member sending ``request`` joined on another cluster than ``now_on``, where the
        request goes (it is told to rejoin, its commits are carried, or, as kafkajs does, it rejoins
        with its old id); if so, and the flip did not already (``Members.moved``: a member this gateway
        did not see join), have the cluster it joined on forget it now, once. Left there, it would
        stay a member until its session time-out — up to 45 s at the clients' defaults — and a switch
        back could not write its group's offsets there (a group takes them only without members) until
        then, clients held. A JoinGroup marks it rejoining (see ``QUIET``)."""
        if request.api_key not in MEMBER_APIS:
            return False
        group, member_id = request.body.group_id, getattr(request.body, "member_id", "")
        member = self.gateway.members.get(group, member_id) if member_id else None
        if member is None or (member.cluster == now_on and not member.left):
            return False
        rejoining = member.rejoining or request.api_key == apis.JOIN_GROUP
        self.gateway.members.joined(
            group, member_id, dataclasses.replace(member, left=True, rejoining=rejoining)
        )
        if member.left:  # removed already: at the flip (``Members.moved``), or at an earlier request
            return True
        cluster = snapshot.clusters.get(member.cluster)
        if cluster is not None and cluster.state is ClusterState.ACTIVE:  # a shielded one is not contacted
            self.connection.later(self._leave(member, group, member_id))
        return True

    async def _leave(self, member: Member, group: str, member_id: str) -> None:
        if not await self._coordinators().leave(member, group, member_id):
            self.gateway.members.still_there(group, member_id)  # its next request tries again

    def sweep(
        self, request: Request, snapshot: RoutingSnapshot, cluster: str, identity: Identity,
        topics: tuple[str, ...],
    ) -> None:  # fmt: skip
        """A join goes to ``cluster``: have the cluster a link copies its topics from forget the group's
        members there that no gateway will — once per group and routing epoch. Such a member is left
        behind when its client crashed and joined again as a new member, as kafkajs does when its
        connections are refused for a few seconds (a gateway restart), or when it joined through a
        gateway since restarted (``find_member`` finds it only at its next request). Left there, it holds
        the next switch to that cluster for its session time-out (30-45 s at the clients' defaults),
        clients held: a group takes offsets only without members."""
        key, body = request.api_key, request.body
        joins = key == apis.JOIN_GROUP or (
            key == apis.CONSUMER_GROUP_HEARTBEAT and body.member_epoch == consumer_protocol.JOIN
        )
        if not joins or identity.anonymous or self.connection.credentials is not None:
            return  # whose a member is is told by its client id alone: an identity by SASL user is not
        source = self._copied_from(snapshot, cluster, topics)
        left = snapshot.clusters.get(source) if source is not None else None
        if source is None or left is None or left.state is not ClusterState.ACTIVE:
            return
        if self.gateway.members.sweeping(body.group_id, source, snapshot.epoch):
            self.connection.later(self._sweep(snapshot, source, body.group_id, identity, topics))

    async def _sweep(
        self, snapshot: RoutingSnapshot, cluster: str, group: str, identity: Identity, topics: tuple[str, ...]
    ) -> None:
        """Remove from ``cluster`` each member of ``group`` there whose client (the same application's)
        is routed elsewhere, and not held by a block."""
        found = await self._coordinators().members(cluster, group)
        if found is None:
            return
        listed, _, consumer = found
        default = self.gateway.config.default_cluster
        for member_id, client_id in listed.items():
            owner = identify(sasl_user=None, client_id=client_id)
            if owner.app != identity.app:
                continue
            routed = resolve(owner, snapshot.bindings, default, topics=topics, group=group)
            if routed.cluster != cluster and routed.state is not BindingState.BLOCKED:
                await self._leave(Member(cluster, None, consumer=consumer), group, member_id)

    def joining(self, request: Request, cluster: str, identity: Identity) -> None:
        """A JoinGroup naming its member goes to ``cluster``: the member is one there from now on as far
        as a switch is concerned, answered or not. A join waits for the group's other members, so a
        switch can cut it (``InFlight``); the broker still makes the member one of the group, and unless
        the switch has it forget the member (``Members.moved``), the group keeps it until its session
        time-out — and a switch back to that cluster cannot write the group's offsets until then."""
        body = request.body
        if body.member_id and self.gateway.members.get(body.group_id, body.member_id) is None:
            member = self._member(request, cluster, identity)
            self.gateway.members.joined(body.group_id, body.member_id, member)

    def _member(self, request: Request, cluster: str, identity: Identity) -> Member:
        session_s = float(request.body.session_timeout.total_seconds())
        return Member(cluster, session_s, identity=identity, credentials=self.connection.credentials)

    def sending(self, request: Request, member_id: str) -> None:
        """A JoinGroup is sent as ``member_id`` (the gateway sends a moved member's as a new member's):
        this connection's consumer is (re)joining its group until a SyncGroup ends the join (see
        ``learn``)."""
        group = request.body.group_id
        rejoin = self._rejoins.get(group)
        if rejoin is None or rejoin.joined.done():
            session_s = float(request.body.session_timeout.total_seconds())
            loop = asyncio.get_running_loop()
            rejoin = self._rejoins[group] = Rejoin(loop.create_future(), loop.create_future(), session_s)
        if _enters(request, member_id):
            rejoin.entered, rejoin.asked_as = True, request.body.member_id

    async def rejoined_as(self, request: Request, cluster: str) -> str:
        """The member id a moved member's JoinGroup goes to ``cluster`` as: a new member's (""), as a
        broker insists — or, where the gateway sent a join of the same member so before, the one that
        join got there, once it is answered (``Members.rename``)."""
        group, member_id = request.body.group_id, request.body.member_id
        members = self.gateway.members
        deadline = time.monotonic() + hold_limit(request, self.gateway.config.gateway.block_hold_s)
        while (pending := members.renaming(group, member_id)) is not None and (
            remaining := deadline - time.monotonic()
        ) > 0:  # again after each: a join woken with it may have gone as a new member's in turn
            await asyncio.wait({pending}, timeout=remaining)
        member = members.get(group, member_id)
        given = members.get(group, member.rejoined_as) if member is not None else None
        if member is not None and given is not None and given.cluster == cluster and not given.left:
            return cast(str, member.rejoined_as)
        self._renames[request.correlation_id] = (group, member_id, members.rename(group, member_id))
        return ""

    async def before_join(self, request: Request, member_id: str, cluster: str) -> None:
        """Wait (bounded) until the commits carried into the group on ``cluster`` before this JoinGroup,
        sent as ``member_id``, are answered, on whichever of the process's connections they came (not
        only written: the join may go to the broker on another connection), where it enters the group.
        Sent first, it would make the group on the new cluster refuse them (it takes a commit from outside
        the group only while it has no member), and the client would process their records again.

        So too for the group's commits this connection wrote to a broker before the join (``commit_sent``):
        a broker reads one connection's requests in order, and the client's commit would reach it in the
        generation it was made in; the gateway writes a join on its connection for long polls, and the
        join, answered first, had a kafkajs commit sent 28 ms before it refused ILLEGAL_GENERATION (chaos
        run, 2026-12-05). A commit waits for no join once written, so this wait ends with its answer."""
        if _enters(request, member_id):
            group = request.body.group_id
            limit = hold_limit(request, self.gateway.config.gateway.block_hold_s)
            deadline = time.monotonic() + limit
            if written := set(self._commits.get(group, ())):
                await asyncio.wait(written, timeout=limit)
            left = max(0.0, deadline - time.monotonic())
            await self.gateway.members.before_entering(group, cluster, left)

    def commit_sent(self, request: Request, answer: asyncio.Future[Any]) -> None:
        """An OffsetCommit of this connection's was written to a broker; ``answer`` is done once its client's
        answer is known — after any sending on to the group's coordinator, or again (see ``before_join``)."""
        group = request.body.group_id
        written = self._commits.setdefault(group, set())
        written.add(answer)

        def answered(_: object) -> None:
            written.discard(answer)
            if not written and self._commits.get(group) is written:
                del self._commits[group]

        answer.add_done_callback(answered)

    def came(self, request: Request) -> None:
        """A request came on this connection: if a rejoin may need its answer (a group leader's Metadata
        for its assignment, a join or sync, a coordinator looked up), a commit that came before it stops
        waiting for that rejoin (``_behind``), whether it waits yet or is still held. kafkajs's leader
        asked for Metadata on the connection of the commit held for its sync: the sync waited for that
        answer, the commit for the sync, both 10 s, and the commit was refused after all (chaos trials,
        with the join on another connection and on the same)."""
        if request.api_key == apis.OFFSET_COMMIT:
            self._behind_of[request.correlation_id] = self._next_behind()
            while len(self._behind_of) > _COMMITS_REMEMBERED:
                del self._behind_of[next(iter(self._behind_of))]
            return
        for needs in (_REJOIN_NEEDS, _SYNC_NEEDS):
            waiting = self._behind.pop(needs, None) if request.api_key in needs else None
            if waiting is not None and not waiting.done():
                waiting.set_result(None)

    def _behind_since(self, request: Request) -> Behind:
        """Done once a request a rejoin may need has come on this connection after ``request``."""
        return self._behind_of.pop(request.correlation_id, None) or self._next_behind()

    def _next_behind(self) -> Behind:
        """Done once a request a rejoin may need comes on this connection after now (``came``)."""
        loop = asyncio.get_running_loop()
        for needs in (_REJOIN_NEEDS, _SYNC_NEEDS):
            if needs not in self._behind:
                self._behind[needs] = loop.create_future()
        return Behind(self._behind[_REJOIN_NEEDS], self._behind[_SYNC_NEEDS])

    def learn(self, request: Request, frame: bytes, cluster: str, identity: Identity) -> None:
        """What a JoinGroup or SyncGroup answer from ``cluster`` tells: a member there, a join done (a
        ConsumerGroupHeartbeat's: ``heartbeat_in``)."""
        if request.api_key == apis.SYNC_GROUP:
            synced = decode_response(request, frame)
            body = request.body
            assigned = None
            members = self.gateway.members
            if synced.error_code == ErrorCode.none:
                assigned = assigned_partitions(synced.assignment)
                members.synced(body.group_id, body.member_id, body.generation_id, assigned)
                self.gateway.unsynced.synced(cluster, body.group_id, body.member_id)
            elif synced.error_code not in _NO_LONGER_A_MEMBER and _alone(body):
                members.sync_refused(body.group_id, body.member_id)
                self.gateway.unsynced.refused(cluster, body.group_id, body.member_id, body.generation_id)
            own, found = self._rejoins.get(body.group_id), members.rejoin_of(body.group_id, body.member_id)
            for rejoin in (own, found if found is not own else None):
                if rejoin is None or rejoin.joined.done():
                    continue
                if synced.error_code == ErrorCode.none:  # on its join's connection, or another
                    rejoin.assigned = assigned
                    rejoin.joined.set_result((body.member_id, body.generation_id))
                    members.rejoin_ended(body.group_id, body.member_id, rejoin)
                elif rejoin is own:
                    rejoin.refused()
        elif request.api_key == apis.JOIN_GROUP:
            joined = decode_response(request, frame)
            group, asked_as = request.body.group_id, request.body.member_id
            rejoin = self._rejoins.get(group)
            if joined.error_code != ErrorCode.none and rejoin is not None and not rejoin.joined.done():
                rejoin.refused()  # a member id asked for, or refused
            elif joined.error_code == ErrorCode.none and rejoin is not None and not rejoin.joined.done():
                rejoin.given = (joined.member_id, joined.generation_id)
                self.gateway.members.rejoining(group, joined.member_id, rejoin)
            # a member id required first (KIP-394) is a pending member there already
            given = joined.error_code in (ErrorCode.none, ErrorCode.member_id_required) and joined.member_id
            if given:
                member = self._member(request, cluster, identity)
                self.gateway.members.joined(group, joined.member_id, member)
                self._given[group] = joined.member_id
            if asked_as:
                self._renamed(request, joined.member_id if given else None)

    def answered_here(self, request: Request) -> None:
        """The gateway answers ``request`` itself (a retriable error): for a JoinGroup or SyncGroup, as a
        refusal from the broker would (``learn``), the client joins again. Unseen, a commit of the old
        membership waited for a join whose sync the gateway had refused, its answer — and a Metadata
        request kafkajs's group leader sent behind it — held 10 s; the leader never synced, and its
        group was stuck for 50 s (a chaos trial)."""
        if request.api_key not in (apis.JOIN_GROUP, apis.SYNC_GROUP):
            return
        group = request.body.group_id
        rejoin = self._rejoins.get(group)
        if rejoin is not None and not rejoin.joined.done():
            rejoin.refused()
        if request.api_key == apis.JOIN_GROUP:
            self._renamed(request, None)

    def close(self) -> None:
        """The connection ended: its joins sent as new members' are answered no more, and the joins of
        their members waiting for them go on at once rather than at the end of their hold."""
        for group, member_id, pending in self._renames.values():
            self.gateway.members.renamed(group, member_id, None, pending)
        self._renames.clear()
        for group, rejoin in self._rejoins.items():  # a commit waiting for one on another connection goes
            if not rejoin.joined.done():
                if rejoin.given is not None:
                    self.gateway.members.rejoin_ended(group, rejoin.given[0], rejoin)
                rejoin.refused()

    def _renamed(self, request: Request, new_id: str | None) -> None:
        """A JoinGroup is answered (``new_id``: the member id it got); if the gateway sent it as a new
        member's, the joins of its member waiting for that go on (``Members.renamed``)."""
        renamed = self._renames.pop(request.correlation_id, None)
        if renamed is not None:
            group, member_id, pending = renamed
            self.gateway.members.renamed(group, member_id, new_id, pending)

    async def heartbeat_out(self, request: Request, cluster: str, identity: Identity) -> bytes:
        """A ConsumerGroupHeartbeat's frame as ``cluster`` takes it: owned topics by that cluster's ids. A
        join naming its member is a member there from now on (see ``joining``); a join waits first, as a
        classic member's does (``before_join``), until the commits carried into its group there are
        answered: a group of the consumer protocol too takes a commit from outside only while it has no
        member, and refuses it UNKNOWN_MEMBER_ID once the join is in."""
        body = request.body
        if body.member_epoch == consumer_protocol.JOIN:
            limit = hold_limit(request, self.gateway.config.gateway.block_hold_s, self.session_s(request))
            await self.gateway.members.before_entering(body.group_id, cluster, limit)
            if body.member_id:
                self._member_of(body.group_id, body.member_id, cluster, identity)
        body = await consumer_protocol.to_cluster(body, cluster, self.gateway.real_ids)
        return request.frame if body is request.body else replace_body(request, body)

    async def heartbeat_in(self, request: Request, frame: bytes, cluster: str, identity: Identity) -> bytes:
        """A ConsumerGroupHeartbeat's answer from ``cluster`` as its member gets it; a member there it
        tells of, noted, with whether its assignment names any partition (``owning``)."""
        answer = decode_response(request, frame)
        if answer.error_code == ErrorCode.none and answer.member_epoch > 0:
            member_id = answer.member_id or request.body.member_id
            self._member_of(request.body.group_id, member_id, cluster, identity)
            heard: dict[str, Any] = {"releasing_since": None}  # a member there: no release of it stands
            if answer.assignment is not None:
                heard["owns"] = any(t.partitions for t in answer.assignment.topic_partitions)
            self._noted(request.body.group_id, member_id, **heard)
        answer = consumer_protocol.answered(request.body, answer)
        answer = await consumer_protocol.to_client(answer, cluster, self.gateway.real_ids)
        return encode_response(request, answer)

    def owning(self, request: Request) -> bool:
        """For a ConsumerGroupHeartbeat: whether its member, if a switch moved it, is to be asked to give
        its partitions up (``RELEASE``) rather than fenced. It is, unless it names none it owns (its
        acknowledgement of that release: an empty list; a null one says "as before") or, naming none,
        its assignment was last seen empty, or it was first asked ``RELEASE_WITHIN_S`` ago: a member
        that owns nothing answers a release of nothing with no acknowledgement, and one whose
        application does not poll revokes nothing. The time is cleared once a cluster answers it as a
        member there (``heartbeat_in``, ``_rejoined_here``): a later switch asks it anew."""
        if request.api_key != apis.CONSUMER_GROUP_HEARTBEAT:
            return False
        owned = request.body.topic_partitions
        names = owned is not None and any(t.partitions for t in owned)
        if owned is not None and not names:
            return False
        member = self.gateway.members.get(request.body.group_id, request.body.member_id)
        if member is None:
            return True
        since = member.releasing_since
        in_time = since is None or time.monotonic() - since < RELEASE_WITHIN_S
        return in_time and (names or member.owns is not False)  # what it names outweighs what was seen

    def releasing(self, request: Request) -> None:
        """Its member asked to give its partitions up: since when, the first time (``owning``)."""
        member = self.gateway.members.get(request.body.group_id, request.body.member_id)
        if member is not None and member.releasing_since is None:
            log.info("group %s: member %s, moved, asked to give its partitions up", request.body.group_id,
                     request.body.member_id)  # fmt: skip
            self._noted(request.body.group_id, request.body.member_id, releasing_since=time.monotonic())

    def _noted(self, group: str, member_id: str, **changes: Any) -> None:
        member = self.gateway.members.get(group, member_id)
        if member is not None and any(getattr(member, k) != v for k, v in changes.items()):
            self.gateway.members.joined(group, member_id, dataclasses.replace(member, **changes))

    def _member_of(self, group: str, member_id: str, cluster: str, identity: Identity) -> None:
        """A member of the consumer protocol is one of ``cluster`` now (unless known there already); its
        group one of that protocol, noted at every heartbeat (see ``ConsumerGroups.note``)."""
        self.gateway.consumer_groups.note(group)
        known = self.gateway.members.get(group, member_id)
        if known is None or known.cluster != cluster or known.left:  # joined (again) there
            member = Member(
                cluster, None, identity=identity, credentials=self.connection.credentials, consumer=True
            )
            self.gateway.members.joined(group, member_id, member)

    def carry(
        self, request: Request, snapshot: RoutingSnapshot, cluster: str, source: str,
        topics: tuple[str, ...], *, send: Send, identity: Identity,
    ) -> Coroutine[Any, Any, Reply]:  # fmt: skip
        """Commit on ``cluster`` what a member that joined on ``source`` commits (see
        :mod:`workers.gateway.groups.carry`); if that cannot be done now, the retriable error.

        Decided as the commit comes, before anything after it is: as the member this connection's
        consumer rejoins as if its join is under way (``Rejoin.entered``: the answer the client waits
        for to finish it goes back ahead of this commit's), else from outside the group, answered before
        any JoinGroup that comes after it (``before_join``). Waiting for a join the client sends only
        later would wait for ever: its answer would queue behind this commit's."""
        rejoin = self._waited_for(request)
        again = None if rejoin is None else rejoin.again  # a refusal from now on ends the wait
        most = self.gateway.config.gateway.block_hold_s
        deadline = time.monotonic() + hold_limit(request, most, self.session_s(request))
        behind = self._behind_since(request)
        answered: asyncio.Future[None] | None = None
        if rejoin is None:
            answered = asyncio.get_running_loop().create_future()
            self.gateway.members.carrying(request.body.group_id, cluster, answered)

        async def carried() -> Reply:
            try:
                async with self._carrying:  # one at a time, in the order they came: a later one lands later
                    found = await self._carried(request, snapshot, cluster, source, topics)
                    if found is None:
                        return OwnAnswer()
                    body, node = found
                    if rejoin is not None and again is not None:  # as the member it rejoins as
                        body = await self._as_rejoined(rejoin, again, request, body, behind)
                    else:  # or as the member its client became there on another connection
                        body = await self._as_successor(body, cluster, identity, deadline, behind)
                    answer = await send(body, node)
                    self._carries += 1
                    sent_as = self._carries
                reply = await answer  # answered, so done: a join sent on another connection comes after
                if answered is not None:
                    answered.set_result(None)  # not after the lookup below: the cluster has answered
                if body.member_id:
                    return reply

                async def resend(again: Any) -> Reply | None:
                    """``again`` sent in this commit's place and answered; None if a later carried commit
                    went since (this one, landing after, would undo it) or the broker connection failed."""
                    async with self._carrying:
                        if self._carries != sent_as:
                            return None
                        try:
                            answer = await send(again, node)
                        except UpstreamError:
                            return None
                        self._carries += 1
                    try:
                        return await answer
                    except UpstreamError:
                        return None

                return await self._joined_elsewhere(
                    request, body, reply, cluster, identity=identity, resend=resend
                )
            finally:
                if answered is not None and not answered.done():
                    answered.set_result(None)

        return carried()

    async def _joined_elsewhere(
        self, request: Request, body: Any, reply: Reply, cluster: str, *, identity: Identity,
        resend: Callable[[Any], Awaitable[Reply | None]],
    ) -> Reply:  # fmt: skip
        """The answer to a commit carried from outside the group (``body``): ``reply``, unless it was
        refused UNKNOWN_MEMBER_ID for a member its client has there already, one that joined through
        another process or gateway (``_as_successor`` knows this process's alone), or whose sync was
        refused: the group's coordinator on ``cluster`` lists a member of the commit's client id.

        Where that member is the group's only one and its sync was refused (``UnsyncedMembers``), the
        commit is sent again as it, at that sync's generation (``resend``): kafkajs commits as the member
        of its last completed sync, and joins again only once the commit is answered, so told to send it
        again, it sent it as the old member again, and the refusal reached it (a chaos trial). Refused
        for a while only (the group between a join and its sync, its coordinator moving), the client is
        told to send it again, and it is sent as that member again then.

        Else, or where that member has moved on (a later generation, gone), the retriable error is
        answered, and the client sends it again — kafkajs as the member it became, once its sync is done.
        Passed on, the refusal was final: kafkajs processed again what the commit covered (chaos run,
        2026-12-05, a gateway of two processes). Nothing of a refused commit was written, so sending it
        again is safe; a client id the application's other consumers share makes theirs retry as well.
        Once per old membership: the Java client sends a commit refused so again as the same member,
        generation and all, until its 60 s run out (``commitSync``), whatever its heartbeats say; a second
        refusal is passed on."""
        group, member_id = request.body.group_id, request.body.member_id
        if not isinstance(reply, bytes) or request.client_id is None:
            return reply
        member = self.gateway.members.get(group, member_id)
        if member is None or member.resent:  # told once already, and sent as no member since
            return reply
        if ErrorCode.unknown_member_id not in _refusals(request, reply):
            return reply
        found = await self._coordinators().members(cluster, group)
        if found is None or request.client_id not in found[0].values():
            return reply
        listed = found[0]
        alone = next(iter(listed)) if len(listed) == 1 else None
        known = self.gateway.members.get(group, alone)
        if alone is not None and (known is None or known.identity in (None, identity)):
            generation = await self.gateway.unsynced.generation(cluster, group, alone)
            if generation is not None:
                again = dataclasses.replace(body, member_id=alone, generation_id_or_member_epoch=generation)
                sent = await resend(again)
                codes = _refusals(request, sent) if isinstance(sent, bytes) else {ErrorCode.not_coordinator}
                log.info(
                    "group %s: a commit carried to %s was refused, its client %s having joined there "
                    "meanwhile: sent again as that member, %s, whose sync was refused, at generation %d: %s",
                    group, cluster, request.client_id, alone, generation,
                    ", ".join(c.name for c in sorted(codes - {ErrorCode.none})) or "taken",
                )  # fmt: skip
                if not codes - {ErrorCode.none}:
                    return sent
                if not codes & _NO_LONGER_A_MEMBER:  # for a while: the client sends it again, and so then
                    return OwnAnswer()
        member = self.gateway.members.get(group, member_id)  # as it is now: the lookups took a while
        if member is None or member.resent:
            return reply
        self.gateway.members.joined(group, member_id, dataclasses.replace(member, resent=True))
        log.info(
            "group %s: a commit carried to %s was refused, its client %s having joined there meanwhile: "
            "told to send it again", group, cluster, request.client_id,
        )  # fmt: skip
        return OwnAnswer()

    async def _as_successor(
        self, body: Any, cluster: str, identity: Identity, deadline: float, behind: Behind
    ) -> Any:
        """A carried commit (``body``) as its client's new member on ``cluster``, if it has exactly one
        that can take it (``Members.successor``); else as it is, from outside the group. Where that member
        has joined and not synced yet, its sync is waited for, until ``deadline`` (``time.monotonic``):
        kafkajs commits its old membership's offsets on its old coordinator's connection while it rejoins
        on the new one's, and sent from outside a group with a member joining, such a commit was refused
        UNKNOWN_MEMBER_ID and 41 records processed again (chaos run 10, a switch back 9 s after a switch).
        A member this connection's own join was given is not waited for: librdkafka commits between its
        join asking for a member id and the join that enters, whose answer would queue behind this one's.
        Nor is any once a request that join may need comes behind this commit (``behind``, see ``came``)."""
        named = commit_partitions(body)
        members = self.gateway.members
        while (found := members.successor(body.group_id, cluster, identity, named)) is None:
            left = deadline - time.monotonic()
            mine = self._given.get(body.group_id)  # its join queues behind this commit: not waited for
            syncing = members.syncing(body.group_id, cluster, identity, besides=mine)
            if left <= 0 or not syncing or members.entering(body.group_id, cluster):
                return body
            if behind.rejoin.done():
                log.info(
                    "group %s: a commit carried to %s goes from outside it, not waiting for a new member's "
                    "sync: a request that sync may need came behind it", body.group_id, cluster,
                )  # fmt: skip
                return body
            synced = asyncio.ensure_future(members.next_sync(body.group_id, left))
            try:
                await asyncio.wait({synced, behind.rejoin}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                synced.cancel()
        member_id, generation = found
        return dataclasses.replace(body, member_id=member_id, generation_id_or_member_epoch=generation)

    async def _carried(
        self, request: Request, snapshot: RoutingSnapshot, cluster: str, source: str, topics: tuple[str, ...]
    ) -> tuple[Any, int] | None:
        """The commit as ``cluster``'s coordinator takes it from outside the group, and that coordinator
        (None: it cannot be carried now)."""
        link = self.gateway.links.carrying_link(snapshot, source, cluster, topics)
        try:
            if link is None:
                raise UpstreamError(f"no link from {source} to {cluster} copies {topics}")
            records = await self.gateway.links.link_records(link)
            presenter = await self.gateway.links.presenter(snapshot, cluster, topics)
            node = await self._coordinator(cluster, request.body.group_id)
        except Exception as exc:
            log.warning(
                "commit of group %s not carried from %s to %s (the client retries it): %s",
                request.body.group_id, source, cluster, exc,
            )  # fmt: skip
            return None
        left = snapshot.clusters.get(source)
        planned = left is None or left.state is ClusterState.ACTIVE  # else a failover: see held

        def end(topic: str, partition: int) -> int | None:
            """The new cluster's end at the switch, in client offsets."""
            final = records.ends.get((topic, partition))
            presented = presenter(topic, partition) if presenter is not None else None
            if final is None or presented is None:
                return None if final is None else final[1]
            return presented.position_to_client(final[1])

        return carried_commit(request.body, end, planned=planned), node

    def adopt(self, request: Request, node: int | None, send: Send) -> Coroutine[Any, Any, Reply]:
        """Send a commit from outside the group once this connection's rejoin is done, as the member it
        rejoined as (see ``ADOPT`` in :mod:`workers.gateway.routing.decision`); as sent if the rejoin takes
        longer than a held request may wait."""
        rejoin = self._waited_for(request)  # the join under way as the commit comes
        assert rejoin is not None, "adopted only while a rejoin is under way (_rejoining)"
        again, behind = rejoin.again, self._behind_since(request)  # a refusal from now on ends the wait

        async def adopted() -> Reply:
            body = await self._as_rejoined(rejoin, again, request, request.body, behind)
            return await (await send(body, node))

        return adopted()

    def in_synced_generation(self, request: Request, cluster: str) -> Any | None:
        """An OffsetCommit forwarded to ``cluster`` as its member's generation now, where it names an
        earlier one and the member's latest sync there (the gateway saw it answered) assigned it every
        partition the commit names; None: as it came. kafkajs committed the generation before on the
        connection its next join had just synced on, the sync's answer in before the commit was decided:
        refused `ILLEGAL_GENERATION` (a chaos trial). The broker refuses such a commit so that a member
        that lost its partitions does not overwrite another's; one that kept them commits for itself."""
        body = request.body
        generation = body.generation_id_or_member_epoch
        if request.api_version < 1 or generation < 0 or not body.member_id:
            return None
        member = self.gateway.members.get(body.group_id, body.member_id)
        if member is None or member.consumer or member.cluster != cluster or member.synced is None:
            return None
        synced, assigned = member.synced
        if synced <= generation or assigned is None or not commit_partitions(body) <= assigned:
            return None
        return dataclasses.replace(body, generation_id_or_member_epoch=synced)

    def _waited_for(self, request: Request) -> Rejoin | None:
        """The join a commit coming now may wait for: this connection's consumer's, under way and entered
        (see ``carry``); else, for a commit naming its member, that member's answered on another of the
        process's connections (``Members.rejoin_of``: kafkajs joined on its new coordinator's connection
        after a broker was killed and committed the generation before on the old one's, 5 ms after the
        join's answer; refused ILLEGAL_GENERATION, a chaos trial)."""
        body = request.body
        rejoin = self._rejoins.get(body.group_id)
        if rejoin is not None and rejoin.entered and not rejoin.joined.done():
            return rejoin
        return self.gateway.members.rejoin_of(body.group_id, body.member_id) if body.member_id else None

    def _rejoining(self, request: Request, member: Member | None) -> bool:
        """For a Heartbeat: whether its member, or this connection's consumer, is already joining the
        group again. For an OffsetCommit from outside the group: whether this connection's consumer is,
        its join entered; from its member at a generation its join has passed, whether that join waits
        for its sync (see ``ADOPT`` and ``QUIET`` in :mod:`workers.gateway.routing.decision`)."""
        key, body = request.api_key, request.body
        if key == apis.HEARTBEAT:
            rejoin = self._rejoins.get(body.group_id)
            here = rejoin is not None and not rejoin.joined.done()
            return here or (member is not None and member.rejoining)
        if key != apis.OFFSET_COMMIT or request.api_version < 1:
            return False
        rejoin = self._waited_for(request)
        if rejoin is None:
            return False
        outside = body.generation_id_or_member_epoch < 0 and not body.member_id
        generation = body.generation_id_or_member_epoch
        return outside or rejoin.passed(body.member_id, generation) or rejoin.ahead_of(body.member_id)

    def _copied_from(self, snapshot: RoutingSnapshot, cluster: str, topics: tuple[str, ...]) -> str | None:
        """The one other cluster a link copies ``topics`` from to ``cluster`` (None: none, or several)."""
        links = self.gateway.links
        sources = [
            c for c in snapshot.clusters
            if c != cluster and links.carrying_link(snapshot, c, cluster, topics) is not None
        ]  # fmt: skip
        return sources[0] if len(sources) == 1 else None

    async def _as_rejoined(
        self, rejoin: Rejoin, again: asyncio.Future[None], request: Request, body: Any,
        behind: Behind,
    ) -> Any:  # fmt: skip
        """``body`` (an OffsetCommit) as the member ``rejoin`` rejoins as, once the rejoin is done;
        unchanged if the join is refused meanwhile (``again``: ``rejoin.again`` as the commit was decided;
        read later, it would be a refusal still to come, of a join the client sends after this commit,
        whose answer queues behind it), or takes longer than a held request may wait (then the commits
        after it wait no more: ``Rejoin.waited_out``) — or once a request the rejoin may need comes behind
        this commit (``behind``): for a rejoin on this connection, one its client may need answered
        before it syncs (kafkajs's leader asked for Metadata behind its commit, after its join: the sync
        waited 10 s for that answer, and the commit went as it came after all, refused
        ILLEGAL_GENERATION), as the SyncGroup's own answer, learned as it comes, ends the wait."""
        limit = hold_limit(request, self.gateway.config.gateway.block_hold_s, rejoin.session_s)
        here = rejoin is self._rejoins.get(request.body.group_id)
        cue = behind.sync if here else behind.rejoin
        if not rejoin.waited_out:
            ends: set[asyncio.Future[Any]] = {rejoin.joined, again, cue}
            done, _ = await asyncio.wait(ends, timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            rejoin.waited_out = not done
        if not rejoin.joined.done():
            if cue.done():
                log.info(
                    "group %s: a commit goes as it came, not waiting for its member's rejoin on %s "
                    "connection: a request that rejoin may need came behind it", request.body.group_id,
                    "this" if here else "another",
                )  # fmt: skip
            return body
        member_id, generation = rejoin.joined.result()
        if body.member_id and not rejoin.owns(body):  # its partitions went to others: as it came
            return body
        return dataclasses.replace(body, member_id=member_id, generation_id_or_member_epoch=generation)

    async def _coordinator(self, cluster: str, group: str) -> int:
        upstream = self.connection.upstream(cluster, None, long_poll=False)
        return await coordinator(self.gateway.brokers, upstream, group)

    def _coordinators(self) -> Coordinators:
        return Coordinators(self.gateway.brokers, self.connection.credentials)


def _alone(sync: Any) -> bool:
    """Whether a SyncGroup is its group's leader's, assigning partitions to itself alone: a group of one."""
    return len(sync.assignments) == 1 and sync.assignments[0].member_id == sync.member_id


def _refusals(request: Request, reply: bytes) -> set[ErrorCode]:
    """The error codes of an OffsetCommit's answer as written to the client (after its size); none where
    it cannot be read (the client's to make sense of, as before)."""
    try:
        answer = decode_response(request, reply[4:])
    except FrameError:
        return set()
    return {ErrorCode(p.error_code) for topic in answer.topics for p in topic.partitions}


def assigned_partitions(assignment: bytes) -> frozenset[tuple[str, int]] | None:
    """The partitions a SyncGroup's assignment names, read as the consumer protocol writes it (version,
    then topics with their partitions, then user data); None where it is not that."""
    try:
        at = 2
        (topics,) = _INT32.unpack_from(assignment, at)
        at += 4
        found: set[tuple[str, int]] = set()
        for _ in range(topics):
            (size,) = _INT16.unpack_from(assignment, at)
            if size < 0 or at + 2 + size > len(assignment):
                return None
            topic = assignment[at + 2 : at + 2 + size].decode()
            at += 2 + size
            (count,) = _INT32.unpack_from(assignment, at)
            at += 4
            if count < 0 or at + 4 * count > len(assignment):  # a length from the wire: bounded by it
                return None
            found.update((topic, p) for p in struct.unpack_from(f">{count}i", assignment, at))
            at += 4 * count
    except (struct.error, UnicodeDecodeError, ValueError):
        return None
    return frozenset(found)


_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")


def _enters(request: Request, member_id: str) -> bool:
    """Whether a JoinGroup sent as ``member_id`` makes its member one of the group at once: one naming
    its member, a static member's (KIP-345), or one from before KIP-394 (v4) — not a dynamic member's
    first, which is only told its member id."""
    return bool(member_id) or _static(request) or request.api_version < 4


def _rejoins_removed(request: Request, consumer: bool) -> bool:
    """Whether ``request``, naming a member that neither the cluster it goes to nor the one a link copies
    from lists, is a classic dynamic member's JoinGroup: one whose membership the flip had the cluster
    it left forget (another process of the gateway did, which saw it join), sent again under its old id,
    as kafkajs does. Sent on as it is, the new cluster refused it (UNKNOWN_MEMBER_ID), kafkajs's two
    joins in flight each joined anew — two members for one client, the group stalled until the second's
    session ran out — and a commit of the old membership was refused (chaos run, 2026-12-05). Taken for
    a member moved from there, it goes as a new member's, its joins in flight as one (``rejoined_as``).
    A member the new cluster just named (KIP-394) is not listed yet either; the process that forwarded
    its first join knows it (``learn``), and any other lets that id go there and has it ask for one
    once more."""
    return request.api_key == apis.JOIN_GROUP and not consumer and not _static(request)


def _static(request: Request) -> bool:
    """Whether a JoinGroup is a static member's (KIP-345), whom the broker knows by its instance id."""
    return request.api_version >= 5 and bool(request.body.group_instance_id)
