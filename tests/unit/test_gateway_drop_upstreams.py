"""A shield closes every broker connection a session holds to the shielded cluster, even when another of
its connections leaves the session while one is being closed. (Once, a long poll answered early by the
same epoch retired its connection during the close, the gateway failed on the vanished key, and the
session's other connection to the frozen cluster stayed open: a producer's write waited on it until the
gateway gave it up 5 s later, and its client connection was closed.)"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from tests.helpers.sessions import Gateway
from workers.gateway.brokers.upstream import Shielded, UpstreamError
from workers.gateway.session import ClientSession, Listener
from workers.gateway.shared import Shared


class StandIn:
    """A broker connection whose closing may do something to the session meanwhile."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.closed_with: UpstreamError | None = None
        self.meanwhile: Any = None

    def close(self, error: UpstreamError | None = None) -> None:
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
        session.drop_upstreams({"primary"})
        writer.close()
        server.close()
        assert list(session._upstreams) == [("standby", 2, False)]
        return {"produce": produce.closed_with, "poll": poll.closed_with, "other": other.closed_with}

    closed = asyncio.run(scenario())
    assert isinstance(closed["produce"], Shielded)
    assert isinstance(closed["poll"], Shielded)
    assert closed["other"] is None
