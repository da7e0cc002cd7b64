"""The ``webhook`` section: a receiver without authentication refuses to start unless it says
``insecure: true``, policies are checked key by key, secrets come from a file or the environment and stay
out of every repr — and ``switchyard webhook`` stops at start-up naming the key of what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from switchyard.alerts.auth import AlertmanagerAuth, GrafanaAuth, Secret, authenticators
from switchyard.alerts.payloads import Alert
from switchyard.alerts.policies import Policy, assign, policies_of
from switchyard.cli import cli
from switchyard.config import Config, load_config
from switchyard.errors import ConfigError

BASE: dict[str, Any] = {
    "clusters": {"primary": {"bootstrap": "127.0.0.1:9092"}, "standby": {"bootstrap": "127.0.0.1:9093"}},
    "default_cluster": "primary",
}
POLICY = {"name": "down", "match": {"alertname": "Down"}, "saga": "failover", "cluster": "primary"}


def write(tmp_path: Path, webhook: dict[str, Any]) -> Path:
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump({**BASE, "webhook": webhook}))
    return path


def problem(tmp_path: Path, webhook: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, webhook), environ={})
    return str(raised.value)


def test_a_configuration_without_a_webhook_section_loads_and_has_no_receiver(tmp_path: Path) -> None:
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(BASE))
    config = load_config(path, environ={})
    assert (config.webhook.listen, config.webhook.max_body_bytes) == ("127.0.0.1:9180", 1024 * 1024)
    assert authenticators(config, {}) == {}


@pytest.mark.parametrize(
    ("webhook", "message"),
    [
        (
            {"alertmanager": {}},
            "webhook.alertmanager.insecure: no authentication configured: set bearer or basic, or insecure: "
            "true to take notifications from anyone",
        ),
        ({"grafana": {"max_skew_s": 60}}, "webhook.grafana.insecure: no authentication configured"),
        (
            {"alertmanager": {"insecure": True, "bearer": {"token_env": "T"}}},
            "webhook.alertmanager.insecure: true, but bearer or basic is set too",
        ),
        (
            {"alertmanager": {"bearer": {"token_env": "T", "token_file": "t"}}},
            "webhook.alertmanager.bearer: needs exactly one of token_file and token_env",
        ),
        ({"alertmanager": {"bearer": {}}}, "webhook.alertmanager.bearer: needs exactly one of"),
        ({"alertmanager": {"bearer": {"token_env": "A-B"}}}, "webhook.alertmanager.bearer.token_env: not an"),
        ({"alertmanager": {"basic": {"password_env": "P"}}}, "webhook.alertmanager.basic.username: required"),
        ({"grafana": {"secret_env": "S", "signature_header": ""}}, "webhook.grafana.signature_header"),
        ({"max_body_bytes": 10}, "webhook.max_body_bytes: Input should be greater than or equal to 1024"),
        ({"listen": "9180"}, "webhook.listen: expected host:port"),
        ({"policies": [{**POLICY, "cluster": None}]}, "webhook.policies.0: needs either keys"),
        ({"policies": [{**POLICY, "keys": ["orders"]}]}, "webhook.policies.0: needs either keys"),
        ({"policies": [{**POLICY, "match": {}}]}, "webhook.policies.0: needs match or match_re"),
        ({"policies": [POLICY, POLICY]}, "webhook.policies.1.name: 'down' names an earlier policy too"),
        (
            {"policies": [{**POLICY, "cluster": None, "keys": ["orders", "a@"]}]},
            "webhook.policies.0.keys.1: not a binding key",
        ),
        (
            {"policies": [{**POLICY, "match_re": {"sev": "("}}]},
            "webhook.policies.0.match_re.sev: not a valid",
        ),
        ({"policies": [{**POLICY, "saga": "switchback"}]}, "webhook.policies.0.saga: Input should be"),
        ({"policies": [{**POLICY, "approval": "later"}]}, "webhook.policies.0.approval: Input should be"),
        ({"policies": [{**POLICY, "cooldown_s": -1}]}, "webhook.policies.0.cooldown_s"),
        ({"policies": [{**POLICY, "when": "now"}]}, "webhook.policies.0.when: unknown key"),
    ],
)
def test_a_bad_webhook_section_names_the_key(tmp_path: Path, webhook: dict[str, Any], message: str) -> None:
    assert message in problem(tmp_path, webhook)


def test_secrets_come_from_a_file_next_to_the_configuration_or_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "am-token").write_text("s3cr3t-token\n")
    path = write(
        tmp_path,
        {
            "alertmanager": {"bearer": {"token_file": "secrets/am-token"}},
            "grafana": {"secret_env": "HOOK_SECRET"},
        },
    )
    config = load_config(path, environ={})
    found = authenticators(config, {"HOOK_SECRET": " grafana-s3cr3t "})
    am, grafana = found["alertmanager"], found["grafana"]
    assert isinstance(am, AlertmanagerAuth)
    assert isinstance(grafana, GrafanaAuth)
    assert am.bearer is not None
    assert am.bearer.matches(b"s3cr3t-token")
    assert grafana.secret is not None
    assert grafana.secret.matches(b"grafana-s3cr3t")
    shown = repr(found) + str(found) + repr(config)
    assert "s3cr3t" not in shown
    assert "Secret('********')" in repr(found)


@pytest.mark.parametrize(
    ("webhook", "environ", "message"),
    [
        (
            {"alertmanager": {"bearer": {"token_env": "AM_TOKEN"}}},
            {},
            "webhook.alertmanager.bearer.token_env: $AM_TOKEN is not set or empty",
        ),
        (
            {"alertmanager": {"basic": {"username": "am", "password_file": "nope"}}},
            {},
            "webhook.alertmanager.basic.password_file: cannot read ",
        ),
        ({"grafana": {"secret_file": "empty"}}, {}, "webhook.grafana.secret_file: "),
    ],
)
def test_a_secret_that_cannot_be_read_is_a_configuration_error_naming_its_key(
    tmp_path: Path, webhook: dict[str, Any], environ: dict[str, str], message: str
) -> None:
    (tmp_path / "empty").write_text("\n")
    config = load_config(write(tmp_path, webhook), environ={})
    with pytest.raises(ConfigError, match=message.replace("$", r"\$")):
        authenticators(config, environ)


def test_a_secret_never_prints() -> None:
    secret = Secret(b"hunter2")
    assert "hunter2" not in f"{secret} {secret!r} {[secret]}"


def test_each_alert_goes_to_the_first_policy_it_matches_in_order(tmp_path: Path) -> None:
    policies = [
        {"name": "page", "match": {"alertname": "Down"}, "match_re": {"severity": "page|critical"},
         "saga": "failover", "keys": ["orders"]},
        {"name": "any-down", "match": {"alertname": "Down"}, "saga": "switchover", "keys": ["orders@h\\#1"]},
        {"name": "empty-team", "match_re": {"team": ""}, "saga": "switchover", "keys": ["audit"]},
    ]  # fmt: skip
    config = Config.model_validate({**BASE, "webhook": {"policies": policies}})
    found = policies_of(config)
    assert [p.keys for p in found] == [("orders",), ("orders@h\\#1",), ("audit",)]

    def alert(fingerprint: str, **labels: str) -> Alert:
        return Alert("firing", labels, {}, fingerprint)

    alerts = [
        alert("a", alertname="Down", severity="critical", team="x"),
        alert("b", alertname="Down", severity="pagemaster", team="x"),  # the regex matches whole values
        alert("c", alertname="Up"),  # no team label: the empty string
        alert("d", alertname="Up", team="x"),
    ]
    taken, unmatched = assign(found, alerts)
    assert [(p.name, [a.fingerprint for a in got]) for p, got in taken] == [
        ("page", ["a"]), ("any-down", ["b"]), ("empty-team", ["c"])
    ]  # fmt: skip
    assert [a.fingerprint for a in unmatched] == ["d"]
    assert isinstance(found[0], Policy)


# ---- `switchyard webhook` at start-up


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_switchyard_webhook_with_an_unauthenticated_receiver_stops_naming_the_key(tmp_path: Path) -> None:
    code, out = run("--config", str(write(tmp_path, {"alertmanager": {}})), "webhook")
    assert code == 2
    assert "webhook.alertmanager.insecure: no authentication configured" in out


def test_switchyard_webhook_with_an_unreadable_secret_or_no_receiver_stops_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NO_SUCH_TOKEN_VAR", raising=False)
    webhook = {"alertmanager": {"bearer": {"token_env": "NO_SUCH_TOKEN_VAR"}}}
    code, out = run("--config", str(write(tmp_path, webhook)), "webhook")
    assert (code, out.strip()) == (
        2, "error: webhook.alertmanager.bearer.token_env: $NO_SUCH_TOKEN_VAR is not set or empty"
    )  # fmt: skip
    code, out = run("--config", str(write(tmp_path, {})), "webhook")
    assert (code, out.strip()) == (
        2, "error: webhook: no receiver is configured: set webhook.alertmanager or webhook.grafana"
    )  # fmt: skip


def test_switchyard_webhook_is_a_command() -> None:
    code, out = run("--help")
    assert code == 0
    assert "webhook" in out
