"""How an evacuation divides a cluster's topics: an application's topics, and those of applications
sharing one, never in two batches; batches packed in order; an operator's plan refused where it divides."""

from __future__ import annotations

from datetime import UTC, datetime

from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState
from switchyard.moves.cluster import Users, _as_planned, packed, users
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.usage import CONSUME, GROUP, PRODUCE, Use

AT = datetime(2026, 11, 30, tzinfo=UTC)


def _use(app: str, topic: str, role: str = PRODUCE, group: str | None = None) -> Use:
    return Use(app, None, topic, role, group, 1.0)


def _bound(**where: str) -> RoutingSnapshot:
    bindings = {BindingKey.parse(k.replace("__", "#")): Binding(c, 1, BindingState.ACTIVE, AT, "t")
                for k, c in where.items()}  # fmt: skip
    return RoutingSnapshot(1, bindings=bindings)


def _sets(found: list[Users]) -> list[tuple[list[str], list[str], list[str]]]:
    return [(sorted(u.topics), sorted(u.apps), sorted(u.keys)) for u in found]


def test_applications_sharing_a_topic_move_together_and_unused_topics_alone() -> None:
    uses = [
        _use("orders", "o1"), _use("orders", "o2"),
        _use("billing", "o2", CONSUME, "bill"), _use("billing", "b1"),
        _use("audit", "a1", CONSUME, "aud"),
        _use("billing", "", GROUP, "bill"),  # a group's own requests name no topic
    ]  # fmt: skip
    cannot: list[str] = []
    found = users(uses, ["o1", "o2", "b1", "a1", "idle"], RoutingSnapshot(1), default_cluster="old",
                  source="old", cannot_move=cannot)  # fmt: skip
    assert _sets(found) == [
        (["a1"], ["audit"], ["audit"]),
        (["b1", "o1", "o2"], ["billing", "orders"], ["billing", "orders"]),
        (["idle"], [], []),
    ]
    assert found[1].producers == {"o1", "o2", "b1"}
    assert not cannot


def test_the_keys_are_those_routing_each_use_to_the_source_and_uses_elsewhere_are_not_its() -> None:
    # orders' own key is on the new cluster already, but its topic key keeps o1 on the old one; billing
    # reads o1 through a group key of its own; audit is bound elsewhere as a whole
    snapshot = _bound(orders="new", orders__o1="old", **{"billing##bill": "old"}, audit="new")
    uses = [_use("orders", "o1"), _use("billing", "o1", CONSUME, "bill"), _use("audit", "o1", CONSUME, "aud")]
    found = users(uses, ["o1"], snapshot, default_cluster="old", source="old", cannot_move=[])
    assert _sets(found) == [(["o1"], ["billing", "orders"], ["billing##bill", "orders#o1"])]


def test_a_blocked_key_stops_the_evacuation() -> None:
    snapshot = RoutingSnapshot(
        1, bindings={BindingKey.for_app("orders"): Binding("old", 4, BindingState.BLOCKED, AT, "t")}
    )
    cannot: list[str] = []
    users([_use("orders", "o1")], ["o1"], snapshot, default_cluster="old", source="old", cannot_move=cannot)
    assert cannot == ["orders is blocked: another saga is switching it"]


def _set(*topics: str, apps: tuple[str, ...] = ("a",)) -> Users:
    return Users(set(topics), set(apps))


def test_sets_are_packed_in_order_into_batches_of_at_most_n_topics() -> None:
    sets = [_set("a"), _set("b", "c"), _set("d", "e", "f", "g"), _set("h")]
    assert [[sorted(s.topics) for s in b] for b in packed(sets, 3)] == [
        [["a"], ["b", "c"]], [["d", "e", "f", "g"]], [["h"]],  # a set larger than n goes alone, whole
    ]  # fmt: skip
    assert len(packed(sets, 0)) == 4  # 0: each set a batch


def test_an_operators_plan_is_taken_in_its_order_and_refused_where_it_divides_or_omits() -> None:
    sets = [
        _set("a", apps=("x",)),
        _set("b", "c", apps=("y", "z")),
        _set("d", apps=("w",)),
        _set("idle", apps=()),
    ]
    cannot: list[str] = []
    planned = _as_planned(sets, [["d", "idle"], ["b", "c", "a"]], cannot)  # an unused topic listed or not
    assert [[sorted(s.topics) for s in b] for b in planned] == [[["d"]], [["a"], ["b", "c"]]]
    assert not cannot
    _as_planned(sets, [["a", "b"], ["c"], ["nope"]], cannot)
    assert cannot == [
        "the plan lists nope (batch 3), which the source does not hold",
        "y, z use b in batch 1, c in batch 2: an application's topics move in one batch",
        "the plan leaves out d, used by w",
    ]
