"""A topic migration's links stay until each group it moved has a member on the target again (at most
``settle_s``): the gateways carry the commits of a member that joined on the source through them, and a
chaos trial's migration, its retirement approved at once, removed them 3.7 s after the flip, before
its KIP-848 member's next heartbeat: the member's commit was refused (UNKNOWN_MEMBER_ID) and its batch
processed again. The group's state is asked of the target (stood in for here); the rest is the loop."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaException

from activities import migration
from switchyard.sagas.steps import RetireRequest

LINK = SimpleNamespace(source="standby", target="primary")


class _Deps:
    """The links the activity looks up, a bootstrap per cluster, and what it did in order."""

    def __init__(self, done: list[str]) -> None:
        self.done = done
        self.store = SimpleNamespace(link=lambda name: LINK if name == "copy" else None)

    def bootstrap(self, cluster: str) -> str:
        self.done.append(f"asked {cluster}")
        return "127.0.0.1:9"


def _retired(monkeypatch: pytest.MonkeyPatch, members: Iterator[int], settle_s: float) -> list[str]:
    done: list[str] = []
    monkeypatch.setattr(migration, "AdminClient", lambda _conf: None)
    monkeypatch.setattr(migration, "beat", lambda _what: None)
    monkeypatch.setattr(migration, "_POLL_S", 0.01)
    monkeypatch.setattr(migration, "_STEADY_S", 0.05)

    def group_state(_admin: Any, group: str) -> tuple[str, int]:
        count = next(members)
        done.append(f"{group}: {count}")
        return "STABLE" if count else "EMPTY", count

    monkeypatch.setattr(migration, "group_state", group_state)

    def remove_links(*_: Any, **__: Any) -> list[str]:
        done.append("links removed")
        return ["copy"]

    monkeypatch.setattr(migration, "remove_links", remove_links)
    monkeypatch.setattr(migration.kafka, "delete_topic", lambda *_: True)
    activities = migration.MigrationActivities(_Deps(done))  # type: ignore[arg-type]
    keys = ["shop", "shop#orders", "shop##readers"]
    request = RetireRequest("saga", "orders", "standby", ["copy"], True, keys, settle_s=settle_s)
    activities.retire_topic.__wrapped__(activities, request)  # type: ignore[attr-defined]
    return done


def test_the_links_go_once_the_moved_group_has_a_member_on_the_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done = _retired(monkeypatch, itertools.chain([0, 0, 1, 1], itertools.repeat(2)), settle_s=30)
    removed = done.index("links removed")
    assert done[:5] == ["asked primary", "readers: 0", "readers: 0", "readers: 1", "readers: 1"]
    assert set(done[5:removed]) == {"readers: 2"}  # the second member rejoined: steady again first
    assert removed > 6
    assert done[removed:] == ["links removed", "asked standby"]


def test_a_group_no_one_reads_holds_the_links_up_no_longer_than_the_settling_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done = _retired(monkeypatch, iter(lambda: 0, 1), settle_s=0.1)
    assert done[0] == "asked primary"
    assert done[-2:] == ["links removed", "asked standby"]
    assert 2 < len(done) - 3 < 30  # asked a few times, then gave up waiting


def test_a_target_that_cannot_say_holds_the_links_up_no_longer_either(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Failing:
        def __iter__(self) -> Iterator[int]:
            return self

        def __next__(self) -> int:
            raise KafkaException("the coordinator is not available")

    done = _retired(monkeypatch, Failing(), settle_s=0.1)
    assert done[-2:] == ["links removed", "asked standby"]
