"""The members a routing change moved: found once, and found again when their removal failed."""

from __future__ import annotations

from collections.abc import Callable

from switchyard.identity import Identity
from workers.gateway.groups.members import Member, Members

SHOP, BILLING = Identity("shop"), Identity("billing")


def routed(where: dict[tuple[str, str], str | None]) -> Callable[[Identity, str], str | None]:
    return lambda identity, group: where.get((identity.app, group), "primary")


def test_members_whose_group_goes_elsewhere_are_found_once_and_marked_left() -> None:
    members = Members()
    members.joined("orders", "m1", Member("primary", 45.0, identity=SHOP))
    members.joined("orders", "m2", Member("primary", 45.0, identity=SHOP))
    members.joined("audit", "m3", Member("primary", 45.0, identity=BILLING))
    members.joined("orders", "m4", Member("primary", None))  # looked up, not seen joining: whose is unknown
    now_on = {("shop", "orders"): "standby"}
    found = members.moved(routed(now_on))
    assert sorted(member_id for _, member_id, _ in found) == ["m1", "m2"]
    assert all(member.cluster == "primary" for _, _, member in found)
    assert members.moved(routed(now_on)) == []
    assert members.get("orders", "m1").left  # type: ignore[union-attr]
    assert not members.get("audit", "m3").left  # type: ignore[union-attr]


def test_a_member_still_blocked_is_not_moved_yet() -> None:
    members = Members()
    members.joined("orders", "m1", Member("primary", 45.0, identity=SHOP))
    assert members.moved(routed({("shop", "orders"): None})) == []


def test_a_member_whose_removal_failed_is_found_again() -> None:
    members = Members()
    members.joined("orders", "m1", Member("primary", 45.0, identity=SHOP))
    now_on = {("shop", "orders"): "standby"}
    assert len(members.moved(routed(now_on))) == 1
    members.still_there("orders", "m1")
    assert [member_id for _, member_id, _ in members.moved(routed(now_on))] == ["m1"]


def test_an_old_memberships_commit_goes_as_its_clients_one_new_member_that_was_assigned_its_partitions() -> (
    None
):
    members = Members(most=4)
    parts = frozenset({("t", 0), ("t", 1)})
    members.joined("orders", "old", Member("primary", 45.0, identity=SHOP))
    assert members.successor("orders", "standby", SHOP, {("t", 0)}) is None  # none there yet
    members.joined("orders", "new", Member("standby", 45.0, identity=SHOP))
    assert members.successor("orders", "standby", SHOP, {("t", 0)}) is None  # joined, not synced
    members.synced("orders", "new", 3, parts)
    assert members.successor("orders", "standby", SHOP, {("t", 0), ("t", 1)}) == ("new", 3)
    assert members.successor("orders", "standby", SHOP, {("t", 2)}) is None  # not its partition
    assert members.successor("orders", "standby", BILLING, {("t", 0)}) is None  # another client's
    members.joined("orders", "other", Member("standby", 45.0, identity=SHOP))
    members.synced("orders", "other", 3, frozenset({("t", 2)}))
    assert members.successor("orders", "standby", SHOP, {("t", 0)}) is None  # which one: not known
    members.joined("audit", "a", Member("standby", 45.0, identity=BILLING))
    members.joined("audit", "b", Member("standby", 45.0, identity=BILLING))  # the oldest goes: "old"
    assert members.get("orders", "old") is None
    assert members.successor("orders", "standby", SHOP, {("t", 2)}) is None
