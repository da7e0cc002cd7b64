"""The metrics a monitoring stack scrapes, and the rules, Alertmanager route and dashboard that use them
(``infra/monitoring/``).

The files are checked with Prometheus's and Alertmanager's own tools (``promtool``, ``amtool``, from
Debian's prometheus and prometheus-alertmanager, which ``make test`` installs). Then a gateway, a mirror, a
worker and a webhook receiver run on the session stack with ``telemetry.prometheus_listen`` on, see a
little traffic (a forwarded and a held request, a link copying a topic, a refused saga, a notification),
and are scraped over HTTP; their exposition, parsed by ``prometheus_client``'s parser, must hold every
metric the rules and the dashboard name, and the metrics operators rely on with their labels.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from confluent_kafka import Producer
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from activities.records import OUTCOMES
from switchyard import kafka, temporal
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import BindingState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import KIND_ATTRIBUTE, PHASE_ATTRIBUTE
from switchyard.sagas.requests import Kind
from switchyard.stack import Stack
from tests.helpers import ports
from tests.helpers.live import FAST_MIRROR
from tests.helpers.processes import (
    GatewayProcess,
    MirrorProcess,
    SwitchyardProcess,
    WebhookProcess,
    WorkerProcess,
)

MONITORING = Path(__file__).resolve().parents[2] / "infra" / "monitoring"
LISTEN = "SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN"
ACTOR = "user:test"
PARTITIONS = 2

# ---- the metric names PromQL expressions use

_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset",
    "inf", "nan",
}  # fmt: skip
_LABEL_LISTS = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(\s*\()?")


def promql_metrics(expr: str) -> set[str]:
    """The metric names in a PromQL expression: its identifiers, less functions (followed by ``(``),
    keywords, label names (in matchers and in by/on/... lists), strings, ranges and Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", text)
    text = re.sub(r"\{[^{}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = _LABEL_LISTS.sub("", text)
    return {
        m.group(1)
        for m in _IDENTIFIER.finditer(text)
        if m.group(2) is None and m.group(1).lower() not in _KEYWORDS
    }


def variable_metrics(query: str) -> set[str]:
    """The metric a Grafana template variable's query reads (``label_values(metric, label)``)."""
    found = re.fullmatch(r"\s*label_values\(\s*(.+?)\s*,\s*\w+\s*\)\s*", query)
    return promql_metrics(found.group(1) if found else query)


def rule_metrics() -> set[str]:
    rules = yaml.safe_load((MONITORING / "rules.yml").read_text())
    exprs = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    return {name for expr in exprs for name in promql_metrics(expr)}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    return loaded


def panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def dashboard_metrics() -> set[str]:
    board = dashboard()
    names = {n for p in panels(board) for t in p.get("targets", []) for n in promql_metrics(t["expr"])}
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            names |= variable_metrics(query["query"] if isinstance(query, dict) else query)
    return names


def test_the_name_extraction_reads_promql_as_prometheus_does() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, api) (rate(a_seconds_bucket{api=~"fetch|produce"}[5m])))'
        " / on (job) group_left () b_info{x='y'} > bool 1e3 and c offset 5m unless ignoring(le) d:rule"
        ' + sum without (instance) (e_total{job="$job"}[$__rate_interval])'
    )
    assert promql_metrics(expr) == {"a_seconds_bucket", "b_info", "c", "d:rule", "e_total"}
    assert variable_metrics('label_values(switchyard_mirror_lag_records{x="1"}, link)') == {
        "switchyard_mirror_lag_records"
    }


# ---- the files, by the tools that read them


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is missing: infra/install-system-packages.sh installs it (make test does)"
    return found


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=MONITORING)


def test_promtool_accepts_the_rules_their_tests_and_the_example_config() -> None:
    promtool = tool("promtool")
    for argv in (
        ("check", "rules", "rules.yml"),
        ("test", "rules", "rules.test.yml"),
        ("check", "config", "prometheus.yml"),
    ):
        done = run(promtool, *argv)
        assert done.returncode == 0, f"promtool {' '.join(argv)}:\n{done.stdout}{done.stderr}"


def test_amtool_accepts_the_alertmanager_example() -> None:
    done = run(tool("amtool"), "check-config", "alertmanager.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load((MONITORING / "alertmanager.yml").read_text())
    hook = next(r for r in config["receivers"] if r["name"] == "switchyard")["webhook_configs"][0]
    assert hook["url"].endswith("/alertmanager")
    assert hook["send_resolved"] is True
    assert hook["http_config"]["authorization"]["credentials_file"]


def test_every_alert_has_what_an_operator_and_a_webhook_policy_need() -> None:
    rules = yaml.safe_load((MONITORING / "rules.yml").read_text())
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    runbooks = (MONITORING.parents[1] / "docs" / "operations.md").read_text()
    assert {a["alert"] for a in alerts} >= {
        "SwitchyardClusterUnreachable", "SwitchyardMirrorLagHigh", "SwitchyardGatewayEpochBehind",
        "SwitchyardSagaAwaitingApproval",
    }  # fmt: skip
    for alert in alerts:
        assert "for" in alert, alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning", "info"}, alert["alert"]
        assert {"summary", "description", "runbook_url"} <= alert["annotations"].keys(), alert["alert"]
        anchor = alert["annotations"]["runbook_url"].partition("#")[2]
        assert anchor == alert["alert"].lower(), alert["alert"]
        assert re.search(rf"^#+ {alert['alert']}$", runbooks, re.MULTILINE), f"no section {alert['alert']}"


def test_the_dashboard_is_grafana_json_on_a_prometheus_datasource_variable() -> None:
    board = dashboard()
    assert board["title"]
    assert board["uid"]
    assert board["schemaVersion"] >= 36
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    every = list(panels(board))
    assert len({p["id"] for p in every}) == len(every), "panel ids must be unique"
    titles = {p["title"] for p in every if p["type"] == "row"}
    assert titles == {"Clusters", "Links", "Gateways", "Sagas"}
    for panel in every:
        assert {"h", "w", "x", "y"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            assert panel["targets"], panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", panel["title"]
                assert promql_metrics(target["expr"]), (panel["title"], target["expr"])


# ---- the processes, scraped


@dataclass(frozen=True)
class Exposition:
    """One scrape, parsed: metric families by name."""

    families: dict[str, Metric]

    @classmethod
    def scrape(cls, port: int) -> Exposition:
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        assert answer.status_code == 200, answer.text
        return cls({family.name: family for family in text_string_to_metric_families(answer.text)})

    @property
    def names(self) -> set[str]:
        """Every name a query can use: the families' and their samples' (``x_total``, ``x_bucket``, ...)."""
        return set(self.families) | {s.name for f in self.families.values() for s in f.samples}

    def samples(self, name: str, **labels: str) -> list[Sample]:
        return [
            s
            for f in self.families.values()
            for s in f.samples
            if s.name == name and labels.items() <= s.labels.items()
        ]

    def values(self, name: str, **labels: str) -> list[float]:
        return sorted(s.value for s in self.samples(name, **labels))


@dataclass
class Deployment:
    config: Config
    env: dict[str, str]
    metrics_ports: dict[str, int]
    """Process name (gateway, mirror, worker, webhook) -> its scrape port."""
    gateway: GatewayProcess
    hook: WebhookProcess
    app: str
    topic: str
    link: str

    def scrape(self) -> dict[str, Exposition]:
        return {name: Exposition.scrape(port) for name, port in self.metrics_ports.items()}

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        assert self.config.source is not None
        return subprocess.run(
            [sys.executable, "-m", "switchyard", "--config", str(self.config.source), *args],
            env={**os.environ, **self.env}, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip


def eventually(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:g}s: {what}"
        time.sleep(0.3)


def waiting_saga(config: Config, queue: str, workflow_id: str) -> None:
    """A stand-in for a failover waiting for its approval, as Temporal's visibility shows one (its kind
    and phase), on ``queue``. Its type is no saga's, so the worker polling the queue never runs it: it
    stays running, and waiting, until terminated."""

    async def start() -> None:
        client = await temporal.connect(config)
        await temporal.register_search_attributes(client)
        attributes = TypedSearchAttributes(
            [
                SearchAttributePair(SearchAttributeKey.for_keyword(KIND_ATTRIBUTE), Kind.FAILOVER.value),
                SearchAttributePair(SearchAttributeKey.for_keyword(PHASE_ATTRIBUTE), "awaiting approval"),
            ]
        )
        await client.start_workflow(
            "MetricsStandIn", id=workflow_id, task_queue=queue, search_attributes=attributes
        )

    asyncio.run(start())


def terminate(config: Config, workflow_id: str) -> None:
    async def end() -> None:
        client = await temporal.connect(config)
        await client.get_workflow_handle(workflow_id).terminate(reason="test over")

    asyncio.run(end())


@pytest.fixture(scope="module")
def deployment(
    stack: Stack,
    stack_config: Config,
    routing: RoutingStore,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    """A gateway, a mirror, a worker and a webhook receiver, each serving /metrics on a port of its own,
    with a link copying a topic of the module's own."""
    assert stack_config.source is not None
    suffix = uuid.uuid4().hex[:6]
    app, topic, link = f"metered-{suffix}", f"metered-{suffix}", f"metered-{suffix}"
    primary = stack_config.clusters["primary"].bootstrap
    kafka.create_topics(primary, [topic], partitions=PARTITIONS)
    kafka.produce(primary, topic, [kafka.Record(b"k", b"v", p) for p in range(PARTITIONS) for _ in range(3)])
    routing.create_link(link, "primary", "standby", include=[re.escape(topic)], actor=ACTOR, reason="metrics")

    env = {
        "SWITCHYARD__ZOOKEEPER__ROOT": routing.layout.root,
        "SWITCHYARD__LEDGER__URL": f"sqlite:///{ledger_path}",
        "SWITCHYARD__TEMPORAL__TASK_QUEUE": f"metrics-{suffix}",
    }
    waiting = f"switchyard:metrics-waiting-{suffix}"
    waiting_saga(stack_config, env["SWITCHYARD__TEMPORAL__TASK_QUEUE"], waiting)  # the worker's first read
    scrape_ports = dict(zip(("gateway", "mirror", "worker", "webhook"), ports.reserve(4), strict=True))
    listen = {name: {LISTEN: f"127.0.0.1:{port}"} for name, port in scrape_ports.items()}
    logs, source, root = tmp_path_factory.mktemp("metrics"), stack_config.source, routing.layout.root
    gateway = GatewayProcess(
        source, root=root, gateway_id=f"gw-{suffix}", log=logs / "gateway.log",
        overrides={**env, **listen["gateway"], "SWITCHYARD__GATEWAY__BLOCK_HOLD_S": "1"},
    )  # fmt: skip
    mirror = MirrorProcess(
        source, root=root, name=f"m-{suffix}", log=logs / "mirror.log",
        overrides={**env, **FAST_MIRROR, **listen["mirror"]},
    )  # fmt: skip
    worker = WorkerProcess(
        source, root=root, name="worker", log=logs / "worker.log", overrides={**env, **listen["worker"]}
    )
    hook = WebhookProcess(
        source, root=root, log=logs / "webhook.log",
        overrides={**env, **listen["webhook"], "SWITCHYARD__WEBHOOK__ALERTMANAGER": "{insecure: true}"},
    )  # fmt: skip
    processes: list[SwitchyardProcess] = [gateway, mirror, worker, hook]
    try:
        with ThreadPoolExecutor(len(processes)) as starting:  # side by side: each waits to be ready
            list(starting.map(lambda process: process.start(), processes))
        yield Deployment(stack_config, env, scrape_ports, gateway, hook, app, topic, link)
    finally:
        for process in processes:
            process.stop()
        terminate(stack_config, waiting)


@pytest.fixture(scope="module")
def scraped(deployment: Deployment, routing: RoutingStore) -> dict[str, Exposition]:
    """Each process's exposition once it has seen what the tests look for: a request forwarded and one
    held by the gateway, the link's partitions copied, a saga ended, a notification answered."""
    refused = deployment.cli("switchback", deployment.app, "--wait")  # refused at its plan: it never moved
    assert refused.returncode == 8, refused.stdout + refused.stderr
    bad = httpx.post(f"{deployment.hook.url}/alertmanager", json={"version": "4"}, timeout=10)
    assert bad.status_code == 422, bad.text

    epoch = routing.set_binding(
        BindingKey.for_app(deployment.app), "primary", BindingState.BLOCKED, actor=ACTOR, reason="metrics"
    )
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=15)
    producer = Producer(
        {"bootstrap.servers": deployment.gateway.bootstrap, "client.id": deployment.app, "linger.ms": 0}
    )
    producer.produce(deployment.topic, b"held", partition=0)
    copied = [3.0] * PARTITIONS
    try:
        found: dict[str, Exposition] = {}

        def complete() -> bool:
            producer.poll(0)
            found.update(deployment.scrape())
            gw, m, link = found["gateway"], found["mirror"], deployment.link
            return bool(
                gw.samples("switchyard_gateway_blocked_requests_total", app=deployment.app)
                and gw.samples("switchyard_gateway_added_latency_seconds_bucket")
                and gw.values("switchyard_gateway_acknowledged_epoch") >= [epoch]
                and m.values("switchyard_mirror_source_end_offset", link=link) == copied
                and m.values("switchyard_mirror_mirrored_offset", link=link) == copied
                and m.values("switchyard_mirror_cluster_reachable", cluster="primary") == [1]
                and found["worker"].samples("switchyard_saga_duration_seconds_count", kind="switchback")
                and found["worker"].values("switchyard_sagas_awaiting_approval", kind="failover") == [1]
            )

        eventually("the processes report what they saw", complete)
        return found
    finally:
        producer.purge()
        producer.flush(0)


def test_every_metric_the_rules_and_the_dashboard_use_is_exported(scraped: dict[str, Exposition]) -> None:
    exported = set().union(*(exposition.names for exposition in scraped.values()))
    used = rule_metrics() | dashboard_metrics()
    assert {"switchyard_gateway_cluster_reachable", "process_cpu_seconds_total"} <= used  # names found at all
    assert not used - exported, f"used but exported by no process: {sorted(used - exported)}"


def test_exported_names_follow_prometheus_conventions(scraped: dict[str, Exposition]) -> None:
    for process, exposition in scraped.items():
        ours = {n: f for n, f in exposition.families.items() if n.startswith("switchyard_")}
        assert ours, f"{process} exports no switchyard_ metric"
        assert not {n for n in exposition.names if n.startswith(("gateway", "mirror"))}, "unprefixed names"
        for name, family in ours.items():
            names = {s.name for s in family.samples}
            if family.type == "counter":
                assert names == {f"{name}_total"}, name
            elif family.type == "histogram":
                assert name.endswith("_seconds"), name
                assert names == {f"{name}_bucket", f"{name}_count", f"{name}_sum"}, name
            else:
                assert family.type == "gauge", name
            if "lag" in name or "latency" in name or "duration" in name:
                assert name.endswith(("_seconds", "_records")), f"{name}: the unit belongs in the name"
            assert not any("otel_scope_name" in s.labels for s in family.samples), name


def test_the_gateway_reports_clusters_epochs_and_requests(
    scraped: dict[str, Exposition], deployment: Deployment, routing: RoutingStore
) -> None:
    gw = scraped["gateway"]
    reachable = {s.labels["cluster"]: s.value for s in gw.samples("switchyard_gateway_cluster_reachable")}
    assert reachable == {"primary": 1, "standby": 1}
    (read,) = gw.values("switchyard_gateway_routing_epoch", gateway=deployment.gateway.id)
    (acked,) = gw.values("switchyard_gateway_acknowledged_epoch", gateway=deployment.gateway.id)
    assert 0 < acked <= read <= routing.epoch()
    requests = gw.samples("switchyard_gateway_requests_total", app=deployment.app, cluster="primary")
    assert {s.labels["api"] for s in requests} >= {"metadata", "produce"}
    assert gw.samples("switchyard_gateway_blocked_requests_total", api="produce", app=deployment.app)
    buckets = gw.samples("switchyard_gateway_upstream_latency_seconds_bucket", api="metadata")
    assert {"0.0001", "+Inf"} <= {s.labels["le"] for s in buckets}  # bounds in seconds
    assert gw.values("switchyard_gateway_connections")


def test_the_mirror_reports_lag_per_partition_in_records_and_seconds(
    scraped: dict[str, Exposition], deployment: Deployment
) -> None:
    m = scraped["mirror"]
    for name in ("switchyard_mirror_lag_records", "switchyard_mirror_lag_seconds"):
        found = m.samples(name, link=deployment.link, topic=deployment.topic)
        assert sorted(s.labels["partition"] for s in found) == [str(p) for p in range(PARTITIONS)], name
        assert all(s.value >= 0 for s in found), name
    assert m.values("switchyard_mirror_lag_records", link=deployment.link) == [0.0] * PARTITIONS
    assert m.values("switchyard_mirror_cluster_reachable", cluster="primary") == [1]


def test_the_worker_reports_saga_outcomes_durations_and_approval_waits(
    scraped: dict[str, Exposition],
) -> None:
    w = scraped["worker"]
    assert w.values("switchyard_sagas_ended_total", kind="switchback", outcome="refused") >= [1]
    ended = {(s.labels["kind"], s.labels["outcome"]) for s in w.samples("switchyard_sagas_ended_total")}
    assert ended >= {(k.value, o) for k, said in OUTCOMES.items() for o in said}  # there from the start, at 0
    assert w.values("switchyard_saga_duration_seconds_count", kind="switchback") >= [1]

    def by_kind(name: str) -> dict[str, float]:
        return {s.labels["kind"]: s.value for s in w.samples(name)}

    waiting = by_kind("switchyard_sagas_awaiting_approval")
    assert waiting == {k.value: 1 if k is Kind.FAILOVER else 0 for k in Kind}  # the stand-in waits
    oldest = by_kind("switchyard_sagas_awaiting_approval_oldest_seconds")
    assert oldest.keys() == waiting.keys()
    assert 0 < oldest.pop(Kind.FAILOVER.value) < 300
    assert set(oldest.values()) == {0}


def test_the_webhook_counts_notifications_by_receiver_and_answer(scraped: dict[str, Exposition]) -> None:
    found = scraped["webhook"].samples("switchyard_webhook_notifications_total", receiver="alertmanager")
    assert [(s.labels["answer"], s.value) for s in found] == [("422", 1)]


def test_a_taken_scrape_port_stops_start_up_naming_the_key(stack_config: Config) -> None:
    assert stack_config.source is not None
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "switchyard", "--config", str(stack_config.source), "mirror"],
            env={**os.environ, LISTEN: f"127.0.0.1:{port}"},
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: telemetry.prometheus_listen: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
