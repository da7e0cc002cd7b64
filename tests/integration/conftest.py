"""What the end-to-end modules share: a deployment of Switchyard's processes on the session stack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from switchyard.config import Config
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from tests.helpers.live import Live


@pytest.fixture(scope="module")
def live(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    deployment = Live(stack_config, routing.layout.root, ledger_path, tmp_path_factory.mktemp("live")).start()
    yield deployment
    deployment.stop()
