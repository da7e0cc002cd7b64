"""A shield winds down every broker connection a session holds to the shielded cluster, even when another
of its connections leaves the session meanwhile. (Once, a long poll answered early by the same epoch
retired its connection during the close, the gateway failed on the vanished key, and the session's other
connection to the frozen cluster stayed open: a producer's write waited on it until the gateway gave it
up 5 s later, and its client connection was closed.) A write already at a live broker gets the broker's
answer; one a broker never answers gets the retriable error after the grace."""

from __future__ import annotations

import asyncio
import struct
import time
from typing import Any, cast

import pytest

from tests.helpers.sessions import Gateway
from workers.gateway.brokers.upstream import Shielded, Upstream, UpstreamError
from workers.gateway.session import ClientSession, Listener
from workers.gateway.shared import Shared


class StandIn:
    """A broker connection whose closing may do something to the session meanwhile."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.closed_with: UpstreamError | None = None
        self.meanwhile: Any = None

    def wind_down(self, error: UpstreamError, within_s: float) -> None:
        if self.meanwhile is not None:
            self.meanwhile()
        self.closed_with = error

    def retire(self) -> None:
        pass


def test_a_connection_leaving_during_the_shield_is_closed_all_the_same() -> None:
    async def scenario() -> dict[str, UpstreamError | None]:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        session = ClientSession(cast(Shared, Gateway()), Listener(), reader, writer)
        produce, poll, other = StandIn("primary"), StandIn("primary"), StandIn("standby")
        session._upstreams = cast(Any, {("primary", 1, False): produce, ("primary", 1, True): poll,
                                        ("standby", 2, False): other})  # fmt: skip
        produce.meanwhile = lambda: session._retire(cast(Any, poll))  # the long poll, answered early
        session.drop_upstreams({"primary"}, 1.0)
        writer.close()
        server.close()
        assert list(session._upstreams) == [("standby", 2, False)]
        return {"produce": produce.closed_with, "poll": poll.closed_with, "other": other.closed_with}

    closed = asyncio.run(scenario())
    assert isinstance(closed["produce"], Shielded)
    assert isinstance(closed["poll"], Shielded)
    assert closed["other"] is None


@pytest.mark.parametrize("answers_after_s", [0.2, None], ids=["live-broker", "broker-never-answers"])
def test_a_request_at_a_broker_as_its_cluster_is_shielded_gets_its_answer_within_the_grace(
    answers_after_s: float | None,
) -> None:
    """A forced failover shields a source that still answers: a write it took must be answered as
    written (answered the retriable error, kafkajs wrote it again on the new cluster, where the mirror
    had copied it too: twice). One a dead broker never answers gets the retriable error after the grace,
    and nothing more goes out over the connection meanwhile."""

    async def scenario() -> tuple[bytes | BaseException, float, bool]:
        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            if answers_after_s is None:
                await reader.read()  # until the gateway closes the connection
                return
            await asyncio.sleep(answers_after_s)
            writer.write(struct.pack(">ii", 4, struct.unpack_from(">i", frame, 4)[0]))  # its correlation id

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        upstream = Upstream("127.0.0.1", server.sockets[0].getsockname()[1], max_frame_bytes=1 << 20)
        answer = await upstream.send(struct.pack(">hhih", 0, 9, 7, -1), 7, expects_response=True)
        assert answer is not None
        await asyncio.sleep(0.05)  # at the broker
        began = time.monotonic()
        upstream.wind_down(Shielded("cluster primary is shielded"), 1.0)
        refused = False
        try:  # while the first waits: refused as the cluster's shield refuses (the client retries)
            await upstream.send(struct.pack(">hhih", 0, 9, 8, -1), 8, expects_response=True)
        except Shielded:
            refused = True
        got: bytes | BaseException
        try:
            got = await asyncio.wait_for(answer, 5)
        except UpstreamError as exc:
            got = exc
        took = time.monotonic() - began
        server.close()
        return got, took, refused

    got, took, refused = asyncio.run(scenario())
    if answers_after_s is None:
        assert isinstance(got, Shielded)
        assert took >= 1.0
    else:
        assert got == struct.pack(">i", 7)
        assert took < 1.0
    assert refused
