"""How long a blocked identity's requests are held: never longer than their client waits for an answer,
even when the client sends more than the connection's answers can hold at once (kafkajs pipelines every
send on one connection). Past that, a resend would race the held copy, and both would be written."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import decode_response, parse_request
from switchyard.keys import BindingKey
from switchyard.ledger.kinds import RoutingSnapshot
from switchyard.model import Binding, BindingState, Cluster, ClusterState
from tests.helpers.sessions import AtOneAddress, Gateway, answered_when, raw, serving
from workers.gateway.routing import apis

HOLD_S = 1.0
IN_FLIGHT = 4
HELD = 8


def test_every_held_request_is_answered_within_its_hold_time_of_being_sent() -> None:
    """Three times more Produce requests than the connection may hold, all sent at once while their
    identity is blocked: each is answered with the retriable error within the hold time of its sending,
    the oldest at once to make room for the newest. (Once, the gateway stopped reading while its room was
    full of held requests: those behind waited unread, in waves of one hold time each, long past their
    client's time-out.)"""
    answers = _held(3 * HELD)
    latest = max(when for when, _ in answers)
    assert latest < HOLD_S + 0.5, f"the last answer came {latest:.1f}s after it was sent"
    early = sum(when < HOLD_S / 2 for when, _ in answers)
    assert early == 2 * HELD, f"{early} of {len(answers)} let go early; the connection may hold {HELD}"


def test_held_requests_do_not_take_the_room_of_those_in_flight() -> None:
    """More held Produce requests than the connection may have in flight, fewer than it may hold: every
    one is held its whole hold time. (Once, held requests took the room of those in flight, and kafkajs
    at 50 sends/s, which pipelines every send on one connection, had its sends let go within a second of
    a block and exhausted its retries.)"""
    answers = _held(HELD)
    assert HELD > IN_FLIGHT
    early = [round(when, 2) for when, _ in answers if when < HOLD_S - 0.1]
    assert not early, f"let go before their hold time: {early}"


def _held(count: int) -> list[tuple[float, bytes]]:
    """``count`` Produce requests of a blocked identity sent at once; each answer, every one the
    retriable error."""
    blocked = Binding("primary", 2, BindingState.BLOCKED, datetime.now(UTC), "test")
    gateway = Gateway(
        {BindingKey.for_app("orders"): blocked},
        block_hold_s=HOLD_S,
        limits={"max_in_flight": IN_FLIGHT, "max_held": HELD},
    )
    frames = [raw(apis.PRODUCE, 9, acks=-1, timeout=timedelta(seconds=30)) for _ in range(count)]
    answers = asyncio.run(answered_when(gateway, frames))
    for frame, (_, answer) in zip(frames, answers, strict=True):
        produced = decode_response(parse_request(frame), answer)
        codes = {p.error_code for t in produced.responses for p in t.partition_responses}
        assert codes == {ErrorCode.not_leader_or_follower}
    return answers


def test_a_produce_decided_while_vouched_is_not_written_if_the_vouch_lapsed_before_it_went() -> None:
    """The vouch is looked at again right before a request is written, after whatever it waited for
    since its decision (a broker's connection, a producer's route read from ZooKeeper, a freeze): one
    that can no longer be vouched for never reaches the broker (with acks, it gets the retriable error:
    ``ClientSession._refused``). Vouched throughout, the same Produce reaches it."""

    async def arrived(vouched_at_send: bool) -> int:
        frames: list[bytes] = []

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
                while True:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    frames.append(await reader.readexactly(size))

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        gateway = Gateway()
        gateway.brokers = AtOneAddress(server.sockets[0].getsockname()[1])
        gateway.links = SimpleNamespace(mirrored=lambda *_: False)  # type: ignore[attr-defined]
        # asked with the snapshot that decides it (vouched then), and with none right before it goes
        gateway.vouched = lambda snapshot=None: snapshot is not None or vouched_at_send  # type: ignore[method-assign]
        produce = raw(apis.PRODUCE, 9, acks=0, timeout=timedelta(seconds=30))
        sessions, port, _ = await serving(gateway)
        _, client = await asyncio.open_connection("127.0.0.1", port)
        client.write(struct.pack(">i", len(produce)) + produce)  # acks=0: no answer
        await asyncio.sleep(0.5)
        client.close()
        sessions.close()
        server.close()
        return len(frames)

    assert asyncio.run(arrived(vouched_at_send=False)) == 0
    assert asyncio.run(arrived(vouched_at_send=True)) == 1


def test_a_write_read_behind_a_held_one_is_not_written_ahead_of_it() -> None:
    """Two Produce requests that arrive together, the first held (here: decided on a snapshot the view
    replaced meanwhile, so its routing could not be vouched for — as when the view thread swaps it under
    a busy session just after a flip), the second forwarded at once: the broker gets them in the order
    they were sent. Once, the second went first: the held one's task had not yet run, so nothing said a
    request was held, and an idempotent producer's later batch reached the new cluster before the one
    it followed — refused OUT_OF_ORDER_SEQUENCE_NUMBER there, fatal to librdkafka (CI, the
    temporal-restart saga test)."""

    async def arrived() -> list[int]:
        correlations: list[int] = []

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
                while True:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    frame = await reader.readexactly(size)
                    correlations.append(struct.unpack_from(">i", frame, 4)[0])

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        gateway = Gateway()
        gateway.brokers = AtOneAddress(server.sockets[0].getsockname()[1])
        gateway.links = SimpleNamespace(mirrored=lambda *_: False)  # type: ignore[attr-defined]
        decided = iter(range(1 << 10))  # the first decision's snapshot replaced: not vouched for
        gateway.vouched = lambda snapshot=None: snapshot is None or next(decided) > 0  # type: ignore[method-assign]
        frames = [
            raw(apis.PRODUCE, 9, acks=-1, timeout=timedelta(seconds=30), transactional_id=None)
            for _ in range(2)
        ]
        sent = b"".join(
            struct.pack(">i", len(f)) + f[:4] + struct.pack(">i", n) + f[8:] for n, f in enumerate(frames, 1)
        )
        sessions, port, _ = await serving(gateway)
        _, client = await asyncio.open_connection("127.0.0.1", port)
        client.write(sent)  # read together: nothing between them for the held one's task to run
        await asyncio.sleep(0.5)
        client.close()
        sessions.close()
        server.close()
        held = sum(gateway.metrics.blocked.counts.values())
        assert held == 1, f"{held} requests decided to be held, where only the first should be"
        return correlations

    assert asyncio.run(arrived()) == [1, 2]


def test_a_write_of_a_shielded_cluster_waits_for_the_flip_and_goes_where_it_sends_it() -> None:
    """A failover shields its source before its flip, and a flip can take longer than a client retries
    (kafkajs: about 10 s of backoff; 14 s in a chaos trial whose target lost a broker). A Produce routed
    to a shielded cluster is held: it reaches the new cluster's broker when the flip comes within its
    hold time, and is answered with the retriable error once that is over, not at once."""

    async def run(flip_after_s: float | None) -> tuple[float, int]:
        arrived: list[float] = []

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionResetError):
                while True:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    await reader.readexactly(size)
                    arrived.append(time.monotonic())

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        key = BindingKey.for_app("orders")
        bound = Binding("primary", 2, BindingState.ACTIVE, datetime.now(UTC), "test")
        gateway = Gateway({key: bound}, block_hold_s=HOLD_S)
        gateway.brokers = AtOneAddress(server.sockets[0].getsockname()[1])
        gateway.links = SimpleNamespace(mirrored=lambda *_: False)  # type: ignore[attr-defined]
        gateway.view.snapshot = _with_primary(gateway.view.snapshot, ClusterState.SHIELDED)
        produce = raw(apis.PRODUCE, 9, acks=-1, timeout=timedelta(seconds=30), transactional_id=None)
        sessions, port, _ = await serving(gateway)
        reader, client = await asyncio.open_connection("127.0.0.1", port)
        sent = time.monotonic()
        client.write(struct.pack(">i", len(produce)) + produce)
        if flip_after_s is not None:
            await asyncio.sleep(flip_after_s)
            flipped = dataclasses.replace(bound, cluster="standby", epoch=3)
            snapshot = gateway.view.snapshot
            gateway.view.snapshot = dataclasses.replace(snapshot, epoch=3, bindings={key: flipped})
            gateway.changes.publish()
            await asyncio.sleep(0.3)
            answered = -1.0
        else:
            head = await asyncio.wait_for(reader.readexactly(4), 5)
            await reader.readexactly(struct.unpack(">i", head)[0])
            answered = time.monotonic() - sent
        client.close()
        sessions.close()
        server.close()
        return answered, len(arrived)

    answered, reached = asyncio.run(run(flip_after_s=None))
    assert reached == 0
    assert HOLD_S - 0.1 < answered < HOLD_S + 0.5, f"answered {answered:.2f}s after it was sent"
    _, reached = asyncio.run(run(flip_after_s=HOLD_S / 2))
    assert reached == 1, "the write held over the shield never reached the cluster the flip sent it to"


def _with_primary(snapshot: RoutingSnapshot, state: ClusterState) -> RoutingSnapshot:
    primary = Cluster("primary", "127.0.0.1:9", state, 1, datetime.now(UTC), "test")
    return dataclasses.replace(snapshot, clusters={"primary": primary})
