"""One gateway as several processes sharing its ports (``gateway.processes``, SO_REUSEPORT): the kernel
spreads connections over them, each acknowledges epochs under its own registration, a client whose
connections land on both loses and doubles nothing, one killed is started again, and SIGTERM ends all."""

from __future__ import annotations

import os
import re
import signal
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.routing.gateways import GatewayRecord, registered, wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.helpers import ports
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import RawClient
from workers.gateway.routing import apis

PROCESSES = 2
RECORDS = 3_000


def members(routing: RoutingStore, base: str) -> dict[str, GatewayRecord]:
    return {g: r for g, r in registered(routing.zk, routing.layout).items() if g.startswith(f"{base}.")}


def until(what: str, check: object, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether a thread of ``pid`` runs (a zombie, ended and waiting for init to reap it, does not). Every
    thread, not the first alone: a process's first thread is a zombie as soon as it ends, while the
    others may still be ending with its sockets open (a killed gateway took a connection so, once in
    fourteen runs)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except (FileNotFoundError, ProcessLookupError):  # reaped
        return False
    for task in tasks:
        try:
            if (task / "stat").read_text().rpartition(")")[2].split()[0] not in "ZX":
                return True
        except (FileNotFoundError, ProcessLookupError):  # ended meanwhile (the two errors /proc gives)
            continue
    return False


def connections(metrics_port: int) -> float:
    """Open client connections, as one process's /metrics says."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    found = re.findall(r"^switchyard_gateway_connections\S*\s+(\S+)$", text, re.MULTILINE)
    return sum(float(v) for v in found)


def test_several_processes_serve_one_gateway_each_acknowledging_and_one_killed_comes_back(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    assert stack_config.source is not None
    metrics_port = ports.reserve_block(PROCESSES)
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id="gw-multi", log=tmp_path / "gw.log",
        overrides={
            "SWITCHYARD__GATEWAY__PROCESSES": str(PROCESSES),
            "SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": f"127.0.0.1:{metrics_port}",
        },
    )  # fmt: skip
    gateway.start()
    try:
        until("every process registered", lambda: len(members(routing, "gw-multi")) == PROCESSES)
        names = {f"gw-multi.{i}" for i in range(PROCESSES)}
        assert set(members(routing, "gw-multi")) == names
        epoch = routing.set_binding(
            BindingKey.for_app(f"multi-{uuid.uuid4().hex[:6]}"), "standby", actor="user:test", reason="test"
        )
        acked = wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
        assert {g for g, e in acked.items() if g in names and e >= epoch} == names

        clients: list[RawClient] = []

        def connected() -> bool:
            """More connections, each answered whichever process the kernel gave it to, until every
            process counts some: a process registers before it listens, so the first may all go to one."""
            for client in [RawClient(gateway.port) for _ in range(8)]:
                clients.append(client)
                assert client.answer(client.send(apis.API_VERSIONS, 3, client_software_name="raw",
                                                 client_software_version="1")).error_code == 0  # fmt: skip
            return all(connections(metrics_port + i) > 0 for i in range(PROCESSES))

        until("both processes to count their connections", connected)
        spread = [connections(metrics_port + i) for i in range(PROCESSES)]
        assert sum(spread) >= len(clients), spread
        for client in clients:
            client.sock.close()

        topic = f"multi-{uuid.uuid4().hex[:8]}"
        kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic], partitions=3)
        killed = members(routing, "gw-multi")["gw-multi.0"]
        sent = write(gateway.bootstrap, topic, RECORDS, midway=lambda: os.kill(killed.pid, signal.SIGKILL))

        def started_again() -> bool:
            again = members(routing, "gw-multi").get("gw-multi.0")
            return again is not None and again.pid != killed.pid

        until("the killed process to be started again", started_again,
              timeout_s=stack_config.zookeeper.session_timeout_s + 30)  # fmt: skip
        sent += write(gateway.bootstrap, topic, RECORDS, start=RECORDS)
        assert sorted(read(gateway.bootstrap, topic, 2 * RECORDS)) == sorted(sent) == list(range(2 * RECORDS))
    finally:
        gateway.stop()
    assert gateway.process is not None
    assert gateway.process.returncode == 0
    until("the registrations to go", lambda: members(routing, "gw-multi") == {}, timeout_s=10)
    log = gateway.log.read_text()
    assert "gateway process 0 exited (-9): starting it again" in log, log[-3000:]


def test_a_process_that_cannot_start_stops_the_gateway_with_the_reason(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id="gw-taken", log=tmp_path / "gw.log",
        overrides={"SWITCHYARD__GATEWAY__PROCESSES": str(PROCESSES)},
    )  # fmt: skip
    holder = socket.socket()  # the port taken by a process that does not share it
    holder.bind(("127.0.0.1", gateway.port))
    holder.listen()
    try:
        gateway.launch()
        assert gateway.process is not None
        code = gateway.process.wait(timeout=60)
    finally:
        holder.close()
        gateway.stop()  # still running only if the test failed: not left serving behind it
    log = gateway.log.read_text()
    assert code != 0, log
    assert f"cannot listen on 127.0.0.1:{gateway.port}" in log, log[-3000:]
    assert "starting: the others stop" in log, log[-3000:]
    assert members(routing, "gw-taken") == {}


def write(
    bootstrap: str, topic: str, count: int, *, start: int = 0, midway: Callable[[], None] | None = None
) -> list[int]:
    """Send ``count`` values from ``start`` through the gateway (idempotent, acks=all), about 1,000 a
    second, calling ``midway`` half way; the acknowledged ones."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "multi@producer",
                         "enable.idempotence": True, "linger.ms": 5})  # fmt: skip
    acked: list[int] = []
    failed: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append(int(msg.value()))  # type: ignore[attr-defined]
        else:
            failed.append(str(err))

    for i, v in enumerate(range(start, start + count)):
        producer.produce(topic, str(v).encode(), on_delivery=delivered)
        producer.poll(0)
        if i % 100 == 99:
            time.sleep(0.1)
        if midway is not None and i == count // 2:
            midway()
    assert producer.flush(60) == 0
    assert failed == []
    return acked


def read(bootstrap: str, topic: str, count: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": "multi@reader", "group.id": "multi",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(int(message.value() or b"-1"))
    finally:
        consumer.close()
    return got


def test_processes_die_with_their_supervisor(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A supervisor killed outright (-9) leaves no process serving behind it: each gets SIGTERM from the
    kernel, ends its connections and deregisters, as on a stop."""
    gateway, children = started(routing, stack_config, tmp_path, "gw-orphans")
    assert gateway.process is not None
    gateway.process.kill()
    gateway.process.wait(10)
    until("the processes to end", lambda: not any(alive(pid) for pid in children))
    until("their registrations to go", lambda: members(routing, "gw-orphans") == {}, timeout_s=10)


def test_a_gateway_killed_leaves_none_of_its_processes_answering(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """The test harness's SIGKILL of a gateway of several processes kills them all at once, as a crash
    would; killed alone, the supervisor left them its parting SIGTERM, and they went on answering while
    the gateway started in its place came up — a chaos trial took them for it (gone 0.3 s; its clients
    were refused for 8 s after)."""
    gateway, processes = started(routing, stack_config, tmp_path, "gw-crash")
    gateway.stop(signal.SIGKILL)
    until("the processes to end", lambda: not any(alive(pid) for pid in processes), timeout_s=0.5)
    with socket.socket() as probe:
        taken = probe.connect_ex(("127.0.0.1", gateway.port)) == 0
    assert not taken, f"a process still takes connections: {gateway.log.read_text()[-2000:]}"


def started(
    routing: RoutingStore, stack_config: Config, tmp_path: Path, name: str
) -> tuple[GatewayProcess, list[int]]:
    """A gateway of ``PROCESSES`` processes, started and each registered; with their pids."""
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id=name, log=tmp_path / "gw.log",
        overrides={"SWITCHYARD__GATEWAY__PROCESSES": str(PROCESSES)},
    )  # fmt: skip
    gateway.start()
    until("every process registered", lambda: len(members(routing, name)) == PROCESSES)
    return gateway, [r.pid for r in members(routing, name).values()]
