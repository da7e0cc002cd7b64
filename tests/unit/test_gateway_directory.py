"""Where the gateway sends a request meant for one broker of a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kio.schema.api_versions.v3.response import FinalizedFeatureKey
from kio.static.primitive import i16

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


@pytest.mark.parametrize(
    ("levels", "offered"),
    [
        ({"primary": 2, "standby": 2}, {"transaction.version": 2}),
        ({"primary": 2, "standby": 1}, {"transaction.version": 1}),
        ({"primary": 2, "standby": None}, {}),  # a cluster without it (3.9): version 1, which all take
    ],
)
def test_the_transaction_version_offered_is_one_every_cluster_has(
    tmp_path: Path, levels: dict[str, int | None], offered: dict[str, int]
) -> None:
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"primary": {"bootstrap": "h1:9092"},
                                                 "standby": {"bootstrap": "h2:9092"}},
                                    "default_cluster": "primary"}))  # fmt: skip
    unused: Any = None
    brokers = BrokerDirectory(load_config(path, environ={}), unused, unused, unused, "gw-test")
    features = {
        cluster: () if level is None else (_level("transaction.version", level),)
        for cluster, level in levels.items()
    }
    brokers._offer_features("primary", features["primary"])
    assert brokers.features == {}  # not before every cluster has answered
    brokers._offer_features("standby", features["standby"])
    assert brokers.features == offered


def _level(name: str, level: int) -> FinalizedFeatureKey:
    return FinalizedFeatureKey(name=name, max_version_level=i16(level), min_version_level=i16(1))
