"""The shared harness: markers by folder, and one isolated embedded stack per test session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from switchyard.config import Config, load_config
from switchyard.stack import Stack
from tests.support import write_stack_config

_MARKERS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in _MARKERS:
            item.add_marker(_MARKERS[folder])


@pytest.fixture(scope="session")
def stack_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_config(write_stack_config(tmp_path_factory.mktemp("stack")), environ={})


@pytest.fixture(scope="session")
def stack(stack_config: Config) -> Iterator[Stack]:
    """ZooKeeper, Temporal and two Kafka clusters on free ports, torn down even when tests fail."""
    embedded = Stack(stack_config)
    try:
        embedded.up()
        yield embedded
    finally:
        embedded.down()
