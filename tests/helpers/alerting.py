"""A deployment watched by Prometheus and Alertmanager whose alerts go to `switchyard webhook`, and a
primary frozen under it: what the alerting test checks and ``make bench`` times.

Brokers of its own (freezing them disturbs nothing else), a gateway, a mirror and a worker that serve
their metrics, the receiver with one policy — the primary unreachable fails its keys over, approved in
advance — and Prometheus evaluating the shipped rules, their ``for`` shortened when asked.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml
from confluent_kafka import Producer

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.ledger.sagas import SagaRun
from switchyard.mirror.status import read_status
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from tests.helpers.live import Live
from tests.helpers.monitoring import AlertmanagerServer, PrometheusServer
from tests.helpers.processes import WebhookProcess, freeze
from tests.helpers.services import PrivateService, kafka_pair

RULES = Path(__file__).parents[2] / "infra" / "monitoring" / "rules.yml"
ALERT = "SwitchyardClusterUnreachable"
ACTOR = "user:test"
_TOKEN = "alerting-token-3f1c"


@dataclass
class Monitored:
    live: Live
    routing: RoutingStore
    primary: PrivateService
    standby: PrivateService
    prometheus: PrometheusServer
    alertmanager: AlertmanagerServer
    receiver: WebhookProcess


@dataclass
class FailedOver:
    """What the application sent, what the standby holds, when each stage came after the freeze."""

    sent: Counter[bytes | None]
    on_standby: Counter[bytes | None]
    stages: dict[str, float]
    run: SagaRun


def rules_waiting(directory: Path, wait: str | None) -> Path:
    """The shipped rules, every ``for`` shortened to ``wait`` (None: as shipped)."""
    if wait is None:
        return RULES
    shipped = yaml.safe_load(RULES.read_text())
    for group in shipped["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = wait
    copy = directory / "rules.yml"
    copy.write_text(yaml.safe_dump(shipped))
    return copy


@contextmanager
def monitored(
    config: Config, routing: RoutingStore, ledger: Path, directory: Path, *, wait: str | None
) -> Iterator[Monitored]:
    with ExitStack() as stack:  # whatever started is stopped, also when a later start fails
        primary, standby = stack.enter_context(kafka_pair(directory / "brokers"))
        overrides = {
            "SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": primary.connect,
            "SWITCHYARD__CLUSTERS__STANDBY__BOOTSTRAP": standby.connect,
        }
        live = Live(config, routing.layout.root, ledger, directory, overrides, scrape_all=True)
        stack.callback(live.stop)
        live.start()
        token = directory / "token"
        token.write_text(_TOKEN + "\n")
        policy = {
            "name": "primary-down", "match": {"alertname": ALERT, "cluster": "primary"},
            "saga": "failover", "cluster": "primary", "approval": "none",
        }  # fmt: skip
        assert config.source is not None
        receiver = WebhookProcess(
            config.source, root=routing.layout.root, log=directory / "webhook.log",
            overrides={
                **live.env,
                "SWITCHYARD__WEBHOOK__ALERTMANAGER": f"{{bearer: {{token_file: {token}}}}}",
                "SWITCHYARD__WEBHOOK__POLICIES": yaml.safe_dump([policy], default_flow_style=True),
            },
        )  # fmt: skip
        alertmanager = AlertmanagerServer(directory / "am", f"{receiver.url}/alertmanager", token)
        targets = {name: [live.scraped[name]] for name in ("gateway", "mirror")}
        prometheus = PrometheusServer(
            directory / "prom", targets, [rules_waiting(directory, wait)], alertmanager.url
        )
        for server in (receiver, alertmanager, prometheus):
            stack.callback(server.stop)
            server.start()
        yield Monitored(live, routing, primary, standby, prometheus, alertmanager, receiver)


def freeze_the_primary(watched: Monitored, *, within_s: float = 120) -> FailedOver:
    """An application bound to the primary sends 100 records through the gateway (copied to the standby
    before anything happens); the primary is frozen (SIGSTOP), and the application sends one more, which
    the gateway answers once the alert's failover moved it. The primary stays frozen."""
    live, routing = watched.live, watched.routing
    assert live.gateway is not None
    app, topic, link = (f"{prefix}-{uuid.uuid4().hex[:6]}" for prefix in ("shop", "orders", "link"))
    kafka.create_topics(watched.primary.connect, [topic], partitions=2)
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    before = [kafka.Record(f"k{i}".encode(), f"before-{i}".encode(), partition=i % 2) for i in range(100)]
    assert kafka.produce(live.gateway.bootstrap, topic, before, settings={"client.id": app}) == 100
    _wait_until(lambda: _copied(routing, link) == 100, "the mirror never copied the records sent before")
    _wait_until(lambda: _up(watched, "primary"), "Prometheus never saw the gateway reach the primary")

    freeze(watched.primary.process.pid())  # stops answering, its data kept
    frozen = time.monotonic()
    producer = Producer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app})
    acked: list[float] = []
    producer.produce(
        topic, b"after", on_delivery=lambda e, _: acked.append(time.monotonic()) if e is None else None
    )
    stages: dict[str, float] = {}
    while not acked:
        assert time.monotonic() - frozen < within_s, f"nothing acknowledged after the freeze; so far {stages}"
        firing = {a["labels"].get("alertname") for a in watched.prometheus.firing()}
        if "alert firing" not in stages and ALERT in firing:
            stages["alert firing"] = time.monotonic() - frozen
        if "saga started" not in stages and routing.ledger.saga_runs(saga_id([app])):
            stages["saga started"] = time.monotonic() - frozen
        producer.poll(0.2)
    stages["first record acknowledged on the standby"] = acked[0] - frozen
    deadline = time.monotonic() + 60
    while (runs := routing.ledger.saga_runs(saga_id([app]))) and runs[0].outcome is None:
        assert time.monotonic() < deadline, "the failover never ended"
        time.sleep(0.5)
    assert runs, f"a record was acknowledged, but no saga moved {app}"
    copy = kafka.read_partitions(watched.standby.connect, topic)
    on_standby = Counter(r.value for records in copy.values() for r in records)
    return FailedOver(Counter([*(r.value for r in before), b"after"]), on_standby, stages, runs[0])


def _copied(routing: RoutingStore, link: str) -> int:
    return sum(p.target_end for m in read_status(routing.zk, routing.layout, link) for p in m.partitions)


def _up(watched: Monitored, cluster: str) -> bool:
    found = watched.prometheus.value(f'switchyard_gateway_cluster_reachable{{cluster="{cluster}"}}')
    return bool(found) and found[0]["value"][1] == "1"


def _wait_until(check: object, what: str, timeout_s: float = 60) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)
