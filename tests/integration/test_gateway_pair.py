"""Two gateway instances on one routing root: the same virtual brokers, both acknowledging epochs,
and a producer that loses no acknowledged record when one of them is killed under it."""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.routing.gateways import registered, wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.support import GatewayProcess


@pytest.fixture(scope="module")
def pair(
    routing: RoutingStore,
    stack_config: Config,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    assert stack_config.source is not None
    logs = tmp_path_factory.mktemp("pair")
    gateways = tuple(
        GatewayProcess(
            stack_config.source, root=routing.layout.root, gateway_id=name, log=Path(logs / f"{name}.log")
        )
        for name in ("gw-1", "gw-2")
    )
    for g in gateways:
        g.start()
    yield gateways  # type: ignore[misc]
    for g in gateways:
        g.stop()


def brokers(gateway: GatewayProcess) -> dict[int, int]:
    """Virtual broker id -> port, as a client of this gateway sees them."""
    found = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(timeout=10).brokers
    return {b.id: b.port for b in found.values()}


def test_both_present_the_same_virtual_brokers(pair: tuple[GatewayProcess, GatewayProcess]) -> None:
    one, two = pair
    seen_one, seen_two = brokers(one), brokers(two)
    assert seen_one.keys() == seen_two.keys()
    assert (
        {p - one.port for p in seen_one.values()}
        == {p - two.port for p in seen_two.values()}
        == set(seen_one)
    )


def test_both_acknowledge_every_epoch(
    pair: tuple[GatewayProcess, GatewayProcess],
    routing: RoutingStore,
) -> None:
    assert set(registered(routing.zk, routing.layout)) == {"gw-1", "gw-2"}
    epoch = routing.set_binding(
        BindingKey.for_app(f"acked-{uuid.uuid4().hex[:6]}"), "standby", actor="user:test", reason="test"
    )
    assert wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10) == {"gw-1": epoch, "gw-2": epoch}


def test_killing_one_gateway_loses_no_acknowledged_record(
    pair: tuple[GatewayProcess, GatewayProcess], stack_config: Config
) -> None:
    one, two = pair
    topic = f"ha-{uuid.uuid4().hex[:8]}"
    primary = stack_config.clusters["primary"].bootstrap
    kafka.create_topics(primary, [topic], partitions=3)
    producer = Producer(
        {
            "bootstrap.servers": f"{one.bootstrap},{two.bootstrap}",
            "client.id": "ha@producer",
            "acks": "all",
            "linger.ms": 2,
            "message.timeout.ms": 60000,
        }
    )
    acked: list[int] = []
    failed: list[str] = []
    sent = 0
    stop = threading.Event()

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append(int(msg.value()))  # type: ignore[attr-defined]
        else:
            failed.append(str(err))

    def kill_first() -> None:
        while len(acked) < 2000 and not stop.is_set():
            time.sleep(0.01)
        one.stop(signal.SIGKILL)

    killer = threading.Thread(target=kill_first)
    killer.start()
    deadline = time.monotonic() + 60
    while (len(acked) < 6000 or killer.is_alive()) and time.monotonic() < deadline:
        producer.produce(topic, value=str(sent).encode(), on_delivery=delivered)
        sent += 1
        producer.poll(0.0005)
    stop.set()
    killer.join()
    assert producer.flush(60) == 0
    one.start()  # a restart under the same id waits for the dead process's session to expire

    assert failed == []
    assert len(acked) > 6000
    stored = {int(r.value or b"-1") for rs in kafka.read_partitions(primary, topic).values() for r in rs}
    assert set(acked) <= stored  # every acknowledged record is in the cluster (a retry may have doubled one)
