"""A live gateway process under thousands of broken and random frames, while a normal client works.

Every offered API at every offered version, each length field of the request set to its largest value,
to a negative one and past the end of the frame; then random frames with valid sizes and headers, and
random bytes. Each must cost at most its own connection: the process stays up, logs no unexpected error,
and a producer and a consumer going through it all along lose nothing. Then well-framed requests with
one array or string null or empty, as a careless client sends them: a broker's answer where Kafka has
one, else the connection closed with one warning line. The gateway's brokers are private to this
module: frames that are well formed enough to be forwarded must not disturb the session stack.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import random
import struct
import threading
import time
import uuid
from collections.abc import Iterator

import kio.index
import pytest
from confluent_kafka import Consumer, Producer
from kio.schema.errors import ErrorCode

from switchyard import kafka
from switchyard.config import Config
from switchyard.frames.protocol import FrameError, decode_response, parse_request
from switchyard.routing.store import RoutingStore
from switchyard.stack import health
from switchyard.threads import Worker
from tests.helpers.frames import Encoded, broken, emptied, example
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import RawClient
from tests.helpers.services import PrivateService
from tests.helpers.stacks import QUICK_CONSUMER
from workers.gateway.routing import apis

MEMBERSHIP = {apis.JOIN_GROUP, apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP}
"""Where Kafka answers an empty group id with INVALID_GROUP_ID (GroupCoordinator.isValidGroupId)."""
RANDOM_FRAMES = 3000
RANDOM_BYTES = 1000


@pytest.fixture(scope="module")
def fuzzed(
    routing: RoutingStore, stack_config: Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[GatewayProcess, PrivateService]]:
    directory = tmp_path_factory.mktemp("fuzz")
    broker = PrivateService.kafka(directory)
    broker.start()
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id="gw-fuzz", log=directory / "gateway.log",
        overrides={
            "SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": broker.connect,
            "SWITCHYARD__CLUSTERS__STANDBY__BOOTSTRAP": broker.connect,
        },
    )  # fmt: skip
    gateway.start()
    yield gateway, broker
    gateway.stop()
    broker.stop()


class Steady:
    """A producer and a consumer through the gateway, going all along."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked: list[int] = []
        self.failed: list[str] = []
        self.received: set[int] = set()
        self.running = True
        self.flushed = threading.Event()
        self.workers = [
            Worker(self._produce, name="steady-producer"),
            Worker(self._consume, name="steady-consumer"),
        ]

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "client.id": "steady@p", "linger.ms": 5})
        sent = 0

        def delivered(err: object, msg: object) -> None:
            if err is None:
                self.acked.append(int(msg.value()))  # type: ignore[attr-defined]
            else:
                self.failed.append(str(err))

        try:
            while self.running:
                producer.produce(self.topic, str(sent).encode(), on_delivery=delivered)
                sent += 1
                producer.poll(0.005)
            assert producer.flush(30) == 0
        finally:
            self.flushed.set()  # only now is ``acked`` whole: the consumer waits for this, then for all of it

    def _consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "client.id": "steady@c",
                "group.id": f"steady-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
                **QUICK_CONSUMER,
            }
        )
        consumer.subscribe([self.topic])
        try:
            deadline = float("inf")
            while time.monotonic() < deadline:
                if self.flushed.is_set():  # every ack is in: read until all of them are, for at most 60 s
                    if set(self.acked) <= self.received:
                        break
                    deadline = min(deadline, time.monotonic() + 60)
                for message in consumer.consume(500, 0.2):
                    if message.error() is None:
                        self.received.add(int(message.value() or b"-1"))
        finally:
            consumer.close()

    def progress(self, timeout_s: float = 30) -> int:
        """Wait until more records were acknowledged and received than now; return how many are."""
        mark = len(self.acked), len(self.received)
        deadline = time.monotonic() + timeout_s
        while len(self.acked) <= mark[0] + 50 or len(self.received) <= mark[1] + 50:
            assert time.monotonic() < deadline, f"the normal client stalled at {mark}"
            time.sleep(0.1)
        return len(self.acked)


def offered_requests(port: int) -> list[tuple[str, bytes, Encoded]]:
    """For every API and version the gateway offers: a well-formed request and where its lengths are."""
    found = []
    for key, (low, high) in sorted(health.api_versions("127.0.0.1", port).items()):
        for version in range(low, high + 1):
            try:
                schema = kio.index.load_request_schema(key, version)
            except kio.index.KioIndexError:
                continue
            encoded = Encoded()
            frame = encoded.request(schema, example(schema))
            found.append((f"{schema.__name__} v{version}", frame, encoded))
    return found


async def _send_all(port: int, frames: list[bytes], *, concurrency: int = 16) -> list[str]:
    """Send each frame on its own connection; how each connection ended, in the order of ``frames``:
    ``answered`` (the gateway sent something back), ``closed`` (it closed without a word) or ``held``
    (nothing in 15 s: the broker waits on it)."""
    outcomes = [""] * len(frames)
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(len(frames)):
        queue.put_nowait(index)

    async def one(data: bytes) -> str:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(data)
            await writer.drain()
            if not whole_frame(data):  # else the gateway would wait for the rest, to its read time-out
                writer.write_eof()  # (and not after a whole one: it drops what a client left behind)
            try:
                got = await asyncio.wait_for(reader.read(1), 15)
            except TimeoutError:  # the broker holds it, as Apache Kafka holds a join or a long poll
                return "held"
            return "answered" if got else "closed"
        except (ConnectionResetError, BrokenPipeError):
            return "closed"
        finally:
            writer.close()

    async def worker() -> None:
        while not queue.empty():
            index = queue.get_nowait()
            outcomes[index] = await one(frames[index])

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


def whole_frame(data: bytes) -> bool:
    return len(data) >= 4 and struct.unpack_from(">i", data)[0] == len(data) - 4


def well_formed(data: bytes) -> bool:
    """Whether ``data`` is one whole request frame the gateway's codec takes (size, header, body): the
    gateway answers such a frame, itself or through a broker, and closes on anything else."""
    if not whole_frame(data):
        return False
    try:
        request = parse_request(data[4:])
        if request.api_key != apis.API_VERSIONS:  # the only request whose body the gateway never reads
            _ = request.body
    except FrameError:
        return False
    return True


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def test_broken_and_random_frames_cost_only_their_own_connection(
    fuzzed: tuple[GatewayProcess, PrivateService],
) -> None:
    gateway, broker = fuzzed
    topic = f"steady-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(broker.connect, [topic], partitions=2)
    steady = Steady(gateway.bootstrap, topic)
    for worker in steady.workers:
        worker.start()
    try:
        steady.progress(60)
        requests = offered_requests(gateway.port)
        assert len(requests) > 100  # every offered API, every offered version
        assert {apis.PRODUCE, apis.FETCH, apis.METADATA} <= {
            struct.unpack_from(">h", f)[0] for _, f, _ in requests
        }

        lengths = [sized(bad) for _, frame, encoded in requests for _, bad in broken(frame, encoded.lengths)]
        assert len(lengths) > 3000
        outcome = collections.Counter(asyncio.run(_send_all(gateway.port, lengths)))
        assert outcome == {"closed": len(lengths)}, outcome  # every one refused, unanswered
        steady.progress()

        rng = random.Random(20261122)
        offered = [struct.unpack_from(">hh", frame) for _, frame, _ in requests]
        frames = []
        for _ in range(RANDOM_FRAMES):
            key, version = rng.choice(offered)
            header = struct.pack(">hhih", key, version, rng.randrange(2**31), 2) + b"fz"
            frames.append(sized(header + rng.randbytes(rng.randrange(0, 120))))
        frames += [rng.randbytes(rng.randrange(1, 64)) for _ in range(RANDOM_BYTES)]
        outcomes = asyncio.run(_send_all(gateway.port, frames))
        expected = ["answered" if well_formed(frame) else "closed" for frame in frames]
        ended = zip(outcomes, expected, frames, strict=True)
        wrong = [(got, frame[4:40]) for got, want, frame in ended if got != want]
        assert wrong == [], f"{len(wrong)} of {len(frames)} ended otherwise than expected: {wrong[:5]}"
        assert 0 < expected.count("answered") < expected.count("closed")  # both kinds were tried
        steady.progress()
    finally:
        steady.running = False
        for worker in steady.workers:
            worker.join(90)

    assert gateway.process is not None
    assert gateway.process.poll() is None, "the gateway process died"
    assert health.kafka("127.0.0.1", gateway.port).ok
    assert steady.failed == []
    assert set(steady.acked) <= steady.received
    log = gateway.log.read_text()
    assert "unexpected error" not in log, log[log.find("unexpected error") - 200 :][:3000]
    assert "Traceback" not in log
    print(f"\nfuzz: {len(lengths)} broken lengths, {len(frames)} random frames, {len(steady.acked)} records")


def test_well_framed_requests_with_a_null_array_or_an_empty_group_id_are_refused_as_a_broker_does(
    fuzzed: tuple[GatewayProcess, PrivateService],
) -> None:
    """Where Kafka has an answer (INVALID_GROUP_ID for an empty group id on the membership APIs) the
    client gets it and keeps its connection; a null the protocol allows nowhere closes the connection,
    as a broker's parser does; either way one warning line at most, never a traceback. Requests the
    protocol allows go on to the broker, and whatever it does with them (answers, drops the connection,
    or holds them, as a join or a long poll) costs the client that connection and the log one line at
    most."""
    gateway, _ = fuzzed
    offered = health.api_versions("127.0.0.1", gateway.port)
    skip = len(gateway.log.read_text())

    def request(key: int, **changes: object) -> bytes:
        schema = kio.index.load_request_schema(key, offered[key][1])
        return Encoded().request(schema, dataclasses.replace(example(schema), **changes))

    client = RawClient(gateway.port)
    client.send_bytes(sized(request(apis.PRODUCE, topic_data=None)))
    client.closed_within(5)
    client = RawClient(gateway.port)
    join = parse_request(request(apis.JOIN_GROUP, group_id=""))
    client.send_bytes(sized(join.frame))
    assert decode_response(join, client.frame()).error_code == ErrorCode.invalid_group_id
    versions = client.send(apis.API_VERSIONS, 3, client_software_name="raw", client_software_version="1")
    assert client.answer(versions).error_code == ErrorCode.none  # the connection stayed open
    client.close()
    produce = f"malformed produce v{offered[apis.PRODUCE][1]} request: null array at"
    assert produce in gateway.log.read_text()[skip:]

    cases = []  # every offered API at its lowest and highest version, one array or string emptied
    for key, (low, high) in sorted(offered.items()):
        for version in sorted({low, high}):
            with contextlib.suppress(kio.index.KioIndexError):
                schema = kio.index.load_request_schema(key, version)
                cases += [(f"{schema.__name__} v{version} {what}", allowed, Encoded().request(schema, entity))
                          for what, allowed, entity in emptied(example(schema))]  # fmt: skip
    assert len(cases) > 300
    outcomes = asyncio.run(_send_all(gateway.port, [sized(frame) for _, _, frame in cases]))
    ended = list(zip(cases, outcomes, strict=True))
    answered_null = [what for (what, allowed, _), got in ended if not allowed and got == "answered"]
    assert answered_null == [], "answered, though the protocol allows no null there"
    held_null = [what for (what, allowed, _), got in ended if not allowed and got == "held"]
    assert held_null == [], "passed on, though the protocol allows no null there"
    empty_groups = [
        (what, got) for (what, _, frame), got in ended
        if struct.unpack_from(">h", frame)[0] in MEMBERSHIP and what.endswith('.group_id=""')
    ]  # fmt: skip
    assert len(empty_groups) >= 8
    assert all(got == "answered" for _, got in empty_groups), empty_groups

    assert gateway.process is not None
    assert gateway.process.poll() is None, "the gateway process died"
    log = gateway.log.read_text()[skip:]
    assert "Traceback" not in log, log[log.find("Traceback") - 300 :][:3000]
    closing = [line for line in log.splitlines() if "closing connection from" in line]
    assert len(closing) == 1 + outcomes.count("closed")  # one line each, the Produce above included
    assert all(" WARNING " in line for line in closing), [line for line in closing if "WARNING" not in line]
    print(f"\nemptied: {len(cases)} requests, {outcomes.count('closed')} connections closed")
