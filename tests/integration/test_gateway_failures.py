"""The gateway's failure behaviour as docs/gateway.md states it: a broker that goes away, ZooKeeper out
of reach."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import AcksTimeout
from switchyard.keys import BindingKey
from switchyard.routing.gateways import registered, wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.helpers.processes import GatewayProcess
from tests.helpers.proxy import FreezableProxy
from tests.helpers.raw import RawClient
from tests.helpers.services import PrivateService
from tests.integration.test_gateway_limits import fetch_fields
from workers.gateway import apis


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_an_unreachable_broker_closes_the_connections_waiting_on_it(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A client waiting on a broker that dies is disconnected, so it reconnects and retries; it is never
    left with an open connection and a request nobody will answer."""
    broker = PrivateService.kafka(tmp_path)
    broker.start()
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id=unique("gw"), log=tmp_path / "gw.log",
        overrides={"SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": broker.connect},
    )  # fmt: skip
    gateway.start()
    try:
        topic = unique("gone")
        kafka.create_topics(broker.connect, [topic], partitions=1)
        client = RawClient(gateway.port)
        client.send(apis.FETCH, 12, **fetch_fields(topic, max_wait_ms=20_000))  # waiting at the broker
        time.sleep(0.5)
        broker.stop()
        assert client.closed_within(15) < 10
    finally:
        gateway.stop()
        broker.stop()


def test_no_epoch_is_acknowledged_while_zookeeper_is_out_of_reach(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """Cut off from ZooKeeper (but not yet expired), a gateway keeps routing by what it knew and
    acknowledges nothing new, so a saga waiting for it times out; back in reach, it catches up."""
    zk_address = stack_config.zookeeper.connect.split(",")[0]
    host, port = zk_address.rsplit(":", 1)
    proxy = FreezableProxy((host, int(port)))
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id=unique("gw"), log=tmp_path / "gw.log",
        overrides={
            "SWITCHYARD__ZOOKEEPER__CONNECT": proxy.address,
            "SWITCHYARD__ZOOKEEPER__SESSION_TIMEOUT_S": "30",  # cut off long before it expires
        },
    )  # fmt: skip
    gateway.start()
    try:
        app = unique("stale")
        before = routing.set_binding(BindingKey.for_app(app), "primary", actor="user:test", reason="t")
        wait_for_acks(routing.zk, routing.layout, before, timeout_s=10)
        proxy.freeze()
        time.sleep(1)
        changed = routing.set_binding(BindingKey.for_app(app), "standby", actor="user:test", reason="t")
        with pytest.raises(AcksTimeout, match=f"{gateway.id} \\(at epoch {before}\\)"):
            wait_for_acks(routing.zk, routing.layout, changed, timeout_s=8)
        assert gateway.id in registered(routing.zk, routing.layout)  # it is there, only behind
        proxy.thaw()
        assert wait_for_acks(routing.zk, routing.layout, changed, timeout_s=30)[gateway.id] >= changed
    finally:
        proxy.thaw()
        gateway.stop()
        proxy.close()
