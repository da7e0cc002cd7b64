"""Where the gateway sends a request meant for one broker of a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from switchyard.config import load_config
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.upstream import UpstreamError


def directory(tmp_path: Path) -> BrokerDirectory:
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"primary": {"bootstrap": "h1:9092,h2:9092,h3:9092"}},
                                    "default_cluster": "primary"}))  # fmt: skip
    unused: Any = None  # the addresses need neither virtual ids nor metrics
    return BrokerDirectory(load_config(path, environ={}), unused, unused, unused, "gw-test")


def test_a_listed_broker_is_reached_where_the_metadata_says(tmp_path: Path) -> None:
    brokers = directory(tmp_path)
    brokers.brokers["primary"] = {1: ("h1", 9092), 2: ("h2", 9092), 3: ("h3", 19092)}
    assert brokers.real_address("primary", 3) == ("h3", 19092)
    assert brokers.real_address("primary", None) == ("h1", 9092)  # any broker: the first bootstrap


def test_a_broker_the_metadata_no_longer_lists_is_refused_not_sent_elsewhere(tmp_path: Path) -> None:
    """A restarting broker's requests once went to the first bootstrap server, a broker they were not
    meant for."""
    brokers = directory(tmp_path)
    brokers.brokers["primary"] = {1: ("h1", 9092), 3: ("h3", 9092)}
    with pytest.raises(UpstreamError, match="broker 2 of cluster primary is not in its metadata now"):
        brokers.real_address("primary", 2)


def test_before_anything_is_learned_the_bootstrap_answers(tmp_path: Path) -> None:
    """A gateway just started knows no broker yet; clients of its predecessor still name theirs."""
    assert directory(tmp_path).real_address("primary", 2) == ("h1", 9092)
