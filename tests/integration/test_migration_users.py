"""Who moves with a topic, and what stops a topic migration before it starts: gateway usage reports as a
gateway writes them, a real routing root, real brokers."""

from __future__ import annotations

import time
import uuid

import pytest

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.moves.topic import find_users
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import migration_link
from switchyard.sagas.steps import TopicUsers, UsersRequest
from switchyard.usage import CONSUME, GROUP, PRODUCE, Use, encode

ACTOR = "user:test"


@pytest.fixture
def store(sqlite_store: RoutingStore) -> RoutingStore:
    """Who uses a topic does not depend on the ledger's database: SQLite only."""
    return sqlite_store


@pytest.fixture
def topic(stack_config: Config) -> str:
    name = f"orders-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [name], partitions=2)
    return name


def report(store: RoutingStore, *uses: tuple[str, str | None, str, str, str | None]) -> None:
    """What a gateway publishes, seen just now."""
    path = store.layout.usage(f"gw-{uuid.uuid4().hex[:4]}")
    store.zk.create(path, encode(Use(*u, last_seen=time.time()) for u in uses), makepath=True, ephemeral=True)


def users(store: RoutingStore, config: Config, topic: str, target: str = "standby") -> TopicUsers:
    return find_users(store, config, UsersRequest(topic, target, migration_link(topic, target), 600))


def refusal(store: RoutingStore, config: Config, topic: str, target: str = "standby") -> str:
    found = users(store, config, topic, target)
    assert found.refusal is not None, f"not refused: {found}"
    return found.refusal


def test_the_producers_consumers_and_their_groups_move(
    store: RoutingStore, stack_config: Config, topic: str
) -> None:
    report(
        store,
        ("shop", "shop-1", topic, PRODUCE, None),
        ("billing", "b-1", topic, CONSUME, None),
        ("billing", "b-1", topic, CONSUME, "billing"),
        ("billing", "b-1", "", GROUP, "billing"),
        ("audit", "a-1", topic, CONSUME, None),  # no group: its offsets are its own
        ("shop", "shop-1", "payments", CONSUME, None),  # another role: its requests never name both
    )
    found = users(store, stack_config, topic)
    assert found.refusal is None, found.refusal
    assert found.keys == sorted([f"audit#{topic}", "billing##billing", f"billing#{topic}", f"shop#{topic}"])
    assert (found.source, found.partitions) == ("primary", 2)
    assert [(u.app, u.role, u.group) for u in found.users] == [
        ("audit", CONSUME, None), ("billing", CONSUME, None), ("billing", CONSUME, "billing"),
        ("shop", PRODUCE, None),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("uses", "expected"),
    [
        ([], "no application used {topic} through a gateway in the last 600s"),
        (
            [
                ("billing", "b-1", "{topic}", CONSUME, "billing"),
                ("billing", "b-2", "refunds", CONSUME, "billing"),
            ],
            "billing##billing also consumes refunds: a group moves whole",
        ),
        (
            [("shop", "shop-1", "{topic}", PRODUCE, None), ("shop", "shop-1", "refunds", PRODUCE, None)],
            "shop@shop-1 produces to refunds too: one client's requests name both topics",
        ),
    ],
    ids=["nobody", "group-elsewhere", "mixed-requests"],
)
def test_what_cannot_move_with_the_topic_is_refused(
    store: RoutingStore,
    stack_config: Config,
    topic: str,
    uses: list[tuple[str, str | None, str, str, str | None]],
    expected: str,
) -> None:
    report(
        store,
        *[
            (app, instance, name.format(topic=topic), role, group)
            for app, instance, name, role, group in uses
        ],
    )
    assert expected.format(topic=topic) in refusal(store, stack_config, topic)


def test_users_on_different_clusters_or_another_link_are_refused(
    store: RoutingStore, stack_config: Config, topic: str
) -> None:
    report(store, ("shop", None, topic, PRODUCE, None), ("billing", None, topic, CONSUME, None))
    store.set_binding(BindingKey.for_app("billing"), "standby", actor=ACTOR, reason="test")
    assert f"routed to different clusters: shop#{topic} on primary; billing#{topic} on standby" in refusal(
        store, stack_config, topic
    )

    store.set_binding(BindingKey.for_app("billing"), "primary", actor=ACTOR, reason="test")
    store.create_link("everything", "primary", "standby", include=[".*"], actor=ACTOR, reason="test")
    assert f"link everything copies {topic} to standby already" in refusal(store, stack_config, topic)
    assert "the topic's users are on primary already" in refusal(store, stack_config, topic, "primary")
