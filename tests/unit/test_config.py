from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from switchyard.config import load_config, split_hostport
from switchyard.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
MINIMAL: dict[str, Any] = {
    "clusters": {"primary": {"bootstrap": "127.0.0.1:9092"}, "standby": {"bootstrap": "127.0.0.1:9093"}},
    "default_cluster": "primary",
}


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "switchyard.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def merged(**sections: Any) -> dict[str, Any]:
    return {**MINIMAL, **sections}


def error_for(tmp_path: Path, data: Any, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, data), environ=environ or {})
    return str(caught.value)


def test_embedded_config_loads_and_resolves_paths_against_the_file() -> None:
    config = load_config(REPO / "infra" / "embedded.yaml", environ={})
    assert set(config.clusters) == {"primary", "standby"}
    assert config.stack.state_dir == REPO / ".state"
    assert config.ledger_url == f"sqlite:///{REPO / '.state' / 'ledger.db'}"
    assert config.temporal_ui_url == "http://127.0.0.1:18233"


def test_defaults_fill_optional_sections(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL), environ={})
    assert config.zookeeper.root == "/switchyard"
    assert config.temporal.task_queue == "switchyard"
    assert config.temporal_ui_port == 8233  # Temporal's own rule: gRPC port + 1000
    assert config.spark.master == "local[*]"


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read configuration"):
        load_config(tmp_path / "nope.yaml", environ={})


def test_config_path_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_CONFIG", str(write(tmp_path, MINIMAL)))
    assert load_config().source == tmp_path / "switchyard.yaml"


def test_bad_yaml_is_reported_with_its_position(tmp_path: Path) -> None:
    assert "not valid YAML" in error_for(tmp_path, "clusters: [unclosed\n")


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    assert "top level must be a mapping" in error_for(tmp_path, "- a\n- b\n")


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"default_cluster": "primary"}, "clusters: required key is missing"),
        (merged(clusters={"primary": {}}), "clusters.primary.bootstrap: required key is missing"),
        (
            merged(clusters={"primary": {"bootstrap": "localhost"}}),
            "clusters.primary.bootstrap: expected host:port, got 'localhost'",
        ),
        (
            merged(clusters={"primary": {"bootstrap": "h:1,h:99999"}}),
            "clusters.primary.bootstrap: port must be a number from 1 to 65535, got '99999'",
        ),
        (merged(zookeeper={"conect": "h:1"}), "zookeeper.conect: unknown key"),
        (merged(zookeeper={"root": "switchyard/"}), "zookeeper.root: must be an absolute ZooKeeper path"),
        (merged(default_cluster="tertiary"), "default_cluster: 'tertiary' is not one of clusters"),
        (
            merged(mirror={"links": {"l1": {"source": "primary", "target": "dr"}}}),
            "mirror.links.l1.target: 'dr' is not one of clusters",
        ),
        (
            merged(mirror={"links": {"l1": {"source": "primary", "target": "primary"}}}),
            "mirror.links.l1: source and target are the same cluster",
        ),
        (
            merged(mirror={"principals": {"orders": {"dr": "User:orders"}}}),
            "mirror.principals.orders.dr: 'dr' is not one of clusters",
        ),
        (
            merged(mirror={"principals": {"orders": {"primary": "orders"}}}),
            "mirror.principals.orders.primary: 'orders' is not a principal (type:name, as User:orders)",
        ),
        (
            merged(mirror={"links": {"l1": {"source": "primary", "target": "standby", "include": ["(x"]}}}),
            "mirror.links.l1.include.0: not a valid regular expression",
        ),
        (merged(ledger={"url": "not a url"}), "ledger.url: not a SQLAlchemy database URL"),
        (merged(sagas={"aging_every_s": 5}), "sagas.aging_every_s: 0 (no schedule) or at least 60s"),
        (merged(logging={"level": "LOUD"}), "logging.level: Input should be"),
        (
            merged(gateway={"bootstrap_port": "many"}),
            "gateway.bootstrap_port: Input should be a valid integer",
        ),
        (merged(telemetry={"export_interval_s": 0}), "telemetry.export_interval_s: Input should be greater"),
        (
            merged(stack={"spark": {"workers": 2}}),
            "stack.spark.workers: the stack can only run a cluster where spark.master points: "
            "spark://host:port, not 'local[*]'",
        ),
        (
            merged(
                spark={"master": "spark://h:7077"}, stack={"spark": {"workers": 1, "worker_memory": "1 GB"}}
            ),
            "stack.spark.worker_memory: String should match pattern",
        ),
        (merged(stack={"kafka": {"version": "2.8.1"}}), "stack.kafka.version: String should match pattern"),
        (merged(stack={"clusters": {"dr": {}}}), "stack.clusters.dr: 'dr' is not one of clusters"),
        (
            merged(stack={"clusters": {"primary": {"brokers": 3}}}),
            "stack.clusters.primary.brokers: 3 brokers need 3 addresses in clusters.primary.bootstrap, one "
            "each; it lists 1",
        ),
        (
            merged(
                clusters={"primary": {"bootstrap": "h:1,h:2"}},
                stack={"clusters": {"primary": {"brokers": 2, "controllers": "h:3"}}},
            ),
            "stack.clusters.primary.controllers: needs one address for each of its 2 brokers",
        ),
        (
            merged(stack={"clusters": {"primary": {"brokers": 6}}}),
            "stack.clusters.primary.brokers: Input should",
        ),
    ],
)
def test_errors_name_the_key_and_the_problem(tmp_path: Path, data: dict[str, Any], expected: str) -> None:
    message = error_for(tmp_path, data)
    assert expected in message
    assert str(tmp_path / "switchyard.yaml") in message


def test_every_bad_key_is_reported_at_once(tmp_path: Path) -> None:
    message = error_for(tmp_path, merged(zookeeper={"connect": "x"}, temporal={"adress": "h:1"}))
    assert "zookeeper.connect:" in message
    assert "temporal.adress: unknown key" in message


def test_environment_overrides_a_key(tmp_path: Path) -> None:
    env = {"SWITCHYARD__TEMPORAL__ADDRESS": "10.0.0.5:7233", "SWITCHYARD__SPARK__SUBMIT_ARGS": "[--verbose]"}
    config = load_config(write(tmp_path, MINIMAL), environ=env)
    assert config.temporal.address == "10.0.0.5:7233"
    assert config.spark.submit_args == ["--verbose"]


def test_environment_can_add_a_cluster(tmp_path: Path) -> None:
    env = {"SWITCHYARD__CLUSTERS__DR__BOOTSTRAP": "dr-kafka:9092"}
    config = load_config(write(tmp_path, MINIMAL), environ=env)
    assert config.clusters["dr"].bootstrap == "dr-kafka:9092"


def test_a_bad_override_names_the_variable(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL, {"SWITCHYARD__GATEWAY__BOOTSTRAP_PORT": "70000"})
    assert "gateway.bootstrap_port: Input should be less than or equal to 65535" in message
    assert "(from $SWITCHYARD__GATEWAY__BOOTSTRAP_PORT)" in message


def test_an_override_inside_a_scalar_is_refused(tmp_path: Path) -> None:
    message = error_for(tmp_path, MINIMAL, {"SWITCHYARD__DEFAULT_CLUSTER__X": "1"})
    assert "default_cluster: is not a section" in message


def test_a_malformed_override_name_is_refused(tmp_path: Path) -> None:
    assert "malformed override name" in error_for(tmp_path, MINIMAL, {"SWITCHYARD__TEMPORAL____X": "1"})


@given(st.sampled_from(["localhost", "10.1.2.3", "[::1]", "kafka-0.kafka.svc"]), st.integers(1, 65535))
def test_hostport_round_trip(host: str, port: int) -> None:
    assert split_hostport(f"{host}:{port}") == (host.strip("[]"), port)


@pytest.mark.parametrize("bad", ["", "host", ":9092", "host:", "host:0", "host:65536", "host:x1"])
def test_hostport_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match=r"host:port|port must be"):
        split_hostport(bad)


def test_a_file_that_is_not_utf8_is_named_with_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "switchyard.yaml"
    path.write_bytes(b"clusters:\n  primary: {bootstrap: 'h\xe9:1'}\n")
    with pytest.raises(
        ConfigError, match=r"switchyard\.yaml: not UTF-8 text \(byte 35: invalid continuation byte\)"
    ):
        load_config(path, environ={})


def test_gateway_limits_default_to_a_brokers_and_budgets_must_hold_a_frame(tmp_path: Path) -> None:
    limits = load_config(write(tmp_path, MINIMAL), environ={}).gateway.limits
    assert (limits.idle_timeout_s, limits.unauthenticated_max_frame_bytes) == (600.0, 512 * 1024)
    message = error_for(tmp_path, merged(gateway={"limits": {"connection_buffer_bytes": 4096}}))
    assert "gateway.limits.connection_buffer_bytes: must be at least gateway.max_frame_bytes" in message
    message = error_for(
        tmp_path,
        merged(
            gateway={
                "max_frame_bytes": 2048,
                "limits": {"connection_buffer_bytes": 8192, "buffer_bytes": 4096},
            }
        ),
    )
    assert (
        "gateway.limits.buffer_bytes: must be at least gateway.limits.connection_buffer_bytes (8192)"
        in message
    )
