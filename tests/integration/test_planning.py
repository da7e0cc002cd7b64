"""The plan of a switch refuses what would break someone else: on a real routing root and real brokers,
with the gateway's usage report and the mirror's status as those processes write them."""

from __future__ import annotations

import threading
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
from switchyard.sharing import split_id
from switchyard.usage import CONSUME, PRODUCE, Use, encode

ACTOR = "user:test"


@pytest.fixture
def store(sqlite_store: RoutingStore) -> RoutingStore:
    return sqlite_store


@pytest.fixture
def link(store: RoutingStore, stack_config: Config) -> tuple[str, str]:
    """A topic on the primary and a link copying it that a mirror reports; (link, topic)."""
    link_id, topic = unreported_link(store, stack_config)
    report(store, link_id, topic)
    return link_id, topic


def unreported_link(store: RoutingStore, config: Config) -> tuple[str, str]:
    topic, link_id = f"orders-{uuid.uuid4().hex[:6]}", f"link-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(config.clusters["primary"].bootstrap, [topic], partitions=1)
    store.create_link(link_id, "primary", "standby", include=[topic], actor=ACTOR, reason="t")
    return link_id, topic


def report(store: RoutingStore, link_id: str, topic: str) -> None:
    """What a mirror process copying the link's one partition publishes."""
    status = PartitionStatus(topic, 0, "copying", 10, 10, 10, 0, 0.0, now())
    path = member_path(store.layout, link_id, "m-1")
    store.zk.create(
        path, MemberStatus("m-1", "host", now(), (status,)).to_json(), makepath=True, ephemeral=True
    )


def test_a_plan_waits_for_a_mirror_started_again_to_report_the_links_partitions(
    store: RoutingStore, stack_config: Config
) -> None:
    """A mirror process started again (after a crash, or as the link was just made) reports the link's
    partitions once its copy group hands them out: the plan waits for that, a while, before it refuses
    — nothing is held yet. (A chaos trial's switchover was refused 2 s after the mirror's restart.)"""
    link_id, topic = unreported_link(store, stack_config)
    store.set_binding(BindingKey.for_app("shop"), "primary", actor=ACTOR, reason="t")
    asked = PlanRequest("saga-test", "switchover", ["shop"], link=link_id)
    refused = plan_switch(store, stack_config, asked, mirror_wait_s=0).refusal
    assert refused is not None
    assert f"no mirror process reports {topic}[0] of link {link_id}" in refused
    later = threading.Timer(1.0, report, (store, link_id, topic))
    later.start()
    try:
        assert plan_switch(store, stack_config, asked, mirror_wait_s=20).refusal is None
    finally:
        later.join()


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
    _, topic = link
    producers(store, topic, "shop", "audit")
    refusal = plan(store, stack_config, "shop")
    assert refusal is not None
    assert f"{topic} is written by audit@audit-1 on primary, which would stay there" in refusal
    assert "promoting it makes primary's copy the reverse link's alone" in refusal
    assert refusal.endswith("Switch them together: shop audit")
    assert plan(store, stack_config, "shop", "audit") is None  # together they may go


def test_a_key_of_its_own_that_stays_is_a_producer_left_behind(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    _, topic = link
    producers(store, topic, "shop")
    store.set_binding(BindingKey.topic("shop", topic), "primary", actor=ACTOR, reason="pinned")
    refusal = plan(store, stack_config, "shop")
    assert refusal is not None
    assert f"{topic} is written by shop@shop-1 on primary, which would stay there" in refusal
    assert refusal.endswith(f"Switch them together: shop shop#{topic}")
    assert plan(store, stack_config, "shop", f"shop#{topic}") is None


def test_of_several_links_the_one_copying_the_keys_topics_is_chosen(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    link_id, topic = link
    other = f"link-{uuid.uuid4().hex[:6]}"
    store.create_link(other, "primary", "standby", include=[f"other-{topic}"], actor=ACTOR, reason="t")
    store.set_binding(BindingKey.for_app("shop"), "primary", actor=ACTOR, reason="known, and idle")
    refusal = plan(store, stack_config, "shop")
    assert refusal is not None
    assert f"several links leave primary ({', '.join(sorted([link_id, other]))})" in refusal
    assert "the gateways saw the keys use none of their topics: name one with --link" in refusal

    producers(store, topic, "shop")
    chosen = plan_switch(store, stack_config, PlanRequest("saga-test", "switchover", ["shop"]))
    assert chosen.refusal is None
    assert chosen.link == link_id


def test_a_key_nobody_knows_is_refused_unless_forced(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    """No binding names it and no gateway saw it: a typo, most likely, and a switch of it would still
    promote the link."""
    link_id, _ = link
    refusal = plan(store, stack_config, "nosuchapp")
    assert refusal is not None
    assert refusal.startswith("nosuchapp: no binding names it and no gateway saw its clients within 604800s")
    assert "A typo? With --force the switch goes ahead" in refusal
    forced = plan_switch(
        store, stack_config, PlanRequest("saga-test", "switchover", ["nosuchapp"], unknown_keys=True)
    )
    assert forced.refusal is None, forced.refusal
    assert "forced: nosuchapp unknown (no binding, no client seen within 604800s)" in forced.checks
    assert forced.link == link_id  # nobody else uses the link: all of it moves
    assert forced.split is None

    store.set_binding(BindingKey.for_app("nosuchapp"), "primary", actor=ACTOR, reason="it exists after all")
    assert plan(store, stack_config, "nosuchapp") is None


def test_a_link_shared_by_disjoint_applications_is_split_and_readers_of_the_moving_topics_may_stay(
    store: RoutingStore, stack_config: Config
) -> None:
    """shop writes one topic, audit another, both copied by one link: a switch of shop moves shop's
    topic along a link of its own; audit only reads shop's, which the reverse link copies back."""
    shop_topic, audit_topic, link_id = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("shop", "audit", "link"))
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [shop_topic, audit_topic], partitions=2)
    store.create_link(
        link_id, "primary", "standby", include=[shop_topic, audit_topic], actor=ACTOR, reason="t"
    )
    reported(store, link_id, [(t, p) for t in (shop_topic, audit_topic) for p in (0, 1)])
    producers(store, shop_topic, "shop")
    producers(store, audit_topic, "audit")
    readers(store, shop_topic, "audit")

    planned = plan_switch(store, stack_config, PlanRequest("saga-test", "switchover", ["shop"]))
    assert planned.refusal is None, planned.refusal
    assert planned.split is not None
    assert (planned.split.link, planned.split.topics) == (link_id, [shop_topic])
    shared = store.link(link_id)
    assert shared is not None
    assert planned.link == planned.split.new_link == split_id(shared, [shop_topic])
    assert [(p.topic, p.partition) for p in planned.partitions] == [(shop_topic, 0), (shop_topic, 1)]
    assert (
        f"audit@audit-1 reads {shop_topic} on primary, and will read what the reverse link copies back"
        in (planned.checks)
    )
    together = plan_switch(store, stack_config, PlanRequest("saga-test", "switchover", ["shop", "audit"]))
    assert (together.refusal, together.split, together.link) == (None, None, link_id)


def test_keys_whose_topics_nobody_saw_move_the_whole_link_so_its_writers_must_come_too(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    _, topic = link
    store.set_binding(BindingKey.for_app("idle"), "primary", actor=ACTOR, reason="bound, never seen")
    producers(store, topic, "audit")
    refusal = plan(store, stack_config, "idle")
    assert refusal is not None
    assert f"{topic} is written by audit@audit-1 on primary, which would stay there" in refusal
    assert refusal.endswith("Switch them together: idle audit")


def reported(store: RoutingStore, link_id: str, keys: list[tuple[str, int]]) -> None:
    statuses = tuple(PartitionStatus(t, p, "copying", 10, 10, 10, 0, 0.0, now()) for t, p in keys)
    path = member_path(store.layout, link_id, "m-1")
    store.zk.create(
        path, MemberStatus("m-1", "host", now(), statuses).to_json(), makepath=True, ephemeral=True
    )


def readers(store: RoutingStore, topic: str, *apps: str) -> None:
    uses = [Use(app, f"{app}-1", topic, CONSUME, f"{app}-readers", time.time()) for app in apps]
    store.zk.create(
        store.layout.usage(f"gw-{uuid.uuid4().hex[:4]}"), encode(uses), makepath=True, ephemeral=True
    )


def test_a_client_whose_requests_would_mix_moving_and_staying_topics_is_refused(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    """shop writes the link's topic and another: switching only ``shop#<topic>`` would leave its Produce
    requests, which name both, on the source."""
    _, topic = link
    producers(store, topic, "shop")
    producers(store, f"elsewhere-{topic}", "shop")
    refusal = plan(store, stack_config, f"shop#{topic}")
    assert refusal is not None
    assert refusal.startswith(
        f"shop@shop-1 writes {topic}, which move, and elsewhere-{topic}, which stay: one request names "
        "them all"
    )
    assert plan(store, stack_config, "shop") is None  # the application whole


def test_keys_whose_topics_are_all_on_other_links_are_refused_on_this_one(
    store: RoutingStore, stack_config: Config, link: tuple[str, str]
) -> None:
    """A topic the keys were seen using that the source still holds, none on this link: refused. Once
    the source no longer holds it (deleted since: a drill's earlier run), its uses say nothing, and the
    whole link moves."""
    link_id, topic = link
    primary = stack_config.clusters["primary"].bootstrap
    kafka.create_topics(primary, [f"elsewhere-{topic}"], partitions=1)
    producers(store, f"elsewhere-{topic}", "shop")
    refusal = plan(store, stack_config, "shop")
    assert refusal == (
        f"shop uses elsewhere-{topic}, which link {link_id} does not copy: is it the right link?"
    )
    kafka.delete_topic(primary, f"elsewhere-{topic}")
    deadline = time.monotonic() + 30
    while kafka.partitions(primary, lambda t: t == f"elsewhere-{topic}"):  # until the brokers say it is gone
        assert time.monotonic() < deadline, "the deleted topic is still listed"
        time.sleep(0.2)
    assert plan(store, stack_config, "shop") is None
