from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import assume, given
from hypothesis import strategies as st

from switchyard.identity import Identity
from switchyard.keys import BindingKey
from switchyard.model import Binding, BindingState
from switchyard.resolution import resolve

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CLUSTERS = ("primary", "standby", "dr")
APPS = ("orders", "billing")
NAMES = ("a", "b", "c")


def bound(cluster: str, epoch: int = 1, state: BindingState = BindingState.ACTIVE) -> Binding:
    return Binding(cluster, epoch, state, T0, "test")


key_strategy = st.one_of(
    st.builds(BindingKey.for_app, st.sampled_from(APPS)),
    st.builds(BindingKey.instance, st.sampled_from(APPS), st.sampled_from(NAMES)),
    st.builds(BindingKey.topic, st.sampled_from(APPS), st.sampled_from(NAMES)),
    st.builds(BindingKey.group, st.sampled_from(APPS), st.sampled_from(NAMES)),
)
binding_strategy = st.builds(
    bound, st.sampled_from(CLUSTERS), st.integers(1, 100), st.sampled_from(list(BindingState))
)
tables = st.dictionaries(key_strategy, binding_strategy, max_size=12)
identities = st.builds(
    Identity, st.sampled_from(APPS), st.none() | st.sampled_from(NAMES), st.none() | st.sampled_from(NAMES)
)
topic_lists = st.lists(st.sampled_from(NAMES), max_size=3)
groups = st.none() | st.sampled_from(NAMES)


def expected_kind(
    identity: Identity, table: dict[BindingKey, Binding], topics: list[str], group: str | None
) -> str:
    """The priority rule written out plainly, to check resolve() against."""
    app = identity.app
    if group is not None and BindingKey.group(app, group) in table:
        return "group"
    wanted = topics or ([identity.legacy_topic] if identity.legacy_topic else [])
    fine = [table.get(BindingKey.topic(app, t)) for t in wanted]
    if wanted and all(fine) and len({(b.cluster, b.state) for b in fine if b}) == 1:
        return "topic"
    if identity.instance is not None and BindingKey.instance(app, identity.instance) in table:
        return "instance"
    if BindingKey.for_app(app) in table:
        return "app"
    return "default"


@given(identities, tables, topic_lists, groups)
def test_priority(
    identity: Identity, table: dict[BindingKey, Binding], topics: list[str], group: str | None
) -> None:
    result = resolve(identity, table, "primary", topics=topics, group=group)
    kinds = {str(k.kind) for k in result.keys} or {"default"}
    assert kinds == {expected_kind(identity, table, topics, group)}
    if result.keys:
        assert all(table[k].cluster == result.cluster for k in result.keys)
        assert result.epoch == max(table[k].epoch for k in result.keys)
    else:
        assert (result.cluster, result.epoch) == ("primary", 0)


@given(identities, tables, topic_lists, groups, st.sampled_from(CLUSTERS))
def test_switching_a_key_never_drags_a_request_another_key_decides(
    identity: Identity, table: dict[BindingKey, Binding], topics: list[str], group: str | None, target: str
) -> None:
    before = resolve(identity, table, "primary", topics=topics, group=group)
    for key in list(table):
        if key in before.keys:
            continue
        moved = {**table, key: bound(target, table[key].epoch + 1)}
        after = resolve(identity, moved, "primary", topics=topics, group=group)
        if after.keys == before.keys:
            assert (after.cluster, after.state) == (before.cluster, before.state)
        else:  # only a key that was not more specific than the deciding one can't take over
            assert key.specificity >= max((k.specificity for k in before.keys), default=-1)


@given(identities, tables, topic_lists, groups, key_strategy, binding_strategy)
def test_another_apps_bindings_never_matter(
    identity: Identity,
    table: dict[BindingKey, Binding],
    topics: list[str],
    group: str | None,
    key: BindingKey,
    binding: Binding,
) -> None:
    assume(key.app != identity.app)
    assert resolve(identity, {**table, key: binding}, "primary", topics=topics, group=group) == resolve(
        identity, table, "primary", topics=topics, group=group
    )


def test_examples_with_reasons() -> None:
    table = {
        BindingKey.for_app("orders"): bound("primary"),
        BindingKey.instance("orders", "host-7"): bound("standby", 2),
        BindingKey.topic("orders", "payments"): bound("dr", 3),
        BindingKey.topic("orders", "refunds"): bound("dr", 4),
        BindingKey.topic("orders", "audit"): bound("standby", 5),
        BindingKey.group("orders", "billing"): bound("standby", 6, BindingState.BLOCKED),
    }
    me = Identity("orders", instance="host-7")

    r = resolve(me, table, "primary", topics=["payments"], group="billing")
    assert (r.cluster, r.state, r.reason) == (
        "standby",
        BindingState.BLOCKED,
        "group binding orders##billing",
    )

    r = resolve(me, table, "primary", topics=["payments", "refunds"])
    assert (r.cluster, r.epoch) == ("dr", 4)
    assert r.reason == "every topic has the same binding: orders#payments, orders#refunds"

    r = resolve(me, table, "primary", topics=["payments", "audit"])
    assert r.cluster == "standby"
    assert r.reason == (
        "instance binding orders@host-7; topic bindings not used: "
        "the request's topics are bound to different places"
    )

    r = resolve(Identity("orders"), table, "primary", topics=["payments", "other"])
    assert r.reason == "AppID binding orders; topic bindings not used: no binding for orders#other"

    r = resolve(Identity("orders", legacy_topic="refunds"), table, "primary")
    assert (r.cluster, r.reason) == ("dr", "legacy client.id topic binding: orders#refunds")

    r = resolve(Identity("stranger"), table, "primary", group="g")
    assert (r.cluster, r.keys) == ("primary", ())
    assert r.reason == "stranger has no binding: default cluster; group 'g' has no binding"

    assert resolve(Identity(""), table, "primary").reason == "anonymous client: default cluster"
