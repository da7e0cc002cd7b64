"""What the end-to-end modules share: a deployment of Switchyard's processes on the session stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from tests.helpers.live import Live
from tests.helpers.otlp import OtlpReceiver


@pytest.fixture(scope="module")
def live(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    otlp: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    """A gateway, a mirror and a worker; they and the CLI export their spans and metrics to ``otlp``."""
    exporting = {
        "SWITCHYARD__TELEMETRY__OTLP_ENDPOINT": otlp.endpoint,
        "SWITCHYARD__TELEMETRY__EXPORT_INTERVAL_S": "1",
    }
    logs = tmp_path_factory.mktemp("live")
    deployment = Live(stack_config, routing.layout.root, ledger_path, logs, overrides=exporting).start()
    yield deployment
    deployment.stop()
