"""A Kafka client on a plain socket, for what stock clients never send: pipelined requests to several
places on one connection, versions nobody offered, frames cut short."""

from __future__ import annotations

import select
import socket
import struct
import time
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchTopic

from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import Request, decode_response, encode_request, request_schema
from tests.helpers.batches import record_batch
from workers.gateway.routing import apis


class RawClient:
    def __init__(self, port: int, *, timeout_s: float = 15.0, client_id: str = "raw") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
        self.client_id = client_id
        self._correlation = 0

    def send(self, api_key: int, version: int, **fields: Any) -> Request:
        self._correlation += 1
        request = encode_request(
            api_key, version, fields, client_id=self.client_id, correlation_id=self._correlation
        )
        self.send_bytes(struct.pack(">i", len(request.frame)) + request.frame)
        return request

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def frame(self) -> bytes:
        """The next response frame (without its size); EOFError when the gateway closed the connection."""
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def answer(self, request: Request) -> Any:
        return decode_response(request, self.frame())

    def quiet_for(self, seconds: float) -> bool:
        """Whether nothing arrives (no answer, no end) within ``seconds``: a request the gateway holds."""
        readable, _, _ = select.select([self.sock], [], [], seconds)
        return not readable

    def closed_within(self, seconds: float) -> float:
        """How long until the gateway closed the connection (AssertionError if it sent data or did not)."""
        started = time.monotonic()
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(1)
        except TimeoutError:
            raise AssertionError(f"the connection was still open after {seconds}s") from None
        except ConnectionResetError:
            data = b""
        assert data == b"", f"an answer came instead of the end: {data!r}"
        return time.monotonic() - started

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _exactly(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise EOFError(f"connection closed after {len(data)} of {size} bytes")
            data += chunk
        return bytes(data)


def join_fields(group: str, topic: str, timeout: timedelta) -> dict[str, Any]:
    """A consumer's JoinGroup (v5) to ``group``, subscribed to ``topic``, but for its member id."""
    subscription = struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)
    protocols = (make(element_type(request_schema(apis.JOIN_GROUP, 5), "protocols"), name="range",
                      metadata=subscription),)  # fmt: skip
    return {"group_id": group, "session_timeout": timeout, "rebalance_timeout": timeout,
            "protocol_type": "consumer", "protocols": protocols}  # fmt: skip


def join_group(
    client: RawClient, group: str, topic: str, timeout: timedelta, member_id: str = ""
) -> tuple[str, int]:
    """Join ``group`` subscribed to ``topic`` (as ``member_id``, or as a new member) and sync, assigning
    nothing, at the broker (or gateway) ``client`` talks to; the member id and generation."""
    join = join_fields(group, topic, timeout)
    joined = client.answer(client.send(apis.JOIN_GROUP, 5, member_id=member_id, **join))
    assert joined.error_code in (ErrorCode.member_id_required, ErrorCode.none), joined.error_code
    member_id = joined.member_id  # the first join is told its member id (KIP-394)
    joined = client.answer(client.send(apis.JOIN_GROUP, 5, member_id=member_id, **join))
    assert joined.error_code == ErrorCode.none, joined.error_code
    return member_id, sync_group(client, group, member_id, int(joined.generation_id))


def coordinator_port(port: int, group: str, client_id: str = "raw") -> int:
    """The port of ``group``'s coordinator, as the broker (or gateway) at ``port`` names it to a client
    of ``client_id``, asked again while the coordinator is being found."""
    with RawClient(port, client_id=client_id) as client:
        deadline = time.monotonic() + 10
        while (found := client.answer(client.send(apis.FIND_COORDINATOR, 3, key=group))).error_code:
            assert time.monotonic() < deadline, found.error_code
            time.sleep(0.2)
        return int(found.port)


def sync_group(client: RawClient, group: str, member_id: str, generation: int) -> int:
    """End a join as ``member_id`` at ``generation``, assigning nothing; the generation."""
    synced = client.answer(send_sync(client, group, member_id, generation))
    assert synced.error_code == ErrorCode.none, synced.error_code
    return generation


def send_sync(
    client: RawClient, group: str, member_id: str, generation: int, assigned: tuple[str, int] | None = None
) -> Request:
    """Send a SyncGroup as the group's leader, assigning its one member ``assigned`` (a topic's
    partition, written as the consumer protocol writes it) or nothing, without waiting for the answer."""
    assignments: tuple[Any, ...] = ()
    if assigned is not None:
        topic, partition = assigned
        written = (
            struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">iii", 1, partition, -1)
        )
        entry = element_type(request_schema(apis.SYNC_GROUP, 3), "assignments")
        assignments = (make(entry, member_id=member_id, assignment=written),)
    sync = {"group_id": group, "generation_id": generation, "assignments": assignments}
    return client.send(apis.SYNC_GROUP, 3, member_id=member_id, **sync)


def fetch_fields(
    topic: str, *, max_wait_ms: int, partitions: tuple[int, ...] = (0,), offset: int = 0
) -> dict[str, object]:
    """A Fetch v12 of ``topic``'s ``partitions`` from ``offset``, outside any fetch session, waiting up to
    ``max_wait_ms`` for a byte."""
    topics = (
        FetchTopic(
            topic=topic,
            partitions=tuple(
                FetchPartition(partition=p, fetch_offset=offset, partition_max_bytes=1 << 20)
                for p in partitions
            ),
        ),
    )
    return {
        "replica_id": -1,
        "max_wait": timedelta(milliseconds=max_wait_ms),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "session_epoch": -1,
        "topics": topics,
        "forgotten_topics_data": (),
    }


def leave_group(client: RawClient, group: str, member_id: str) -> ErrorCode:
    """Leave ``group`` as ``member_id``; what the coordinator answered."""
    schema = request_schema(apis.LEAVE_GROUP, 3)
    member = make(element_type(schema, "members"), member_id=member_id, group_instance_id=None)
    left = client.answer(client.send(apis.LEAVE_GROUP, 3, group_id=group, members=(member,)))
    return ErrorCode(left.error_code)


def consumer_heartbeat(
    client: RawClient,
    group: str,
    member_id: str,
    epoch: int,
    *,
    topic: str | None = None,
    owned: dict[uuid.UUID, tuple[int, ...]] | None = None,
) -> Any:
    """A consumer-protocol heartbeat (KIP-848) as ``member_id`` at ``epoch`` (0: a join subscribed to
    ``topic``), owning ``owned`` (topic id: partitions; None: unchanged), asked again while the group's
    coordinator is being found or loaded (at the one broker ``client`` talks to); the answer."""
    entry = element_type(request_schema(apis.CONSUMER_GROUP_HEARTBEAT, 1), "topic_partitions")
    fields: dict[str, Any] = {"group_id": group, "member_id": member_id, "member_epoch": epoch}
    if epoch == 0:
        fields |= {"subscribed_topic_names": (topic,), "rebalance_timeout": timedelta(seconds=45)}
    fields["topic_partitions"] = (
        () if epoch == 0 else None if owned is None
        else tuple(make(entry, topic_id=t, partitions=ps) for t, ps in owned.items())
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        answer = client.answer(client.send(apis.CONSUMER_GROUP_HEARTBEAT, 1, **fields))
        if answer.error_code not in _LOADING or time.monotonic() > deadline:
            return answer
        # as a client looks its coordinator up: a cluster creates its offsets topic on the first lookup
        client.answer(client.send(apis.FIND_COORDINATOR, 3, key=group, key_type=0))
        time.sleep(0.2)


_LOADING = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available}
)


def commit_offset(
    client: RawClient, group: str, member_id: str, generation: int, topic: str, offset: int, version: int = 8
) -> ErrorCode:
    """Commit ``offset`` of ``topic``'s partition 0 as the member (``generation``: its generation, or its
    member epoch from ``version`` 9 on); what the coordinator answered."""
    return committed(client.answer(send_commit(client, group, member_id, generation, topic, offset, version)))


def send_commit(
    client: RawClient, group: str, member_id: str, generation: int, topic: str, offset: int, version: int = 8
) -> Request:
    """Send ``commit_offset``'s request without waiting for its answer (``committed`` reads it)."""
    schema = request_schema(apis.OFFSET_COMMIT, version)
    partition = make(element_type(element_type(schema, "topics"), "partitions"), committed_offset=offset)
    topics = (make(element_type(schema, "topics"), name=topic, partitions=(partition,)),)
    return client.send(
        apis.OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
        member_id=member_id, topics=topics,
    )  # fmt: skip


def committed(answer: Any) -> ErrorCode:
    """What an answer to ``send_commit`` says of its one partition."""
    return ErrorCode(answer.topics[0].partitions[0].error_code)


class RawProducer:
    """An idempotent producer's Produce requests over a raw connection to a gateway, one at a time: its
    batches sent in whatever order a test needs."""

    def __init__(self, port: int, app: str, issued: tuple[int, int] | None = None) -> None:
        """``issued``: the producer id and epoch of a client that already has them (reconnected)."""
        self.client = RawClient(port, client_id=app)
        if issued is not None:
            self.producer_id, self.epoch = issued
            return
        deadline = time.monotonic() + 30
        while True:  # a broker's first InitProducerId is answered "load in progress" while it gets ids
            issued = self.client.answer(self.client.send(
                apis.INIT_PRODUCER_ID, 4, transactional_id=None, transaction_timeout=timedelta(minutes=1),
                producer_id=-1, producer_epoch=-1,
            ))  # fmt: skip
            if issued.error_code != ErrorCode.coordinator_load_in_progress or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert issued.error_code == ErrorCode.none, issued
        self.producer_id, self.epoch = issued.producer_id, issued.producer_epoch

    def produce(
        self, topic: str, batches: dict[int, tuple[int, str]], bumped: int = 0
    ) -> dict[int, ErrorCode]:
        """One request: per partition, a batch of three records ``tag``0..2 at ``sequence``; the error
        each partition is answered with."""
        return self.answered(self.send(topic, batches, bumped))

    def send(self, topic: str, batches: dict[int, tuple[int, str]], bumped: int = 0) -> Request:
        """The request of ``produce``, its answer not waited for (``answered``)."""
        topic_cls = element_type(request_schema(apis.PRODUCE, 9), "topic_data")
        partition_cls = element_type(topic_cls, "partition_data")
        data = make(topic_cls, name=topic, partition_data=tuple(
            make(partition_cls, index=partition, records=record_batch(
                self.producer_id, self.epoch + bumped, sequence, [f"{tag}{n}".encode() for n in range(3)]
            ))
            for partition, (sequence, tag) in batches.items()
        ))  # fmt: skip
        return self.client.send(
            apis.PRODUCE, 9, transactional_id=None, acks=-1, timeout=timedelta(seconds=30),
            topic_data=(data,),
        )  # fmt: skip

    def answered(self, request: Request) -> dict[int, ErrorCode]:
        """The error each partition of ``request`` is answered with."""
        answer = self.client.answer(request)
        return {p.index: ErrorCode(p.error_code) for p in answer.responses[0].partition_responses}

    def close(self) -> None:
        self.client.close()
