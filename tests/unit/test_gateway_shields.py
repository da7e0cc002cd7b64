"""A gateway process's clocks after a shield: how long a write sent to the shielded cluster may still be
waiting somewhere in the gateway (``settling``), and how long writes are held for the routing change
(``fresh``)."""

from __future__ import annotations

from datetime import UTC, datetime

from switchyard.keys import BindingKey, KeyKind
from switchyard.model import Binding, BindingState, Cluster, ClusterState
from switchyard.routing.snapshot import RoutingSnapshot
from workers.gateway.process.shields import SETTLED_S, SHIELD_GRACE_S, SHIELD_HOLDS_S, Shields

SETTLES_S = SHIELD_GRACE_S + SETTLED_S
APP = BindingKey("orders")


def snapshot(epoch: int, standby: ClusterState, *, orders_on: str | None = "standby") -> RoutingSnapshot:
    at = datetime.now(UTC)
    clusters = {
        "primary": Cluster("primary", "127.0.0.1:9", ClusterState.ACTIVE, 1, at, "test"),
        "standby": Cluster("standby", "127.0.0.1:10", standby, epoch, at, "test"),
    }
    bindings = {} if orders_on is None else {APP: Binding(orders_on, epoch, BindingState.ACTIVE, at, "test")}
    return RoutingSnapshot(epoch, bindings, clusters)


def applied(shields: Shields, *changes: tuple[float, RoutingSnapshot]) -> RoutingSnapshot:
    """``changes`` applied in turn, each at its time; the last."""
    for now, change in changes:
        shields.apply(change, now)
    return changes[-1][1]


def test_a_shield_settles_its_grace_and_margin_after_this_process_applied_it() -> None:
    shields = Shields("primary")
    active = applied(shields, (0.0, snapshot(1, ClusterState.ACTIVE)))
    shielded = snapshot(2, ClusterState.SHIELDED)
    assert not shields.settling("standby", active, now=0.0)
    assert shields.settling("standby", shielded, now=0.0), "shielded, not applied here yet"
    assert shields.newly_closed(shielded) == {"standby"}
    applied(shields, (10.0, shielded))
    assert shields.newly_closed(shielded) == set()
    assert shields.settling("standby", shielded, now=10.0 + SETTLES_S - 0.1)
    assert not shields.settling("standby", shielded, now=10.0 + SETTLES_S + 0.1)
    assert not shields.settling("primary", shielded, now=10.0)


def test_a_flip_off_the_shielded_cluster_settles_anew_from_when_this_process_applied_it() -> None:
    """A process frozen through the shield applied it seconds after this one, and still holds writes the
    client sent the shielded cluster when this one has counted its own shield out: both count from the
    flip, which every process acknowledged the shield before (a chaos trial, a Java producer's batches)."""
    shields = Shields("primary")
    applied(shields, (0.0, snapshot(1, ClusterState.ACTIVE)), (10.0, snapshot(2, ClusterState.SHIELDED)))
    flipped = snapshot(3, ClusterState.SHIELDED, orders_on="primary")
    assert shields.settling("standby", flipped, now=15.0), "the flip routed by, not applied here yet"
    applied(shields, (15.2, flipped))
    assert shields.settling("standby", flipped, now=15.2 + SETTLES_S - 0.1)
    assert not shields.settling("standby", flipped, now=15.2 + SETTLES_S + 0.1)
    assert shields.fresh("standby", now=10.0 + SHIELD_HOLDS_S - 0.1), "held writes count from the shield"
    assert not shields.fresh("standby", now=10.0 + SHIELD_HOLDS_S + 0.1)


def test_a_change_that_moves_nothing_off_the_shielded_cluster_does_not_settle_it_again() -> None:
    shields = Shields("primary")
    applied(
        shields,
        (0.0, snapshot(1, ClusterState.ACTIVE, orders_on="primary")),
        (10.0, snapshot(2, ClusterState.SHIELDED, orders_on="primary")),
    )
    unbound = snapshot(3, ClusterState.SHIELDED, orders_on=None)  # primary: the default
    assert not shields.settling("standby", unbound, now=20.0)
    applied(shields, (20.0, unbound))
    assert not shields.settling("standby", unbound, now=20.1)


def test_a_binding_made_away_from_the_default_cluster_moves_off_it() -> None:
    shields = Shields("standby")
    newest = applied(
        shields,
        (0.0, snapshot(1, ClusterState.ACTIVE, orders_on=None)),
        (10.0, snapshot(2, ClusterState.SHIELDED, orders_on=None)),
        (20.0, snapshot(3, ClusterState.SHIELDED, orders_on="primary")),
    )
    assert shields.settling("standby", newest, now=20.0 + SETTLES_S - 0.1)


def test_a_cluster_active_again_forgets_its_shield() -> None:
    shields = Shields("primary")
    active = applied(
        shields,
        (0.0, snapshot(1, ClusterState.SHIELDED)),
        (1.0, snapshot(2, ClusterState.SHIELDED, orders_on="primary")),
        (2.0, snapshot(3, ClusterState.ACTIVE, orders_on="primary")),
    )
    assert not shields.settling("standby", active, now=2.0)
    assert shields.fresh("standby", now=100.0), "no shield: nothing counted out"
    shielded_again = snapshot(4, ClusterState.SHIELDED, orders_on="primary")
    assert shields.newly_closed(shielded_again) == {"standby"}
    applied(shields, (50.0, shielded_again))
    assert shields.settling("standby", shielded_again, now=50.0 + SETTLES_S - 0.1)
    assert not shields.settling("standby", shielded_again, now=50.0 + SETTLES_S + 0.1)


def test_a_topic_key_bound_away_moves_off_where_its_application_was_bound() -> None:
    """A key with no binding of its own follows its application's, not the default cluster: a failover
    of one topic of an application bound to the shielded cluster moves off that cluster."""
    shields = Shields("primary")
    topic = BindingKey("orders", KeyKind.TOPIC, "payments")
    first = applied(
        shields,
        (0.0, snapshot(1, ClusterState.ACTIVE)),
        (10.0, snapshot(2, ClusterState.SHIELDED)),  # orders on the standby: its topic follows
    )
    bound = Binding("primary", 3, BindingState.ACTIVE, datetime.now(UTC), "test")
    flipped = RoutingSnapshot(3, {**first.bindings, topic: bound}, first.clusters)
    applied(shields, (20.0, flipped))
    assert shields.settling("standby", flipped, now=20.0 + SETTLES_S - 0.1)
