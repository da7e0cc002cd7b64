"""The gateway's limits on what one client may hold: byte budgets, read and idle time-outs, and long polls
answered early when a newer epoch routes them elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import struct
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest
import uvloop

from switchyard.config import GatewayLimitsConfig
from switchyard.frames.protocol import FrameError
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.framing.intake import ByteBudget, Intake
from workers.gateway.routing.inflight import InFlight, StillRouted, Ticket, own_wait_s

FRAME = struct.pack(">hhih", 18, 0, 1, 1) + b"x"


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def intake(
    reader: asyncio.StreamReader,
    *,
    budget: ByteBudget | None = None,
    busy: Callable[[], bool] = lambda: False,
    login_required: bool = False,
    **limits: float,
) -> Intake:
    return Intake(
        reader,
        GatewayLimitsConfig(**limits),  # type: ignore[arg-type]
        max_frame_bytes=1 << 20,
        process_budget=budget or ByteBudget(1 << 30),
        busy=busy,
        login_required=login_required,
    )


def test_a_budget_makes_takers_wait_in_turn_and_survives_cancelled_waiters() -> None:
    async def scenario() -> list[str]:
        budget = ByteBudget(100)
        order: list[str] = []
        await budget.take(80)

        async def taker(name: str, size: int) -> None:
            await budget.take(size)
            order.append(name)

        big = asyncio.create_task(taker("big", 50))
        gone = asyncio.create_task(taker("gone", 60))
        small = asyncio.create_task(taker("small", 10))
        await asyncio.sleep(0.01)
        assert order == []  # first come, first served: small waits behind big, though it would fit
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        budget.give_back(80)
        await asyncio.gather(big, small)
        assert budget.held == 60
        return order

    assert asyncio.run(scenario()) == ["big", "small"]


def test_a_frame_is_read_whole_and_its_bytes_held_until_released() -> None:
    async def scenario() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(sized(FRAME) * 2)
        budget = ByteBudget(1 << 20)
        frames = intake(reader, budget=budget)
        frame, lease = (await frames.next_frame()) or (b"", None)
        assert frame == FRAME
        assert budget.held == len(FRAME)
        assert lease is not None
        lease.release()
        lease.release()  # twice is once
        assert budget.held == 0
        reader.feed_eof()
        assert (await frames.next_frame()) is not None
        assert await frames.next_frame() is None  # a clean end

    asyncio.run(scenario())


def test_a_connection_waits_for_room_in_its_own_budget() -> None:
    async def scenario() -> None:
        large = struct.pack(">hhih", 18, 0, 1, 600) + b"x" * 600
        reader = asyncio.StreamReader()
        reader.feed_data(sized(large) * 2)
        frames = intake(reader, connection_buffer_bytes=1024, buffer_bytes=1 << 20)
        first = await frames.next_frame()
        assert first is not None
        second = asyncio.create_task(frames.next_frame())
        await asyncio.sleep(0.05)
        assert not second.done()  # the first frame's bytes leave no room for the second
        first[1].release()
        assert (await second) is not None

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("sent", "problem"),
    [
        (b"\x00\x00", "a frame size was not sent whole in 0.2s"),
        (struct.pack(">i", 100) + b"only some", "a frame of 100 bytes was not sent whole in 0.2s"),
    ],
)
def test_a_started_frame_must_arrive_within_the_read_timeout(sent: bytes, problem: str) -> None:
    async def scenario() -> None:
        reader = asyncio.StreamReader()
        reader.feed_data(sent)
        frames = intake(reader, frame_read_timeout_s=0.2, idle_timeout_s=0.1)
        reading = asyncio.create_task(frames.next_frame())
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.1)
        assert frames.overdue(loop.time()) is None  # begun 0.1 s ago: not late yet, and not idle
        await asyncio.sleep(0.15)
        assert frames.overdue(loop.time()) == problem
        reading.cancel()

    asyncio.run(scenario())


def test_an_idle_connection_is_overdue_unless_it_waits_for_answers() -> None:
    async def scenario() -> None:
        waiting = [True]
        frames = intake(asyncio.StreamReader(), idle_timeout_s=0.1, busy=lambda: waiting[0])
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.15)
        assert frames.overdue(loop.time()) is None  # requests in flight: not idle
        waiting[0] = False
        assert frames.overdue(loop.time()) == "idle for 0.1s"

    asyncio.run(scenario())


def test_a_login_must_come_in_time_and_frames_before_it_are_small() -> None:
    async def scenario() -> None:
        frames = intake(asyncio.StreamReader(), login_required=True, login_timeout_s=0.1)
        loop = asyncio.get_running_loop()
        assert frames.overdue(loop.time()) is None
        await asyncio.sleep(0.15)
        assert frames.overdue(loop.time()) == "no SASL login within 0.1s"
        frames.logged_in = True
        assert frames.overdue(loop.time()) is None

        big = asyncio.StreamReader()
        big.feed_data(struct.pack(">i", 600_000))
        with pytest.raises(FrameError, match=r"frame size 600000 outside 8\.\.524288"):
            await intake(big, login_required=True).next_frame()

    asyncio.run(scenario())


def test_a_new_epoch_waits_only_for_the_requests_it_moves_and_answers_moved_long_polls() -> None:
    async def scenario() -> None:
        inflight = InFlight(grace_s=5)
        moved_at_5 = lambda snapshot: snapshot.epoch < 5  # noqa: E731
        unrelated = inflight.start(3, lambda snapshot: True, long_poll=True)  # another app's long poll
        poll = inflight.start(3, moved_at_5, long_poll=True)  # a Fetch of the identity being moved
        produce = inflight.start(3, moved_at_5)  # its Produce, which may still land
        assert inflight.supersede(RoutingSnapshot(epoch=4)) == 0  # epoch 4 moves none of them
        assert inflight.supersede(RoutingSnapshot(epoch=5)) == 1
        assert poll.superseded is not None
        assert poll.superseded.done()
        assert unrelated.superseded is not None
        assert not unrelated.superseded.done()
        waiting = asyncio.create_task(inflight.drained_before(5))
        inflight.finish(poll)  # answered early
        await asyncio.sleep(0.01)
        assert not waiting.done()  # the Produce sent under epoch 3 is still out; the unrelated poll is not
        inflight.finish(produce)
        await asyncio.wait_for(waiting, 1)
        assert unrelated.epoch == 5  # dated with the epoch it agrees with
        inflight.finish(unrelated)

    asyncio.run(scenario())


def test_a_request_that_starts_under_an_epoch_older_than_one_looked_at_is_looked_at_under_it() -> None:
    """A ticket started a turn after its decision (a split request's), dated with an epoch older than one
    the gateway has looked at since: left so, a JoinGroup among them held every later acknowledgement
    until its rebalance ended."""

    async def scenario() -> None:
        inflight = InFlight(grace_s=0.05)
        given_up: list[str] = []
        moved_at_5 = lambda snapshot: snapshot.epoch < 5  # noqa: E731
        inflight.supersede(RoutingSnapshot(epoch=5))
        join = inflight.start(4, moved_at_5, long_poll=True)  # routed elsewhere by 5: answered at once
        assert join.superseded is not None
        assert join.superseded.done()
        unrelated = inflight.start(4, lambda snapshot: True, long_poll=True)
        assert unrelated.epoch == 5  # routed the same way: it agrees with 5
        commit = inflight.start(4, moved_at_5, give_up=lambda: given_up.append("commit"))
        waiting = asyncio.create_task(inflight.drained_before(5))
        inflight.finish(join)
        await asyncio.sleep(0.1)
        assert given_up == ["commit"]  # waited for as if in flight when 5 came: given up after its grace
        assert not waiting.done()
        inflight.finish(commit)
        await asyncio.wait_for(waiting, 1)
        inflight.finish(unrelated)

    asyncio.run(scenario())


def test_a_moved_request_its_broker_does_not_answer_is_given_up_after_its_own_wait_and_the_grace() -> None:
    async def scenario() -> None:
        inflight = InFlight(grace_s=0.05)
        given_up: list[str] = []
        moved_at_5 = lambda snapshot: snapshot.epoch < 5  # noqa: E731

        def start(name: str, still_routed: StillRouted, own_wait_s: float = 0.0) -> Ticket:
            return inflight.start(
                3, still_routed, own_wait_s=own_wait_s, give_up=lambda: given_up.append(name), what=name
            )

        stalled = start("stalled commit", moved_at_5)
        produce = start("produce waiting for replicas", moved_at_5, own_wait_s=1.0)
        answered = start("answered commit", moved_at_5)
        unrelated = start("another app's commit", lambda snapshot: True)
        await asyncio.sleep(0.1)
        assert given_up == []  # overdue already, but no epoch has moved anything yet
        inflight.supersede(RoutingSnapshot(epoch=5))
        inflight.finish(answered)
        await asyncio.sleep(0.01)
        assert given_up == ["stalled commit"]  # sent 0.1 s ago: past its grace at once
        inflight.finish(stalled)
        waiting = asyncio.create_task(inflight.drained_before(5))
        await asyncio.sleep(0.1)
        assert given_up == ["stalled commit"]  # the Produce may wait for its replicas 1 s
        deadline = time.monotonic() + 5  # its wait is 1 s; the margins ample for a loaded machine
        while len(given_up) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert given_up == ["stalled commit", "produce waiting for replicas"]
        inflight.finish(produce)
        await asyncio.wait_for(waiting, 1)
        assert unrelated.timer is None
        inflight.finish(unrelated)

        blocked_at_6 = lambda snapshot: snapshot.epoch != 6  # noqa: E731
        abandoned = inflight.start(
            5, blocked_at_6, own_wait_s=0.1, give_up=lambda: given_up.append("abandoned"), what="abandoned"
        )
        inflight.supersede(RoutingSnapshot(epoch=6))  # the block moves it...
        inflight.supersede(RoutingSnapshot(epoch=7))  # ...and the unblock routes it back: waited for
        await asyncio.sleep(0.2)
        assert given_up == ["stalled commit", "produce waiting for replicas"]
        inflight.finish(abandoned)

    asyncio.run(scenario())


def test_a_request_s_own_wait_is_its_timeout_field() -> None:
    assert own_wait_s(SimpleNamespace(timeout=datetime.timedelta(seconds=30))) == 30
    assert own_wait_s(SimpleNamespace(timeout=datetime.timedelta(seconds=-1))) == 0
    assert own_wait_s(SimpleNamespace(group_id="g")) == 0
    assert own_wait_s(SimpleNamespace(timeout=datetime.timedelta(days=24))) == 30  # a client's word, bounded


def test_an_ended_intake_reads_nothing_more_and_its_connection_stays_up_for_the_answers() -> None:
    """A graceful stop ends a connection's requests while its client floods it: the stream reader had
    paused the socket itself (its buffer full), and would resume it as the buffer empties. The intake
    gives no further frame, and the transport stays open for the answers on their way (on uvloop, as
    the gateway runs)."""

    async def scenario() -> tuple[list[object], bool, object]:
        problems: list[object] = []
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: problems.append(context["message"])
        )
        outcome: asyncio.Future[tuple[bool, object]] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while len(reader._buffer) < 2 * (1 << 16):  # type: ignore[attr-defined]  # paused, full
                await asyncio.sleep(0.01)
            ended = intake(reader)
            ended.end(writer.transport)  # type: ignore[arg-type]
            got = await ended.next_frame()
            await asyncio.sleep(0.3)  # the buffer emptied of nothing, the client still writing
            outcome.set_result((writer.transport.is_closing(), got))
            writer.close()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, client = await asyncio.open_connection("127.0.0.1", port)

        async def flood() -> None:
            with contextlib.suppress(ConnectionError):
                while not stop.is_set():
                    client.write(sized(FRAME) * 3000)
                    await client.drain()

        flooding = asyncio.create_task(flood())
        closing, got = await asyncio.wait_for(outcome, 10)
        stop.set()
        flooding.cancel()
        client.close()
        server.close()
        return problems, closing, got

    problems, closing, got = uvloop.run(scenario())
    assert got is None
    assert not closing
    assert problems == []
