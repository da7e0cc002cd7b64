"""Transactional producers across a switch: a transaction never spans two clusters, and the producer's
transactional id is carried to the cluster it is switched to, fencing whatever is left behind.

A transactional producer's id and epoch are known only to the cluster whose coordinator issued them,
and a transaction's records and markers belong to one cluster. So the gateway never forwards one
producer's transaction to a cluster other than the one that issued its id (its *issuer*, known from the
InitProducerId answers it saw and the carries it made, :mod:`~workers.gateway.producers.issuers`). Instead
it makes the
client end the transaction and take an id on the new cluster, with the errors every client already
handles as "abort and try again" (:func:`abortable`):

1. **While the producer's identity is blocked**, a transaction open on the old cluster (its coordinator
   says so) ends there, before the saga fences the copy: its writes (a Produce, AddPartitionsToTxn) are
   answered at once with an abortable error, so no record lands there after the block, while its
   commit or abort (EndTxn, with TxnOffsetCommit and AddOffsetsToTxn before it) goes on there — markers
   only. (The Java client's AddPartitionsToTxn is answered as done instead, and the write after it
   refused: an abortable error there reaches a Kafka Streams application through its record's send,
   which Streams does not survive.) A transaction whose records were all written before the block
   commits; one with a write refused is aborted by its client. A request that would begin a transaction
   is held like a write, and the transaction begins after the switch (:func:`while_blocked`, which also
   says what happens where the coordinator cannot be asked).
2. **After the flip**, the first transactional request from a producer id the new cluster did not issue
   gets the abortable error (the Java client's AddPartitionsToTxn and AddOffsetsToTxn are answered as done
   instead: an abortable error there would have it abort without a new epoch and ask again, while the
   write that follows, refused, has it ask for one). The client aborts — the abort is answered here,
   since nothing of it ever reached the new cluster — and asks for a new epoch (InitProducerId with its
   id and epoch, KIP-360), which the gateway sends to the new cluster as a fresh start of the
   transactional id. A client of transaction version 2 asks for nothing: it takes the id and epoch its
   abort's answer carries (EndTxn v5), so the gateway takes them from the new cluster and answers with
   them (version 2 is offered where every cluster has it: ``BrokerDirectory.features``).
3. **Only the live producer is carried.** The coordinator of the cluster it left has its producer id and
   epoch as the id's current ones; a client presenting any other (a zombie fenced there by a newer
   instance) is fenced (PRODUCER_FENCED), as that coordinator would. Once carried, the id is fenced on
   the old cluster too
   (its epoch bumped, any transaction still open there aborted), so nothing left behind writes there.

What an application sees: one abortable error per switch, on the transaction in progress, which it
aborts and retries as its error handling already does; records of an aborted transaction are never
read by a ``read_committed`` reader, on either cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from kazoo.exceptions import KazooException
from kio.schema.errors import ErrorCode

from switchyard.frames.bounds import BoundsError, after_string, check_response_header
from switchyard.frames.protocol import Request, encode_request
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.upstream import Upstream, UpstreamError
from workers.gateway.producers.issuers import Issued, IssuerStore
from workers.gateway.routing import apis

log = logging.getLogger(__name__)
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
DESCRIBE_TRANSACTIONS = 65
_KEY_TYPE_TRANSACTION = 1
_JAVA_PRODUCE = 11
"""The Java client writes with Produce v11 and later (librdkafka up to v10)."""
_RETRIED = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)
_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_TIMEOUT = timedelta(minutes=1)
"""A transaction time-out where the client's is not known: both clients' default."""
_AGAIN_WITHIN_S = 60.0
"""How long after a carry a client presenting the producer id and epoch it was carried from gets the same
answer again (past that, it is a zombie of its former self, and fenced)."""
_REMEMBERED = 10_000
_WITHIN_S = 10.0
"""How long the gateway itself retries a coordinator that is busy (an open transaction being aborted
answers CONCURRENT_TRANSACTIONS until its markers are written): well inside a client's request time-out."""


@dataclass(frozen=True)
class TxnRequest:
    """What a transactional request says about its producer."""

    transactional_id: str
    producer_id: int
    epoch: int
    aborting: bool = False
    """An EndTxn that aborts."""


def transactional(request: Request) -> TxnRequest | None:
    """The producer a transactional request speaks for (None: not one, or a first InitProducerId)."""
    key, body = request.api_key, request.body
    if key == apis.PRODUCE:
        if not body.transactional_id:
            return None
        found = apis.producer_of_body(body)
        return None if found is None else TxnRequest(body.transactional_id, *found)
    if key == apis.ADD_PARTITIONS_TO_TXN:
        if not body.v3_and_below_transactional_id:
            return None
        return TxnRequest(body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                          body.v3_and_below_producer_epoch)  # fmt: skip
    if key in (apis.ADD_OFFSETS_TO_TXN, apis.TXN_OFFSET_COMMIT, apis.END_TXN, apis.INIT_PRODUCER_ID):
        if not body.transactional_id or body.producer_id < 0:
            return None
        aborting = key == apis.END_TXN and not body.committed
        return TxnRequest(body.transactional_id, body.producer_id, body.producer_epoch, aborting)
    return None


def abortable(request: Request) -> ErrorCode:
    """The error that makes the request's client abort its transaction (and, where the client bumps its
    epoch itself, ask for a new one) without closing the producer.

    TRANSACTION_ABORTABLE (KIP-890) for the Java client (3.8+), which aborts on it and never closes the
    producer (UNKNOWN_PRODUCER_ID would reach the application as an OutOfOrderSequenceException, which
    the client's documentation says to close the producer on); it is told apart by its versions (a
    Produce from v11, AddPartitionsToTxn and AddOffsetsToTxn from v1, TxnOffsetCommit and EndTxn from v4).
    Where Kafka Streams meets the error, one it takes as its tasks having migrated (it aborts, and
    restores their state from the changelogs) instead, since TRANSACTION_ABORTABLE fails the application
    there: INVALID_PRODUCER_EPOCH on a write (KIP-588: abortable, and the client bumps its epoch; Streams'
    production exception handler would take the other), and ILLEGAL_GENERATION on a TxnOffsetCommit
    (abortable, a CommitFailedException to the application), which a transaction of offsets alone meets
    first. For librdkafka (Produce up to v10, AddPartitionsToTxn and AddOffsetsToTxn v0, TxnOffsetCommit
    up to v3, EndTxn v0-1), which does not know TRANSACTION_ABORTABLE, UNKNOWN_PRODUCER_ID: it aborts,
    and bumps its epoch with InitProducerId after."""
    key, version = request.api_key, request.api_version
    if key == apis.PRODUCE and version >= _JAVA_PRODUCE:
        return ErrorCode.invalid_producer_epoch
    if key == apis.TXN_OFFSET_COMMIT and version >= 4:
        return ErrorCode.illegal_generation
    since = {apis.END_TXN: 4, apis.ADD_PARTITIONS_TO_TXN: 1, apis.ADD_OFFSETS_TO_TXN: 1}.get(key)
    if since is not None and version >= since:
        return ErrorCode.transaction_abortable
    return ErrorCode.unknown_producer_id


class WhileBlocked(enum.Enum):
    """What a transactional request does while its producer's identity is blocked (``while_blocked``)."""

    HOLD = enum.auto()
    """Held, as any request of a blocked identity: it is answered after the switch."""
    REFUSE = enum.auto()
    """Answered with the abortable error: nothing of the transaction lands on the old cluster after the
    block."""
    TELL_ADDED = enum.auto()
    """Answered as done (the Java client's AddPartitionsToTxn); its writes are refused next."""
    FORWARD = enum.auto()
    """Sent on to the cluster the transaction began on."""


def while_blocked(request: Request, txn: TxnRequest, open_: bool | None) -> WhileBlocked:
    """What ``request`` does while its producer's identity is blocked; ``open_``: whether its coordinator
    has a transaction of the producer open (``Carrier.ongoing``; None: not known).

    An open transaction ends where it began: its writes are refused, its end goes on; a request that
    would begin one waits, and the transaction begins after the switch. Where it is not known, the
    request goes on as if one were open — except an AddPartitionsToTxn, which may be a transaction's
    first: refused, librdkafka counts it all the same and sends the abort that follows, which a
    coordinator with no transaction open answers INVALID_TXN_STATE, fatal to the producer."""
    key = request.api_key
    if txn.aborting:
        return WhileBlocked.FORWARD
    if key == apis.ADD_PARTITIONS_TO_TXN:
        if open_ is not True:
            return WhileBlocked.HOLD
        return WhileBlocked.TELL_ADDED if request.api_version else WhileBlocked.REFUSE
    if open_ is False:
        return WhileBlocked.HOLD
    return WhileBlocked.REFUSE if key == apis.PRODUCE else WhileBlocked.FORWARD


def _producer(txn: TxnRequest) -> TxnRequest:
    """The producer (transactional id, id, epoch) a request speaks for, whatever the request."""
    return dataclasses.replace(txn, aborting=False)


class Carrier:
    """Takes a live transactional producer's id onto the cluster it is switched to, and fences it on the
    cluster it left (see the module)."""

    def __init__(self, brokers: BrokerDirectory, clusters: list[str], store: IssuerStore) -> None:
        self.brokers, self.clusters, self.store = brokers, clusters, store
        self._native: dict[tuple[str, int, str], int] = {}
        """Per (transactional id, producer id, cluster) judged native there: the routing epoch it was judged
        at. A producer id becomes another cluster's only by a carry, after a flip: within one epoch the
        judgement holds. That an id is foreign is never kept: it is asked again, and a carry ends it."""
        self._carrying: dict[str, asyncio.Lock] = {}
        """One carry of a transactional id at a time (in this process): a second ask, while the first is
        under way, waits for its answer."""
        self._fencing: set[asyncio.Task[None]] = set()
        self._unstored = self._unasked = False
        self._unadded: dict[TxnRequest, None] = {}
        """Producers (id and epoch) told their partitions were added to their transaction, which the
        gateway never asked for (``told_added``)."""
        self._registered: dict[TxnRequest, None] = {}
        """Producers (id and epoch) whose registration in their transaction this process sent (``sent``)."""

    async def foreign(self, txn: TxnRequest, cluster: str, epoch: int) -> bool:
        """Whether the request's producer id is not one ``cluster`` issued for its transactional id, under
        routing ``epoch``: the issuer stored (:mod:`~workers.gateway.producers.issuers`), or where none is
        stored for that producer id (a client that began before the gateway), ``cluster``'s coordinator
        asked whether it has that producer id for the transactional id (a coordinator that cannot be
        asked leaves the request to be forwarded as it was)."""
        key = (txn.transactional_id, txn.producer_id, cluster)
        if self._native.get(key) == epoch:
            return False
        issued = await self._load(txn.transactional_id)
        if issued is not None and issued.producer_id == txn.producer_id:
            native = issued.cluster == cluster
        else:
            try:
                state = await self._describe(cluster, txn.transactional_id)
            except (UpstreamError, OSError, TimeoutError):
                return False
            native = state is not None and state.producer_id == txn.producer_id
        if native:
            self._remember(key, epoch)
        return not native

    async def issued(self, transactional_id: str, issued: Issued, epoch: int) -> None:
        """``issued.cluster`` issued a producer id and epoch for the transactional id (an InitProducerId
        answer, or a carry): stored before the client hears of it."""
        self._remember((transactional_id, issued.producer_id, issued.cluster), epoch)
        try:
            await asyncio.to_thread(self.store.save, transactional_id, issued)
        except KazooException:
            if not self._unstored:  # said once per outage
                log.warning("transactional ids' issuers not stored (ZooKeeper); judged by their coordinators")
            self._unstored = True
            return
        self._unstored = False

    async def ongoing(self, cluster: str, txn: TxnRequest) -> bool | None:
        """Whether the request's producer has a transaction open on ``cluster``, asked of its coordinator.
        Where it cannot be asked: open if this process sent a registration of the producer's on since its
        last EndTxn (``sent``), else None (not known: see ``while_blocked``)."""
        try:
            state = await self._describe(cluster, txn.transactional_id)
        except (UpstreamError, OSError, TimeoutError) as exc:
            if not self._unasked:  # said once per outage
                log.warning("%s: not asked whether transactions are open (%s)", cluster, exc)
            self._unasked = True
            return True if _producer(txn) in self._registered else None
        self._unasked = False
        return state is not None and state.state == "Ongoing"

    def sent(self, request: Request, txn: TxnRequest) -> None:
        """``request`` of the producer's goes on to its coordinator: a registration (AddPartitionsToTxn,
        AddOffsetsToTxn) is kept until its transaction ends (``ongoing``)."""
        if request.api_key in (apis.ADD_PARTITIONS_TO_TXN, apis.ADD_OFFSETS_TO_TXN):
            _kept(self._registered, _producer(txn), None)

    async def live(self, txn: TxnRequest, cluster: str) -> tuple[str | None, timedelta] | None:
        """Where the request's producer id and epoch are the transactional id's current ones, among the
        clusters other than ``cluster``, and the id's transaction time-out there (what a fresh start
        keeps); None if nowhere (a zombie). A cluster that cannot be asked (failed over from) may be
        where it is live: the client is then taken at its word (no cluster named, nothing to fence)."""
        unasked = False
        for other in self.clusters:
            if other == cluster:
                continue
            try:
                state = await self._describe(other, txn.transactional_id)
            except (UpstreamError, OSError, TimeoutError) as exc:
                log.warning("%s: not asked whether %s is live there (%s)", other, txn.transactional_id, exc)
                unasked = True
                continue
            if state is not None and (state.producer_id, state.epoch) == (txn.producer_id, txn.epoch):
                return other, timedelta(milliseconds=state.timeout_ms) if state.timeout_ms > 0 else _TIMEOUT
        return (None, _TIMEOUT) if unasked else None

    def told_added(self, txn: TxnRequest) -> None:
        """The producer is told that partitions were added to its transaction when they were not (the Java
        client's AddPartitionsToTxn answered as done: see the module); see ``unadded``."""
        _kept(self._unadded, _producer(txn), None)

    def unadded(self, txn: TxnRequest) -> bool:
        """Whether the producer was told of partitions added that were not (``told_added``). Its writes
        are refused until the transaction ends, wherever they are routed by then: sent on — the switch
        compensated, back on the cluster it began on — a write to a partition never added would be
        refused there with an error Kafka Streams does not survive, or, where the broker does not check,
        written into a transaction whose end never marks it."""
        return _producer(txn) in self._unadded

    def ended(self, txn: TxnRequest) -> None:
        """The producer's transaction ends (an EndTxn): what ``told_added`` and ``sent`` kept of it goes."""
        self._unadded.pop(_producer(txn), None)
        self._registered.pop(_producer(txn), None)

    def carrying(self, transactional_id: str) -> asyncio.Lock:
        if len(self._carrying) > _REMEMBERED:
            self._carrying = {k: v for k, v in self._carrying.items() if v.locked()}
        return self._carrying.setdefault(transactional_id, asyncio.Lock())

    async def already(self, txn: TxnRequest, cluster: str) -> tuple[int, int] | None:
        """The producer id and epoch the request's producer was carried to ``cluster`` with, lately (a client
        that asks again gets the same answer, as a coordinator answers a retried bump: librdkafka sends a
        bump twice at times, and the cluster left is fenced by then, and would say no)."""
        issued = await self._load(txn.transactional_id)
        if (
            issued is None
            or issued.cluster != cluster
            or issued.carried_from != (txn.producer_id, txn.epoch)
            or time.time() - issued.at > _AGAIN_WITHIN_S
        ):
            return None
        return issued.producer_id, issued.epoch

    async def _load(self, transactional_id: str) -> Issued | None:
        try:
            return await asyncio.to_thread(self.store.load, transactional_id)
        except KazooException:
            return None

    def _remember(self, key: tuple[str, int, str], epoch: int) -> None:
        _kept(self._native, key, epoch)

    async def start(
        self,
        cluster: str,
        node: int | None,
        transactional_id: str,
        timeout: timedelta,
        unlike: tuple[int, int] | None = None,
    ) -> Any:
        """A fresh start of the transactional id on ``cluster`` (InitProducerId without an id: any other
        producer of it there fenced, a transaction of it left open there aborted); the broker's answer.

        Started again if it hands out the producer id and epoch ``unlike`` (what the client holds from the
        cluster it left: producer ids are numbered per cluster, and epochs alike): a client told the id
        and epoch it has keeps its sequence numbers (librdkafka takes them as no change), and the new
        cluster refuses them (OUT_OF_ORDER_SEQUENCE_NUMBER, fatal; found in the tests)."""

        async def ask(upstream: Upstream) -> tuple[Any, ErrorCode]:
            answer = await upstream.ask(
                apis.INIT_PRODUCER_ID, self.brokers.version(apis.INIT_PRODUCER_ID),
                transactional_id=transactional_id, transaction_timeout=timeout, producer_id=-1,
                producer_epoch=-1,
            )  # fmt: skip
            return answer, answer.error_code

        answer = await self._retried(cluster, node, transactional_id, ask)
        if answer.error_code == ErrorCode.none and (answer.producer_id, answer.producer_epoch) == unlike:
            answer = await self._retried(cluster, node, transactional_id, ask)
        return answer

    def fence(self, cluster: str, transactional_id: str) -> None:
        """Fence the id on the cluster it left, in the background (a failed fence is logged: the cluster
        is away, and its coordinator aborts what is open there at the transaction's time-out)."""
        task = asyncio.create_task(self._fence(cluster, transactional_id))
        self._fencing.add(task)
        task.add_done_callback(self._fencing.discard)

    async def _fence(self, cluster: str, transactional_id: str) -> None:
        try:
            if await self._describe(cluster, transactional_id) is None:
                return
            answer = await self.start(cluster, None, transactional_id, _TIMEOUT)
        except (UpstreamError, OSError, TimeoutError) as exc:
            log.warning("%s: transactional id %s not fenced: %s", cluster, transactional_id, exc)
            return
        if answer.error_code != ErrorCode.none:
            log.warning("%s: transactional id %s not fenced: %s", cluster, transactional_id,
                        answer.error_code.name)  # fmt: skip
        else:
            log.info("%s: transactional id %s fenced (it moved)", cluster, transactional_id)

    async def _describe(self, cluster: str, transactional_id: str) -> Described | None:
        """The id's state at ``cluster``'s coordinator (None: the coordinator does not know it)."""

        async def ask(upstream: Upstream) -> tuple[Described, ErrorCode]:
            request = encode_request(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": (transactional_id,)},
                                     client_id="switchyard-gateway")  # fmt: skip
            answer = await upstream.send(request.frame, request.correlation_id, expects_response=True)
            assert answer is not None
            state = described(await asyncio.wait_for(answer, upstream.connect_timeout_s))
            return state, state.error

        state = await self._retried(cluster, None, transactional_id, ask)
        if state.error == ErrorCode.transactional_id_not_found:
            return None
        if state.error != ErrorCode.none:
            raise UpstreamError(f"{cluster}: describing {transactional_id}: {state.error.name}")
        return state

    async def _retried(
        self,
        cluster: str,
        node: int | None,
        txn: str,
        ask: Callable[[Upstream], Awaitable[tuple[T, ErrorCode]]],
    ) -> T:
        """``ask`` transactional id ``txn``'s coordinator on ``cluster`` (the real broker ``node``, if
        known), again while it is busy or has moved; its last answer."""
        loop = asyncio.get_running_loop()
        deadline, pause = loop.time() + _WITHIN_S, 0.05
        at: tuple[str, int] | None = None
        while True:
            if node is None:
                node, at = await self._coordinator(cluster, txn)
            upstream = self.brokers.upstream(cluster, node, at=at)
            try:
                answer, code = await ask(upstream)
            finally:
                upstream.close()
            if code not in _RETRIED or loop.time() + pause > deadline:
                return answer
            node = None if code in _MOVED else node
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    async def _coordinator(self, cluster: str, txn: str) -> tuple[int, tuple[str, int]]:
        upstream = self.brokers.upstream(cluster, None)
        try:
            answer = await upstream.ask(
                apis.FIND_COORDINATOR, self.brokers.version(apis.FIND_COORDINATOR, 3),
                key=txn, key_type=_KEY_TYPE_TRANSACTION,
            )  # fmt: skip
        finally:
            upstream.close()
        if answer.error_code != ErrorCode.none:
            raise UpstreamError(f"{cluster}: no coordinator for {txn}: {answer.error_code.name}")
        return int(answer.node_id), (answer.host, answer.port)


def _kept(kept: dict[K, V], key: K, value: V) -> None:
    """``key`` kept in ``kept`` (with ``value``), which holds the latest ``_REMEMBERED``."""
    kept[key] = value
    while len(kept) > _REMEMBERED:
        del kept[next(iter(kept))]


@dataclass(frozen=True)
class Described:
    """A transactional id's state at its coordinator (DescribeTransactions)."""

    error: ErrorCode
    state: str
    timeout_ms: int
    producer_id: int
    epoch: int


_CODE = struct.Struct(">h")
_AFTER_STATE = struct.Struct(">iqqh")  # time-out, start time, producer id, epoch


def described(frame: bytes) -> Described:
    """The first transactional id's state in a DescribeTransactions v0 answer, read by hand: kio's reader
    refuses the start time -1 that an id with no transaction open has."""
    try:
        at = check_response_header(frame, flexible=True) + 4  # past the throttle time
        count, at = _uvarint_at(frame, at)
        if count < 2:  # compact arrays count one more than they hold
            raise BoundsError("no transactional id in the answer")
        (code,) = _CODE.unpack_from(frame, at)
        at = after_string(frame, at + _CODE.size, flexible=True)  # the transactional id
        length, start = _uvarint_at(frame, at)
        state = frame[start : start + max(length - 1, 0)].decode()
        at = after_string(frame, at, flexible=True)
        timeout_ms, _, producer_id, epoch = _AFTER_STATE.unpack_from(frame, at)
    except (BoundsError, struct.error, UnicodeDecodeError) as exc:
        raise UpstreamError(f"undecodable DescribeTransactions answer: {exc}") from exc
    return Described(ErrorCode(code), state, timeout_ms, producer_id, epoch)


def _uvarint_at(frame: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(at, min(at + 5, len(frame))):
        value |= (frame[index] & 0x7F) << shift
        if not frame[index] & 0x80:
            return value, index + 1
        shift += 7
    raise BoundsError(f"no varint at {at}")
