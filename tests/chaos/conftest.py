"""``make chaos`` runs on clusters of three brokers each and a ZooKeeper ensemble of three nodes: a
broker or a node killed there is an outage of that one, which its cluster or its ensemble rides out (the
suite's clusters have one broker, whose restart takes the whole cluster down for longer than kafkajs
gives a send; its ZooKeeper one node)."""

from __future__ import annotations

import pytest

from switchyard.config import Config, load_config
from tests.helpers.stacks import write_stack_config

BROKERS = 3
ZOOKEEPERS = 3


@pytest.fixture(scope="session")
def stack_config(tmp_path_factory: pytest.TempPathFactory) -> Config:
    return load_config(write_stack_config(tmp_path_factory.mktemp("stack"), BROKERS, ZOOKEEPERS), environ={})
