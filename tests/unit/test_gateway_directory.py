"""Where the gateway sends a request meant for one broker of a cluster."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kio.schema.api_versions.v3.response import FinalizedFeatureKey
from kio.static.primitive import i16

from switchyard.config import load_config
from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import response_schema
from switchyard.routing.layout import Layout
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.upstream import Upstream, UpstreamError
from workers.gateway.brokers.vnodes import RealBroker, VirtualNodes
from workers.gateway.routing import apis


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


def test_any_broker_is_first_the_first_bootstrap_then_whichever_answered_last(tmp_path: Path) -> None:
    """A broker of three killed, the first bootstrap server, took every request for any broker (the
    bootstrap port's Metadata and FindCoordinator, the gateway's own) with it until it was back: 28 s
    in a chaos trial, and kafkajs gave its sends up."""
    brokers = directory(tmp_path)
    brokers.brokers["primary"] = {1: ("h1", 9092), 2: ("h2", 9092), 4: ("h4", 9092)}
    anywhere = brokers.upstream("primary", None)
    assert (anywhere.host, anywhere.port) == ("h1", 9092)
    assert anywhere.others == (("h2", 9092), ("h3", 9092), ("h4", 9092))  # then listed, not bootstrap
    assert brokers.upstream("primary", 2).others == ()  # a request meant for one broker goes to it only
    anywhere.reached(("h3", 9092))
    assert brokers.real_address("primary", None) == ("h3", 9092)
    assert brokers.upstream("primary", None).others == (("h1", 9092), ("h2", 9092), ("h4", 9092))


def test_a_connection_to_any_broker_is_made_to_the_next_where_one_refuses() -> None:
    async def scenario() -> tuple[tuple[str, int], list[tuple[str, int]]]:
        server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
        live = server.sockets[0].getsockname()[:2]
        dead = _closed_port()
        reached: list[tuple[str, int]] = []
        anywhere = Upstream(*dead, max_frame_bytes=1 << 20, others=(dead, live), reached=reached.append)
        await anywhere.send(b"\0\0\0\0", 1, expects_response=False)
        one = Upstream(*dead, max_frame_bytes=1 << 20)  # meant for that broker: no other will do
        with pytest.raises(UpstreamError, match="cannot connect"):
            await one.send(b"\0\0\0\0", 1, expects_response=False)
        anywhere.close()
        server.close()
        return (anywhere.host, anywhere.port), reached

    live, reached = asyncio.run(scenario())
    assert reached == [live]
    assert live[0] == "127.0.0.1"


def _closed_port() -> tuple[str, int]:
    """An address nothing listens at: a port just given back."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[:2]


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


def test_a_metadata_answer_lists_every_broker_of_the_other_clusters_given_an_id(tmp_path: Path) -> None:
    """A broker killed and back: a FindCoordinator answer named it as coordinator on one cluster while
    the Metadata answers kafkajs had cached, from the other, left it out, and kafkajs gave a commit up
    (``KafkaJSBrokerNotFound``, two chaos trials). Every broker of the other configured clusters given a
    virtual id is listed, learned by this process or not; the answering cluster's as it lists them."""
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump({"clusters": {"primary": {"bootstrap": "h1:9092"},
                                                 "standby": {"bootstrap": "s1:9092"}},
                                    "default_cluster": "primary"}))  # fmt: skip
    vnodes = VirtualNodes(None, Layout("/test"))  # type: ignore[arg-type]  # every id known already
    given = [RealBroker("primary", 1), RealBroker("primary", 2), RealBroker("primary", 3),
             RealBroker("standby", 1), RealBroker("standby", 2), RealBroker("retired", 1)]  # fmt: skip
    ids = {broker: vnodes._remember(broker, (1 << 30) + n) for n, broker in enumerate(given)}

    async def listening(_: int) -> None:
        pass

    unused: Any = None
    brokers = BrokerDirectory(load_config(path, environ={}), vnodes, unused, listening, "gw-test")
    brokers.brokers["standby"] = {1: ("s1", 9092)}  # standby 2 not listed by the standby just now
    cls = response_schema(apis.METADATA, 9)
    broker_cls = element_type(cls, "brokers")
    answer = make(cls, brokers=tuple(make(broker_cls, node_id=n, host=f"h{n}", port=9092) for n in (1, 2)),
                  cluster_id="real", controller_id=1, topics=())  # fmt: skip
    primary = [ids[RealBroker("primary", n)] for n in (1, 2)]  # primary 3 is down: not listed
    standby = [ids[RealBroker("standby", n)] for n in (1, 2)]

    listed = [b.node_id for b in asyncio.run(brokers.rewrite(apis.METADATA, answer, "primary")).brokers]
    assert listed == primary + standby
    brokers.brokers["primary"] = {1: ("h1", 9092), 2: ("h2", 9092)}
    request: Any = SimpleNamespace(api_key=apis.METADATA, api_version=9)
    made = asyncio.run(brokers.local_metadata(request, "standby"))  # its Metadata of no topics
    assert [b.node_id for b in made.brokers] == [standby[0], *primary, ids[RealBroker("primary", 3)]]
