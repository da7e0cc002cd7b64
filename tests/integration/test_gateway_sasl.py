"""SASL/PLAIN clients and plain clients through one gateway; the gateway's metrics, read from OTLP."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import BindingState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.helpers.otlp import OtlpReceiver
from tests.helpers.processes import GatewayProcess
from tests.integration.test_gateway import bind, only_on, records, unique
from workers.gateway.framing.sasl import user_line

PASSWORD = "correct horse battery staple"


def sasl(user: str, password: str = PASSWORD, **more: str) -> dict[str, Any]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
        **more,
    }


@pytest.fixture(scope="module")
def app() -> str:
    return unique("orders")


def start_gateway(
    config: Config, routing: RoutingStore, directory: Path, mode: str, users: Path, **more: str
) -> GatewayProcess:
    assert config.source is not None
    process = GatewayProcess(
        config.source,
        root=routing.layout.root,
        gateway_id=f"gw-{mode}",
        log=directory / f"gateway-{mode}.log",
        overrides={
            "SWITCHYARD__GATEWAY__SASL__MODE": mode,
            "SWITCHYARD__GATEWAY__SASL__USERS_FILE": str(users),
            **more,
        },
    )
    process.start()
    return process


@pytest.fixture(scope="module")
def users(app: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sasl") / "users"
    path.write_text(user_line(app, PASSWORD) + "\n")
    return path


@pytest.fixture(scope="module")
def gateway(
    routing: RoutingStore,
    stack_config: Config,
    users: Path,
    otlp: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[GatewayProcess]:
    process = start_gateway(
        stack_config,
        routing,
        tmp_path_factory.mktemp("gw-sasl"),
        "optional",
        users,
        SWITCHYARD__TELEMETRY__OTLP_ENDPOINT=otlp.endpoint,
        SWITCHYARD__TELEMETRY__EXPORT_INTERVAL_S="0.5",
    )
    yield process
    process.stop()


def test_the_sasl_user_is_the_appid_and_plain_clients_still_work(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config, app: str, otlp: OtlpReceiver
) -> None:
    bind(routing, BindingKey.for_app(app), "standby")
    topic, plain_topic = unique("sasl"), unique("nosasl")
    kafka.create_topics(stack_config.clusters["standby"].bootstrap, [topic], partitions=2)
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [plain_topic], partitions=2)

    # client.id names another app, but the authenticated user decides: it is only the instance
    settings = sasl(app, **{"client.id": "someone-else@host-7"})
    assert kafka.produce(gateway.bootstrap, topic, records(300), settings=settings) == 300
    only_on(stack_config, "standby", topic, 300)
    got = kafka.consume(gateway.bootstrap, topic, group=unique("g"), count=300, settings=settings)
    assert sorted(r.value for r in got) == sorted(r.value for r in records(300))

    # without SASL on the same gateway: identity from client.id, unbound, so the default cluster
    assert kafka.produce(gateway.bootstrap, plain_topic, records(200), settings={"client.id": "x@1"}) == 200
    only_on(stack_config, "primary", plain_topic, 200)

    # the metrics say who went where (exported every 0.5 s to the test's OTLP receiver)
    deadline = time.monotonic() + 15
    while (
        otlp.latest("switchyard.gateway.requests", api="produce", app=app, cluster="standby") == 0
        or otlp.latest("switchyard.gateway.requests", api="produce", app="x", cluster="primary") == 0
    ):  # both produced before; the export that carries the second may come a period later
        names = sorted({n for n, _ in otlp.points})
        assert time.monotonic() < deadline, f"no produce metrics for {app} or x; metrics: {names}"
        time.sleep(0.5)
    assert otlp.latest("switchyard.gateway.requests", app=app, cluster="primary") == 0
    assert otlp.latest("switchyard.gateway.upstream_latency", api="produce") > 0
    assert otlp.latest("switchyard.gateway.added_latency", api="fetch") > 0


def test_a_wrong_password_or_unknown_user_is_refused(gateway: GatewayProcess, app: str) -> None:
    for user, password in ((app, "wrong"), ("nobody", PASSWORD)):
        errors: list[KafkaError] = []
        settings = {**sasl(user, password), "error_cb": errors.append, "log_level": 0}
        admin = AdminClient({"bootstrap.servers": gateway.bootstrap, **settings})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=3)
        admin.poll(1)  # serves error_cb
        refusals = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
        assert refusals, f"{user}: no authentication error among {errors}"
        assert "unknown user or wrong password" in refusals[0].str()


def test_a_blocked_sasl_client_is_counted(
    gateway: GatewayProcess, routing: RoutingStore, stack_config: Config, otlp: OtlpReceiver
) -> None:
    app = unique("blocked")
    users = Path(gateway.env["SWITCHYARD__GATEWAY__SASL__USERS_FILE"])
    users.write_text(users.read_text() + user_line(app, PASSWORD) + "\n")  # picked up without a restart
    epoch = routing.set_binding(
        BindingKey.for_app(app), "primary", BindingState.BLOCKED, actor="user:test", reason="test"
    )
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    topic = unique("blk")
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic])
    with pytest.raises(kafka.KafkaOperationError):
        kafka.produce(gateway.bootstrap, topic, records(5), settings=sasl(app), timeout_s=3)
    deadline = time.monotonic() + 15
    while otlp.latest("switchyard.gateway.blocked_requests", app=app) == 0:
        assert time.monotonic() < deadline, f"no blocked metrics for {app}"
        time.sleep(0.5)


def test_required_mode_closes_unauthenticated_clients(
    routing: RoutingStore, stack_config: Config, users: Path, app: str, tmp_path: Path
) -> None:
    process = start_gateway(stack_config, routing, tmp_path, "required", users)
    try:
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": process.bootstrap}).list_topics(timeout=5)
        listed = AdminClient({"bootstrap.servers": process.bootstrap, **sasl(app)}).list_topics(timeout=10)
        assert listed.brokers, "an authenticated client got no brokers"
        assert "before SASL authentication, which this gateway requires" in process.log.read_text()
    finally:
        process.stop()


def test_broker_connections_log_in_as_the_client(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A gateway in front of a SASL-only Kafka endpoint (a second gateway requiring PLAIN) logs in as
    each client: the inner gateway routes by the user it sees, and refuses a user it does not know."""
    app = unique("chain")
    inner_users, outer_users = tmp_path / "inner-users", tmp_path / "outer-users"
    inner_users.write_text(f"{user_line(app, PASSWORD)}\n{user_line('svc-gateway', 'svc-pw')}\n")
    outer_users.write_text(f"{user_line(app, PASSWORD)}\n{user_line('drifter', PASSWORD)}\n")
    bind(routing, BindingKey.for_app(app), "standby")
    inner = start_gateway(stack_config, routing, tmp_path, "required", inner_users)
    outer = start_gateway(
        stack_config,
        routing,
        tmp_path,
        "optional",
        outer_users,
        SWITCHYARD__ZOOKEEPER__ROOT=f"{routing.layout.root}-outer",  # no bindings: all to "primary"
        SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP=inner.bootstrap,
        SWITCHYARD__CLUSTERS__PRIMARY__SASL__MECHANISM="PLAIN",
        SWITCHYARD__CLUSTERS__PRIMARY__SASL__USERNAME="svc-gateway",
        SWITCHYARD__CLUSTERS__PRIMARY__SASL__PASSWORD="svc-pw",
    )
    try:
        topic = unique("chained")
        kafka.create_topics(stack_config.clusters["standby"].bootstrap, [topic], partitions=1)
        assert kafka.produce(outer.bootstrap, topic, records(100), settings=sasl(app)) == 100
        only_on(stack_config, "standby", topic, 100)  # the inner gateway saw the user, not svc-gateway

        errors: list[KafkaError] = []
        drifter = AdminClient(
            {
                "bootstrap.servers": outer.bootstrap,
                **sasl("drifter"),
                "error_cb": errors.append,
                "log_level": 0,
            }
        )
        with pytest.raises(KafkaException):
            drifter.list_topics(timeout=3)
        assert "SASL login failed: sasl_authentication_failed" in outer.log.read_text()
    finally:
        outer.stop()
        inner.stop()
        routing.zk.delete(f"{routing.layout.root}-outer", recursive=True)
