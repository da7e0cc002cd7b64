"""``telemetry.prometheus_listen``: validated like every host:port key, and a port that cannot be taken
stops start-up with one message naming the key (the scrape itself: tests/integration/test_metrics.py)."""

from __future__ import annotations

import json
import logging
import os
import socket
from pathlib import Path

import pytest
import yaml

from switchyard import telemetry
from switchyard.config import load_config
from switchyard.errors import ConfigError

MINIMAL = {"clusters": {"primary": {"bootstrap": "127.0.0.1:9092"}}, "default_cluster": "primary"}


def load(tmp_path: Path, environ: dict[str, str]) -> str | None:
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(MINIMAL))
    return load_config(path, environ=environ).telemetry.prometheus_listen


def test_the_scrape_endpoint_is_off_unless_configured(tmp_path: Path) -> None:
    assert load(tmp_path, {}) is None
    assert load(tmp_path, {"SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": "0.0.0.0:9464"}) == "0.0.0.0:9464"
    assert load(tmp_path, {"SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": "'[::1]:9464'"}) == "[::1]:9464"


@pytest.mark.parametrize(("value", "problem"), [("localhost", "expected host:port"), ("h:0", "port must be")])
def test_a_bad_address_names_the_key_and_the_variable(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, {"SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN": value})
    message = str(caught.value)
    assert "telemetry.prometheus_listen" in message
    assert "$SWITCHYARD__TELEMETRY__PROMETHEUS_LISTEN" in message
    assert problem in message


def test_a_taken_port_is_one_error_naming_the_key() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            telemetry.prometheus_reader(f"127.0.0.1:{port}")
    assert str(caught.value) == (
        f"telemetry.prometheus_listen: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


@pytest.mark.parametrize("kind", ["text", "json"])
def test_every_log_line_names_its_process(kind: str) -> None:
    """A gateway's processes share one log: a line that does not say which wrote it leaves a connection's
    story (a join through one process, its commit through the other) untold."""
    record = logging.LogRecord(
        "workers.gateway.session", logging.INFO, __file__, 1, "group g: joined", None, None
    )
    line = telemetry.formatter(kind).format(record)
    if kind == "json":
        assert json.loads(line)["pid"] == os.getpid()
    else:
        assert line.endswith(f" INFO    workers.gateway.session[{os.getpid()}]: group g: joined"), line
