"""A moved member's joins and the commits that wait for a connection's rejoin: what ends each wait.

A wait that nothing ends lasts a held request's whole hold (10 s here), and a client's requests behind it
on the same connection wait as long: a kafkajs group stalled so in a chaos trial.
"""

from __future__ import annotations

import asyncio
import datetime
from types import SimpleNamespace
from typing import Any

from workers.gateway.groups.handling import GroupHandling
from workers.gateway.groups.members import Member, Members
from workers.gateway.routing import apis

GROUP, MOVED = "orders", "m-old"
HOLD_S = 10.0
SOON_S = 1.0
"""Well within a hold: a wait that ends this soon was ended by what the test did, not by its limit."""


def gateway() -> Any:
    members = Members()
    members.joined(GROUP, MOVED, Member("primary", 30.0))
    config = SimpleNamespace(gateway=SimpleNamespace(block_hold_s=HOLD_S))
    return SimpleNamespace(members=members, config=config)


def handling(shared: Any) -> GroupHandling:
    return GroupHandling(shared, SimpleNamespace(credentials=None))  # type: ignore[arg-type]


def join(correlation_id: int, member_id: str = MOVED) -> Any:
    held = datetime.timedelta(seconds=30)
    body = SimpleNamespace(group_id=GROUP, member_id=member_id, group_instance_id=None, session_timeout=held)
    return SimpleNamespace(api_key=apis.JOIN_GROUP, api_version=9, correlation_id=correlation_id, body=body)


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

        async def send(body: Any, node: int | None) -> Any:
            sent.append(body)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

        adopted = group.adopt(commit(), None, send)  # decided now...
        group.answered_here(join(2, member_id="m-new"))  # ...its join refused before it waits
        await asyncio.wait_for(adopted, SOON_S)
        assert [b.member_id for b in sent] == [""], "sent as a member it never became"

    asyncio.run(run())
