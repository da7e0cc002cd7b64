"""The plan of a switch refuses what would break someone else: on a real routing root and real brokers,
with the gateway's usage report and the mirror's status as those processes write them."""

from __future__ import annotations

import time
import uuid

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import MemberStatus, PartitionStatus, member_path
from switchyard.model import now
from switchyard.planning import plan_switch
from switchyard.routing.store import RoutingStore
from switchyard.sagas.steps import PlanRequest
from switchyard.usage import PRODUCE, Use, encode

ACTOR = "user:test"


@pytest.fixture
def store(sqlite_store: RoutingStore) -> RoutingStore:
    return sqlite_store


@pytest.fixture
def link(store: RoutingStore, stack_config: Config) -> tuple[str, str]:
    """A topic on the primary and a link copying it that a mirror reports; (link, topic)."""
    topic, link_id = f"orders-{uuid.uuid4().hex[:6]}", f"link-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic], partitions=1)
    store.create_link(link_id, "primary", "standby", include=[topic], actor=ACTOR, reason="t")
    status = PartitionStatus(topic, 0, "copying", 10, 10, 10, 0, 0.0, now())
    path = member_path(store.layout, link_id, "m-1")
    store.zk.create(
        path, MemberStatus("m-1", "host", now(), (status,)).to_json(), makepath=True, ephemeral=True
    )
    return link_id, topic


def producers(store: RoutingStore, topic: str, *apps: str) -> None:
    uses = [Use(app, f"{app}-1", topic, PRODUCE, None, time.time()) for app in apps]
    store.zk.create(
        store.layout.usage(f"gw-{uuid.uuid4().hex[:4]}"), encode(uses), makepath=True, ephemeral=True
    )


def plan(store: RoutingStore, config: Config, *keys: str) -> str | None:
    return plan_switch(store, config, PlanRequest("saga-test", "switchover", list(keys))).refusal


def test_a_switch_that_leaves_another_producer_of_the_links_topics_behind_is_refused(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    link_id, topic = link
    producers(store, topic, "shop", "audit")
    refusal = plan(store, stack_config, "shop")
    assert refusal is not None
    assert f"audit@audit-1 writes {topic} on primary, and would stay there" in refusal
    assert f"promoting link {link_id} makes its topics the mirror's alone on primary" in refusal
    assert plan(store, stack_config, "shop", "audit") is None  # together they may go


def test_a_key_of_its_own_that_stays_is_a_producer_left_behind(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    _, topic = link
    producers(store, topic, "shop")
    store.set_binding(BindingKey.topic("shop", topic), "primary", actor=ACTOR, reason="pinned")
    refusal = plan(store, stack_config, "shop")
    assert refusal is not None
    assert f"shop@shop-1 writes {topic} on primary, and would stay there" in refusal
    assert plan(store, stack_config, "shop", f"shop#{topic}") is None


def test_of_several_links_the_one_copying_the_keys_topics_is_chosen(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    link_id, topic = link
    other = f"link-{uuid.uuid4().hex[:6]}"
    store.create_link(other, "primary", "standby", include=[f"other-{topic}"], actor=ACTOR, reason="t")
    refusal = plan(store, stack_config, "shop")
    assert refusal is not None
    assert f"several links leave primary ({', '.join(sorted([link_id, other]))})" in refusal
    assert "the gateways saw the keys use none of their topics: name one with --link" in refusal

    producers(store, topic, "shop")
    chosen = plan_switch(store, stack_config, PlanRequest("saga-test", "switchover", ["shop"]))
    assert chosen.refusal is None
    assert chosen.link == link_id
