"""A moved member's joins and the commits that wait for a connection's rejoin: what ends each wait.

A wait that nothing ends lasts a held request's whole hold (10 s here), and a client's requests behind it
on the same connection wait as long: a kafkajs group stalled so in a chaos trial.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import struct
import time
from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.join_group.v5.response import JoinGroupResponse
from kio.schema.offset_commit.v8.response import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from kio.schema.sync_group.v3.response import SyncGroupResponse
from kio.static.primitive import i32, i32Timedelta

from switchyard.frames.protocol import decode_response, encode_request, encode_response, parse_request
from switchyard.identity import Identity
from tests.helpers.sessions import Unsynced
from tests.unit.test_gateway_carry import offset_commit
from workers.gateway.groups.carry import carried_commit
from workers.gateway.groups.handling import GroupHandling, assigned_partitions
from workers.gateway.groups.members import Member, Members
from workers.gateway.routing import apis
from workers.gateway.routing.blocking import OwnAnswer
from workers.gateway.routing.holds import KIP848_HEARTBEAT_S, hold_limit

GROUP, MOVED = "orders", "m-old"
HOLD_S = 10.0
SOON_S = 1.0
"""Well within a hold: a wait that ends this soon was ended by what the test did, not by its limit."""


def gateway() -> Any:
    members = Members()
    members.joined(GROUP, MOVED, Member("primary", 30.0))
    config = SimpleNamespace(gateway=SimpleNamespace(block_hold_s=HOLD_S))
    return SimpleNamespace(members=members, config=config, unsynced=Unsynced())


def handling(shared: Any) -> GroupHandling:
    return GroupHandling(shared, SimpleNamespace(credentials=None))  # type: ignore[arg-type]


def join(correlation_id: int, member_id: str = MOVED) -> Any:
    held = datetime.timedelta(seconds=30)
    body = SimpleNamespace(group_id=GROUP, member_id=member_id, group_instance_id=None, session_timeout=held)
    return SimpleNamespace(api_key=apis.JOIN_GROUP, api_version=9, correlation_id=correlation_id, body=body)


def recorder(sent: list[Any], reply: bytes | None = None) -> Any:
    """A ``Send`` that notes each body it is given and answers at once, with ``reply``."""

    async def send(body: Any, node: int | None) -> Any:
        sent.append(body)
        done: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        done.set_result(reply)
        return done

    return send


def request_of(api_key: int) -> Any:
    return SimpleNamespace(api_key=api_key, api_version=0, correlation_id=99, body=None)


def commit() -> Any:
    body = SimpleNamespace(group_id=GROUP, member_id="", generation_id_or_member_epoch=-1)
    return SimpleNamespace(api_key=apis.OFFSET_COMMIT, api_version=9, correlation_id=7, body=body)


def test_a_joins_answer_ends_only_its_own_wait_not_a_later_joins() -> None:
    """A join that waited out its hold for an earlier one is sent as a new member's in turn: the earlier
    join's answer must not end the wait of those behind the later one."""

    async def run() -> None:
        members = gateway().members
        first = members.rename(GROUP, MOVED)
        second = members.rename(GROUP, MOVED)  # the one behind waited past its hold
        members.renamed(GROUP, MOVED, "m-new", first)
        assert first.done()
        assert members.renaming(GROUP, MOVED) is second, "the later join's wait was ended by the earlier's"
        assert members.get(GROUP, MOVED).rejoined_as == "m-new"  # type: ignore[union-attr]
        members.renamed(GROUP, MOVED, "m-newer", second)
        assert members.renaming(GROUP, MOVED) is None

    asyncio.run(run())


def test_joins_waiting_for_one_whose_connection_ended_go_on_at_once() -> None:
    async def run() -> None:
        shared = gateway()
        first, second = handling(shared), handling(shared)
        assert await first.rejoined_as(join(1), "standby") == ""  # sent as a new member's
        waiting = asyncio.create_task(second.rejoined_as(join(2), "standby"))
        await asyncio.sleep(0.1)
        assert not waiting.done()
        first.close()  # its join is never answered
        assert await asyncio.wait_for(waiting, SOON_S) == ""

    asyncio.run(run())


def test_a_join_refused_here_ends_the_wait_of_the_joins_behind_it() -> None:
    async def run() -> None:
        shared = gateway()
        first, second = handling(shared), handling(shared)
        sent = join(1)
        await first.rejoined_as(sent, "standby")
        waiting = asyncio.create_task(second.rejoined_as(join(2), "standby"))
        await asyncio.sleep(0.1)
        first.answered_here(sent)
        assert await asyncio.wait_for(waiting, SOON_S) == ""

    asyncio.run(run())


def test_a_commit_decided_before_its_join_was_refused_waits_for_no_later_join() -> None:
    """The commit waits for the rejoin under way as it comes. Refused after the commit was decided but
    before it waits, the client joins again — after this commit, on this connection, so that join's
    answer queues behind the commit's: waiting for it would wait the whole hold."""

    async def run() -> None:
        group = handling(gateway())
        group.sending(join(1, member_id="m-new"), "m-new")  # the rejoin, entered
        sent: list[Any] = []
        send = recorder(sent)

        adopted = group.adopt(commit(), None, send)  # decided now...
        group.answered_here(join(2, member_id="m-new"))  # ...its join refused before it waits
        await asyncio.wait_for(adopted, SOON_S)
        assert [b.member_id for b in sent] == [""], "sent as a member it never became"

    asyncio.run(run())


def assignment(*partitions: tuple[str, int]) -> bytes:
    """A SyncGroup's assignment as the consumer protocol writes it (version 0, no user data)."""
    topics = sorted({t for t, _ in partitions})
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        mine = [p for t, p in partitions if t == topic]
        body += (
            struct.pack(">h", len(topic)) + topic.encode() + struct.pack(f">i{len(mine)}i", len(mine), *mine)
        )
    return body + struct.pack(">i", -1)


def test_a_syncs_assignment_is_read_as_the_consumer_protocol_writes_it() -> None:
    assert assigned_partitions(assignment(("t", 0), ("t", 2), ("u", 1))) == {("t", 0), ("t", 2), ("u", 1)}
    assert assigned_partitions(b"") is None
    assert assigned_partitions(b"\0\0\0\0\0\\9\0\1") is None  # cut short
    assert assigned_partitions(struct.pack(">hih1si", 0, 1, 1, b"t", 1 << 30)) is None  # a count past its end


@dataclasses.dataclass(frozen=True)
class CommitBody:
    """An OffsetCommit's body, in the fields the gateway reads and replaces."""

    group_id: str
    member_id: str
    generation_id_or_member_epoch: int
    topics: tuple[Any, ...]


def member_commit(generation: int, *partitions: tuple[str, int]) -> Any:
    named = sorted({t for t, _ in partitions})
    topics = tuple(
        SimpleNamespace(
            name=t, partitions=[SimpleNamespace(partition_index=p) for u, p in partitions if u == t]
        )
        for t in named
    )
    body = CommitBody(GROUP, "m-new", generation, topics)
    return SimpleNamespace(api_key=apis.OFFSET_COMMIT, api_version=8, correlation_id=9, body=body)


def adopted_generation(assigned: bytes, *partitions: tuple[str, int]) -> int:
    """The generation a commit of the last generation goes in, made as its member's next join waits for
    its sync (the join answered with generation 2), once the sync assigned ``assigned``."""

    async def run() -> int:
        group = handling(gateway())
        group.sending(join(1, member_id="m-new"), "m-new")
        rejoin = group._rejoins[GROUP]
        commit = member_commit(1, *partitions)
        assert group._rejoining(commit, None), "behind its join: the broker takes it in the join's generation"
        rejoin.given = ("m-new", 2)  # the join's answer
        assert not group._rejoining(member_commit(2, *partitions), None)  # its own generation: sent
        assert group._rejoining(commit, None)
        sent: list[Any] = []
        send = recorder(sent)

        adopted = asyncio.ensure_future(group.adopt(commit, None, send))
        await asyncio.sleep(0.05)
        assert not sent, "sent before the sync"
        rejoin.joined.set_result(("m-new", 2))  # the sync, as ``learn`` takes it
        rejoin.assigned = assigned_partitions(assigned)
        await asyncio.wait_for(adopted, SOON_S)
        return int(sent[0].generation_id_or_member_epoch)

    return asyncio.run(run())


def test_a_commit_of_the_generation_a_members_join_passed_goes_in_the_next_once_synced() -> None:
    assert adopted_generation(assignment(("t", 0), ("t", 1)), ("t", 0), ("t", 1)) == 2
    assert adopted_generation(assignment(("t", 0)), ("t", 0), ("t", 1)) == 1  # t-1 went to another member
    assert adopted_generation(b"", ("t", 0)) == 1  # not the consumer protocol's: as it came


def test_joins_woken_by_a_join_that_got_no_member_id_go_one_at_a_time() -> None:
    """The first join's connection ended unanswered: of the two joins waiting for it, one goes as a new
    member's, and the other waits for that one's answer and goes as the member id it got — both going
    as new members' would make two members again."""

    async def run() -> tuple[str, str]:
        shared = gateway()
        first, second, third = handling(shared), handling(shared), handling(shared)
        await first.rejoined_as(join(1), "standby")
        waiting = [
            asyncio.create_task(h.rejoined_as(join(n), "standby")) for n, h in ((2, second), (3, third))
        ]
        await asyncio.sleep(0.1)
        first.close()
        done, _ = await asyncio.wait(waiting, timeout=SOON_S, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, "both went as new members'"
        gone = next(iter(done))
        went, last = (second, waiting[1]) if gone is waiting[0] else (third, waiting[0])
        shared.members.joined(GROUP, "m-given", Member("standby", 30.0))
        went._renamed(join(2 if went is second else 3), "m-given")  # its answer: the member id it got
        return gone.result(), await asyncio.wait_for(last, SOON_S)

    assert asyncio.run(run()) == ("", "m-given")


def test_an_old_memberships_commit_waits_for_its_clients_new_member_to_sync() -> None:
    """kafkajs commits its old membership's offsets on its old coordinator's connection while it rejoins
    on the new one's: the carried commit goes as the new member once that member has synced there, not
    from outside a group that has a member joining (refused UNKNOWN_MEMBER_ID: a chaos trial)."""
    shop = Identity("shop")
    carried = dataclasses.replace(member_commit(-1, ("t", 0)).body, member_id="")

    async def run() -> None:
        shared = gateway()
        group = handling(shared)

        def successor(deadline: float) -> Any:
            return group._as_successor(carried, "standby", shop, deadline, group._next_behind())

        assert await successor(time.monotonic() + HOLD_S) is carried
        shared.members.joined(GROUP, "m-new", Member("standby", 30.0, identity=shop))  # joined, not synced
        waiting = asyncio.ensure_future(successor(time.monotonic() + HOLD_S))
        await asyncio.sleep(0.05)
        group.came(request_of(apis.FETCH))  # a join needs no Fetch answered
        await asyncio.sleep(0.05)
        assert not waiting.done(), "sent from outside the group while its client's member joins"
        shared.members.synced(GROUP, "m-new", 5, frozenset({("t", 0)}))
        went = await asyncio.wait_for(waiting, SOON_S)
        assert (went.member_id, went.generation_id_or_member_epoch) == ("m-new", 5)
        shared.members.joined(GROUP, "m-next", Member("standby", 30.0, identity=shop))  # never syncs
        began = time.monotonic()
        assert await successor(began + 0.2) is carried
        assert time.monotonic() - began < SOON_S
        waiting = asyncio.ensure_future(successor(time.monotonic() + HOLD_S))
        await asyncio.sleep(0.05)
        group.came(request_of(apis.METADATA))  # a group leader's, for its assignment: queued behind this
        assert await asyncio.wait_for(waiting, SOON_S) is carried, "waited for a sync that waits for it"
        group._given[GROUP] = "m-next"  # this connection's own join got it: that join waits behind this
        began = time.monotonic()
        assert await successor(began + HOLD_S) is carried
        assert time.monotonic() - began < SOON_S, "waited for a join queued behind it"

    asyncio.run(run())


def real_join(member_id: str, correlation_id: int) -> Any:
    """A JoinGroup as kafkajs sends it (v5), parsed as the gateway parses it."""
    fields = {
        "group_id": GROUP, "session_timeout": datetime.timedelta(seconds=30),
        "rebalance_timeout": datetime.timedelta(seconds=60), "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocols": (),
    }  # fmt: skip
    return encode_request(apis.JOIN_GROUP, 5, fields, client_id="c", correlation_id=correlation_id)


def real_sync(member_id: str, generation: int) -> Any:
    fields = {
        "group_id": GROUP, "generation_id": generation, "member_id": member_id, "group_instance_id": None,
        "assignments": (),
    }  # fmt: skip
    return encode_request(apis.SYNC_GROUP, 3, fields, client_id="c", correlation_id=50)


def answer(request: Any, body: Any) -> bytes:
    return encode_response(request, body)[4:]  # as read off the wire, without its size


async def generation_after_sync(behind: int | None, *, one_connection: bool) -> int:
    """The generation a commit of generation 1 goes in, made once its member's join (answered with
    generation 2) is under way on the same connection or another, with a request of ``behind`` coming
    behind the commit on its own connection (None: none) and the join's sync answered after."""
    shop = Identity("shop")
    shared = gateway()
    joining = handling(shared)
    committing = joining if one_connection else handling(shared)
    sent_join = real_join("m-new", 1)
    joining.sending(sent_join, "m-new")
    commit = member_commit(1, ("t", 0))
    if not one_connection:
        assert not committing._rejoining(commit, None), "held before the join was answered"
    joined = JoinGroupResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
        generation_id=i32(2), protocol_name="range", leader="m-new", member_id="m-new", members=(),
    )  # fmt: skip
    joining.learn(sent_join, answer(sent_join, joined), "standby", shop)
    assert committing._rejoining(commit, None), "sent in a generation the group has left"
    sent: list[Any] = []
    adopted = asyncio.ensure_future(committing.adopt(commit, None, recorder(sent)))
    await asyncio.sleep(0.05)
    if behind is not None:
        committing.came(request_of(behind))
        await asyncio.sleep(0.05)
    if not adopted.done():
        assert not sent, "sent before the sync"
        sync = real_sync("m-new", 2)
        synced = SyncGroupResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            error_code=ErrorCode.none,
            assignment=assignment(("t", 0)),
        )
        joining.learn(sync, answer(sync, synced), "standby", shop)
        assert not committing._rejoining(commit, None), "a rejoin synced is one no more"
    await asyncio.wait_for(adopted, SOON_S)
    return int(sent[0].generation_id_or_member_epoch)


def test_a_commit_of_a_generation_passed_by_a_join_on_another_connection_goes_in_the_next_one() -> None:
    """kafkajs, its coordinator's broker killed, joined on the new coordinator's connection and committed
    the generation before on the old one's, 5 ms after the join's answer: refused ILLEGAL_GENERATION (a
    chaos trial). The commit waits for that join's sync, on the other connection, and goes in its
    generation — unless a request the join may need comes behind it on its own connection."""
    assert asyncio.run(generation_after_sync(None, one_connection=False)) == 2
    assert asyncio.run(generation_after_sync(apis.FETCH, one_connection=False)) == 2
    assert (
        asyncio.run(generation_after_sync(apis.METADATA, one_connection=False)) == 1
    )  # the leader's sync waits for its answer


def test_a_commit_behind_its_own_connections_rejoin_waits_until_a_request_the_sync_needs_comes() -> None:
    """kafkajs, its fetch answered NOT_LEADER after a switch's flip, joined again and committed the
    generation before on the same connection, then, the group's leader, asked for Metadata there before
    its sync: that answer queued behind the commit held for the sync, the group stood 10 s, and the
    commit went as it came after all, refused ILLEGAL_GENERATION (a chaos trial). Such a request ends the
    wait at once; the join's own SyncGroup does not, its answer learned as it comes."""
    assert asyncio.run(generation_after_sync(None, one_connection=True)) == 2
    assert (
        asyncio.run(generation_after_sync(apis.SYNC_GROUP, one_connection=True)) == 2
    )  # its answer ends the wait
    assert asyncio.run(generation_after_sync(apis.FETCH, one_connection=True)) == 2
    assert (
        asyncio.run(generation_after_sync(apis.METADATA, one_connection=True)) == 1
    )  # the leader's: at once


def consumer_join(correlation_id: int, member_id: str) -> Any:
    """A consumer-protocol member's join (KIP-848): a ConsumerGroupHeartbeat at member epoch 0."""
    body = SimpleNamespace(group_id=GROUP, member_id=member_id, member_epoch=0, topic_partitions=None)
    return SimpleNamespace(
        api_key=apis.CONSUMER_GROUP_HEARTBEAT,
        api_version=1,
        correlation_id=correlation_id,
        body=body,
        frame=b"",
    )


async def carried_unanswered(shared: Any) -> tuple[asyncio.Future[Any], asyncio.Future[Any]]:
    """A commit carried into the group on the standby from outside it, through another connection of the
    process, sent and not answered yet: its carry, and the answer to give it (the carry's link reading
    left out)."""
    carried = dataclasses.replace(member_commit(-1, ("t", 0)).body, member_id="")
    committing = handling(shared)
    answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    async def send(body: Any, node: int | None) -> Any:
        return answered

    async def as_is(*_: Any) -> tuple[Any, int | None]:
        return carried, None

    committing._carried = as_is  # type: ignore[method-assign]
    request = SimpleNamespace(api_key=apis.OFFSET_COMMIT, api_version=8, correlation_id=9, body=carried)
    carrying = asyncio.ensure_future(
        committing.carry(request, None, "standby", "primary", ("t",), send=send, identity=Identity("shop"))  # type: ignore[arg-type]
    )
    await asyncio.sleep(0.05)
    return carrying, answered


def test_a_join_entering_waits_for_a_commit_carried_into_its_group_on_another_connection() -> None:
    """kafkajs committed its old membership's offsets on its old coordinator's connection and joined on
    another 0.3 s later: a join that enters first makes the group on the new cluster refuse a commit
    from outside it (UNKNOWN_MEMBER_ID), and the records are processed again (a chaos trial)."""

    async def run() -> None:
        shared = gateway()
        joining = handling(shared)
        carrying, answered = await carried_unanswered(shared)
        await asyncio.wait_for(joining.before_join(join(2, "m-x"), "m-x", "primary"), SOON_S)  # elsewhere
        await asyncio.wait_for(joining.before_join(join(3, ""), "", "standby"), SOON_S)  # asks for an id
        entering = asyncio.ensure_future(joining.before_join(join(4, "m-x"), "m-x", "standby"))
        await asyncio.sleep(0.05)
        assert not entering.done(), "entered the group before a commit carried into it was answered"
        answered.set_result(None)
        await asyncio.wait_for(carrying, SOON_S)
        await asyncio.wait_for(entering, SOON_S)
        assert not shared.members.entering(GROUP, "standby")
        await asyncio.wait_for(joining.before_join(join(5, "m-x"), "m-x", "standby"), SOON_S)  # none left

    asyncio.run(run())


def test_a_consumer_protocol_join_waits_for_a_commit_carried_into_its_group() -> None:
    """librdkafka's KIP-848 member, moved back by a switch, had its old membership's commit carried to
    the primary from outside the group, and joined there (member epoch 0) before that commit was
    answered: the group, a member in it, refused the commit UNKNOWN_MEMBER_ID (chaos run, 2026-12-05,
    twice). Its join waits for the carried commit, as a classic member's does; one to another cluster
    does not, nor one once the commit is answered."""
    shop = Identity("shop")

    async def run() -> None:
        shared = gateway()
        shared.consumer_groups, shared.real_ids = SimpleNamespace(note=lambda group: None), None
        joining = handling(shared)
        carrying, answered = await carried_unanswered(shared)
        elsewhere = joining.heartbeat_out(consumer_join(2, "m-x"), "primary", shop)  # type: ignore[arg-type]
        await asyncio.wait_for(elsewhere, SOON_S)
        entering = asyncio.ensure_future(joining.heartbeat_out(consumer_join(3, "m-x"), "standby", shop))  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        assert not entering.done(), "joined the group before a commit carried into it was answered"
        assert shared.members.get(GROUP, "m-x").cluster == "primary", "a member of the standby already"
        answered.set_result(None)
        await asyncio.wait_for(carrying, SOON_S)
        await asyncio.wait_for(entering, SOON_S)
        assert shared.members.get(GROUP, "m-x").cluster == "standby"
        await asyncio.wait_for(joining.heartbeat_out(consumer_join(4, "m-x"), "standby", shop), SOON_S)  # type: ignore[arg-type]

    asyncio.run(run())


def test_a_consumer_protocol_members_requests_are_held_within_its_heartbeats_time_out() -> None:
    """librdkafka times a KIP-848 heartbeat out after the heartbeat interval (5 s), and every request in
    flight on its connection with it: held 10 s (by the broker's 45 s session, tried once), a chaos run's
    consumer had two commits fail so (``_TIMED_OUT``) and processed four records again. A classic
    member's requests are held by its own session."""
    shared = gateway()
    shared.members.joined(GROUP, "kip848", Member("primary", None, consumer=True))
    group = handling(shared)

    def held(api_key: int, member_id: str) -> float:
        request = SimpleNamespace(api_key=api_key, body=SimpleNamespace(group_id=GROUP, member_id=member_id))
        return hold_limit(request, HOLD_S, group.session_s(request))  # type: ignore[arg-type]

    assert held(apis.CONSUMER_GROUP_HEARTBEAT, "kip848") < KIP848_HEARTBEAT_S
    assert held(apis.OFFSET_COMMIT, "kip848") < KIP848_HEARTBEAT_S
    assert held(apis.HEARTBEAT, MOVED) == HOLD_S  # a third of its 30 s session


def carrier(shared: Any, sent: list[Any]) -> tuple[GroupHandling, Any]:
    """A connection whose carried commits go as they are given (the link's reading left out), and a
    ``carry`` of one of them: what it sent lands in ``sent``, answered at once."""
    shop = Identity("shop")
    carried = dataclasses.replace(member_commit(-1, ("t", 0)).body, member_id="")
    committing = handling(shared)

    async def as_is(*_: Any) -> tuple[Any, int | None]:
        return carried, None

    committing._carried = as_is  # type: ignore[method-assign]
    request = SimpleNamespace(api_key=apis.OFFSET_COMMIT, api_version=8, correlation_id=9, body=carried)
    committing.came(request)  # type: ignore[arg-type]

    def carry() -> Any:
        return committing.carry(
            request, None, "standby", "primary", ("t",), send=recorder(sent), identity=shop
        )  # type: ignore[arg-type]

    return committing, carry


def test_a_carried_commit_waiting_for_a_members_sync_goes_once_that_members_join_waits_for_it() -> None:
    """kafkajs's first join is told its member id (KIP-394): a member of the group's to come, whose sync a
    carried commit of the old membership waits for. Its second join enters the group, and so waits for
    that commit: each would wait its whole hold for the other. The commit goes from outside the group,
    which has no member yet and takes it."""

    async def run() -> None:
        shared = gateway()
        shared.members.joined(GROUP, "m-new", Member("standby", 30.0, identity=Identity("shop")))  # id told
        sent: list[Any] = []
        _, carry = carrier(shared, sent)
        carrying = asyncio.ensure_future(carry())
        await asyncio.sleep(0.05)
        assert not carrying.done(), "did not wait for the member's sync"
        entering = asyncio.ensure_future(handling(shared).before_join(join(4, "m-new"), "m-new", "standby"))
        await asyncio.wait_for(carrying, SOON_S)
        await asyncio.wait_for(entering, SOON_S)
        assert [b.member_id for b in sent] == [""], "not from outside the group"

    asyncio.run(run())


def test_a_request_a_rejoin_needs_that_came_while_the_commit_was_held_ends_its_wait() -> None:
    """A commit held by a block is carried only once the block ends: a Metadata request its client sent
    behind it meanwhile counts as much as one sent once it waits."""

    async def run() -> None:
        shared = gateway()
        shared.members.joined(GROUP, "m-new", Member("standby", 30.0, identity=Identity("shop")))
        sent: list[Any] = []
        committing, carry = carrier(shared, sent)
        committing.came(request_of(apis.METADATA))  # before the carry begins
        await asyncio.wait_for(carry(), SOON_S)
        assert [b.member_id for b in sent] == [""]

    asyncio.run(run())


def test_a_rejoin_whose_connection_closed_or_that_synced_elsewhere_holds_no_commit() -> None:
    async def run() -> None:
        shop = Identity("shop")
        for ends in ("closed", "synced elsewhere"):
            shared = gateway()
            joining, committing = handling(shared), handling(shared)
            sent_join = real_join("m-new", 1)
            joining.sending(sent_join, "m-new")
            joined = JoinGroupResponse(
                throttle_time=i32Timedelta.parse(datetime.timedelta(0)), error_code=ErrorCode.none,
                generation_id=i32(2), protocol_name="range", leader="m-new", member_id="m-new", members=(),
            )  # fmt: skip
            joining.learn(sent_join, answer(sent_join, joined), "standby", shop)
            commit = member_commit(1, ("t", 0))
            assert committing._rejoining(commit, None)
            if ends == "closed":
                sent: list[Any] = []
                waiting = asyncio.ensure_future(committing.adopt(commit, None, recorder(sent)))
                await asyncio.sleep(0.05)
                joining.close()
                await asyncio.wait_for(waiting, SOON_S)  # as it came: nothing will sync that join now
                assert [b.generation_id_or_member_epoch for b in sent] == [1]
            else:
                sync = real_sync("m-new", 2)
                synced = SyncGroupResponse(
                    throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                    error_code=ErrorCode.none,
                    assignment=assignment(("t", 0)),
                )
                handling(shared).learn(sync, answer(sync, synced), "standby", shop)
            assert not committing._rejoining(commit, None), f"held for a rejoin {ends}"

    asyncio.run(run())


def test_a_commit_of_a_generation_before_its_members_latest_sync_goes_in_that_one() -> None:
    """kafkajs committed generation 10 on the connection its join of generation 11 had just synced on,
    the sync answered before the commit was read: refused ILLEGAL_GENERATION (a chaos trial). A member
    that kept every partition the commit names commits for itself in the generation it is in now."""
    shared = gateway()
    shared.members.joined(GROUP, "m-new", Member("standby", 30.0))
    group = handling(shared)
    assert group.in_synced_generation(member_commit(10, ("t", 0)), "standby") is None  # not synced yet
    shared.members.synced(GROUP, "m-new", 11, frozenset({("t", 0), ("t", 1)}))
    went = group.in_synced_generation(member_commit(10, ("t", 0), ("t", 1)), "standby")
    assert went is not None
    assert went.generation_id_or_member_epoch == 11
    assert group.in_synced_generation(member_commit(11, ("t", 0)), "standby") is None  # its own
    assert group.in_synced_generation(member_commit(10, ("t", 0), ("t", 2)), "standby") is None  # t-2 not its
    assert group.in_synced_generation(member_commit(10, ("t", 0)), "primary") is None  # synced elsewhere
    assert group.in_synced_generation(member_commit(-1, ("t", 0)), "standby") is None  # from outside


def refusing(sent: list[Any], request: Any, *errors: ErrorCode) -> Any:
    """A ``Send`` that notes each body it is given and answers the n-th with the n-th of ``errors`` (the
    last, once they run out) on the commit's partition."""
    answers = []
    for error in errors:
        partition = OffsetCommitResponsePartition(partition_index=i32(0), error_code=error)
        refused = OffsetCommitResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
            topics=(OffsetCommitResponseTopic(name="t", partitions=(partition,)),),
        )
        answers.append(encode_response(request, refused))  # as the client is sent it, its size first

    async def send(body: Any, node: int | None) -> Any:
        sent.append(body)
        done: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        done.set_result(answers[min(len(sent), len(answers)) - 1])
        return done

    return send


class Listed:
    """A group's coordinator on the new cluster, as ``Coordinators.members`` has it: ids to client ids;
    answered once ``opened`` is set, if given."""

    def __init__(self, members: dict[str, str], opened: asyncio.Event | None = None) -> None:
        self.listed, self.opened = members, opened

    async def members(self, cluster: str, group: str) -> tuple[dict[str, str], bool, bool]:
        if self.opened is not None:
            await self.opened.wait()
        return self.listed, False, False


OLD_COMMIT = parse_request(offset_commit(8))
"""A commit of client "c"'s old membership, its member "rdkafka-1234" of group "g"."""


def left_the_primary() -> Any:
    """A gateway process that saw ``OLD_COMMIT``'s member join the primary, and had it leave there at the
    flip."""
    shared = gateway()
    body = OLD_COMMIT.body
    shared.members.joined(body.group_id, body.member_id, Member("primary", 30.0, left=True))
    return shared


async def carried_to_standby(
    shared: Any, members: dict[str, str], *errors: ErrorCode
) -> tuple[Any, list[Any]]:
    """``OLD_COMMIT`` carried to the standby from outside the group, whose coordinator lists ``members``
    and answers with ``errors`` in turn: the reply, and the bodies sent."""
    sent: list[Any] = []
    committing = handling(shared)

    async def outside(*_: Any) -> tuple[Any, int | None]:
        return carried_commit(OLD_COMMIT.body, lambda _t, _p: None, planned=True), None

    committing._carried = outside  # type: ignore[method-assign]
    committing._coordinators = lambda: Listed(members)  # type: ignore[method-assign,assignment,return-value]
    send = refusing(sent, OLD_COMMIT, *errors)
    shop = Identity("shop")
    reply = await committing.carry(OLD_COMMIT, None, "standby", "primary", ("t",), send=send, identity=shop)  # type: ignore[arg-type]
    assert [b.member_id for b in sent[:1]] == [""], "not carried from outside the group"
    return reply, sent


def test_a_carried_commit_refused_for_its_clients_member_joined_elsewhere_is_sent_again() -> None:
    """kafkajs rejoined the standby through the other process of a gateway of two, and committed its old
    membership on this one's connection: carried from outside the group, which had its new member now,
    the commit was refused UNKNOWN_MEMBER_ID, and what it covered processed again (chaos run,
    2026-12-05). Answered the retriable error instead, the client sends it again as its new member. Once
    per membership: the Java client would send it as the same member for 60 s. A refusal with no member
    of that client there, or another refusal, is the client's to see."""

    async def run() -> None:
        joined_elsewhere = {"m-new": "c"}
        shared = left_the_primary()
        told, _ = await carried_to_standby(shared, joined_elsewhere, ErrorCode.unknown_member_id)
        assert isinstance(told, OwnAnswer)
        again, _ = await carried_to_standby(shared, joined_elsewhere, ErrorCode.unknown_member_id)  # the same
        assert isinstance(again, bytes), "told twice: the Java client resends as the same member for 60 s"
        for error, members in [
            (ErrorCode.unknown_member_id, {"m-other": "other@reader"}),  # not its client's member
            (ErrorCode.unknown_member_id, {}),
            (ErrorCode.offset_metadata_too_large, joined_elsewhere),  # another refusal
            (ErrorCode.none, joined_elsewhere),
        ]:
            reply, _ = await carried_to_standby(left_the_primary(), members, error)
            assert isinstance(reply, bytes), (error, members)

    asyncio.run(run())


def test_a_carried_commit_refused_goes_as_its_clients_one_member_there_whose_sync_was_refused() -> None:
    """kafkajs joined the standby through the other process, its sync was refused, and it committed its
    old membership's offsets before joining again: sent again by the client, the commit went as the old
    member again, and was refused (a chaos trial). It goes as the new member, at the generation whose
    sync was refused, each time; refused so for a while (the group between a join and its sync), the
    client is told to send it again, and it goes as that member again then; refused as a member moved
    on, it is told so once, as before. Not where the group has a member of another client, or more than
    one of this client's (whose the partitions are is not known then), nor as a member this process
    knows of another application's."""

    def refused_sync(shared: Any = None) -> Any:
        shared = shared or left_the_primary()
        shared.unsynced.refused("standby", "g", "m-new", 24)
        return shared

    async def run() -> None:
        unknown, taken = ErrorCode.unknown_member_id, ErrorCode.none
        shared = refused_sync()
        for _ in range(2):  # each commit of the old membership: kafkajs commits each batch's
            reply, sent = await carried_to_standby(shared, {"m-new": "c"}, unknown, taken)
            assert [(b.member_id, b.generation_id_or_member_epoch) for b in sent] == [("", -1), ("m-new", 24)]
            assert isinstance(reply, bytes)
            assert committed_code(reply) == taken
        shared = refused_sync()
        for _ in range(3):  # rebalancing a while: told to send it again, and sent as the member each time
            told, sent = await carried_to_standby(
                shared, {"m-new": "c"}, unknown, ErrorCode.rebalance_in_progress
            )
            assert isinstance(told, OwnAnswer)
            assert len(sent) == 2
        shared = refused_sync()
        told, sent = await carried_to_standby(shared, {"m-new": "c"}, unknown, ErrorCode.illegal_generation)
        assert isinstance(told, OwnAnswer)  # moved on since: told once...
        assert len(sent) == 2
        passed, _ = await carried_to_standby(shared, {"m-new": "c"}, unknown)
        assert isinstance(passed, bytes)  # ...and the next refusal is the client's
        assert committed_code(passed) == unknown
        another = left_the_primary()
        another.members.joined("g", "m-new", Member("standby", 30.0, identity=Identity("till")))
        for shared, members in [
            (refused_sync(), {"m-new": "c", "m-other": "other@reader"}),
            (refused_sync(), {"m-new": "c", "m-newer": "c"}),
            (refused_sync(another), {"m-new": "c"}),
            (left_the_primary(), {"m-new": "c"}),  # its sync not refused
        ]:
            told, sent = await carried_to_standby(shared, members, unknown, taken)
            assert isinstance(told, OwnAnswer), members
            assert len(sent) == 1, members

    asyncio.run(run())


def test_a_refused_carried_commit_is_not_sent_again_over_one_the_connection_carried_after_it() -> None:
    """Two commits of the old membership carried on one connection, the first refused: by the time the
    lookups let it be sent again as the new member, the second has gone. Sent again then, the first —
    older offsets — would land over the second; the client is told to send it again instead."""

    async def run() -> None:
        shared = left_the_primary()
        shared.unsynced.refused("standby", "g", "m-new", 24)
        committing, sent, opened = handling(shared), [], asyncio.Event()

        async def outside(*_: Any) -> tuple[Any, int | None]:
            return carried_commit(OLD_COMMIT.body, lambda _t, _p: None, planned=True), None

        committing._carried = outside  # type: ignore[method-assign]
        committing._coordinators = lambda: Listed({"m-new": "c"}, opened)  # type: ignore[method-assign,assignment,return-value]
        send = refusing(sent, OLD_COMMIT, ErrorCode.unknown_member_id, ErrorCode.none)
        shop = Identity("shop")
        first, second = (
            asyncio.ensure_future(
                committing.carry(OLD_COMMIT, None, "standby", "primary", ("t",), send=send, identity=shop)  # type: ignore[arg-type]
            )
            for _ in range(2)
        )
        while len(sent) < 2:  # both sent before the first's refusal is looked into
            await asyncio.sleep(0)
        opened.set()
        assert isinstance(await first, OwnAnswer)
        assert isinstance(await second, bytes)
        assert [b.member_id for b in sent] == ["", ""], "the first sent again after the second"

    asyncio.run(run())


def committed_code(reply: bytes) -> ErrorCode:
    """The error code of ``OLD_COMMIT``'s one partition in ``reply``, as the client is sent it."""
    answer = decode_response(OLD_COMMIT, reply[4:])
    return ErrorCode(answer.topics[0].partitions[0].error_code)


def test_a_commit_sent_again_after_one_waited_out_its_joins_sync_goes_at_once() -> None:
    """kafkajs's group leader, its assignment's Metadata lost with a connection, never synced, and resent
    its old generation's commit four times: each waited a whole hold for that sync (a chaos trial)."""

    async def run() -> tuple[float, float, list[int]]:
        shared = gateway()
        shared.config.gateway.block_hold_s = 0.3
        group = handling(shared)
        group.sending(join(1, member_id="m-new"), "m-new")
        group._rejoins[GROUP].given = ("m-new", 2)  # the join's answer; no sync follows
        sent: list[Any] = []
        waits = []
        for _ in range(2):
            began = time.monotonic()
            await asyncio.wait_for(group.adopt(member_commit(1, ("t", 0)), None, recorder(sent)), SOON_S)
            waits.append(time.monotonic() - began)
        return waits[0], waits[1], [b.generation_id_or_member_epoch for b in sent]

    first, again, generations = asyncio.run(run())
    assert first >= 0.3, "the first commit did not wait for the sync"
    assert again < 0.1, f"the commit sent again waited {again:.2f} s for a sync that did not come"
    assert generations == [1, 1]


def test_a_commit_behind_its_members_unanswered_join_goes_once_synced_in_the_syncs_generation() -> None:
    """A connection's requests reach the broker one at a time: the commit is taken after the join is
    answered, and refused there if the join made a new generation (kafkajs, a chaos trial: 3 ms after
    its join's answer). It waits for the sync instead, as one sent after the join's answer does."""

    async def run() -> list[int]:
        group = handling(gateway())
        group.sending(join(1, member_id="m-new"), "m-new")
        rejoin = group._rejoins[GROUP]
        commit = member_commit(1, ("t", 0))
        assert group._rejoining(commit, None), "sent on as it came: refused once the join is answered"
        other = member_commit(1, ("t", 0))
        other.body = dataclasses.replace(other.body, member_id="m-other")
        assert not group._rejoining(other, None), "another member's commit: not behind this join"
        sent: list[Any] = []
        adopted = asyncio.ensure_future(group.adopt(commit, None, recorder(sent)))
        await asyncio.sleep(0.05)
        assert not sent, "sent before the join was answered"
        rejoin.given = ("m-new", 2)
        rejoin.assigned = frozenset({("t", 0)})
        rejoin.joined.set_result(("m-new", 2))
        await asyncio.wait_for(adopted, SOON_S)
        return [b.generation_id_or_member_epoch for b in sent]

    assert asyncio.run(run()) == [2]
