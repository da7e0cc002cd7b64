"""One gateway as one process and as two (``gateway.processes``), in one run against the same broker:
four producers at full speed (records of 1 KiB, each its own connections, so the kernel spreads them
over the processes), then four consumers reading it all back. Per setup: the payload MiB/s, the
gateway's CPU seconds per GiB (all its processes), and each process's share of that CPU — which says
whether the connections spread. Nothing is pinned: two processes need two cores, and this machine has
two in all, shared with the clients and the broker, so the ratio here says what a saturated 2-core host
gains, not what two free cores would (performance.md)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.routing.gateways import registered
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers.processes import GatewayProcess, cpu_seconds
from tests.helpers.services import PrivateService

CLIENTS = 4
RECORDS = 60_000
"""Per client: 4 x 60,000 records of 1 KiB, 234 MiB a round."""
SIZE = 1024
PARTITIONS = 6
ROUNDS = 3
MiB = 2**20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateService]:
    service = PrivateService.kafka(Path(tmp_path_factory.mktemp("procs-bench")) / "broker")
    service.start()
    yield service
    service.stop()


def gateway(
    stack_config: Config, routing: RoutingStore, broker: PrivateService, count: int, log: Path
) -> GatewayProcess:
    assert stack_config.source is not None
    process = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id=f"gw-procs-{count}", log=log,
        overrides={"SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": broker.connect,
                   "SWITCHYARD__GATEWAY__PROCESSES": str(count)},
    )  # fmt: skip
    process.start()
    deadline = time.monotonic() + 30
    while len(pids(routing, process.id)) < count:
        assert time.monotonic() < deadline, "not every process registered"
        time.sleep(0.1)
    return process


def pids(routing: RoutingStore, base: str) -> list[int]:
    found = registered(routing.zk, routing.layout)
    return [r.pid for name, r in found.items() if name == base or name.startswith(f"{base}.")]


def together(work: list[threading.Thread]) -> float:
    started = time.perf_counter()
    for thread in work:
        thread.start()
    for thread in work:
        thread.join()
    return time.perf_counter() - started


def produce(bootstrap: str, topic: str, client: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "client.id": f"procs@p{client}"})
    payload = b"p" * SIZE
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, payload, key=f"{client}-{i}".encode())
                break
            except BufferError:
                producer.poll(0.001)
        producer.poll(0)
    assert producer.flush(120) == 0


def consume(bootstrap: str, topic: str, partitions: list[int], counted: list[int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"procs-{uuid.uuid4().hex[:6]}",
                         "client.id": "procs@c"})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    ends = kafka.ends_of(bootstrap, [(topic, p) for p in partitions])
    want, got = sum(ends.values()), 0
    deadline = time.monotonic() + 180
    while got < want and time.monotonic() < deadline:
        got += sum(1 for m in consumer.consume(1000, 0.5) if m.error() is None)
    consumer.close()
    counted.append(got)


def one_round(bootstrap: str, create_on: str, procs: list[int]) -> tuple[float, float, float, list[float]]:
    topic = f"procs-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(create_on, [topic], partitions=PARTITIONS)
    before = [cpu_seconds(p) for p in procs]
    produce_s = together(
        [threading.Thread(target=produce, args=(bootstrap, topic, c)) for c in range(CLIENTS)]
    )
    counted: list[int] = []
    share = [list(range(PARTITIONS))[c::CLIENTS] for c in range(CLIENTS)]
    fetch_s = together([threading.Thread(target=consume, args=(bootstrap, topic, share[c], counted))
                        for c in range(CLIENTS) if share[c]])  # fmt: skip
    after = [cpu_seconds(p) for p in procs]
    assert sum(counted) >= CLIENTS * RECORDS
    mib = CLIENTS * RECORDS * SIZE / MiB
    cpu = [a - b for a, b in zip(after, before, strict=True)]
    return mib / produce_s, mib / fetch_s, sum(cpu) / (2 * mib / 1024), cpu


def test_two_gateway_processes_against_one(
    routing: RoutingStore, stack_config: Config, broker: PrivateService, tmp_path: Path
) -> None:
    rows = []
    figures: dict[int, tuple[float, float]] = {}
    for count in (1, 2):
        process = gateway(stack_config, routing, broker, count, tmp_path / f"gw-{count}.log")
        try:
            procs = pids(routing, process.id)
            rounds = [one_round(process.bootstrap, broker.connect, procs) for _ in range(ROUNDS)]
        finally:
            process.stop()
        produce_mib = sorted(r[0] for r in rounds)[ROUNDS // 2]
        fetch_mib = sorted(r[1] for r in rounds)[ROUNDS // 2]
        per_gib = sorted(r[2] for r in rounds)[ROUNDS // 2]
        cpu = [sum(r[3][i] for r in rounds) for i in range(count)]
        figures[count] = (produce_mib, fetch_mib)
        rows.append((count, f"{produce_mib:.0f}", f"{fetch_mib:.0f}", f"{per_gib:.1f}",
                     " / ".join(f"{c / sum(cpu):.0%}" for c in cpu)))  # fmt: skip
    one, two = figures[1], figures[2]
    rows.append(("2 / 1", f"{two[0] / one[0]:.2f}x", f"{two[1] / one[1]:.2f}x", "", ""))
    print(f"\n\none gateway as 1 and as 2 processes: {CLIENTS} producers then {CLIENTS} consumers, 1 KiB "
          f"records, medians of {ROUNDS} rounds, nothing pinned (2 cores in all)")  # fmt: skip
    print(
        render(
            ("PROCESSES", "PRODUCE MiB/s", "FETCH MiB/s", "GATEWAY CPU s/GiB", "CPU SHARE PER PROCESS"), rows
        )
    )
