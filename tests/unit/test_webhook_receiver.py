"""The alert webhook receiver through its ASGI app (httpx.ASGITransport), the sagas and the routing state
in memory: Alertmanager's and Grafana's real payload shapes — firing, repeated, re-sent by the other
Alertmanager of an HA pair, flapping, resolved before the approval, unsigned, wrongly signed, stale,
malformed, oversized — and which saga each starts or rejects, and what each gets back."""

from __future__ import annotations

import asyncio
import base64
import copy
import hashlib
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import httpx
import pytest
from temporalio.service import RPCError, RPCStatusCode

from switchyard.alerts.auth import authenticators
from switchyard.alerts.dispatch import RESOLVED_BEFORE_APPROVAL, Dispatcher
from switchyard.config import Config
from switchyard.errors import StackError, TemporalRefused
from switchyard.sagas.requests import ApprovalPoint, Kind
from tests.helpers.alerts import InMemorySagas, StaticKeys
from workers.webhook.app import Receiver, create_app
from workers.webhook.sagas import TemporalSagas

T = TypeVar("T")
TOKEN = "am-token-3f1c"
SECRET = "grafana-hmac-9b2e"
ENV = {"AM_TOKEN": TOKEN, "GRAFANA_SECRET": SECRET, "AM_PASSWORD": "pa55"}
GROUP = '{}/{severity="critical"}:{alertname="KafkaClusterUnreachable", cluster="primary"}'
POLICIES = [
    {
        "name": "orders-switch",
        "match": {"alertname": "OrdersLagCritical"},
        "saga": "switchover",
        "keys": ["orders", "orders##billing"],
        "approval": "before-block",
        "cooldown_s": 600,
    },
    {
        "name": "primary-down",
        "match": {"alertname": "KafkaClusterUnreachable", "cluster": "primary"},
        "match_re": {"severity": "critical|page"},
        "saga": "failover",
        "cluster": "primary",
        "approval": "before-flip",
        "cooldown_s": 900,
    },
    {"name": "audit-now", "match": {"alertname": "AuditDown"}, "saga": "failover", "keys": ["audit"]},
]


def config_data(**webhook: Any) -> dict[str, Any]:
    return {
        "clusters": {"primary": {"bootstrap": "127.0.0.1:9092"}, "standby": {"bootstrap": "127.0.0.1:9093"}},
        "default_cluster": "primary",
        "webhook": {
            "alertmanager": {
                "bearer": {"token_env": "AM_TOKEN"},
                "basic": {"username": "alertmanager", "password_env": "AM_PASSWORD"},
            },
            "grafana": {"secret_env": "GRAFANA_SECRET", "timestamp_header": "X-Grafana-Alerting-Timestamp"},
            "policies": POLICIES,
            **webhook,
        },
    }


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2025, 3, 14, 9, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def unix(self) -> float:
        return self.now.timestamp()


@dataclass
class Webhook:
    """The app on sagas and bindings in memory; each request runs on an event loop of its own."""

    config: Config
    clock: Clock = field(default_factory=Clock)
    bindings: dict[str, str] = field(
        default_factory=lambda: {"payments": "primary", "payments@pos-7": "primary", "audit": "standby"}
    )

    def __post_init__(self) -> None:
        self.sagas = InMemorySagas(self.clock)
        self.keys = StaticKeys(self.bindings)
        dispatcher = Dispatcher(self.config, self.sagas, self.keys, clock=self.clock)
        receiver = Receiver(
            self.config, dispatcher, authenticators(self.config, ENV), self.sagas, clock=self.clock.unix
        )
        self.app = create_app(receiver)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return asyncio.run(self._posts([(path, body, headers)]))[0]

    def together(self, *requests: tuple[str, bytes, dict[str, str]]) -> list[httpx.Response]:
        """Requests sent at once, as an HA pair delivers its two copies."""
        return asyncio.run(self._posts(list(requests)))

    def get(self, path: str) -> httpx.Response:
        return asyncio.run(self._with(lambda c: c.get(path)))

    async def _posts(self, requests: list[tuple[str, bytes, dict[str, str]]]) -> list[httpx.Response]:
        async def send(client: httpx.AsyncClient) -> list[httpx.Response]:
            return list(await asyncio.gather(*(client.post(p, content=b, headers=h) for p, b, h in requests)))

        return await self._with(send)

    async def _with(self, call: Callable[[httpx.AsyncClient], Awaitable[T]]) -> T:
        transport = httpx.ASGITransport(app=self.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            return await call(client)

    # ---- as the senders send

    def alertmanager(self, payload: dict[str, Any], token: str | None = TOKEN) -> httpx.Response:
        return self.post("/alertmanager", encode(payload), am_headers(token))

    def grafana(self, payload: dict[str, Any], **signing: Any) -> httpx.Response:
        body = encode(payload)
        return self.post("/grafana", body, grafana_headers(body, now=self.clock.unix(), **signing))


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def am_headers(token: str | None = TOKEN) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "Alertmanager/0.25.0"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def grafana_headers(
    body: bytes, *, now: float, secret: str | None = SECRET, age_s: float = 0.0, stamp: bool = True
) -> dict[str, str]:
    headers = {"Content-Type": "application/json", "User-Agent": "Grafana"}
    if secret is None:
        return headers
    sent = str(int(now - age_s))
    signed = f"{sent}:".encode() + body if stamp else body
    headers["X-Grafana-Alerting-Signature"] = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    if stamp:
        headers["X-Grafana-Alerting-Timestamp"] = sent
    return headers


def am_alert(
    name: str = "KafkaClusterUnreachable",
    status: str = "firing",
    fingerprint: str = "5d3a4b7c1e2f9a80",
    **labels: str,
) -> dict[str, Any]:
    labels = {"alertname": name, "cluster": "primary", "severity": "critical", "job": "kafka", **labels}
    return {
        "status": status,
        "labels": labels,
        "annotations": {
            "summary": f"{name}: no broker of cluster {labels['cluster']} answers",
            "runbook_url": "https://runbooks.example/kafka#unreachable",
        },
        "startsAt": "2025-03-14T08:58:17.314159265Z",
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else "2025-03-14T09:12:00.000000001Z",
        "generatorURL": "http://prometheus-0:9090/graph?g0.expr=up%7Bjob%3D%22kafka%22%7D+%3D%3D+0",
        "fingerprint": fingerprint,
    }


def am_payload(
    *alerts: dict[str, Any], group_key: str = GROUP, external_url: str = "http://alertmanager-0:9093"
) -> dict[str, Any]:
    alerts = alerts or (am_alert(),)
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = {k: v for k, v in alerts[0]["labels"].items() if all(a["labels"].get(k) == v for a in alerts)}
    return {
        "receiver": "switchyard",
        "status": status,
        "alerts": list(alerts),
        "groupLabels": {k: common[k] for k in ("alertname", "cluster") if k in common},
        "commonLabels": common,
        "commonAnnotations": alerts[0]["annotations"] if len(alerts) == 1 else {},
        "externalURL": external_url,
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
    }


def resolved(payload: dict[str, Any]) -> dict[str, Any]:
    done = copy.deepcopy(payload)
    done["status"] = "resolved"
    for alert in done["alerts"]:
        alert["status"] = "resolved"
    return done


def grafana_payload(status: str = "firing", fingerprint: str = "c6eadffa33fcdf37") -> dict[str, Any]:
    """Grafana's webhook contact point, version 1 (its own example's fields)."""
    labels = {"alertname": "KafkaClusterUnreachable", "cluster": "primary", "severity": "page",
              "grafana_folder": "Kafka"}  # fmt: skip
    return {
        "receiver": "switchyard-webhook",
        "status": status,
        "orgId": 1,
        "alerts": [
            {
                "status": status,
                "labels": labels,
                "annotations": {"summary": "primary has no live broker"},
                "startsAt": "2025-03-14T09:51:03.157076+01:00",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "https://grafana.example/alerting/grafana/aeb2a3/view?orgId=1",
                "fingerprint": fingerprint,
                "silenceURL": "https://grafana.example/alerting/silence/new?alertmanager=grafana",
                "dashboardURL": "https://grafana.example/d/kafka?orgId=1",
                "panelURL": "https://grafana.example/d/kafka?orgId=1&viewPanel=3",
                "values": {"A": 0, "C": 1},
                "valueString": "[ var='A' labels={cluster=primary} value=0 ], [ var='C' value=1 ]",
            }
        ],
        "groupLabels": {"alertname": "KafkaClusterUnreachable", "grafana_folder": "Kafka"},
        "commonLabels": labels,
        "commonAnnotations": {"summary": "primary has no live broker"},
        "externalURL": "https://grafana.example/",
        "version": "1",
        "groupKey": '{}/{__grafana_autogenerated__="true"}:{alertname="KafkaClusterUnreachable"}',
        "truncatedAlerts": 0,
        "title": "[FIRING:1] KafkaClusterUnreachable Kafka (primary page)",
        "state": "alerting",
        "message": "**Firing**\n\nValue: A=0, C=1",
    }


@pytest.fixture
def hook() -> Webhook:
    return Webhook(Config.model_validate(config_data()))


def outcome(response: httpx.Response) -> list[tuple[str | None, str, str | None]]:
    assert response.status_code == 200, response.text
    return [(r["policy"], r["outcome"], r["saga"]) for r in response.json()["results"]]


PRIMARY = "switchyard:payments,payments@pos-7"


# ---- Alertmanager: firing, repeated, re-sent, flapping


def test_a_firing_alert_starts_the_policys_saga_on_the_clusters_keys_with_the_alert_recorded(
    hook: Webhook,
) -> None:
    answer = hook.alertmanager(am_payload())
    assert outcome(answer) == [("primary-down", "started", PRIMARY)]
    assert answer.json()["results"][0]["keys"] == ["payments", "payments@pos-7"]
    (run,) = hook.sagas.runs
    assert (run.saga, run.kind) == (PRIMARY, Kind.FAILOVER)
    assert run.request.keys == ["payments", "payments@pos-7"]
    assert run.request.source == "primary"
    assert run.request.actor == "alertmanager:switchyard"
    assert "KafkaClusterUnreachable" in run.request.reason
    assert "no broker of cluster primary answers" in run.request.reason
    assert run.request.policy.approval is ApprovalPoint.BEFORE_FLIP
    assert run.memo["alert"] == {
        "source": "alertmanager", "actor": "alertmanager:switchyard", "group_key": GROUP, "status": "firing",
        "fingerprints": ["5d3a4b7c1e2f9a80"], "alerts": 1, "alertnames": ["KafkaClusterUnreachable"],
        "policy": "primary-down", "keys": ["payments", "payments@pos-7"],
    }  # fmt: skip


def test_a_repeat_and_the_ha_partners_copy_start_no_second_saga_and_say_it_is_already_running(
    hook: Webhook,
) -> None:
    first = am_payload()
    assert outcome(hook.alertmanager(first)) == [("primary-down", "started", PRIMARY)]
    repeat = hook.alertmanager(first)  # Alertmanager's repeat_interval: the same bytes again
    copy_from_partner = hook.alertmanager(am_payload(external_url="http://alertmanager-1:9093"))
    for answer in (repeat, copy_from_partner):
        assert outcome(answer) == [("primary-down", "already running", PRIMARY)]
        assert answer.json()["repeat"] is True
        assert PRIMARY in answer.json()["results"][0]["detail"]
    assert len(hook.sagas.runs) == 1


def test_the_two_copies_of_an_ha_pair_arriving_together_start_one_saga(hook: Webhook) -> None:
    copies = [
        ("/alertmanager", encode(am_payload(external_url=f"http://alertmanager-{i}:9093")), am_headers())
        for i in (0, 1)
    ]
    answers = hook.together(*copies)
    assert sorted(outcome(a)[0][1] for a in answers) == ["already running", "started"]
    assert len(hook.sagas.runs) == 1


def test_a_re_sent_group_with_another_alert_is_handled_again_and_finds_the_saga_running(
    hook: Webhook,
) -> None:
    hook.alertmanager(am_payload())
    grown = am_payload(am_alert(), am_alert(fingerprint="77aa", instance="primary-kafka-1:9092"))
    answer = hook.alertmanager(grown)
    assert outcome(answer) == [("primary-down", "already running", PRIMARY)]
    assert answer.json()["repeat"] is False
    assert len(hook.sagas.runs) == 1


def test_flapping_before_the_approval_rejects_the_saga_then_starts_a_fresh_one(hook: Webhook) -> None:
    firing = am_payload()
    assert outcome(hook.alertmanager(firing)) == [("primary-down", "started", PRIMARY)]
    hook.clock.advance(60)
    assert outcome(hook.alertmanager(resolved(firing))) == [("primary-down", "rejected", PRIMARY)]
    hook.clock.advance(60)  # well inside the policy's 900 s cool-down
    assert outcome(hook.alertmanager(firing)) == [("primary-down", "started", PRIMARY)]
    first, second = hook.sagas.runs
    assert (first.status, second.status) == ("failed", "running")
    assert first.approvals[0].startswith("rejected before the flip by alertmanager:switchyard: ")


def test_flapping_past_the_approval_rejects_nothing_and_starts_nothing(hook: Webhook) -> None:
    firing = am_payload(am_alert("AuditDown", fingerprint="aa01"))  # the audit policy waits for nobody
    assert outcome(hook.alertmanager(firing)) == [("audit-now", "started", "switchyard:audit")]
    answer = hook.alertmanager(resolved(firing))
    assert outcome(answer) == [("audit-now", "nothing to do", None)]
    assert "switchyard:audit is not waiting for an approval" in answer.json()["results"][0]["detail"]
    assert outcome(hook.alertmanager(firing)) == [("audit-now", "already running", "switchyard:audit")]
    assert [r.status for r in hook.sagas.runs] == ["running"]


def test_resolved_before_the_approval_rejects_the_saga_with_a_decision_naming_the_alert(
    hook: Webhook,
) -> None:
    firing = am_payload(am_alert("OrdersLagCritical", fingerprint="0rd3"))
    assert outcome(hook.alertmanager(firing)) == [
        ("orders-switch", "started", "switchyard:orders,orders##billing")
    ]
    answer = hook.alertmanager(resolved(firing))
    assert outcome(answer) == [("orders-switch", "rejected", "switchyard:orders,orders##billing")]
    (run,) = hook.sagas.runs
    assert run.kind is Kind.SWITCHOVER
    assert run.approvals == [
        f"rejected before the block by alertmanager:switchyard: {RESOLVED_BEFORE_APPROVAL}: "
        f"OrdersLagCritical (alertmanager group {GROUP})"
    ]
    again = hook.alertmanager(resolved(firing))  # the partner's copy of the resolution
    assert outcome(again) == [("orders-switch", "nothing to do", "switchyard:orders,orders##billing")]
    assert len(hook.sagas.runs) == 1


def test_a_resolution_leaves_alone_a_saga_whose_memo_it_cannot_read(hook: Webhook) -> None:
    firing = am_payload(am_alert("OrdersLagCritical", fingerprint="0rd3"))
    hook.alertmanager(firing)
    hook.sagas.runs[0].memo["alert"] = "set by hand"  # a memo of another shape: not this group's saga
    answer = hook.alertmanager(resolved(firing))
    assert outcome(answer) == [("orders-switch", "nothing to do", None)]
    assert "this alert group did not start it" in answer.json()["results"][0]["detail"]
    assert hook.sagas.runs[0].status == "running"


def test_a_resolution_leaves_alone_a_saga_this_alert_group_did_not_start(hook: Webhook) -> None:
    hook.alertmanager(am_payload(am_alert("OrdersLagCritical", fingerprint="0rd3"), group_key="{}:{a=1}"))
    other_group = am_payload(am_alert("OrdersLagCritical", status="resolved", fingerprint="0rd3"))
    answer = hook.alertmanager(other_group)
    assert outcome(answer) == [("orders-switch", "nothing to do", None)]
    assert "this alert group did not start it" in answer.json()["results"][0]["detail"]
    assert hook.sagas.runs[0].status == "running"


def test_a_saga_that_ended_cools_down_its_keys_for_the_policys_cool_down(hook: Webhook) -> None:
    hook.alertmanager(am_payload())
    hook.sagas.finish(PRIMARY, "failed")
    hook.clock.advance(300)
    refired = am_payload(am_alert(fingerprint="11ee"))  # a new alert in the group: handled afresh
    answer = hook.alertmanager(refired)
    assert outcome(answer) == [("primary-down", "cooling down", PRIMARY)]
    assert (
        "starts none on these keys before 2025-03-14T09:15:00+00:00" in answer.json()["results"][0]["detail"]
    )
    hook.clock.advance(601)
    assert outcome(hook.alertmanager(am_payload(am_alert(fingerprint="22ee")))) == [
        ("primary-down", "started", PRIMARY)
    ]


def test_a_repeat_long_after_its_saga_ended_starts_nothing(hook: Webhook) -> None:
    firing = am_payload()
    hook.alertmanager(firing)
    hook.sagas.finish(PRIMARY)
    hook.clock.advance(4 * 3600)  # Alertmanager's default repeat_interval, past the cool-down
    answer = hook.alertmanager(firing)
    assert outcome(answer) == [("primary-down", "nothing to do", PRIMARY)]
    assert "ended (completed)" in answer.json()["results"][0]["detail"]
    assert len(hook.sagas.runs) == 1


def test_alerts_no_policy_takes_are_answered_so_and_each_policy_answers_for_its_own(hook: Webhook) -> None:
    mixed = am_payload(
        am_alert(), am_alert("AuditDown", fingerprint="aa01"), am_alert("DiskFull", fingerprint="d15c"),
        group_key="{}:{team=\"kafka\"}",
    )  # fmt: skip
    assert outcome(hook.alertmanager(mixed)) == [
        ("primary-down", "started", PRIMARY),
        ("audit-now", "started", "switchyard:audit"),
        (None, "no policy matched", None),
    ]
    quiet = hook.alertmanager(am_payload(am_alert(severity="warning"), group_key='{}:{x="y"}'))
    assert outcome(quiet) == [(None, "no policy matched", None)]  # the policy's regex wants critical|page
    assert quiet.json()["results"][0]["detail"] == "no policy matches KafkaClusterUnreachable"


def test_a_cluster_with_no_key_bound_has_nothing_to_move(hook: Webhook) -> None:
    hook.keys.bindings.clear()
    answer = hook.alertmanager(am_payload())
    assert outcome(answer) == [("primary-down", "nothing to do", None)]
    assert answer.json()["results"][0]["detail"] == "no binding key is bound to cluster primary"


# ---- what is answered 503, and only that


def test_temporal_away_is_503_and_the_retry_is_handled_afresh(hook: Webhook) -> None:
    hook.sagas.reachable = False
    answer = hook.alertmanager(am_payload())
    assert answer.status_code == 503
    assert answer.json() == {"detail": "Temporal at memory cannot be reached"}
    assert hook.get("/readyz").status_code == 503
    hook.sagas.reachable = True
    assert outcome(hook.alertmanager(am_payload())) == [("primary-down", "started", PRIMARY)]
    assert hook.get("/readyz").json() == {"status": "ready"}


def test_zookeeper_away_is_503_only_for_a_policy_that_needs_a_clusters_keys(hook: Webhook) -> None:
    hook.keys.reachable = False
    answer = hook.alertmanager(am_payload())
    assert answer.status_code == 503
    assert "ZooKeeper" in answer.json()["detail"]
    explicit = hook.alertmanager(am_payload(am_alert("AuditDown", fingerprint="aa01"), group_key="{}:{a=2}"))
    assert outcome(explicit) == [("audit-now", "started", "switchyard:audit")]


# ---- Alertmanager's authentication


def test_an_unauthenticated_notification_is_401_naming_the_header_and_starts_nothing(hook: Webhook) -> None:
    answer = hook.alertmanager(am_payload(), token=None)
    assert answer.status_code == 401
    assert answer.json() == {"detail": "missing header Authorization"}
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="switchyard"'
    wrong = hook.alertmanager(am_payload(), token="am-token-3f1d")
    assert (wrong.status_code, wrong.json()) == (
        401,
        {"detail": "header Authorization: the bearer token does not match"},
    )
    assert hook.sagas.runs == []


def test_basic_auth_is_taken_as_configured(hook: Webhook) -> None:
    def basic(user: str, password: str) -> dict[str, str]:
        encoded = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {encoded}", "Content-Type": "application/json"}

    body = encode(am_payload())
    for user, password in [("alertmanager", "nope"), ("someone-else", "pa55"), ("", "pa55")]:
        wrong = hook.post("/alertmanager", body, basic(user, password))
        assert (wrong.status_code, wrong.json()["detail"]) == (
            401,
            "header Authorization: the basic credentials do not match",
        ), (user, password)
    garbled = hook.post("/alertmanager", body, {**am_headers(None), "Authorization": "Basic !!"})
    assert (garbled.status_code, garbled.json()["detail"]) == (
        401, "header Authorization: basic credentials are not base64 of user:password"
    )  # fmt: skip
    assert outcome(hook.post("/alertmanager", body, basic("alertmanager", "pa55")))[0][1] == "started"


def test_an_insecure_receiver_takes_notifications_without_credentials() -> None:
    hook = Webhook(Config.model_validate(config_data(alertmanager={"insecure": True})))
    assert outcome(hook.alertmanager(am_payload(), token=None))[0][1] == "started"


def test_no_secret_and_no_credential_reaches_the_log(hook: Webhook, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("DEBUG")
    hook.alertmanager(am_payload(), token="guessed-token")
    hook.alertmanager(am_payload())
    hook.grafana(grafana_payload(), secret="guessed-secret")
    logged = caplog.text + repr(hook.app.state.receiver)
    assert "primary-down: started" in caplog.text
    for secret in (TOKEN, SECRET, "pa55", "guessed-token", "guessed-secret"):
        assert secret not in logged


# ---- malformed and oversized


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda p: p["alerts"][0].pop("fingerprint"), ["body", "alerts", 0, "fingerprint"]),
        (lambda p: p.update(version="3"), ["body", "version"]),
        (lambda p: p.update(status="pending"), ["body", "status"]),
        (lambda p: p["alerts"][0].update(startsAt="yesterday"), ["body", "alerts", 0, "startsAt"]),
        (lambda p: p.update(alerts={"0": {}}), ["body", "alerts"]),
        (lambda p: p.pop("groupKey"), ["body", "groupKey"]),
    ],
)
def test_a_malformed_notification_is_422_naming_the_field(
    hook: Webhook, change: Callable[[dict[str, Any]], object], field: list[object]
) -> None:
    payload = am_payload()
    change(payload)
    answer = hook.alertmanager(payload)
    assert answer.status_code == 422, answer.text
    assert field in [e["loc"] for e in answer.json()["detail"]]
    assert hook.sagas.runs == []


@pytest.mark.parametrize("body", [b"", b"{", b"[]", b"\xff\xfe", b'{"version": "4"'])
def test_a_body_that_is_no_notification_is_refused_with_4xx(hook: Webhook, body: bytes) -> None:
    answer = hook.post("/alertmanager", body, am_headers())
    assert answer.status_code in (400, 422), answer.text
    assert answer.json()["detail"]


def test_an_oversized_body_is_413_naming_the_limit_whether_or_not_it_declares_its_length() -> None:
    hook = Webhook(Config.model_validate(config_data(max_body_bytes=4096)))
    big = am_payload(*(am_alert(fingerprint=f"{i:016x}") for i in range(40)))
    body = encode(big)
    assert len(body) > 4096
    declared = hook.post("/alertmanager", body, am_headers())
    assert (declared.status_code, declared.json()) == (
        413, {"detail": "the body is larger than webhook.max_body_bytes (4096 bytes)"}
    )  # fmt: skip

    async def chunks() -> Any:  # no Content-Length: counted as it arrives
        for i in range(0, len(body), 1000):
            yield body[i : i + 1000]

    async def streamed() -> httpx.Response:
        transport = httpx.ASGITransport(app=hook.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            return await client.post("/alertmanager", content=chunks(), headers=am_headers())

    assert asyncio.run(streamed()).status_code == 413
    assert hook.sagas.runs == []


def test_a_body_that_does_not_arrive_in_time_is_408() -> None:
    hook = Webhook(Config.model_validate(config_data(read_timeout_s=0.2)))
    sent: list[dict[str, Any]] = []

    async def slow_receive() -> dict[str, Any]:
        await asyncio.sleep(5)
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/alertmanager", "raw_path": b"/alertmanager", "query_string": b"", "root_path": "",
        "headers": [(b"authorization", f"Bearer {TOKEN}".encode()), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 9180), "state": {},
    }  # fmt: skip
    started = time.monotonic()
    asyncio.run(hook.app(scope, slow_receive, send))  # type: ignore[arg-type]
    assert time.monotonic() - started < 3
    assert sent[0]["status"] == 408
    assert b"webhook.read_timeout_s (0.2s)" in sent[1]["body"]


def test_a_body_not_declared_as_json_is_415(hook: Webhook) -> None:
    headers = {**am_headers(), "Content-Type": "application/x-www-form-urlencoded"}
    answer = hook.post("/alertmanager", encode(am_payload()), headers)
    assert (answer.status_code, answer.json()["detail"]) == (
        415, "header Content-Type must be application/json, not 'application/x-www-form-urlencoded'"
    )  # fmt: skip
    assert (
        hook.post("/alertmanager", encode(am_payload()), {"Authorization": f"Bearer {TOKEN}"}).status_code
        == 415
    )


def test_a_receiver_that_is_not_configured_is_404_and_health_answers() -> None:
    hook = Webhook(Config.model_validate(config_data(grafana=None)))
    answer = hook.grafana(grafana_payload())
    assert (answer.status_code, answer.json()["detail"]) == (
        404, "webhook.grafana is not configured: this receiver takes nothing"
    )  # fmt: skip
    assert hook.get("/healthz").json() == {"status": "up"}
    assert hook.get("/openapi.json").status_code == 200


# ---- Grafana


GRAFANA_SAGA = PRIMARY


def test_a_signed_grafana_alert_starts_the_saga_and_its_repeat_does_not(hook: Webhook) -> None:
    answer = hook.grafana(grafana_payload())
    assert outcome(answer) == [("primary-down", "started", GRAFANA_SAGA)]
    (run,) = hook.sagas.runs
    assert run.request.actor == "grafana:1"
    assert run.memo["alert"]["fingerprints"] == ["c6eadffa33fcdf37"]
    hook.clock.advance(30)
    assert outcome(hook.grafana(grafana_payload())) == [("primary-down", "already running", GRAFANA_SAGA)]
    assert len(hook.sagas.runs) == 1


def test_grafana_resolved_before_the_approval_rejects_the_saga(hook: Webhook) -> None:
    hook.grafana(grafana_payload())
    assert outcome(hook.grafana(grafana_payload("resolved"))) == [("primary-down", "rejected", GRAFANA_SAGA)]
    assert hook.sagas.runs[0].approvals[0].startswith("rejected before the flip by grafana:1: ")


@pytest.mark.parametrize(
    ("signing", "reason"),
    [
        ({"secret": None}, "missing header X-Grafana-Alerting-Signature"),
        ({"secret": "not-the-secret"}, "header X-Grafana-Alerting-Signature: signature does not match"),
        ({"stamp": False}, "missing header X-Grafana-Alerting-Timestamp"),
        (
            {"age_s": 301},
            "header X-Grafana-Alerting-Timestamp: timestamp 1741942499 is stale (301s from now; "
            "webhook.grafana.max_skew_s allows 300s)",
        ),
        ({"age_s": -400}, "is stale (400s from now"),
    ],
)
def test_an_unsigned_wrongly_signed_or_stale_grafana_notification_is_401_saying_why(
    hook: Webhook, signing: dict[str, Any], reason: str
) -> None:
    answer = hook.grafana(grafana_payload(), **signing)
    assert answer.status_code == 401
    assert reason in answer.json()["detail"]
    assert hook.sagas.runs == []


@pytest.mark.parametrize("stamp", ["9" * 400, "1_741_942_800", "1741942800.5"])
def test_a_signed_timestamp_that_is_no_unix_time_is_401_not_a_crash(stamp: str) -> None:
    hook = Webhook(Config.model_validate(config_data()))
    body = encode(grafana_payload())
    signature = hmac.new(SECRET.encode(), f"{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Grafana-Alerting-Signature": signature,
        "X-Grafana-Alerting-Timestamp": stamp,
    }
    answer = hook.post("/grafana", body, headers)
    assert (answer.status_code, answer.json()["detail"]) == (
        401, "header X-Grafana-Alerting-Timestamp: not a Unix timestamp"
    )  # fmt: skip


def test_a_body_changed_after_signing_does_not_match() -> None:
    hook = Webhook(Config.model_validate(config_data()))
    body = encode(grafana_payload())
    headers = grafana_headers(body, now=hook.clock.unix())
    answer = hook.post("/grafana", body.replace(b'"orgId": 1', b'"orgId": 2'), headers)
    assert (answer.status_code, answer.json()["detail"]) == (
        401, "header X-Grafana-Alerting-Signature: signature does not match"
    )  # fmt: skip


def test_grafanas_header_names_and_a_signature_without_a_timestamp_are_configurable() -> None:
    grafana = {"secret_env": "GRAFANA_SECRET", "signature_header": "X-Signature"}
    hook = Webhook(Config.model_validate(config_data(grafana=grafana)))
    body = encode(grafana_payload())
    signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    json_type = {"Content-Type": "application/json; charset=utf-8"}
    assert (
        outcome(hook.post("/grafana", body, {**json_type, "X-Signature": signature.upper()}))[0][1]
        == "started"
    )
    answer = hook.post("/grafana", body, {**json_type, "X-Grafana-Alerting-Signature": signature})
    assert (answer.status_code, answer.json()["detail"]) == (401, "missing header X-Signature")


def test_a_malformed_grafana_notification_is_422_naming_the_field(hook: Webhook) -> None:
    payload = grafana_payload()
    payload["orgId"] = "first"
    answer = hook.grafana(payload)
    assert answer.status_code == 422
    assert ["body", "orgId"] in [e["loc"] for e in answer.json()["detail"]]


@pytest.mark.parametrize(
    ("status", "answered"),
    [
        (RPCStatusCode.UNAVAILABLE, StackError),  # 503: Alertmanager sends it again
        (RPCStatusCode.DEADLINE_EXCEEDED, StackError),
        (RPCStatusCode.PERMISSION_DENIED, TemporalRefused),  # 500 naming it: again would change nothing
        (RPCStatusCode.NOT_FOUND, TemporalRefused),
    ],
)
def test_only_temporal_away_is_worth_sending_again(status: RPCStatusCode, answered: type[Exception]) -> None:
    sagas = TemporalSagas(Config.model_validate(config_data()))

    async def call() -> None:
        async with sagas._calling("start a saga"):
            raise RPCError("namespace default", status, b"")

    with pytest.raises(answered, match=f"start a saga: {status.name}"):
        asyncio.run(call())
