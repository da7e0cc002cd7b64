"""Property test of the served OpenAPI document (schemathesis, in-process through ASGI, the sagas and the
routing state in memory): whatever it sends — payloads the schema describes and ones it does not — the
receiver never answers 5xx. Its receivers are open here and its policies take every alert, so generated
notifications go all the way through the dispatcher (starting, finding and rejecting sagas)."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from switchyard.alerts.auth import authenticators
from switchyard.alerts.dispatch import Dispatcher
from switchyard.config import Config
from tests.helpers.alerts import InMemorySagas, StaticKeys
from workers.webhook.app import Receiver, create_app

CONFIG: dict[str, Any] = {
    "clusters": {"primary": {"bootstrap": "127.0.0.1:9092"}, "standby": {"bootstrap": "127.0.0.1:9093"}},
    "default_cluster": "primary",
    "webhook": {
        "max_body_bytes": 64 * 1024,
        "alertmanager": {"insecure": True},
        "grafana": {"insecure": True},
        "policies": [
            {"name": "severe", "match_re": {"severity": "crit.*"}, "saga": "switchover", "keys": ["orders"],
             "approval": "before-block"},
            {"name": "any", "match_re": {"alertname": ".*"}, "saga": "failover", "cluster": "primary",
             "approval": "before-flip", "cooldown_s": 0},
        ],
    },
}  # fmt: skip


def app() -> Any:
    config = Config.model_validate(CONFIG)
    sagas = InMemorySagas()
    keys = StaticKeys({"payments": "primary", "payments@pos-7": "primary"})
    return create_app(Receiver(config, Dispatcher(config, sagas, keys), authenticators(config, {}), sagas))


schema = schemathesis.openapi.from_asgi("/openapi.json", app())


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_gets_a_server_error(case: schemathesis.Case[Any]) -> None:
    case.call_and_validate(checks=[not_a_server_error])


def test_the_document_describes_both_receivers_and_their_payloads() -> None:
    document = schema.raw_schema
    assert {"/alertmanager", "/grafana", "/healthz", "/readyz"} <= set(document["paths"])
    shapes = document["components"]["schemas"]
    assert {"AlertmanagerNotification", "GrafanaNotification", "Answer", "Problem"} <= set(shapes)
    assert set(document["paths"]["/alertmanager"]["post"]["responses"]) >= {"200", "401", "413", "422", "503"}
