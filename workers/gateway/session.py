"""One client connection: read requests, decide for each, forward or answer, reply in request order.

What to do with a request is decided by :func:`workers.gateway.routing.decision.decide`; this module
carries it out — forwards, answers, holds (:mod:`workers.gateway.routing.holds`), hands group requests to
the connection's :class:`~workers.gateway.groups.handling.GroupHandling` — and sees the gateway only
through :class:`workers.gateway.shared.Shared`. The gateway's own answers are values
(:class:`~workers.gateway.routing.blocking.OwnAnswer`) that the writer alone encodes.

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
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, cast

from kio.schema.errors import ErrorCode

from switchyard.config import GatewayLimitsConfig
from switchyard.frames.entities import element_type, make, replace_known
from switchyard.frames.protocol import (
    FrameError,
    Request,
    api_name,
    decode_response,
    encode_request,
    encode_response,
    parse_request,
    replace_body,
    request_schema,
    response_schema,
    with_size,
)
from switchyard.identity import Identity, identify
from switchyard.model import BindingState
from switchyard.resolution import Resolution, resolve
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.brokers import leaders, mapped, topic_identity
from workers.gateway.brokers.fetches import answer_without_epochs, forwarded_fetch
from workers.gateway.brokers.rewrite import BROKER_NAMING, leader_hints
from workers.gateway.brokers.upstream import (
    Check,
    Overdue,
    Shielded,
    Unlisted,
    Unvouched,
    Upstream,
    UpstreamError,
    dropped,
)
from workers.gateway.brokers.vnodes import RealBroker
from workers.gateway.framing.intake import Intake, Lease
from workers.gateway.framing.sasl import Credentials, SaslError
from workers.gateway.groups import coordinated
from workers.gateway.groups.coordinator import coordinator
from workers.gateway.groups.handling import GroupHandling, Send
from workers.gateway.migrated.offsets import Listed
from workers.gateway.migrated.partitions import Part, Split, listed_of
from workers.gateway.process import stalls
from workers.gateway.producers.ids import origin_of
from workers.gateway.producers.issuers import Issued
from workers.gateway.producers.sequences import Unsendable, established, mark_refused
from workers.gateway.producers.transactions import (
    TxnRequest,
    WhileBlocked,
    abortable,
    transactional,
    while_blocked,
)
from workers.gateway.producers.translation import ProducerRoute, Translation, translate
from workers.gateway.routing import apis
from workers.gateway.routing.apis import Context, context_of
from workers.gateway.routing.blocking import OwnAnswer, Reply
from workers.gateway.routing.decision import Action, Decision, decide
from workers.gateway.routing.holds import hold_limit
from workers.gateway.routing.inflight import Ticket, own_wait_s
from workers.gateway.shared import Shared

log = logging.getLogger(__name__)
Replies = asyncio.Queue[tuple[Awaitable[Reply], Lease, Request] | None]
"""Each request's answer-to-be, in request order, with its bytes' lease and the request it answers
(None: no more)."""
_HIGH_WATER = 256 * 1024
"""Bytes waiting to go to the client before the session waits for them to drain."""
_LOADING_PAUSE_S, _LOADING_WITHIN_S = 0.2, 10.0
"""How often, and for how long at most, a group's request is sent again to a coordinator still loading the
group's offsets, or not the coordinator yet (``_follower``): well inside a client's request time-out
(30 s in the Java client and kafkajs, 60 s in librdkafka); no longer than the request may be held
(``hold_limit``), as the client's later requests wait behind it: a KIP-848 member's heartbeat too."""
_FIND_WITHIN_S = 3.0
"""How long the gateway asks a cluster for a group's coordinator when the one its request went to is
gone from the cluster's metadata, before the request gets the retriable error: well within
``KIP848_HEARTBEAT_S``, after which librdkafka gives a KIP-848 heartbeat up and every request in flight
on its connection with it. Asked 5 s, a consumer's heartbeats timed out behind the lookup, and its
commit in flight failed to the application (``_TIMED_OUT``, a chaos trial: a standby broker killed)."""
_LOOKUPS = 3
"""A member's lookup is made again while the routing moves on under it, this many times at most (a
switch's epochs come a few at a time)."""


@dataclass(frozen=True)
class Incoming:
    """A request with what the session learnt of it on arrival, kept while it is decided (or incoming)."""

    request: Request
    context: Context
    identity: Identity
    received: float
    """When it arrived (``time.perf_counter``)."""


@dataclass(frozen=True)
class Listener:
    """Where a connection came in: the bootstrap port, or a virtual broker standing for a real one."""

    virtual_id: int | None = None
    broker: RealBroker | None = None


class ClientSession:
    def __init__(
        self, gateway: Shared, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.gateway = gateway
        self.listener = listener
        self.reader, self.writer = reader, writer
        self.peer = writer.get_extra_info("peername")
        self.credentials: Credentials | None = None
        """Who the client proved to be over SASL; its broker connections log in as the same user."""
        self._handshaken = False
        self._closing = False
        self._producer = False
        """The connection carried a request only a producer sends (``apis.from_a_producer``)."""
        self._upstreams: dict[tuple[str, int | None, bool], Upstream] = {}
        """Broker connections by (cluster, node, for long polls): a long poll never shares its connection
        with other requests, which would wait behind it at the broker (a broker answers a connection's
        requests one after the other)."""
        self._identities: dict[str | None, Identity] = {}
        self._resolved: dict[tuple[Identity, tuple[str, ...], str | None], Resolution] = {}
        self._resolved_in: RoutingSnapshot | None = None
        self._answering: set[asyncio.Task[Reply]] = set()
        """Answers on their way from brokers; each holds an in-flight ticket until it settles."""
        self._finish_within: float | None = None
        """Set by ``finish``: how long the answers still on their way may take before the end."""
        self._retired: list[Upstream] = []
        """Broker connections left behind by a long poll answered early; closed when their answers are in."""
        self.groups = GroupHandling(gateway, self)
        self._coordinating: dict[tuple[str, str], int] = {}
        """Each group's coordinator by cluster, where a broker refused a request of the group as not its
        coordinator and the cluster named another (:mod:`workers.gateway.groups.coordinated`)."""
        self._released: asyncio.Future[bool] | None = None
        """Set when the latest held request has been let go (the next held one waits for it): whether a
        Produce among those held before was answered with the retriable error."""
        self._held: dict[asyncio.Event, None] = {}
        """One event per request held now: set, it lets that request go with the retriable error at once
        (see ``_make_room``)."""
        self._waiting: dict[asyncio.Event, None] = {}
        """Those of ``_held`` not let go yet, oldest first. Dicts, not lists: a producer that does not
        wait for its answers (librdkafka's default) has a thousand requests held on one connection within
        a few seconds at thousands of records/s, and scanning them on every request stalled the gateway
        for a minute (the soak)."""
        self._progress = asyncio.Event()
        """Set when an answer is taken to be written or a hold ends: the reader may have room again."""
        self._unanswered = 0
        self._stalls: dict[str, stalls.Waiting | None] = {"reading": None, "writing": None}
        """What the reader and the writer each wait on (the reader: a request it dispatches, then room
        for the next; the writer: a request's answer, then the client taking it); reported once (``check``)
        if it is long (:mod:`workers.gateway.process.stalls`)."""
        self._ending = False
        self._gone = False
        """Set as the session closes its broker connections: no request is sent for it from then on."""
        self.task: asyncio.Task[Any] | None = None
        """The task running this session (set by the gateway, which ends it at shutdown)."""
        config = gateway.config.gateway
        self.intake = Intake(
            reader,
            config.limits,
            max_frame_bytes=config.max_frame_bytes,
            process_budget=gateway.budget,
            busy=lambda: self._unanswered > 0,
            login_required=config.sasl.mode == "required",
        )

    async def run(self) -> None:
        limits = self.gateway.config.gateway.limits
        replies: Replies = asyncio.Queue()  # bounded by ``_room``
        writer_task = asyncio.create_task(self._write(replies))
        writer_task.add_done_callback(lambda _: self._progress.set())
        metrics = self.gateway.metrics
        metrics.connections.add(1)
        reading = cast(asyncio.Task[Any], asyncio.current_task())
        try:
            while not writer_task.done():
                got = await self.intake.next_frame()
                if got is None:
                    break
                frame, lease = got
                self._unanswered += 1
                try:
                    request = parse_request(frame)
                    self.groups.came(request)
                    self._stalls["reading"] = stalls.Waiting(request, reading)
                    reply = await self._dispatch(request)
                except BaseException:
                    self._answered(lease)
                    raise
                replies.put_nowait((reply, lease, request))
                if isinstance(reply, asyncio.Future) and request.api_key in _JOINS:
                    reply.add_done_callback(functools.partial(self._told, request))
                await self._room(replies, limits, writer_task)
                self._stalls["reading"] = None
                if self._closing:
                    break
        except (FrameError, SaslError) as exc:
            if self._finish_within is None:  # finishing, a frame half read is let go unsaid
                log.warning("closing connection from %s: %s", self.peer, exc)
        except UpstreamError as exc:
            log.warning("closing connection from %s: upstream failed: %s", self.peer, exc)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        except Exception:  # a bug must cost one connection, never the process or a hung client
            log.exception("closing connection from %s after an unexpected error", self.peer)
        finally:
            metrics.connections.add(-1)
            await self._close_down(writer_task, replies)

    async def _close_down(self, writer_task: asyncio.Task[None], replies: Replies) -> None:
        """Fail what still waits on brokers, let the writer end, give back every request's bytes."""
        self._ending = True
        replies.put_nowait(None)
        try:
            if self._finish_within is not None and self._answering:
                await asyncio.wait(set(self._answering), timeout=self._finish_within)
        finally:  # cancelled there (the gateway's shutdown), nothing more is sent for it either
            self._gone = True
            for upstream in [*self._upstreams.values(), *self._retired]:
                upstream.close()  # fails whatever still waits on a broker...
        try:
            await asyncio.gather(*self._answering, return_exceptions=True)  # ...so these settle
        finally:  # joins on other connections waiting for this one's go on, whatever ends it
            self.groups.close()
        await asyncio.gather(writer_task, return_exceptions=True)
        while not replies.empty():
            item = replies.get_nowait()
            if item is not None:
                self._answered(item[1])
        self.writer.close()

    def close(self) -> None:
        """End the connection at once: the reader sees the end of the stream."""
        self.writer.close()

    def finish(self, within_s: float) -> None:
        """End the connection as a graceful shutdown does: read no further request (those read in part
        or not yet are left to the client to send again: none reached a broker), give the answers on
        their way up to ``within_s`` to arrive and be written, then close. Cut short, a Produce written by
        its broker and not answered is sent again by its client, and a producer that is not idempotent
        writes it twice (the soak saw 17 records doubled at a gateway's restart)."""
        self._finish_within = within_s
        self.intake.end(cast(asyncio.Transport, self.writer.transport))

    def drop_upstreams(self, clusters: set[str], grace_s: float) -> None:
        """Send nothing more over this connection's broker connections to ``clusters``, and close each
        once what waits on it is answered, or after ``grace_s``: what still waits then gets the retriable
        error, and its client retries where it is routed now. A live cluster (a forced failover's source)
        answers within the grace a write it took; answered the retriable error instead, a producer that
        is not idempotent would write it again on the new cluster, where the mirror may have copied it."""
        doomed = [key for key, upstream in self._upstreams.items() if upstream.cluster in clusters]
        dropped = [self._upstreams.pop(key) for key in doomed]  # all first: a close may retire another
        for upstream in dropped:
            upstream.wind_down(Shielded(f"cluster {upstream.cluster} is shielded"), grace_s)
            self._retired.append(upstream)  # closed with the session, if it ends first

    def check(self, now: float) -> None:
        """End the connection if it has run past a time-out (called by the gateway's watchdog)."""
        reason = self.intake.overdue(now)
        if reason is not None and not self._ending:
            log.warning("closing connection from %s: %s", self.peer, reason)
            self._ending = True
            self.writer.transport.abort()
            if self.task is not None:
                self.task.cancel()  # it may be waiting for room in a budget, where no end of stream reaches
        for stage, waiting in self._stalls.items():
            report = None if waiting is None else waiting.report(stage, time.perf_counter())
            if report is not None:
                self._stalls[stage] = None  # once
                log.warning(
                    "connection from %s: %s; %d requests unanswered", self.peer, report, self._unanswered
                )

    def _told(self, request: Request, reply: asyncio.Future[Any]) -> None:
        """A JoinGroup's or SyncGroup's answer is known: if it is the gateway's own, the group handling
        hears of it now (``answered_here``), not once it is written — a commit held for that join comes
        ahead of it on the connection, and would wait its whole hold for its own answer to be written."""
        if not reply.cancelled() and reply.exception() is None and isinstance(reply.result(), OwnAnswer):
            self.groups.answered_here(request)

    def _answered(self, lease: Lease) -> None:
        lease.release()
        self._unanswered -= 1

    async def _write(self, replies: Replies) -> None:
        while (item := await replies.get()) is not None:
            self._progress.set()
            reply, lease, request = item
            self._stalls["writing"] = stalls.Waiting(request, reply)
            try:
                data = await reply
                if isinstance(data, OwnAnswer):  # the one place the gateway's own answers are encoded
                    if not isinstance(reply, asyncio.Future):
                        self.groups.answered_here(request)
                    data = data.encoded(request)
            except (UpstreamError, FrameError) as exc:
                if not self._ending:  # else the client left, and its unanswered requests with it
                    log.warning("closing connection from %s: %s", self.peer, exc)
                self._answered(lease)
                break
            except Exception:
                log.exception("closing connection from %s after an unexpected error", self.peer)
                self._answered(lease)
                break
            finally:
                self._stalls["writing"] = None
            self._answered(lease)
            if data is not None:
                self.writer.write(data)
                if self.writer.transport.get_write_buffer_size() > _HIGH_WATER:
                    drained = self.writer.drain()
                    self._stalls["writing"] = stalls.Waiting(request, drained)
                    try:
                        await drained
                    finally:
                        self._stalls["writing"] = None
        self.writer.close()

    async def _dispatch(self, request: Request) -> Awaitable[Reply]:
        """Decide, and for a forwarded request write it upstream now; return the awaitable reply."""
        received = time.perf_counter()  # not the loop's clock: uvloop's counts whole milliseconds
        key = request.api_key
        if key == apis.API_VERSIONS:
            return _ready(encode_response(request, self.gateway.answers.api_versions_response(request)))
        if key in (apis.SASL_HANDSHAKE, apis.SASL_AUTHENTICATE):
            return _ready(encode_response(request, await self._sasl(request)))
        if self.credentials is None and self.gateway.config.gateway.sasl.mode == "required":
            raise SaslError(f"{api_name(key)} before SASL authentication, which this gateway requires")
        if not self.gateway.brokers.offers(key, request.api_version):
            raise FrameError(
                f"{api_name(key)} v{request.api_version} is not offered by this gateway "
                "(ApiVersions says what is)"
            )
        self._producer = self._producer or apis.from_a_producer(request)
        refused = apis.refusal(request)
        if refused is not None:  # the broker's own answer, or the gateway's: nothing to route or hold
            return _ready(OwnAnswer(refused))
        identity = self._identity(request.client_id)
        if topic_identity.ids_asked(key, request.body):
            request = await self._by_name(request, identity)
        incoming = Incoming(request, context_of(request), identity, received)
        snapshot = self.gateway.view.snapshot  # one snapshot decides the request and dates it
        context = incoming.context
        resolution = self._resolve(snapshot, incoming.identity, context.topics, context.group)
        self.gateway.metrics.requests.add(api_name(key), incoming.identity.app or "-", resolution.cluster)
        self.gateway.usage.note(incoming.identity, key, incoming.context)
        if self.groups.names_a_member(request):
            snapshot, resolution = await self._find_member(incoming, snapshot, resolution)
        waits = await self._coordinator_waits(incoming, resolution)
        decision = self._decide(incoming, snapshot, resolution, coordinator_waits=waits)
        txn = transactional(request)
        # held as the gateway cannot vouch for its routing, what would end a transaction waits too
        if txn is not None and (decision.action is not Action.HOLD or self.gateway.vouched(snapshot)):
            handled = await self._transactional(incoming, decision, txn, snapshot, resolution)
            if handled is not None:
                return handled
        # from the moment a request is held, not once its task first runs (``_released`` is set then):
        # one read right behind it, in the same buffer, would otherwise go first
        if decision.action is Action.HOLD or (self._held and key in apis.BLOCKABLE):
            if decision.action is Action.HOLD:
                self.gateway.metrics.blocked.add(api_name(key), incoming.identity.app or "-")
            let_go = asyncio.Event()
            self._held[let_go] = self._waiting[let_go] = None
            return self.later(self._hold(incoming, snapshot, let_go))
        return await self._carry_out(incoming, decision, snapshot, resolution)

    async def _coordinator_waits(self, incoming: Incoming, resolution: Resolution) -> bool:
        """Whether ``incoming`` is a FindCoordinator for a blocked group of the consumer protocol, from a
        connection that carried no producer's request: not found until the block ends (``decide``)."""
        group = incoming.context.group
        if incoming.request.api_key != apis.FIND_COORDINATOR or group is None or self._producer:
            return False
        if resolution.state is not BindingState.BLOCKED:
            return False
        return await self.gateway.consumer_groups.of_consumer_protocol(group)

    async def _find_member(
        self, incoming: Incoming, snapshot: RoutingSnapshot, resolution: Resolution
    ) -> tuple[RoutingSnapshot, Resolution]:
        """Where the member ``incoming`` names joined, if this gateway did not see it join
        (``GroupHandling.find_member``), looked up by the routing that decides the request: again by the
        latest routing while it moves on meanwhile — a flip closes the connections a lookup uses, and a
        member left unknown would be sent to the new cluster as it is, which does not know it
        (UNKNOWN_MEMBER_ID: its commit refused, what it processed since processed again). Where it
        cannot be told, the connection is closed, as when the coordinator cannot be reached: the client
        looks its coordinator up again and retries, its membership kept."""
        context = incoming.context
        for _ in range(_LOOKUPS):
            request, cluster = incoming.request, resolution.cluster
            told = await self.groups.find_member(
                request, snapshot, cluster, context.topics, incoming.identity
            )
            if self.gateway.view.snapshot is snapshot:
                if not told:
                    body = request.body
                    raise UpstreamError(
                        f"group {body.group_id}: {cluster} cannot say where {body.member_id} is"
                    )
                break
            snapshot = self.gateway.view.snapshot
            resolution = self._resolve(snapshot, incoming.identity, context.topics, context.group)
        return snapshot, resolution

    async def _transactional(
        self,
        incoming: Incoming,
        decision: Decision,
        txn: TxnRequest,
        snapshot: RoutingSnapshot,
        resolution: Resolution,
    ) -> Awaitable[Reply] | None:
        """A transactional producer's request, where a switch concerns it (see
        :mod:`workers.gateway.producers.transactions`); None: routed as any other."""
        request, carrier = incoming.request, self.gateway.transactions
        if request.api_key == apis.PRODUCE and carrier.unadded(txn):
            return _abortable(request)  # to a partition it was told was added, and was not: never sent
        if request.api_key == apis.END_TXN:
            carrier.ended(txn)
        if decision.action is Action.HOLD:
            ending = await self._while_blocked(incoming, decision, txn)
            if isinstance(ending, Decision):  # the transaction's end goes on where it began
                return await self._carry_out(incoming, ending, snapshot, resolution)
            return ending
        if decision.action is not Action.FORWARD:
            return None
        if not await carrier.foreign(txn, decision.cluster, snapshot.epoch):
            carrier.sent(request, txn)
            return None
        if request.api_key == apis.INIT_PRODUCER_ID or (txn.aborting and request.api_version >= 5):
            return self.later(self._carried(incoming, decision, txn, snapshot.epoch))
        if txn.aborting and abortable(request) == ErrorCode.transaction_abortable:
            return _unsent(OwnAnswer(ErrorCode.none))  # the Java client's: nothing of it reached this cluster
        if txn.aborting:  # librdkafka's: refused so, it bumps its epoch (KIP-360), and the bump is carried
            return _abortable(request)
        if request.api_key in (apis.ADD_PARTITIONS_TO_TXN, apis.ADD_OFFSETS_TO_TXN) and request.api_version:
            if request.api_key == apis.ADD_PARTITIONS_TO_TXN:
                carrier.told_added(txn)
            return _unsent(OwnAnswer(ErrorCode.none))  # the Java client's: its write, refused next, bumps
        return _abortable(request)

    async def _while_blocked(
        self, incoming: Incoming, decision: Decision, txn: TxnRequest
    ) -> Awaitable[Reply] | Decision | None:
        """A transactional request while its identity is blocked: an open transaction ends now, where it
        began — the answer, or where it goes (None: held, as any other)."""
        request, carrier = incoming.request, self.gateway.transactions
        open_ = None if txn.aborting else await carrier.ongoing(decision.cluster, txn)
        match while_blocked(request, txn, open_):
            case WhileBlocked.HOLD:
                return None
            case WhileBlocked.TELL_ADDED:
                carrier.told_added(txn)
                return _unsent(OwnAnswer(ErrorCode.none))
            case WhileBlocked.REFUSE:
                return _abortable(request)
            case WhileBlocked.FORWARD:
                carrier.sent(request, txn)
                broker = self.listener.broker
                node = broker.node_id if broker is not None and broker.cluster == decision.cluster else None
                return Decision(Action.FORWARD, decision.cluster, node)

    async def _carried(self, incoming: Incoming, decision: Decision, txn: TxnRequest, epoch: int) -> Reply:
        """A foreign producer's request for a new epoch (an InitProducerId, or a version 2 abort whose answer
        carries one): the transactional id started afresh on the cluster it is routed to, if the client is
        its live producer on the cluster it left; that cluster's id and epoch in the answer."""
        async with self.gateway.transactions.carrying(txn.transactional_id):
            return await self._carry_once(incoming, decision, txn, epoch)

    async def _carry_once(self, incoming: Incoming, decision: Decision, txn: TxnRequest, epoch: int) -> Reply:
        request, carrier = incoming.request, self.gateway.transactions
        if (again := await carrier.already(txn, decision.cluster)) is not None:
            return _new_epoch(request, *again)
        found = await carrier.live(txn, decision.cluster)
        if found is None:
            log.info("%s: %s is nowhere the live producer of %s: fenced", incoming.identity, txn,
                     txn.transactional_id)  # fmt: skip
            return OwnAnswer(ErrorCode.producer_fenced)
        left, timeout = found
        if request.api_key == apis.INIT_PRODUCER_ID:
            timeout = request.body.transaction_timeout
        if not self.gateway.vouched():  # it looked for its producer meanwhile: started nowhere unvouched
            return OwnAnswer()
        try:
            started = await carrier.start(decision.cluster, decision.node, txn.transactional_id, timeout,
                                          (txn.producer_id, txn.epoch))  # fmt: skip
        except (UpstreamError, OSError, TimeoutError) as exc:
            log.info("%s: transactional id %s not started on %s: %s", incoming.identity, txn.transactional_id,
                     decision.cluster, exc)  # fmt: skip
            return OwnAnswer()
        if started.error_code != ErrorCode.none:
            return OwnAnswer(started.error_code)
        carry = Issued(decision.cluster, started.producer_id, started.producer_epoch,
                       (txn.producer_id, txn.epoch), time.time())  # fmt: skip
        await carrier.issued(txn.transactional_id, carry, epoch)
        if left is not None:
            carrier.fence(left, txn.transactional_id)
        log.info("%s: transactional id %s carried from %s to %s", incoming.identity, txn.transactional_id,
                 left or "a cluster not reached", decision.cluster)  # fmt: skip
        return _new_epoch(request, started.producer_id, started.producer_epoch)

    def _decide(
        self, incoming: Incoming, snapshot: RoutingSnapshot, resolution: Resolution, *,
        coordinator_waits: bool = False,
    ) -> Decision:  # fmt: skip
        """``coordinator_waits``: see ``decide`` (a FindCoordinator's, never held, is decided here once)."""
        request, context = incoming.request, incoming.context
        gateway = self.gateway
        joined_on, rejoining = self.groups.joined_on(request, snapshot, resolution.cluster, context.topics)
        partitions = gateway.moved.of(snapshot).touch(request, resolution.cluster, context.topics)
        return decide(
            request.api_key, context, resolution, self.listener.broker,
            empty_metadata=request.api_key == apis.METADATA and request.body.topics == (),
            mirrored=lambda topic: gateway.links.mirrored(snapshot, resolution.cluster, topic),
            joined_on=joined_on, rejoining=rejoining, owning=self.groups.owning(request),
            partitions=partitions,
            shielded=snapshot.shielded(resolution.cluster), unvouched=not gateway.vouched(snapshot),
            coordinator_waits=coordinator_waits,
            shield_holds=gateway.shield_fresh(resolution.cluster)
            and not (request.api_key == apis.PRODUCE and request.body.transactional_id),
        )  # fmt: skip

    async def _carry_out(
        self, incoming: Incoming, decision: Decision, snapshot: RoutingSnapshot, resolution: Resolution
    ) -> Awaitable[Reply]:
        """Do what ``decision`` says (a HOLD here is one whose time ran out: the retriable error)."""
        request = incoming.request
        moved = self.groups.moved(request, snapshot, decision.cluster)
        action = decision.action
        if action is Action.ANSWER:
            metadata = await self.gateway.brokers.local_metadata(request, decision.cluster)
            if request.body.topics != ():  # a shielded cluster's: its topics as last known
                metadata = await self._shielded_topics(request, metadata, decision.cluster)
            return _ready(encode_response(request, metadata))
        if action is Action.DROP:
            return _ready(None)
        if action is Action.RELEASE:
            self.groups.releasing(request)
        if decision.answer is not None:
            if action in (
                Action.REDIRECT,
                Action.REFUSE,
                Action.SHIELD,
                Action.UNFOUND,
            ):  # a HOLD's: when held
                self.gateway.metrics.blocked.add(api_name(request.api_key), incoming.identity.app or "-")
            return _unsent(decision.answer)
        if action is Action.CARRY:
            assert decision.source is not None
            send = self._sender(incoming, snapshot, resolution)
            carried = self.groups.carry(
                request, snapshot, resolution.cluster, decision.source, incoming.context.topics, send=send,
                identity=incoming.identity,
            )  # fmt: skip
            return self.later(carried)
        if action is Action.ADOPT:
            send = self._sender(incoming, snapshot, resolution)
            return self.later(self.groups.adopt(request, decision.node, send))
        if action is Action.SPLIT:
            return await self._split(incoming, decision, snapshot, resolution)
        frame = await self._outgoing(incoming, snapshot, decision.cluster, moved=moved)
        if request.api_key in _ENTERING and self._routed_otherwise_since(incoming, snapshot, resolution):
            return _unsent(OwnAnswer())  # waited (``before_join``), and the epoch may be acknowledged since
        return await self._forward(incoming, frame, snapshot, resolution, decision.node)

    async def _outgoing(
        self, incoming: Incoming, snapshot: RoutingSnapshot, cluster: str, *, moved: bool
    ) -> bytes:
        """The frame a forwarded request goes to ``cluster`` as: a moved member's join as a new member's
        (``GroupHandling.rejoined_as``), topic ids and offsets as the cluster has them."""
        request = incoming.request
        self.groups.sweep(request, snapshot, cluster, incoming.identity, incoming.context.topics)
        if request.api_key == apis.JOIN_GROUP:
            member_id = await self.groups.rejoined_as(request, cluster) if moved else request.body.member_id
            await self.groups.before_join(request, member_id, cluster)
            self.groups.sending(request, member_id)
            if moved:
                return replace_body(request, dataclasses.replace(request.body, member_id=member_id))
            self.groups.joining(request, cluster, incoming.identity)
        elif request.api_key == apis.CONSUMER_GROUP_HEARTBEAT:
            return await self.groups.heartbeat_out(request, cluster, incoming.identity)
        elif request.api_key in mapped.TRANSLATED_REQUESTS:
            given = forwarded_fetch(request.body) if request.api_key == apis.FETCH else None
            if request.api_key == apis.OFFSET_COMMIT:
                given = self.groups.in_synced_generation(request, cluster)
            body = await self._in_cluster_offsets(incoming, given or request.body, snapshot, cluster)
            if request.api_key == apis.DELETE_RECORDS:
                body = await self.gateway.links.purge_bound(snapshot, cluster, body)
            if body is not request.body:
                return replace_body(request, body)
        return request.frame

    async def _in_cluster_offsets(
        self, incoming: Incoming, body: Any, snapshot: RoutingSnapshot, cluster: str
    ) -> Any:
        """``body`` (a Fetch or a commit) with the offsets it names as ``cluster`` numbers them, where
        they differ from those clients see (:mod:`workers.gateway.brokers.mapped`)."""
        key = incoming.request.api_key
        topics = mapped.topics_of(key, body, answer=False)
        lookup = await self.gateway.links.presenter(snapshot, cluster, topics or ())
        return body if lookup is None else mapped.request(key, body, lookup)

    async def _split(
        self, incoming: Incoming, decision: Decision, snapshot: RoutingSnapshot, resolution: Resolution
    ) -> Awaitable[Reply]:
        """Carry out a request naming migrated partitions part by part (see
        :mod:`workers.gateway.migrated.partitions`): a Produce's parts written now, as a forwarded request
        is; in flight like a forwarded one, and answered early when a newer epoch routes it otherwise."""
        request = incoming.request
        ticket = self.gateway.inflight.start(  # in flight from its decision, not from its answer's task
            snapshot.epoch,
            self._still_routed(snapshot, incoming.identity, incoming.context.topics,
                               incoming.context.group, resolution, reads=request.api_key == apis.FETCH),
            long_poll=request.api_key == apis.FETCH,
            what=(request.api_key, incoming.identity, decision.cluster, "split"),
        )  # fmt: skip
        split = Split(
            request, self.gateway.moved.of(snapshot), decision.cluster, decision.node,
            _SplitBrokers(self, snapshot, incoming, decision.cluster),
        )  # fmt: skip
        try:
            answering = asyncio.ensure_future(await split.sent())
        except BaseException:
            self.gateway.inflight.finish(ticket)
            raise
        return self.later(self._split_answer(request, answering, ticket))

    async def _split_answer(self, request: Request, answering: asyncio.Future[Any], ticket: Ticket) -> Reply:
        try:
            if ticket.superseded is not None:
                await asyncio.wait((answering, ticket.superseded), return_when=asyncio.FIRST_COMPLETED)
                if not answering.done():
                    answering.cancel()
                    return OwnAnswer()
            body = await answering
        finally:
            self.gateway.inflight.finish(ticket)
        return None if body is None else encode_response(request, body)

    async def _hold(self, incoming: Incoming, snapshot: RoutingSnapshot, let_go: asyncio.Event) -> Reply:
        """Wait while the identity is blocked (bounded), then carry out what the routing of that moment
        says. Held requests are let go in the order they came, each after the one before is on its way.

        A held request is never sent on once its hold time is over, whatever the routing says by then:
        its client may have given up on it and sent it again, and both would be written. It gets the
        retriable error instead (and sooner when the connection holds too many, ``_make_room``); ``let_go``
        set does that at once. A Produce held behind one answered so, or with another error of the
        gateway's own, or behind one that failed before it was sent, is answered so too: sent on, it
        would reach the broker ahead of the earlier batch's retry, a gap in an idempotent producer's
        sequence (and, translated, it would set where the partition's sequences start on the new
        cluster, past the earlier batch: fatal to the client)."""
        loop = asyncio.get_running_loop()
        before, self._released = self._released, loop.create_future()
        released = self._released
        produce = incoming.request.api_key == apis.PRODUCE
        refused = after_refused = carried_out = False
        try:
            context, identity = incoming.context, incoming.identity
            most = self.gateway.config.gateway.block_hold_s
            limit = hold_limit(incoming.request, most, self.groups.session_s(incoming.request))
            deadline = incoming.received + limit
            resolution = self._resolve(snapshot, identity, context.topics, context.group)
            while True:
                while (
                    self._decide(incoming, snapshot, resolution).action is Action.HOLD
                    and not let_go.is_set()
                    and (remaining := deadline - time.perf_counter()) > 0
                ):
                    snapshot = await self.gateway.changes.after(snapshot, remaining, let_go)
                    resolution = self._resolve(snapshot, identity, context.topics, context.group)
                if before is not None:
                    after_refused = await before
                    refused = after_refused and produce
                    before = None
                latest = self.gateway.view.snapshot
                if refused or let_go.is_set() or time.perf_counter() >= deadline:
                    break
                if (
                    latest is snapshot
                    and self._decide(incoming, snapshot, resolution).action is not Action.HOLD
                ):
                    break  # held again if the gateway stopped vouching for its routing meanwhile
                snapshot = latest  # it moved on while this request waited its turn: decided again
                resolution = self._resolve(snapshot, identity, context.topics, context.group)
            refused = refused or let_go.is_set() or time.perf_counter() >= deadline
            if not refused and self.groups.names_a_member(incoming.request):  # by the routing it goes by
                snapshot, resolution = await self._find_member(incoming, snapshot, resolution)
            if refused:
                decision = Decision(Action.HOLD, resolution.cluster)  # its time is over: the retriable error
                if produce:
                    self._refusing(incoming, resolution.cluster)
            else:
                decision = self._decide(incoming, snapshot, resolution)
            txn = transactional(incoming.request) if decision.action is not Action.HOLD else None
            handled = None if txn is None else await self._transactional(
                incoming, decision, txn, snapshot, resolution
            )  # fmt: skip
            answer = (
                handled
                if handled is not None
                else await self._carry_out(incoming, decision, snapshot, resolution)
            )
            carried_out = not isinstance(answer, _Unsent)
        finally:
            self._held.pop(let_go, None)
            self._waiting.pop(let_go, None)
            self._progress.set()
            if not released.done():  # a Produce answered here or failed, unsent, is refused, for those behind
                released.set_result(after_refused or (produce and (refused or not carried_out)))
        return await answer

    async def _room(self, replies: Replies, limits: GatewayLimitsConfig, writer: asyncio.Task[None]) -> None:
        """Wait until the connection may read its next request: fewer than ``max_in_flight`` answers
        awaited besides the held ones. Held requests never stop the reading: past ``max_held`` the oldest
        is let go. Unread, the client's next requests would age where the gateway cannot see them — past
        the client's time-out, resent behind themselves, and both copies sent on when the block ends."""
        if len(self._waiting) > limits.max_held:
            self._make_room(limits.max_held)
        while replies.qsize() - len(self._held) >= limits.max_in_flight and not writer.done():
            self._progress.clear()
            await self._progress.wait()

    def _make_room(self, most: int) -> None:
        """Let the oldest held requests go, with the retriable error, until at most ``most`` wait."""
        while len(self._waiting) > most:
            let_go = next(iter(self._waiting))
            del self._waiting[let_go]
            let_go.set()

    def _sender(self, incoming: Incoming, snapshot: RoutingSnapshot, resolution: Resolution) -> Send:
        """How a commit the group handling has waited on (its carry, its member's rejoin) is sent: as
        ``body`` now, unless the routing moved on meanwhile (``_routed_otherwise_since``)."""

        async def send(body: Any, node: int | None) -> Awaitable[Reply]:
            if self._routed_otherwise_since(incoming, snapshot, resolution):
                return _ready(OwnAnswer())
            body = await self._in_cluster_offsets(incoming, body, snapshot, resolution.cluster)
            frame = replace_body(incoming.request, body)
            return await self._forward(incoming, frame, snapshot, resolution, node)

        return send

    def _routed_otherwise_since(
        self, incoming: Incoming, snapshot: RoutingSnapshot, resolution: Resolution
    ) -> bool:
        """Whether the routing moved on since ``snapshot`` decided a request that has waited since (a
        commit's carry, its member's rejoin; a join's wait for commits) and routes it otherwise now: the
        epoch that did may be acknowledged already, so the request is answered with the retriable error
        rather than sent the old way."""
        latest = self.gateway.view.snapshot
        if latest is snapshot:
            return False
        context = incoming.context
        still = self._still_routed(snapshot, incoming.identity, context.topics, context.group, resolution)
        return not still(latest)

    async def _by_name(self, request: Request, identity: Identity) -> Request:
        """``request`` naming by name the topics it named by the ids clients see (see
        :mod:`workers.gateway.brokers.topic_identity`): routing, and the cluster asked, need names. A shielded
        cluster is not asked: its topics are those the gateway last saw there."""
        snapshot = self.gateway.view.snapshot
        cluster = self._resolve(snapshot, identity, (), None).cluster
        if snapshot.shielded(cluster):
            topics: Iterable[str] = self.gateway.moved.topics(cluster)
        else:
            version = self.gateway.brokers.version(apis.METADATA)
            answer = await self.upstream(cluster, None, long_poll=False).ask(
                apis.METADATA, version, topics=None, allow_auto_topic_creation=False
            )
            topics = (t.name for t in answer.topics if t.name)
        names = topic_identity.names_of(topics)
        body = topic_identity.by_name(request.api_key, request.body, names)
        return dataclasses.replace(request, frame=replace_body(request, body))

    def _abandon(self, answer: asyncio.Future[bytes], upstream: Upstream) -> None:
        """Leave the broker's answer to a long poll answered early behind (a cut join's member is removed
        by the change that cut it: ``Members.moved``)."""
        answer.add_done_callback(dropped)
        self._retire(upstream)

    async def _forward(
        self,
        incoming: Incoming,
        frame: bytes,
        snapshot: RoutingSnapshot,
        resolution: Resolution,
        node: int | None,
        *,
        sent_on: bool = False,
        loaded_by: float | None = None,
    ) -> Awaitable[Reply]:
        """Write ``frame`` to a broker of the resolved cluster now; return its answer-to-be. A group's
        request goes where its coordinator was last found, and on to its coordinator if the broker says
        it is not, or again to it while it loads the group's offsets, until ``loaded_by``
        (``time.monotonic``; None: as long as it may be held, at most ``_LOADING_WITHIN_S``, from its
        arrival) —
        see ``_follower`` (``sent_on``: it was sent on so already) and
        :mod:`workers.gateway.groups.coordinated`."""
        request, context, identity = incoming.request, incoming.context, incoming.identity
        key = request.api_key
        group = context.group if key in apis.GROUP_APIS else None
        try:
            upstream = self._upstream_of(resolution.cluster, node, group, long_poll=key in apis.LONG_POLLS)
        except UpstreamError as closed:  # shielded since this request was decided, or its broker gone
            return await self._unconnected(
                incoming, frame, snapshot, resolution, node, closed, sent_on=sent_on, loaded_by=loaded_by
            )
        inflight = self.gateway.inflight
        ticket = inflight.start(
            snapshot.epoch,
            self._still_routed(
                snapshot, identity, context.topics, context.group, resolution, reads=key == apis.FETCH
            ),
            long_poll=key in apis.LONG_POLLS,
            what=(key, identity, resolution.cluster, node),
            own_wait_s=own_wait_s(request.body),
            give_up=functools.partial(_give_up, upstream, key),
        )
        try:
            if context.producer is not None:  # in flight already while its producer id is looked up
                frame = await self._translate(
                    request, identity, context.producer, resolution.cluster, snapshot.epoch
                )
            future = await upstream.send(
                frame, request.correlation_id, expects_response=context.expects_response,
                check=self.vouching(key),
            )  # fmt: skip
        except (Shielded, Overdue) as closed:  # closed on purpose while it connected, or unvouched since
            inflight.finish(ticket)
            if isinstance(closed, Unvouched) and key == apis.PRODUCE:
                self._produce_refused(incoming, resolution.cluster)
            return self._refused(request, context.expects_response, closed)
        except Unsendable as refused:  # a moved producer's batch that may not go yet (or never)
            inflight.finish(ticket)
            log.log(_refusal_level(refused.codes.values()), "%s: Produce answered without sending: %s",
                    identity, refused)  # fmt: skip
            return _unsent(OwnAnswer(codes=refused.codes) if context.expects_response else None)
        except BaseException as failed:
            inflight.finish(ticket)
            if isinstance(failed, UpstreamError) and upstream.unreached and upstream.node is not None:
                now = self.gateway.view.snapshot  # out of flight already: no epoch waits for it
                await self._until_led_elsewhere(
                    incoming, now, resolution.cluster, upstream.node, request.body
                )
            raise
        if future is None:
            inflight.finish(ticket)
            return _ready(None)
        on = None
        if group is not None:
            if loaded_by is None:  # its client's later requests wait behind it, a KIP-848 heartbeat too
                held_s = hold_limit(request, _LOADING_WITHIN_S, self.groups.session_s(request))
                loaded_by = time.monotonic() + held_s - (time.perf_counter() - incoming.received)
            on = self._follower(
                incoming, frame, snapshot, resolution,
                upstream=upstream, group=group, sent_on=sent_on, loaded_by=loaded_by,
            )  # fmt: skip
        answer = self._answer(request, future, upstream, ticket, identity, received=incoming.received, on=on)
        answered = self.later(answer)
        if key == apis.OFFSET_COMMIT:  # its answer as the client gets it: after any sending on or again
            self.groups.commit_sent(request, answered)
        return answered

    async def _until_led_elsewhere(
        self, incoming: Incoming, decided: RoutingSnapshot, cluster: str, node: int, body: Any
    ) -> None:
        """A Produce whose broker could not be reached (nothing was sent to that broker) waits, at most its
        hold time from its arrival, for the cluster to lead the partitions of ``body`` (what was to go
        there: the request, or its part of a split one) elsewhere (:mod:`.brokers.leaders`), or for the
        routing to move on from ``decided`` (a split request's, in flight, the snapshot it went by: an epoch
        since waits for it); then the client connection closes, as it would at once, and its client finds
        the new leader."""
        request = incoming.request
        if request.api_key != apis.PRODUCE:
            return
        until = incoming.received + hold_limit(request, self.gateway.config.gateway.block_hold_s)
        began, partitions = time.perf_counter(), leaders.produced_to(body)
        elsewhere = asyncio.ensure_future(
            leaders.led_elsewhere(self.gateway.brokers, cluster, node, partitions, until)
        )
        routed = asyncio.ensure_future(self.gateway.changes.after(decided, until - began))
        try:  # a switch meanwhile (a failover of the cluster) ends it too: the client goes where it is sent
            await asyncio.wait((elsewhere, routed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            elsewhere.cancel()
            routed.cancel()
        if elsewhere.done() and not elsewhere.cancelled():
            why = elsewhere.result()
        elif self.gateway.view.snapshot is not decided:
            why = "the routing changed"
        else:
            why = "its hold time ran out"
        log.info("%s: Produce to broker %s of %s, which cannot be reached, held %.1f s: %s",
                 incoming.identity, node, cluster, time.perf_counter() - began, why)  # fmt: skip

    def _upstream_of(self, cluster: str, node: int | None, group: str | None, *, long_poll: bool) -> Upstream:
        """The connection a request goes over: to ``node``, or for a group's request to where its
        coordinator was last found (``_coordinating``), ``node`` again once that is gone."""
        learned = self._coordinating.get((cluster, group)) if group is not None else None
        if learned is None:
            return self.upstream(cluster, node, long_poll=long_poll)
        try:
            return self.upstream(cluster, learned, long_poll=long_poll)
        except UpstreamError:
            del self._coordinating[(cluster, cast(str, group))]  # gone: as decided
            return self.upstream(cluster, node, long_poll=long_poll)

    async def _unconnected(  # noqa: PLR0917 - what _forward was given
        self, incoming: Incoming, frame: bytes, snapshot: RoutingSnapshot, resolution: Resolution,
        node: int | None, closed: UpstreamError, *, sent_on: bool, loaded_by: float | None,
    ) -> Awaitable[Reply]:  # fmt: skip
        """The answer to a request no broker connection could be had for (``closed`` says why): one any
        broker answers (``apis.ANY_BROKER``) whose broker has left the cluster's metadata goes to any; a
        group's request whose broker has left it goes on to the group's coordinator now;
        otherwise the retriable error (``_refused``), a moved producer's later batches of the same
        partitions held back until its resend."""
        request, context = incoming.request, incoming.context
        if isinstance(closed, Unlisted) and request.api_key in apis.ANY_BROKER:  # any broker: never unlisted
            return await self._forward(incoming, frame, snapshot, resolution, None, loaded_by=loaded_by)
        group = context.group if request.api_key in apis.GROUP_APIS else None
        if isinstance(closed, Unlisted) and group is not None and not sent_on:
            now = await self._coordinator_now(resolution.cluster, group, node)
            if now is not None and self._routed_otherwise_since(incoming, snapshot, resolution):
                return _unsent(OwnAnswer())  # the retriable error, as a request the new routing sends on
            if now is not None:
                return await self._forward(incoming, frame, snapshot, resolution, now, sent_on=True,
                                           loaded_by=loaded_by)  # fmt: skip
        if request.api_key == apis.PRODUCE:
            self._refusing(incoming, resolution.cluster)
        return self._refused(request, context.expects_response, closed)

    async def _coordinator_now(self, cluster: str, group: str, gone: int | None) -> int | None:
        """The broker that coordinates ``group`` now, asked of any broker of ``cluster``, its request's
        own (``gone``) having left the cluster's metadata: a killed coordinator's requests go on to its
        successor, as when a live broker says it is not the coordinator (a KIP-848 commit answered
        NOT_COORDINATOR by the gateway was refused to the application in a chaos trial). None: there
        is no other yet, or the cluster may not be asked (shielded meanwhile). The connection's reading
        waits for it (at most ``_FIND_WITHIN_S``), so the group's later requests stay behind it."""
        if not self._reachable(cluster):
            return None
        asking = self.gateway.brokers.upstream(cluster, None, self.credentials)
        try:
            now = await asyncio.wait_for(coordinator(self.gateway.brokers, asking, group), _FIND_WITHIN_S)
        except (UpstreamError, TimeoutError, FrameError) as exc:
            log.info("group %s: broker %s of %s is gone, and no other coordinator found: %s", group, gone,
                     cluster, exc)  # fmt: skip
            return None
        finally:
            asking.close()
        if now == gone:
            return None
        log.info("group %s: coordinated by broker %s of %s now, not %s (gone)", group, now, cluster, gone)
        self._coordinating[(cluster, group)] = now
        return now

    def _follower(
        self, incoming: Incoming, frame: bytes, snapshot: RoutingSnapshot, resolution: Resolution, *,
        upstream: Upstream, group: str, sent_on: bool, loaded_by: float,
    ) -> Callable[[bytes], Awaitable[Reply | None]]:  # fmt: skip
        """What replaces a group request's answer that says ``upstream``'s broker does not coordinate
        ``group``: the answer of the coordinator the cluster names now, asked at once. Where the broker
        names itself, or the request was sent on to it already (``sent_on``: it was named, and has not
        taken the group over yet), it is asked again after a pause, as an offsets request answered that
        its coordinator is still loading them is, until ``loaded_by``. None: the answer says neither,
        the time is up, or the cluster names no coordinator, and the client is told as the broker told
        it. A KIP-848 commit sent on to the coordinator a cluster named, its own broker killed, was
        answered NOT_COORDINATOR 16 ms later; passed on, librdkafka failed it to the application
        (chaos run, 2026-12-05)."""

        async def follow(answer: bytes) -> Reply | None:
            request = incoming.request
            decoded = decode_response(request, answer)
            loading = coordinated.loading(request.api_key, decoded)
            if not loading and not coordinated.not_coordinator(request.api_key, decoded):
                return None
            cluster, now = resolution.cluster, upstream.node
            if not loading:
                try:  # asked of the broker that just answered: it is up
                    now = await coordinator(self.gateway.brokers, upstream, group)
                except (UpstreamError, TimeoutError, FrameError) as exc:
                    log.info("group %s: not at broker %s of %s, and no other found: %s", group, upstream.node,
                             cluster, exc)  # fmt: skip
                    return None
            if now != upstream.node:
                log.info("group %s: coordinated by broker %s of %s now, not %s", group, now, cluster,
                         upstream.node)  # fmt: skip
                self._coordinating[(cluster, group)] = cast(int, now)
            if loading or sent_on or now == upstream.node:  # not taken over yet: again, after a pause
                if time.monotonic() >= loaded_by:
                    return None
                await asyncio.sleep(_LOADING_PAUSE_S)
            if self._routed_otherwise_since(incoming, snapshot, resolution):  # held for nothing since
                return OwnAnswer()  # the retriable error, as a request the new routing sends on
            again = self._forward(
                incoming, frame, snapshot, resolution, now, sent_on=True, loaded_by=loaded_by
            )
            return await (await again)

        return follow

    def later(self, answer: Coroutine[Any, Any, Reply]) -> asyncio.Task[Reply]:
        """Run ``answer`` as a task the session waits for when it ends."""
        task = asyncio.create_task(answer)
        self._answering.add(task)
        task.add_done_callback(self._settled)
        return task

    async def _sasl(self, request: Request) -> Any:
        if request.api_key == apis.SASL_HANDSHAKE:
            reply = self.gateway.answers.sasl_handshake(request, authenticated=self.credentials is not None)
            self._handshaken = reply.error_code == ErrorCode.none
            return reply
        reply, credentials = await self.gateway.answers.sasl_authenticate(
            request, handshaken=self._handshaken
        )
        self._handshaken = False
        if credentials is None:
            self._closing = True  # as a broker does: the refusal is sent, then the connection closed
        else:
            self.credentials = credentials
            self.intake.logged_in = True
            self._identities.clear()
        return reply

    async def _answer(
        self,
        request: Request,
        future: asyncio.Future[bytes],
        upstream: Upstream,
        ticket: Ticket,
        identity: Identity,
        *,
        received: float,
        on: Callable[[bytes], Awaitable[Reply | None]] | None = None,
    ) -> bytes | OwnAnswer:
        """The client's answer to a forwarded request, from its broker's (``on``: what may replace it, a
        group's coordinator's)."""
        sent = time.perf_counter()
        try:
            if ticket.superseded is not None:
                await asyncio.wait((future, ticket.superseded), return_when=asyncio.FIRST_COMPLETED)
                if not future.done():  # a newer epoch routes it elsewhere: answer as that epoch would
                    self._abandon(future, upstream)
                    return OwnAnswer()
            try:
                frame = await future
            except (Shielded, Overdue):
                unanswered = self._unanswerable(request)
                if unanswered is None:
                    raise
                return unanswered
        finally:
            self.gateway.inflight.finish(ticket)
        if on is not None and (instead := await on(frame)) is not None:
            return instead
        answered = time.perf_counter()
        cluster = upstream.cluster
        produced = await self._learn(request, frame, cluster, identity, ticket.epoch)
        translated = None
        if request.api_key in mapped.TRANSLATED_ANSWERS and self.gateway.links.presents(
            self.gateway.view.snapshot, cluster
        ):
            translated = await self._in_client_offsets(request, produced or frame, cluster)
        if produced is not None and (translated is not None or leader_hints(produced)):
            body = produced if translated is None else translated
            if leader_hints(body):
                body = await self.gateway.brokers.rewrite(apis.PRODUCE, body, cluster)
            reply = encode_response(request, body)
        else:
            reply = await self._presented(
                request, frame if translated is None else translated, cluster, identity
            )
        attributes = {"api": api_name(request.api_key)}
        self.gateway.metrics.upstream_latency.record(answered - sent, attributes)
        added = (time.perf_counter() - received) - (answered - sent)
        self.gateway.metrics.added_latency.record(added, attributes)
        return reply

    async def _in_client_offsets(self, request: Request, answer: Any, cluster: str) -> Any:
        """A broker's answer (decoded, or its frame) with the offsets it names as clients see them, where
        ``cluster``'s differ (:mod:`workers.gateway.brokers.mapped`): None if none does; else the body
        for a decoded answer, the frame for a frame."""
        raw = isinstance(answer, bytes | bytearray)
        topics = mapped.topics_of(request.api_key, request.body, answer=True)
        body = decode_response(request, answer) if raw and topics is None else None
        if body is not None:  # an OffsetFetch of all the group's topics: those its answer names
            topics = mapped.answered_topics(request.api_key, body)
        lookup = await self.gateway.links.presenter(self.gateway.view.snapshot, cluster, topics or ())
        if lookup is None:
            return None
        if body is None:
            body = decode_response(request, answer) if raw else answer
        translated = mapped.answer(request.api_key, body, lookup)
        if translated is body:
            return None
        return encode_response(request, translated)[4:] if raw else translated

    async def _learn(
        self, request: Request, frame: bytes, cluster: str, identity: Identity, epoch: int
    ) -> Any:
        """What the gateway keeps from an answer (acknowledged writes, issued producer ids, members and
        their rounds); a Produce answer is returned decoded (else None)."""
        if request.api_key == apis.PRODUCE:
            produced = decode_response(request, frame)
            self.gateway.acked.note(cluster, request.body, produced)
            producer = None if request.body.transactional_id else apis.producer_of_body(request.body)
            if producer is not None:
                moved = self.gateway.producers.translating(identity, producer[0], cluster)
                if moved is not None:
                    established(moved, producer[1], produced)
            return produced
        if request.api_key == apis.INIT_PRODUCER_ID:
            issued, transactional_id = decode_response(request, frame), request.body.transactional_id
            if issued.producer_id >= 0 and transactional_id:
                issuer = Issued(cluster, issued.producer_id, issued.producer_epoch)
                await self.gateway.transactions.issued(transactional_id, issuer, epoch)
            elif issued.producer_id >= 0:
                await self.gateway.producers.issued(identity, issued.producer_id, cluster, epoch)
        elif request.api_key in (apis.SYNC_GROUP, apis.JOIN_GROUP):
            self.groups.learn(request, frame, cluster, identity)
        return None

    async def _presented(self, request: Request, frame: bytes, cluster: str, identity: Identity) -> bytes:
        """A broker's answer as the client gets it: naming virtual brokers only, migrated partitions led
        where they moved, topics named as clients know them, record batches of no leader epoch."""
        if request.api_key == apis.FETCH:
            return answer_without_epochs(frame, request.api_version)
        if request.api_key == apis.CONSUMER_GROUP_HEARTBEAT:
            return await self.groups.heartbeat_in(request, frame, cluster, identity)
        naming = request.api_key in BROKER_NAMING
        if not naming and not topic_identity.presents(request.api_key, request.api_version):
            return with_size(frame)
        body = decode_response(request, frame)
        if naming:
            body = await self.gateway.brokers.rewrite(request.api_key, body, cluster)
            if request.api_key == apis.METADATA:
                self.gateway.moved.learn(cluster, body)
                self.gateway.real_ids.learn(
                    cluster, ((t.name, getattr(t, "topic_id", None)) for t in body.topics)
                )
            if request.api_key in (apis.METADATA, apis.DESCRIBE_TOPIC_PARTITIONS):
                body = await self._moved_leaders(body, cluster)
        return encode_response(request, topic_identity.present(request.api_key, body))

    async def _shielded_topics(self, request: Request, metadata: Any, cluster: str) -> Any:
        """A shielded cluster's topics in a Metadata answer made here, as the gateway last saw them: each
        partition led by the virtual broker that led it, whose requests are answered at once with the
        retriable error (so clients keep asking, and find a partition a migration moves the moment it
        does), those a migration moved led where they moved; a topic never seen, without a leader. Each
        topic keeps the id clients see for it (a client takes an id gone for a topic deleted)."""
        known = self.gateway.moved.topics(cluster)
        asked = request.body.topics
        names = [t.name for t in asked] if asked is not None else sorted(known)
        topic_cls = element_type(type(metadata), "topics")
        partition_cls = element_type(topic_cls, "partitions")
        topics = []
        for i, name in enumerate(names):
            if not name:  # asked by an id no topic seen there has (see _by_name)
                assert asked is not None
                unknown = ErrorCode.unknown_topic_id
                topics.append(make(topic_cls, topic_id=asked[i].topic_id, error_code=unknown))
            elif name not in known:
                topics.append(make(topic_cls, name=name, error_code=ErrorCode.leader_not_available))
            else:
                partitions = tuple(_led(partition_cls, p, leader) for p, leader in enumerate(known[name]))
                topic = make(topic_cls, name=name, partitions=partitions)
                topics.append(replace_known(topic, topic_id=topic_identity.topic_id(name)))
        return await self._moved_leaders(dataclasses.replace(metadata, topics=tuple(topics)), cluster)

    async def _moved_leaders(self, body: Any, cluster: str) -> Any:
        """A Metadata or DescribeTopicPartitions answer (virtual ids already) with each migrated partition
        led by the virtual broker of its target's leader, where its writes go, its leader epoch unknown
        (-1: its records come from two clusters with unrelated epochs)."""
        migrations = self.gateway.moved.of(self.gateway.view.snapshot)
        topics = []
        for topic in body.topics:
            moved = migrations.of(cluster, topic.name) if topic.name else {}
            partitions = []
            for given in topic.partitions:
                migration = moved.get(given.partition_index)
                if migration is not None and migration.in_effect:
                    partitions.append(await self._led_by_target(given, topic.name, migration.target))
                else:
                    partitions.append(given)
            topics.append(dataclasses.replace(topic, partitions=tuple(partitions)) if moved else topic)
        if not hasattr(body, "brokers"):  # DescribeTopicPartitions: its brokers come from Metadata
            return dataclasses.replace(body, topics=tuple(topics))
        listed = {b.node_id for b in body.brokers}
        leaders = {p.leader_id for t in topics for p in t.partitions if p.leader_id >= 0} - listed
        broker_cls = element_type(type(body), "brokers")
        more = tuple(
            make(
                broker_cls,
                node_id=v,
                host=self.gateway.brokers.address(v)[0],
                port=self.gateway.brokers.address(v)[1],
            )
            for v in sorted(leaders)
        )  # a leader never named in an answer before: clients must find it among the brokers
        return dataclasses.replace(body, topics=tuple(topics), brokers=body.brokers + more)

    async def _led_by_target(self, partition: Any, topic: str, target: str) -> Any:
        node = await self.gateway.moved.leaders.leader(target, topic, partition.partition_index)
        if node is None:
            return replace_known(
                partition, error_code=ErrorCode.leader_not_available, leader_id=-1, leader_epoch=-1
            )
        vid = await self.gateway.brokers.virtual_id(target, node)
        return replace_known(
            partition, error_code=ErrorCode.none, leader_id=vid, leader_epoch=-1, replica_nodes=(vid,),
            isr_nodes=(vid,), offline_replicas=(),
        )  # fmt: skip

    def _settled(self, answer: asyncio.Task[Reply]) -> None:
        """An answer is in (or failed). Its failure is seen by the writer, if it still waits for it; when
        the connection is already ending nobody will, and that is no error worth a traceback."""
        self._answering.discard(answer)
        if not answer.cancelled():
            answer.exception()

    def _still_routed(
        self,
        sent_in: RoutingSnapshot,
        identity: Identity,
        topics: tuple[str, ...],
        group: str | None,
        resolution: Resolution,
        *,
        reads: bool = False,
    ) -> Callable[[RoutingSnapshot], bool]:
        """Whether a newer snapshot would still send this request where ``resolution`` did (its
        binding, and the migrations of the partitions of its topics). A read (``reads``: a Fetch)
        depends on the binding only: a migration keeps the origin's records below its end offset where
        they were, and the origin takes no write past it, so a read sent before the migration took
        effect answers as it would have just before. Answered with the retriable error instead (a long
        poll routed otherwise is), kafkajs would join its group again, as it does at any stale-leader
        fetch error, and a commit racing that join be refused: its records processed twice."""

        moved = self.gateway.moved
        before = moved.of(sent_in).signature(resolution.cluster, topics)

        def still_routed(snapshot: RoutingSnapshot) -> bool:
            now = self._resolve(snapshot, identity, topics, group)
            if (now.cluster, now.state) != (resolution.cluster, resolution.state):
                return False
            if reads and not snapshot.shielded(resolution.cluster):  # (a fault migration's origin is)
                return True
            return moved.of(snapshot).signature(resolution.cluster, topics) == before

        return still_routed

    def _retire(self, upstream: Upstream) -> None:
        """Send no more requests over ``upstream``: one left behind would wait behind the dropped poll."""
        for key, current in list(self._upstreams.items()):
            if current is upstream:
                del self._upstreams[key]
        self._retired.append(upstream)
        upstream.retire()

    async def _translate(
        self, request: Request, identity: Identity, producer: tuple[int, int], cluster: str, epoch: int
    ) -> bytes:
        """The Produce frame to send: as received, or with its producer translated for ``cluster``;
        :class:`Unsendable` if a batch may not go there now (:mod:`workers.gateway.producers.sequences`)."""
        translation = await self._checked(request.body, identity, producer, cluster, epoch)
        if translation is None:
            return request.frame
        return replace_body(request, translated(request.body, translation))

    async def _checked(
        self, body: Any, identity: Identity, producer: tuple[int, int], cluster: str, epoch: int
    ) -> Translation | None:
        """The translation ``body`` (a Produce of ``producer``) is written to ``cluster`` with (None: as
        it is); :class:`Unsendable` if a batch may not go there now. Where a partition's sequences start
        is stored before a batch is sent by it."""
        producers = self.gateway.producers
        translation = await producers.translation(identity, producer[0], cluster, epoch)
        if translation is None:
            return None
        return await self.sequenced(
            body, producer, translation, cluster, lambda t: producers.remember(identity, producer[0], t)
        )

    async def sequenced(  # noqa: PLR0917 - what a batch's check needs
        self,
        body: Any,
        producer: tuple[int, int],
        translation: Translation,
        cluster: str,
        remember: Callable[[Translation], Awaitable[Translation]],
        told: Callable[[tuple[str, int]], bool] = lambda _: True,
    ) -> Translation:
        """The translation ``body`` is written to ``cluster`` with, its partitions' starts checked (see
        ``sequences.check``) and stored by ``remember`` before anything relies on them: where another
        process stored first, its starts, or its translation, are the ones."""
        while True:
            known = translation.kept()
            try:
                await self.gateway.sequences.check(
                    body, producer[1], translation, cluster, self._reachable,
                    told=told, settling=self.gateway.settling,
                )  # fmt: skip
                refused = None
            except Unsendable as exc:
                refused = exc
            if (used := translation.kept()) != known:  # stored before anything relies on it
                stored = await remember(translation)
                if stored is not translation or not stored.kept().covers(used):
                    translation = stored  # another process stored first: its starts are the ones
                    continue
            if refused is not None:
                raise refused
            return translation

    def vouching(self, api_key: int) -> Check:
        """What a request of ``api_key`` passes right before it is written to a broker: what a gateway
        that cannot vouch for its routing holds (``apis.UNVOUCHED_HELD``) is not written then, whatever
        it waited for since it was decided (a broker's connection, a producer's route read from
        ZooKeeper, a freeze)."""

        def check() -> None:
            if api_key in apis.UNVOUCHED_HELD and not self.gateway.vouched():
                raise Unvouched(f"{api_name(api_key)} not sent: the gateway cannot vouch for its routing")

        return check

    def _produce_refused(self, incoming: Incoming, cluster: str) -> None:
        """A Produce decided to go and refused before it went: a Produce already held behind it on this
        connection is refused too (``_hold``), as behind a held one refused, so none reaches the broker
        ahead of its resend."""
        if self._released is None or self._released.done():
            self._released = asyncio.get_running_loop().create_future()
            self._released.set_result(True)
        self._refusing(incoming, cluster)

    def _refusing(self, incoming: Incoming, cluster: str) -> None:
        """A held Produce answered with the retriable error: where its producer's batches are translated,
        none behind it goes first (:mod:`workers.gateway.producers.sequences`)."""
        producer = incoming.context.producer
        moved = producer and self.gateway.producers.translating(incoming.identity, producer[0], cluster)
        if moved:
            mark_refused(moved, incoming.request.body)

    def _reachable(self, cluster: str) -> bool:
        return _askable(self.gateway, self.gateway.view.snapshot, cluster)

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

    def _identity(self, client_id: str | None) -> Identity:
        identity = self._identities.get(client_id)
        if identity is None:
            identity = self._identities[client_id] = identify(
                sasl_user=self.credentials.user if self.credentials else None, client_id=client_id
            )
        return identity

    def _refused(self, request: Request, expects_response: bool, closed: UpstreamError) -> Awaitable[Reply]:
        """The answer to a request whose broker connection was closed on purpose before it was sent, or
        whose broker the cluster's metadata no longer lists: the retriable error where its API has one,
        else ``closed`` raised (the client connection closes)."""
        if not expects_response:
            return _unsent(None)
        refused = self._unanswerable(request)
        if refused is None:
            raise closed
        return _unsent(refused)

    def _unanswerable(self, request: Request) -> OwnAnswer | None:
        """A request whose cluster was shielded under it, answered with the retriable error where its
        API has one (None: there is none, and the connection closes as on a broker's failure)."""
        return OwnAnswer() if request.api_key in apis.SHIELDABLE else None

    def upstream(self, cluster: str, node: int | None, *, long_poll: bool) -> Upstream:
        """This session's connection to a broker; :class:`Shielded` for a cluster shielded now (it is not
        contacted at all: a request decided just before the shield must not reach it). :class:`UpstreamError`
        once the session has closed its broker connections, and for one that failed under requests: sent
        over another, a request behind them would reach the broker ahead of their retries (an idempotent
        producer's batches out of order, fatal to the client); the client connection closes instead."""
        snapshot = self.gateway.view.snapshot
        if snapshot.shielded(cluster):
            raise Shielded(f"cluster {cluster} is {snapshot.clusters[cluster].state}")
        if self._gone:  # a request carried out late (a split's part) is not sent for a client gone
            raise UpstreamError(f"the connection from {self.peer} has ended: nothing more is sent for it")
        key = (cluster, node, long_poll)
        upstream = self._upstreams.get(key)
        if upstream is not None and upstream.broke:  # those behind a lost request are not sent either:
            self.close()  # the client connects again, and resends them all in order
            raise upstream.closed_by()
        if (
            upstream is not None
            and node is not None  # any broker serves one for any: kept while it lasts, wherever it went
            and (upstream.host, upstream.port) != self.gateway.brokers.real_address(cluster, node)
        ):  # the broker moved (restarted elsewhere): what is in flight is answered, the rest goes there
            self._retire(upstream)
            upstream = None
        if upstream is None or upstream.closed or upstream.retired:
            upstream = self._upstreams[key] = self.gateway.brokers.upstream(cluster, node, self.credentials)
        return upstream


def _askable(gateway: Shared, snapshot: RoutingSnapshot, cluster: str) -> bool:
    """Whether ``cluster`` may be asked: not shielded in ``snapshot``, nor found unreachable by the probe."""
    return not snapshot.shielded(cluster) and gateway.metrics.reachable.get(cluster) is not False


def translated(body: Any, translation: Translation) -> Any:
    """A Produce ``body`` with its batches written as ``translation``'s producer."""
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
    return dataclasses.replace(body, topic_data=topics)


def _refusal_level(codes: Iterable[ErrorCode]) -> int:
    """How loudly a Produce the gateway answered itself is logged: the retriable error is routine, a
    duplicate is taken as delivered, the others stop a client (librdkafka: fatally)."""
    codes = set(codes)
    if codes <= {ErrorCode.not_leader_or_follower}:
        return logging.DEBUG
    return (
        logging.INFO
        if codes <= {ErrorCode.not_leader_or_follower, ErrorCode.duplicate_sequence_number}
        else logging.WARNING
    )


def _give_up(upstream: Upstream, api_key: int) -> None:
    upstream.close(Overdue(f"{upstream.host}:{upstream.port} did not answer {api_name(api_key)} in time"))


class _SplitBrokers:
    """How a split request of one session reaches brokers: over the session's connections, as the
    client (its credentials, its producer's translated id)."""

    def __init__(
        self, session: ClientSession, snapshot: RoutingSnapshot, incoming: Incoming, routed: str
    ) -> None:
        self.session, self.snapshot, self.incoming, self.routed = session, snapshot, incoming, routed
        self.gateway = session.gateway
        self._writing: dict[str, Translation] = {}
        """Per cluster, the translation this request's batches are written there with."""

    async def send(
        self, cluster: str, node: int | None, request: Request, body: Any, *, long_poll: bool
    ) -> Awaitable[Any]:
        fields = {f.name: getattr(body, f.name) for f in dataclasses.fields(body)}
        upstream = self.session.upstream(cluster, node, long_poll=long_poll)
        check = self.session.vouching(request.api_key)
        try:
            if request.api_key == apis.PRODUCE and body.acks == 0:
                version = request.api_version
                own = encode_request(apis.PRODUCE, version, fields, client_id="switchyard-gateway")
                await upstream.send(own.frame, own.correlation_id, expects_response=False, check=check)
                return _ready(None)
            answering = await upstream.request(request.api_key, request.api_version, check=check, **fields)
        except UpstreamError:  # a write to a broker never reached waits as a whole one's does (_forward)
            if upstream.unreached and node is not None and request.api_key == apis.PRODUCE:
                for topic in leaders.produced_to(body):  # a migrated partition's leader is kept: asked anew
                    self.forget(cluster, topic)
                await self.session._until_led_elsewhere(self.incoming, self.snapshot, cluster, node, body)
            raise
        if request.api_key == apis.PRODUCE:
            answering.add_done_callback(functools.partial(self._noted, cluster, body))
        return answering

    def _noted(self, cluster: str, body: Any, answering: asyncio.Task[Any]) -> None:
        if not answering.cancelled() and answering.exception() is None:
            self.gateway.acked.note(cluster, body, answering.result())
            producer, translation = self.incoming.context.producer, self._writing.get(cluster)
            if producer is not None and translation is not None:
                established(translation, producer[1], answering.result())

    async def leader(self, cluster: str, topic: str, partition: int) -> int | None:
        return await self.gateway.moved.leaders.leader(cluster, topic, partition)

    def forget(self, cluster: str, topic: str) -> None:
        self.gateway.moved.leaders.forget(cluster, topic)

    def reachable(self, cluster: str) -> bool:
        return _askable(self.gateway, self.snapshot, cluster)

    async def written(
        self, bodies: dict[Part, Any]
    ) -> tuple[dict[Part, Any], dict[tuple[str, int], ErrorCode]]:
        """An idempotent producer's batches as their clusters take them: to the routed cluster as the
        request would be forwarded whole; to a migration's target as the gateway's own id there, each
        partition's sequences starting where the client's left off on the routed cluster, the origin.
        A part whose batches may not go now is not sent: its partitions' errors are returned instead
        (the others of that part NOT_LEADER_OR_FOLLOWER, resent by the client, nothing before them)."""
        producer, identity = self.incoming.context.producer, self.incoming.identity
        if producer is None:
            return bodies, {}
        written, refused = {}, {}
        for part, body in bodies.items():
            cluster = part[0]
            try:
                if cluster == self.routed:
                    translation = await self.session._checked(
                        body, identity, producer, cluster, self.snapshot.epoch
                    )
                else:
                    translation = await self._migrated(identity, producer, cluster)
                    moved = self.gateway.moved
                    remember = functools.partial(
                        moved.remember, (identity, producer[0], cluster, self.routed)
                    )
                    translation = await self.session.sequenced(
                        body, producer, translation, cluster, remember, told=moved.seen_held
                    )
            except Unsendable as exc:
                named = {(t.name, p.index) for t in body.topic_data for p in t.partition_data}
                refused.update({key: exc.codes.get(key, ErrorCode.not_leader_or_follower) for key in named})
                continue
            if translation is not None:
                self._writing[cluster] = translation
            written[part] = body if translation is None else translated(body, translation)
        return written, refused

    async def _migrated(self, identity: Identity, producer: tuple[int, int], cluster: str) -> Translation:
        """The translation the producer writes partitions migrated to ``cluster`` with; its origin is
        the routed cluster, as whom the client writes there. Only for a partition this process saw held
        can the origin's end tell where its sequences go on (:attr:`Moved.held_here`)."""
        on_origin = self.gateway.producers.translating(identity, producer[0], self.routed)
        origin = origin_of(ProducerRoute(self.routed, on_origin), producer[0])
        return await self.gateway.moved.translation(identity, producer[0], cluster, origin)

    async def list_offsets(
        self, cluster: str, node: int, request: Request | None, key: tuple[str, int], timestamp: int
    ) -> Listed:
        version = (
            request.api_version if request is not None else self.gateway.brokers.offered[apis.LIST_OFFSETS][1]
        )
        schema = request_schema(apis.LIST_OFFSETS, version)
        topic_cls = element_type(schema, "topics")
        entry = make(
            element_type(topic_cls, "partitions"), partition_index=key[1], current_leader_epoch=-1,
            timestamp=timestamp,
        )  # fmt: skip
        isolation = getattr(request.body, "isolation_level", 0) if request is not None else 0
        answer = await self.session.upstream(cluster, node, long_poll=False).ask(
            apis.LIST_OFFSETS, version, replica_id=-1, isolation_level=isolation,
            topics=(make(topic_cls, name=key[0], partitions=(entry,)),),
        )  # fmt: skip
        (partition,) = answer.topics[0].partitions
        return listed_of(partition)


def _led(partition_cls: Any, index: int, leader: int) -> Any:
    """A Metadata partition led by virtual broker ``leader`` (-1: none), its epoch unknown."""
    error = ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available
    nodes = (leader,)
    return make(partition_cls, partition_index=index, leader_id=leader, leader_epoch=-1, replica_nodes=nodes,
                isr_nodes=nodes, error_code=error)  # fmt: skip


def _new_epoch(request: Request, producer_id: int, epoch: int) -> bytes:
    """The answer to an InitProducerId or a version 2 EndTxn that hands the client ``producer_id``."""
    cls = response_schema(request.api_key, request.api_version)
    return encode_response(request, make(cls, error_code=ErrorCode.none, producer_id=producer_id,
                                         producer_epoch=epoch))  # fmt: skip


def _abortable(request: Request) -> Awaitable[Reply]:
    """The answer that has the client abort its transaction (see ``abortable``), nothing sent on."""
    code = abortable(request)
    if request.api_key == apis.PRODUCE:
        return _unsent(OwnAnswer(codes={(t.name, p.index): code for t in request.body.topic_data
                                        for p in t.partition_data}))  # fmt: skip
    return _unsent(OwnAnswer(code))


_JOINS = frozenset({apis.JOIN_GROUP, apis.SYNC_GROUP})
_ENTERING = frozenset({apis.JOIN_GROUP, apis.CONSUMER_GROUP_HEARTBEAT})
"""Requests that may wait before they are sent (``GroupHandling.before_join``, ``heartbeat_out``), out of
flight meanwhile: a routing change since may be acknowledged, and they are not sent the old way then."""


def _ready(value: Any) -> Awaitable[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


class _Unsent(asyncio.Future[Any]):
    """An answer the gateway gave a request it did not send on (an error the client retries, or a
    heartbeat's answer of its own): a Produce held behind it is not sent either (``_hold``)."""


def _unsent(value: Any) -> _Unsent:
    future = _Unsent(loop=asyncio.get_running_loop())
    future.set_result(value)
    return future
