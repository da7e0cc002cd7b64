"""A Kafka cluster with consumer groups its coordinator mistreats: a real broker that advertises a proxy
in front of it. The proxy answers every OffsetFetch naming a poisoned group with an error — what a
persistent coordinator error looks like to every client (the mirror, the worker, a consumer through the
gateway) — and never answers an OffsetCommit naming a stalled group, nor anything after it on that
connection (a broker stalled on one request); everything else passes through untouched."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kio.schema.errors import ErrorCode

from switchyard.frames.protocol import (
    Request,
    decode_response,
    encode_response,
    parse_request,
    with_size,
)
from switchyard.stack import health
from tests.helpers import ports
from tests.helpers.services import PrivateService
from workers.gateway.routing import apis
from workers.gateway.routing.blocking import blocked_response

POISON = ErrorCode.group_authorization_failed


class PoisonProxy:
    """Forwards 127.0.0.1:``port`` to the broker at ``target``, one request at a time per connection."""

    def __init__(self, port: int, target: int, groups: set[str], stall: frozenset[str] = frozenset()) -> None:
        self.port, self.target, self.groups, self.stall = port, target, groups, stall
        self.refused = self.stalled = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poison-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            broker, to_broker = await asyncio.open_connection("127.0.0.1", self.target)
            try:
                while True:
                    frame = await _frame(client)
                    request = parse_request(frame)
                    if request.api_key == apis.OFFSET_FETCH and _named(request.body) & self.groups:
                        self.refused += 1
                        to_client.write(
                            encode_response(request, blocked_response(request, request.body, POISON))
                        )
                        continue
                    if request.api_key == apis.OFFSET_COMMIT and _named(request.body) & self.stall:
                        self.stalled += 1
                        while await client.read(65536):
                            pass  # nothing more is answered, until the client hangs up
                        break
                    to_broker.write(with_size(frame))
                    if request.api_key == apis.PRODUCE and request.body.acks == 0:
                        continue  # no answer comes
                    answer = with_size(await _frame(broker))
                    if request.api_key == apis.API_VERSIONS:
                        answer = _offset_fetch_by_group(request, answer[4:])
                    to_client.write(answer)
            finally:
                to_broker.close()
        to_client.close()


def _named(body: object) -> set[str]:
    """The groups a request names."""
    named = {g.group_id for g in getattr(body, "groups", None) or ()}
    named.add(getattr(body, "group_id", ""))
    return named


def _offset_fetch_by_group(request: Request, answer: bytes) -> bytes:
    """Offer OffsetFetch up to v7, one group per request (as the gateway does), so a refusal is one
    group's; the whole frame, size included."""
    versions = decode_response(request, answer)
    keys = tuple(
        dataclasses.replace(k, max_version=min(k.max_version, apis.VERSION_CAPS[apis.OFFSET_FETCH]))
        if k.api_key == apis.OFFSET_FETCH
        else k
        for k in versions.api_keys
    )
    return encode_response(request, dataclasses.replace(versions, api_keys=keys))


async def _frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


@contextmanager
def poisoned_cluster(
    log: Path, groups: set[str], stall: frozenset[str] = frozenset()
) -> Iterator[PoisonProxy]:
    """An Apache Kafka broker of its own that advertises the proxy's address, so every client reaches it
    through the proxy; the proxy's bootstrap is ``127.0.0.1:<proxy.port>``."""
    advertised = ports.reserve(1)[0]
    broker = PrivateService.kafka(log.parent, advertised=advertised)
    broker.start()
    proxy = PoisonProxy(advertised, broker.port, groups, stall)
    try:
        for _ in range(100):
            if health.kafka("127.0.0.1", advertised).ok:
                break
            threading.Event().wait(0.1)
        yield proxy
    finally:
        proxy.close()
        broker.stop()
