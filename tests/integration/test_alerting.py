"""End to end with the real parts: Debian's Prometheus scrapes the gateway and the mirror and evaluates the
shipped rules (infra/monitoring/rules.yml), Debian's Alertmanager posts what fires to `switchyard webhook`
with its bearer token, and the receiver's policy fails the primary's keys over — a frozen primary (SIGSTOP
of its broker) is failed over by the alert alone, and the application goes on on the standby.

The shipped rules wait 30 s before an unreachable cluster fires (``for: 30s``); the test's copy of them
waits 2 s: what is tested is the path from the broker to the standby, not the patience. ``make bench``
times each stage at the shipped timings.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.stack import Stack
from tests.helpers.live import Live
from tests.helpers.monitoring import AlertmanagerServer, PrometheusServer
from tests.helpers.processes import WebhookProcess
from tests.helpers.services import PrivateService, kafka_pair

ACTOR = "user:test"
RULES = Path(__file__).parents[2] / "infra" / "monitoring" / "rules.yml"
TEST_FOR = "2s"
TOKEN = "alerting-token-3f1c"
ALERT = "SwitchyardClusterUnreachable"


@dataclass
class Monitored:
    live: Live
    primary: PrivateService
    standby: PrivateService
    prometheus: PrometheusServer
    alertmanager: AlertmanagerServer
    receiver: WebhookProcess


def rules_waiting(directory: Path, wait: str) -> Path:
    """The shipped rules with every ``for`` shortened to ``wait``."""
    shipped = yaml.safe_load(RULES.read_text())
    for group in shipped["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = wait
    copy = directory / "rules.yml"
    copy.write_text(yaml.safe_dump(shipped))
    return copy


@pytest.fixture(scope="module")
def monitored(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Monitored]:
    directory = tmp_path_factory.mktemp("alerting")
    with kafka_pair(directory / "brokers") as (primary, standby):
        overrides = {
            "SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": primary.connect,
            "SWITCHYARD__CLUSTERS__STANDBY__BOOTSTRAP": standby.connect,
        }
        live = Live(stack_config, routing.layout.root, ledger_path, directory, overrides, scrape_all=True)
        live.start()
        token = directory / "token"
        token.write_text(TOKEN + "\n")
        policy = {
            "name": "primary-down", "match": {"alertname": ALERT, "cluster": "primary"},
            "saga": "failover", "cluster": "primary", "approval": "none",
        }  # fmt: skip
        assert stack_config.source is not None
        receiver = WebhookProcess(
            stack_config.source, root=routing.layout.root, log=directory / "webhook.log",
            overrides={
                **live.env,
                "SWITCHYARD__WEBHOOK__ALERTMANAGER": f"{{bearer: {{token_file: {token}}}}}",
                "SWITCHYARD__WEBHOOK__POLICIES": yaml.safe_dump([policy], default_flow_style=True),
            },
        )  # fmt: skip
        receiver.start()
        alertmanager = AlertmanagerServer(directory / "am", f"{receiver.url}/alertmanager", token)
        alertmanager.start()
        targets = {name: [live.scraped[name]] for name in ("gateway", "mirror")}
        prometheus = PrometheusServer(
            directory / "prom", targets, [rules_waiting(directory, TEST_FOR)], alertmanager.url
        )
        prometheus.start()
        try:
            yield Monitored(live, primary, standby, prometheus, alertmanager, receiver)
        finally:
            for server in (prometheus, alertmanager, receiver):
                server.stop()
            live.stop()


def test_a_frozen_primary_is_failed_over_by_its_alert_alone(
    monitored: Monitored, routing: RoutingStore
) -> None:
    live, primary, standby = monitored.live, monitored.primary, monitored.standby
    assert live.gateway is not None
    app, topic, link = (f"{prefix}-{uuid.uuid4().hex[:6]}" for prefix in ("shop", "orders", "link"))
    kafka.create_topics(primary.connect, [topic], partitions=2)
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    before = [kafka.Record(f"k{i}".encode(), f"before-{i}".encode(), partition=i % 2) for i in range(100)]
    assert kafka.produce(live.gateway.bootstrap, topic, before, settings={"client.id": app}) == 100
    wait_until(lambda: copied(routing, link) == 100, "the mirror never copied the records sent before")
    wait_until(lambda: up(monitored, "primary"), "Prometheus never saw the gateway reach the primary")

    os.kill(primary.process.pid() or 0, signal.SIGSTOP)  # the primary stops answering, its data kept
    frozen = time.monotonic()
    producer = Producer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app})
    acked: list[float] = []
    producer.produce(
        topic, b"after", on_delivery=lambda e, _: acked.append(time.monotonic()) if e is None else None
    )
    stages: dict[str, float] = {}
    while not acked:
        assert time.monotonic() - frozen < 120, (
            f"no record acknowledged 120 s after the freeze; so far {stages}"
        )
        if "alert firing" not in stages and any(
            a["labels"].get("alertname") == "SwitchyardClusterUnreachable"
            for a in monitored.prometheus.firing()
        ):
            stages["alert firing"] = time.monotonic() - frozen
        if "saga started" not in stages and routing.ledger.saga_runs(saga_id([app])):
            stages["saga started"] = time.monotonic() - frozen
        producer.poll(0.2)
    stages["first record acknowledged on the standby"] = acked[0] - frozen
    print(f"\nfrozen primary -> {', '.join(f'{k} {v:.1f}s' for k, v in stages.items())}")

    assert "saga started" in stages, "a record was acknowledged, but no saga moved the application"
    (run,) = routing.ledger.saga_runs(saga_id([app]))
    assert run.actor == "alertmanager:switchyard", run.actor
    assert ALERT in run.reason, run.reason
    deadline = time.monotonic() + 60
    while (run := routing.ledger.saga_runs(saga_id([app]))[0]).outcome is None:
        assert time.monotonic() < deadline, "the failover never ended"
        time.sleep(0.5)
    assert run.outcome == "switched", run.result
    assert routing.binding(BindingKey.for_app(app)).cluster == "standby"  # type: ignore[union-attr]
    on_standby = Counter(r.value for rs in kafka.read_partitions(standby.connect, topic).values() for r in rs)
    assert on_standby == Counter([*(r.value for r in before), b"after"])  # nothing lost, nothing twice


def copied(routing: RoutingStore, link: str) -> int:
    return sum(p.target_end for m in read_status(routing.zk, routing.layout, link) for p in m.partitions)


def up(monitored: Monitored, cluster: str) -> bool:
    found = monitored.prometheus.value(f'switchyard_gateway_cluster_reachable{{cluster="{cluster}"}}')
    return bool(found) and found[0]["value"][1] == "1"


def wait_until(check: object, what: str, timeout_s: float = 60) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
