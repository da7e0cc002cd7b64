"""The gateway's failure behaviour as docs/gateway.md states it: a broker that goes away, a broker stalled
on one request, ZooKeeper out of reach."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic

from switchyard import kafka
from switchyard.config import Config
from switchyard.errors import AcksTimeout
from switchyard.frames.entities import make
from switchyard.keys import BindingKey
from switchyard.routing.gateways import registered, wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.helpers.poison import poisoned_cluster
from tests.helpers.processes import GatewayProcess
from tests.helpers.proxy import FreezableProxy
from tests.helpers.raw import RawClient, fetch_fields
from tests.helpers.services import PrivateService
from workers.gateway.routing import apis

ACTOR = "user:test"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@contextmanager
def gateway_on_private(
    routing: RoutingStore, stack_config: Config, tmp_path: Path, cluster: str
) -> Iterator[tuple[PrivateService, GatewayProcess]]:
    """A broker of the test's own as ``cluster``, and a gateway routing to it; both stopped after."""
    broker = PrivateService.kafka(tmp_path / cluster)
    broker.start()
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id=unique("gw"), log=tmp_path / "gw.log",
        overrides={f"SWITCHYARD__CLUSTERS__{cluster.upper()}__BOOTSTRAP": broker.connect},
    )  # fmt: skip
    try:
        gateway.start()
        yield broker, gateway
    finally:
        gateway.stop()
        broker.stop()


@contextmanager
def cut_off_gateway(
    routing: RoutingStore, stack_config: Config, tmp_path: Path, *, session_s: int
) -> Iterator[tuple[FreezableProxy, GatewayProcess]]:
    """A gateway that reaches ZooKeeper through a proxy the test can freeze (a network partition between
    the two alone), with a session time-out of ``session_s``; stopped after, the proxy thawed first."""
    host, port = stack_config.zookeeper.connect.split(",")[0].rsplit(":", 1)
    proxy = FreezableProxy((host, int(port)))
    assert stack_config.source is not None
    gateway = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id=unique("gw"), log=tmp_path / "gw.log",
        overrides={
            "SWITCHYARD__ZOOKEEPER__CONNECT": proxy.address,
            "SWITCHYARD__ZOOKEEPER__SESSION_TIMEOUT_S": str(session_s),
        },
    )  # fmt: skip
    gateway.start()
    try:
        yield proxy, gateway
    finally:
        proxy.thaw()
        gateway.stop()
        proxy.close()


def test_an_unreachable_broker_closes_the_connections_waiting_on_it(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A client waiting on a broker that dies is disconnected, so it reconnects and retries; it is never
    left with an open connection and a request nobody will answer."""
    with gateway_on_private(routing, stack_config, tmp_path, "primary") as (broker, gateway):
        topic = unique("gone")
        kafka.create_topics(broker.connect, [topic], partitions=1)
        assert kafka.ends_of(broker.connect, [(topic, 0)]) == {(topic, 0): 0}  # led: a Fetch now waits
        client = RawClient(gateway.port)
        client.send(apis.FETCH, 12, **fetch_fields(topic, max_wait_ms=20_000))  # waiting at the broker
        time.sleep(0.5)
        os.kill(broker.process.pid() or 0, signal.SIGKILL)  # dies: a broker stopped cleanly answers first
        assert client.closed_within(15) < 10


def test_a_request_its_broker_never_answers_holds_a_switch_up_for_seconds_only(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """An epoch is acknowledged once nothing routed the old way may still land, but a broker stalled on
    such a request (Tansu once left a librdkafka commit unanswered for good, and a switch with it) is
    given up on after the request's own wait and the grace: the client gets the retriable error on a
    connection kept open, and the epoch is acknowledged."""
    group = unique("stalled")
    with poisoned_cluster(tmp_path / "broker.log", set(), frozenset({group})) as stalling:
        bootstrap = f"127.0.0.1:{stalling.port}"
        assert stack_config.source is not None
        gateway = GatewayProcess(
            stack_config.source, root=routing.layout.root, gateway_id=unique("gw"), log=tmp_path / "gw.log",
            overrides={
                "SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": bootstrap,
                "SWITCHYARD__GATEWAY__LIMITS__STALE_REQUEST_GRACE_S": "2",
            },
        )  # fmt: skip
        gateway.start()
        try:
            app, topic = unique("stall"), unique("stall-t")
            kafka.create_topics(bootstrap, [topic], partitions=1)
            before = routing.set_binding(BindingKey.for_app(app), "primary", actor="user:test", reason="t")
            wait_for_acks(routing.zk, routing.layout, before, timeout_s=10)
            client = RawClient(gateway.port, client_id=app, timeout_s=30)
            partition = make(OffsetCommitRequestPartition, partition_index=0, committed_offset=1)
            commit = client.send(
                apis.OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1, member_id="",
                topics=(make(OffsetCommitRequestTopic, name=topic, partitions=(partition,)),),
            )  # fmt: skip
            deadline = time.monotonic() + 10
            while not stalling.stalled:
                assert time.monotonic() < deadline, "the commit never reached the broker"
                time.sleep(0.05)
            moved = routing.set_binding(BindingKey.for_app(app), "standby", actor="user:test", reason="t")
            wait_for_acks(routing.zk, routing.layout, moved, timeout_s=15)

            answer = client.answer(commit)
            assert [p.error_code for p in answer.topics[0].partitions] == [ErrorCode.not_coordinator]
            versions = client.send(
                apis.API_VERSIONS, 3, client_software_name="raw", client_software_version="1"
            )
            assert client.answer(versions).error_code == ErrorCode.none  # the connection is kept
            assert f"gave up on offset_commit of {app}" in gateway.log.read_text()
            assert stalling.stalled == 1
        finally:
            gateway.stop()


def test_no_epoch_is_acknowledged_while_zookeeper_is_out_of_reach(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """Cut off from ZooKeeper (but not yet expired), a gateway keeps routing by what it knew and
    acknowledges nothing new, so a saga waiting for it times out; back in reach, it catches up."""
    with cut_off_gateway(routing, stack_config, tmp_path, session_s=30) as (proxy, gateway):
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


def test_a_gateway_cut_off_from_zookeeper_past_its_session_writes_nothing_by_the_routing_it_knew(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """Cut off from ZooKeeper until its session expires, a gateway drops out of the barrier, and a switch
    goes on without it. From the moment it can no longer vouch for its session (two thirds of the time-out
    after its last answer) it holds its clients' writes; back in reach, it sends them where the switch
    put them, once each, from an idempotent producer too. (Before, it went on routing by the bindings it
    knew: its producer's records were written to the cluster the application had left, after the switch
    — lost to the application.)"""
    with cut_off_gateway(routing, stack_config, tmp_path, session_s=6) as (proxy, gateway):
        app, topic = unique("cut"), unique("cut")
        primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
        for bootstrap in (primary, standby):
            kafka.create_topics(bootstrap, [topic], partitions=1)
        key = BindingKey.for_app(app)
        bound = routing.set_binding(key, "primary", actor=ACTOR, reason="t")
        wait_for_acks(routing.zk, routing.layout, bound, timeout_s=10)
        # librdkafka's producer at its defaults (not idempotent), and an idempotent one: its InitProducerId
        # and its sequences are held as well, and go on on the other cluster
        settings = {"bootstrap.servers": gateway.bootstrap}
        producers = {
            offset: Producer({**settings, "client.id": f"{app}@p{offset}", "enable.idempotence": offset > 0})
            for offset in (0, 100)
        }
        failed: list[str] = []

        def send(values: range) -> None:
            for offset, producer in producers.items():
                for value in values:
                    producer.produce(
                        topic, str(offset + value).encode(),
                        on_delivery=lambda e, _: failed.append(str(e)) if e else None,
                    )  # fmt: skip

        def flushed(timeout_s: float) -> int:
            return sum(producer.flush(timeout_s) for producer in producers.values())

        send(range(10))
        assert flushed(30) == 0
        proxy.freeze()
        deadline = time.monotonic() + 30
        while gateway.id in registered(routing.zk, routing.layout):
            assert time.monotonic() < deadline, "the cut-off gateway's session never expired"
            time.sleep(0.2)
        moved = routing.set_binding(key, "standby", actor=ACTOR, reason="t")
        assert gateway.id not in wait_for_acks(routing.zk, routing.layout, moved, timeout_s=5)
        left_at = kafka.ends_of(primary, [(topic, 0)])[(topic, 0)]
        send(range(10, 20))  # to the gateway that knows only the binding before the switch
        for producer in producers.values():
            producer.poll(1.5)
        proxy.thaw()
        assert flushed(60) == 0
        assert failed == []
        assert kafka.ends_of(primary, [(topic, 0)])[(topic, 0)] == left_at == 20, "written after the switch"
        on_standby = sorted(int(r.value or b"") for r in kafka.read_partitions(standby, topic)[0])
        assert on_standby == [*range(10, 20), *range(110, 120)]  # each once
        assert "no longer vouched for" in gateway.log.read_text()


def test_an_idempotent_producer_switched_to_a_cluster_that_never_issued_an_id_keeps_its_connection(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A broker that has issued no producer id yet answers the first InitProducerId with
    COORDINATOR_LOAD_IN_PROGRESS while it gets a block of ids from its controller. The gateway, taking an
    id there for a producer a switch moved, asks again; before, it closed the client's connection, and
    a held batch behind the one that failed set the partition's sequences past it (fatal to librdkafka,
    once in ten migrations)."""
    # its own standby: the shared one has issued ids already
    with gateway_on_private(routing, stack_config, tmp_path, "standby") as (standby, gateway):
        app, topic = unique("fresh"), unique("ids")
        for bootstrap in (stack_config.clusters["primary"].bootstrap, standby.connect):
            kafka.create_topics(bootstrap, [topic], partitions=1)
        key = BindingKey.for_app(app)
        bound = routing.set_binding(key, "primary", actor=ACTOR, reason="t")
        wait_for_acks(routing.zk, routing.layout, bound, timeout_s=10)
        producer = Producer(
            {"bootstrap.servers": gateway.bootstrap, "client.id": f"{app}@p", "enable.idempotence": True}
        )
        failed: list[str] = []

        def delivered(error: object, _: object) -> None:
            if error is not None:
                failed.append(str(error))

        def send(values: range) -> None:
            for value in values:
                producer.produce(topic, str(value).encode(), on_delivery=delivered)
            assert producer.flush(30) == 0

        send(range(100))
        switched = routing.set_binding(key, "standby", actor=ACTOR, reason="t")
        wait_for_acks(routing.zk, routing.layout, switched, timeout_s=10)
        send(range(100, 200))
        assert failed == []
        assert [int(r.value or b"") for r in kafka.read_partitions(standby.connect, topic)[0]] == list(
            range(100, 200)
        )
        said = gateway.log.read_text()
        assert "InitProducerId failed" not in said
        assert "closing connection" not in said
