"""One client connection: read requests, decide for each, forward or answer, reply in request order.

Every request is resolved against the routing snapshot current when it is read, so after a binding
changes, no new request of that identity goes to the old cluster; requests already sent are counted
in flight under the epoch they were sent in, and the gateway acknowledges an epoch only once none sent
before it is still waiting (see :class:`InFlight`).

Requests are dispatched (written upstream) in the order they arrive; their answers are queued in the
same order, so responses go back in request order even when one connection's requests go to different
brokers or clusters, or are answered by the gateway itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from switchyard.identity import Identity, identify
from switchyard.model import BindingState
from switchyard.resolution import Resolution, resolve
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway import apis
from workers.gateway.apis import context_of
from workers.gateway.blocking import TOPIC_AUTHORIZATION_FAILED, blocked_response
from workers.gateway.producers import translate
from workers.gateway.protocol import (
    FrameError,
    Request,
    api_name,
    decode_response,
    encode_response,
    parse_request,
    read_frame,
    replace_body,
    with_size,
)
from workers.gateway.rewrite import BROKER_NAMING
from workers.gateway.sasl import Credentials, SaslError
from workers.gateway.upstream import Upstream, UpstreamError
from workers.gateway.vnodes import RealBroker

if TYPE_CHECKING:
    from workers.gateway.server import Gateway

log = logging.getLogger(__name__)
_QUEUE_DEPTH = 64
_HIGH_WATER = 256 * 1024
"""Bytes waiting to go to the client before the session waits for them to drain."""


@dataclass(frozen=True)
class Listener:
    """Where a connection came in: the bootstrap port, or a virtual broker standing for a real one."""

    virtual_id: int | None = None
    broker: RealBroker | None = None


class ClientSession:
    def __init__(
        self, gateway: Gateway, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.gateway = gateway
        self.listener = listener
        self.reader, self.writer = reader, writer
        self.peer = writer.get_extra_info("peername")
        self.credentials: Credentials | None = None
        """Who the client proved to be over SASL; its broker connections log in as the same user."""
        self._handshaken = False
        self._closing = False
        self._upstreams: dict[tuple[str, int | None], Upstream] = {}
        self._identities: dict[str | None, Identity] = {}
        self._resolved: dict[tuple[Identity, tuple[str, ...], str | None], Resolution] = {}
        self._resolved_in: RoutingSnapshot | None = None
        self._answering: set[asyncio.Task[bytes]] = set()
        """Answers on their way from brokers; each holds an in-flight token until it settles."""

    async def run(self) -> None:
        replies: asyncio.Queue[Awaitable[bytes | None] | None] = asyncio.Queue(_QUEUE_DEPTH)
        writer_task = asyncio.create_task(self._write(replies))
        metrics = self.gateway.metrics
        metrics.connections.add(1)
        try:
            while not writer_task.done():
                frame = await read_frame(self.reader, self.gateway.config.gateway.max_frame_bytes)
                if frame is None:
                    break
                request = parse_request(frame)
                await replies.put(await self._dispatch(request))
                if self._closing:
                    break
        except (FrameError, SaslError) as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except UpstreamError as exc:
            log.warning("closing connection from %s: upstream failed: %s", self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except Exception:  # a bug must cost one connection, never the process or a hung client
            log.exception("closing connection from %s after an unexpected error", self.peer)
        finally:
            metrics.connections.add(-1)
            if not writer_task.done():
                await replies.put(None)
            await asyncio.gather(writer_task, return_exceptions=True)
            for upstream in self._upstreams.values():
                await upstream.close()  # fails whatever still waits on a broker...
            await asyncio.gather(*self._answering, return_exceptions=True)  # ...so these settle
            self.writer.close()

    async def _write(self, replies: asyncio.Queue[Awaitable[bytes | None] | None]) -> None:
        while (reply := await replies.get()) is not None:
            try:
                data = await reply
            except (UpstreamError, FrameError) as exc:
                log.warning("closing connection from %s: %s", self.peer, exc)
                break
            except Exception:
                log.exception("closing connection from %s after an unexpected error", self.peer)
                break
            if data is not None:
                self.writer.write(data)
                if self.writer.transport.get_write_buffer_size() > _HIGH_WATER:
                    await self.writer.drain()
        self.writer.close()
        while not replies.empty():  # let the reader see the end rather than block on a full queue
            replies.get_nowait()

    async def _dispatch(self, request: Request) -> Awaitable[bytes | None]:
        """Decide, and for a forwarded request write it upstream now; return the awaitable reply."""
        received = asyncio.get_running_loop().time()
        key = request.api_key
        if key == apis.API_VERSIONS:
            return _ready(encode_response(request, self.gateway.api_versions_response(request)))
        if key in (apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE):
            return _ready(encode_response(request, await self._sasl(request)))
        if self.credentials is None and self.gateway.config.gateway.sasl.mode == "required":
            raise SaslError(f"{api_name(key)} before SASL authentication, which this gateway requires")
        context = context_of(request)
        identity = self._identity(request.client_id)
        snapshot = self.gateway.view.snapshot  # one snapshot decides the request and dates it
        resolution = self._resolve(snapshot, identity, context.topics, context.group)
        self.gateway.metrics.requests.add(api_name(key), identity.app or "-", resolution.cluster)

        if key == apis.METADATA and request.body.topics == ():  # an empty list, not None (= all)
            return _ready(
                encode_response(request, await self.gateway.local_metadata(request, resolution.cluster))
            )
        if key in apis.BLOCKABLE and self._must_block(resolution.state, resolution.cluster):
            self.gateway.metrics.blocked.add(api_name(key), identity.app or "-")
            return _ready(encode_response(request, blocked_response(request, request.body)))
        if key == apis.PRODUCE and any(
            self.gateway.mirrored(snapshot, resolution.cluster, t) for t in context.topics
        ):
            self.gateway.metrics.blocked.add(api_name(key), identity.app or "-")
            refusal = blocked_response(request, request.body, TOPIC_AUTHORIZATION_FAILED)
            return _ready(encode_response(request, refusal))

        frame = request.frame
        if context.producer is not None:
            frame = await self._translate(request, identity, context.producer, resolution.cluster)

        broker = self.listener.broker
        node = broker.node_id if broker is not None and broker.cluster == resolution.cluster else None
        upstream = self._upstream(resolution.cluster, node)
        token = self.gateway.inflight.start(snapshot.epoch)
        try:
            future = await upstream.send(
                frame, request.correlation_id, expects_response=context.expects_response
            )
        except BaseException:
            self.gateway.inflight.finish(token)
            raise
        if future is None:
            self.gateway.inflight.finish(token)
            return _ready(None)
        answer = asyncio.create_task(
            self._answer(request, future, resolution.cluster, token, identity, received=received)
        )
        self._answering.add(answer)
        answer.add_done_callback(self._answering.discard)
        return answer

    async def _sasl(self, request: Request) -> Any:
        if request.api_key == apis.SASL_HANDSHAKE:
            reply = self.gateway.sasl_handshake(request, authenticated=self.credentials is not None)
            self._handshaken = reply.error_code == ErrorCode.none
            return reply
        reply, credentials = await self.gateway.sasl_authenticate(request, handshaken=self._handshaken)
        self._handshaken = False
        if credentials is None:
            self._closing = True  # as a broker does: the refusal is sent, then the connection closed
        else:
            self.credentials = credentials
            self._identities.clear()
        return reply

    async def _answer(
        self,
        request: Request,
        future: asyncio.Future[bytes],
        cluster: str,
        token: int,
        identity: Identity,
        *,
        received: float,
    ) -> bytes:
        loop = asyncio.get_running_loop()
        sent = loop.time()
        try:
            frame = await future
        finally:
            self.gateway.inflight.finish(token)
        answered = loop.time()
        if request.api_key == apis.INIT_PRODUCER_ID:
            issued = decode_response(request, frame)
            if issued.producer_id >= 0:
                self.gateway.issued(identity, issued.producer_id, cluster)
        if request.api_key in BROKER_NAMING:
            body = decode_response(request, frame)
            reply = encode_response(request, await self.gateway.rewrite(request.api_key, body, cluster))
        else:
            reply = with_size(frame)
        attributes = {"api": api_name(request.api_key)}
        self.gateway.metrics.upstream_latency.record((answered - sent) * 1000, attributes)
        added = (loop.time() - received) - (answered - sent)
        self.gateway.metrics.added_latency.record(added * 1000, attributes)
        return reply

    async def _translate(
        self, request: Request, identity: Identity, producer: tuple[int, int], cluster: str
    ) -> bytes:
        """The Produce frame to send: as received, or with its producer translated for ``cluster``."""
        issuer = self.gateway.producer_ids.get((identity, producer[0]))
        if issuer is None or issuer == cluster:
            return request.frame
        translation = await self.gateway.translation(identity, producer, cluster)
        body = request.body
        topics = tuple(
            dataclasses.replace(
                t,
                partition_data=tuple(
                    dataclasses.replace(p, records=translate(p.records, translation, t.name, p.index))
                    if p.records
                    else p
                    for p in t.partition_data
                ),
            )
            for t in body.topic_data
        )
        return replace_body(request, dataclasses.replace(body, topic_data=topics))

    def _resolve(
        self, snapshot: RoutingSnapshot, identity: Identity, topics: tuple[str, ...], group: str | None
    ) -> Resolution:
        """Resolve against ``snapshot``, remembering answers for as long as the snapshot is current."""
        if snapshot is not self._resolved_in:
            self._resolved, self._resolved_in = {}, snapshot
        key = (identity, topics, group)
        resolution = self._resolved.get(key)
        if resolution is None:
            resolution = self._resolved[key] = resolve(
                identity, snapshot.bindings, self.gateway.config.default_cluster, topics=topics, group=group
            )
        return resolution

    def _must_block(self, state: BindingState, cluster: str) -> bool:
        """Blocked identity, or a virtual broker of a cluster the identity is no longer bound to."""
        broker = self.listener.broker
        return state is BindingState.BLOCKED or (broker is not None and broker.cluster != cluster)

    def _identity(self, client_id: str | None) -> Identity:
        identity = self._identities.get(client_id)
        if identity is None:
            identity = self._identities[client_id] = identify(
                sasl_user=self.credentials.user if self.credentials else None, client_id=client_id
            )
        return identity

    def _upstream(self, cluster: str, node: int | None) -> Upstream:
        upstream = self._upstreams.get((cluster, node))
        if upstream is None or upstream.closed:
            upstream = self.gateway.upstream(cluster, node, self.credentials)
            self._upstreams[(cluster, node)] = upstream
        return upstream


def _ready(value: Any) -> Awaitable[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
