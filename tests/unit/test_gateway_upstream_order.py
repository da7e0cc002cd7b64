"""Requests sent over one broker connection leave in the order they were sent, also while it connects;
none goes over another once one failed under requests."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import struct
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from switchyard.frames.entities import make
from switchyard.frames.protocol import Request, decode_response, parse_request, response_schema
from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState
from switchyard.routing.snapshot import RoutingSnapshot
from tests.helpers.sessions import AtOneAddress, Gateway, answered_when, answering_broker, commit_answer, raw
from workers.gateway.brokers.upstream import Upstream, UpstreamError
from workers.gateway.routing import apis
from workers.gateway.routing.blocking import OwnAnswer
from workers.gateway.session import ClientSession, Listener
from workers.gateway.shared import Shared


def test_requests_sent_while_the_connection_is_made_leave_in_the_order_they_were_sent() -> None:
    async def scenario() -> list[int]:
        arrived: list[int] = []
        got_all = asyncio.Event()

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while len(arrived) < 3:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                arrived.append(struct.unpack_from(">i", frame, 4)[0])  # the header's correlation id
            got_all.set()
            writer.close()

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        upstream = Upstream("127.0.0.1", port, max_frame_bytes=1 << 20)

        def frame(correlation_id: int) -> bytes:
            return struct.pack(">hhih", 0, 9, correlation_id, -1)

        async def third() -> None:  # sent the moment the connection is up, while the second still waits
            while not upstream._ready:
                await asyncio.sleep(0)
            await upstream.send(frame(3), 3, expects_response=False)

        late = asyncio.create_task(third())
        await asyncio.sleep(0)
        first = asyncio.create_task(upstream.send(frame(1), 1, expects_response=False))
        second = asyncio.create_task(upstream.send(frame(2), 2, expects_response=False))
        await asyncio.gather(first, second, late)
        await asyncio.wait_for(got_all.wait(), 5)
        server.close()
        return arrived

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_a_connection_that_failed_under_a_request_is_not_replaced_but_one_closed_idle_is() -> None:
    """A request behind one whose broker connection failed must not go out over a new connection ahead
    of the failed one's retry (an idempotent producer's batches out of order): the session refuses it,
    and its client connection closes. A connection the broker closed while nothing waited is replaced."""

    async def scenario() -> tuple[bool, bool, str, bool, bool]:
        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(1)  # the first request's first byte: the broker dies under it
            writer.close()

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        gateway = Gateway()
        gateway.brokers = AtOneAddress(port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        session = ClientSession(cast(Shared, gateway), Listener(), reader, writer)

        failed = session.upstream("primary", 1, long_poll=False)
        answer = await failed.send(struct.pack(">hhih", 3, 9, 1, -1), 1, expects_response=True)
        assert answer is not None
        with contextlib.suppress(UpstreamError):
            await asyncio.wait_for(answer, 5)
        with pytest.raises(UpstreamError) as refused:
            session.upstream("primary", 1, long_poll=False)
        client_closed = writer.is_closing()  # the client connects again and resends them all in order

        idle = session.upstream("primary", 2, long_poll=False)
        await idle.send(struct.pack(">hhih", 3, 9, 2, -1), 2, expects_response=False)

        async def closed_idle() -> None:  # the broker closes it; nothing waited for an answer
            while not idle.closed:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(closed_idle(), 5)
        replaced = session.upstream("primary", 2, long_poll=False) is not idle
        writer.close()
        server.close()
        return failed.broke, idle.broke, str(refused.value), replaced, client_closed

    failed_broke, idle_broke, refusal, replaced, client_closed = asyncio.run(scenario())
    assert (failed_broke, idle_broke, replaced, client_closed) == (True, False, True, True)
    assert "closed the connection" in refusal


def test_a_connection_to_any_broker_is_kept_when_any_broker_means_another_address_now() -> None:
    """Which broker answers for any moves with the probe and with each refused connection: retiring every
    session's connection each time would cost each a new connection and login, and one still connecting
    failed its requests and closed its client's connection. One meant for a broker that moved is not kept."""
    shift = [0]

    class Moving(AtOneAddress):
        def real_address(self, _cluster: str, _node: int | None) -> tuple[str, int]:
            return "127.0.0.1", self.port + shift[0]

    async def scenario() -> tuple[bool, bool]:
        server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        gateway = Gateway()
        gateway.brokers = Moving(port)
        session = ClientSession(cast(Shared, gateway), Listener(), reader, writer)
        anywhere = session.upstream("primary", None, long_poll=False)
        broker = session.upstream("primary", 1, long_poll=False)
        shift[0] = 1
        kept = session.upstream("primary", None, long_poll=False) is anywhere
        followed = session.upstream("primary", 1, long_poll=False) is not broker
        writer.close()
        server.close()
        return kept, followed

    assert asyncio.run(scenario()) == (True, True)


def test_a_join_the_gateway_answers_itself_is_told_to_its_group_handling_once_its_answer_is_known() -> None:
    """Not once it is written: a commit held for that join may come ahead of it on the connection."""

    async def scenario() -> list[str]:
        server = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        session = ClientSession(cast(Shared, Gateway()), Listener(), reader, writer)
        told: list[str] = []
        session.groups.answered_here = told.append  # type: ignore[method-assign,assignment]
        for name, result in (("own", OwnAnswer()), ("broker's", b"answer")):
            reply: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            reply.add_done_callback(functools.partial(session._told, name))  # type: ignore[arg-type]
            reply.set_result(result)
            await asyncio.sleep(0)
        writer.close()
        server.close()
        return told

    assert asyncio.run(scenario()) == ["own"]


@pytest.mark.parametrize("broker", ["slow to answer", "not the coordinator at first"])
def test_a_join_goes_once_the_commit_its_connection_sent_before_it_is_answered(broker: str) -> None:
    """A broker reads one connection's requests in order: a client's commit, then its rejoin, reach it so
    directly, the commit in the generation it was made in. The gateway writes a join on its connection
    for long polls, the commit on the other: the join, answered first, had a kafkajs commit sent 28 ms
    before it refused ILLEGAL_GENERATION (chaos run, 2026-12-05). Here the broker is slow to answer the
    commit, or answers it NOT_COORDINATOR and is slow to name the coordinator, which the gateway sends it
    on to: the join must not reach a broker before the commit's answer as the client gets it."""
    when, _ = asyncio.run(_join_behind_commit(broker))
    early = when["commit answered"] - when["join arrived"]
    assert early <= 0, f"the join reached a broker {early:.3f} s before the commit's answer"


def test_a_join_that_waited_for_a_commit_is_not_sent_where_the_routing_no_longer_sends_it() -> None:
    """Out of flight while it waits, it holds no routing change's acknowledgement up: one that moves its
    group may be acknowledged meanwhile, and the join is answered the retriable error, as a held join
    is, not sent to the cluster the group left."""
    when, joined = asyncio.run(_join_behind_commit("slow to answer", flip_after_s=0.1))
    assert "join arrived" not in when
    assert joined.error_code == ErrorCode.not_coordinator


async def _join_behind_commit(broker: str, flip_after_s: float | None = None) -> tuple[dict[str, float], Any]:
    """A commit and a join sent at once on one connection to a broker ``broker`` (see above), the group
    switched from the primary to the standby ``flip_after_s`` in (None: not): when the broker answered
    the commit and saw the join (monotonic), and the join's answer."""
    when: dict[str, float] = {}
    commits = 0

    async def answer(request: Request) -> Any:
        nonlocal commits
        schema = response_schema(request.api_key, request.api_version)
        if request.api_key == apis.OFFSET_COMMIT:
            commits += 1
            refused = broker == "not the coordinator at first" and commits == 1
            if broker == "slow to answer":
                await asyncio.sleep(0.3)  # the connection's earlier work, as it were
            when["commit answered"] = time.monotonic()
            return commit_answer(request, ErrorCode.not_coordinator if refused else ErrorCode.none)
        if request.api_key == apis.FIND_COORDINATOR:
            await asyncio.sleep(0.3)  # its election still settling, as it were
            return make(schema, node_id=i32(1), host="127.0.0.1")
        when["join arrived"] = time.monotonic()
        return make(schema, generation_id=i32(2), member_id="m1", leader="m1")

    server = await answering_broker(answer)
    key = BindingKey.for_app("orders")  # the client id raw frames carry: orders@host-1
    gateway = Gateway({key: _bound("primary", 2)})
    gateway.brokers = AtOneAddress(server.sockets[0].getsockname()[1])
    gateway.links = SimpleNamespace(  # type: ignore[attr-defined]
        mirrored=lambda *_: False, presents=lambda *_: False, presenter=_no_presenter
    )

    def flip() -> None:
        gateway.view.snapshot = RoutingSnapshot(3, {key: _bound("standby", 3)})
        gateway.changes.publish()

    if flip_after_s is not None:
        asyncio.get_running_loop().call_later(flip_after_s, flip)
    commit = raw(apis.OFFSET_COMMIT, 8, group_id="orders", generation_id_or_member_epoch=-1, member_id="")
    join = raw(  # enters the group at once
        apis.JOIN_GROUP, 3, group_id="orders", member_id="", session_timeout=timedelta(seconds=30)
    )
    try:
        answers = await answered_when(gateway, [commit, join], timeout_s=5)
    finally:
        server.close()
    return when, decode_response(parse_request(join), answers[1][1])


def _bound(cluster: str, epoch: int) -> Binding:
    return Binding(cluster, epoch, BindingState.ACTIVE, datetime.now(UTC), "test")


async def _no_presenter(*_: object) -> None:
    return None  # no offsets of another cluster's to present
