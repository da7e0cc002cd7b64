"""Which ACLs a link creates and deletes on its target (pure logic; the brokers' side is in
tests/integration/test_mirror_topics.py)."""

from __future__ import annotations

from datetime import UTC, datetime

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from switchyard.config import Config
from switchyard.mirror.status import MemberStatus
from workers.mirror.acls import acl_changes, covers, writers

LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED


def acl(
    name: str,
    pattern: ResourcePatternType = LITERAL,
    principal: str = "User:a",
    *,
    restype: ResourceType = ResourceType.TOPIC,
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", operation, permission)


def test_a_binding_covers_its_topic_a_prefix_of_it_or_every_topic() -> None:
    topics = ["orders", "payments"]
    assert covers(acl("orders"), topics)
    assert covers(acl("pay", PREFIXED), topics)
    assert covers(acl("*"), topics)
    assert not covers(acl("order"), topics)  # a literal name is the whole name
    assert not covers(acl("ordersx", PREFIXED), topics)
    assert not covers(acl("invoices"), topics)


def test_the_target_gains_what_covers_the_links_topics_and_loses_revoked_literal_grants() -> None:
    kept, revoked, broad = acl("orders"), acl("orders", principal="User:gone"), acl("ord", PREFIXED)
    elsewhere, operators_own = acl("invoices"), acl("x", PREFIXED, "User:ops")
    create, delete = acl_changes(
        source=[kept, broad, elsewhere], target=[revoked, operators_own, acl("audit")], names=["orders"]
    )
    assert create == sorted([kept, broad])  # not the binding on a topic the link does not copy
    assert delete == [revoked]  # not a prefixed binding, nor one on a topic the link does not copy


def test_a_source_without_any_topic_acl_strips_nothing_from_the_target() -> None:
    """A broker without an authorizer answers DescribeAcls with no bindings: that is not a revocation."""
    assert acl_changes(source=[], target=[acl("orders")], names=["orders"]) == ([], [])


def test_a_members_notes_survive_its_status_node() -> None:
    status = MemberStatus("m1", "h:1", datetime.now(UTC), notes=("topic t created without x=y (...)",))
    assert MemberStatus.from_json(status.to_json()) == status
    older = status.to_json().replace(b',"notes":["topic t created without x=y (...)"]', b"")
    assert MemberStatus.from_json(older).notes == ()  # written by a process from before notes


def test_a_principal_named_otherwise_on_the_target_is_granted_there_under_that_name() -> None:
    """``mirror.principals``: the standby knows the orders service as User:orders-dr."""
    grant, theirs = acl("orders", principal="User:orders"), acl("orders", principal="User:orders-dr")
    others = acl("orders", principal="User:audit")
    renamed = {"User:orders": "User:orders-dr"}
    create, delete = acl_changes([grant, others], [grant], ["orders"], renamed)
    assert (create, delete) == (sorted([theirs, others]), [grant])
    assert acl_changes([grant, others], [theirs, others], ["orders"], renamed) == ([], [])


def test_principals_are_named_per_cluster() -> None:
    clusters = {"primary": {"bootstrap": "p:9092"}, "standby": {"bootstrap": "s:9092"}}
    names = {"orders": {"primary": "User:orders", "standby": "User:orders-dr"}, "same": {"primary": "User:x"}}
    config = Config.model_validate(
        {"clusters": clusters, "default_cluster": "primary", "mirror": {"principals": names}}
    )
    assert config.mirror.principal_names("primary", "standby") == {"User:orders": "User:orders-dr"}
    assert config.mirror.principal_names("standby", "primary") == {"User:orders-dr": "User:orders"}


def test_the_transactional_ids_of_those_allowed_to_write_a_links_topic_are_only_added() -> None:
    """No transactional id is tied to a topic in what the admin API shows: those of the principals that
    may write one of the link's topics are granted on the target, and none is deleted there."""
    topic_acls = [
        acl("orders", principal="User:writer", operation=AclOperation.WRITE),
        acl("ord", PREFIXED, "User:admin", operation=AclOperation.ALL),
        acl("orders", principal="User:reader"),
        acl(
            "orders", principal="User:banned", operation=AclOperation.WRITE, permission=AclPermissionType.DENY
        ),
        acl("invoices", principal="User:other", operation=AclOperation.WRITE),
    ]
    assert writers(topic_acls, ["orders"]) == {"User:writer", "User:admin"}
    tx = acl(
        "orders-tx",
        principal="User:writer",
        restype=ResourceType.TRANSACTIONAL_ID,
        operation=AclOperation.WRITE,
    )
    stale = acl("old-tx", principal="User:writer", restype=ResourceType.TRANSACTIONAL_ID)
    assert acl_changes([tx], [stale], None) == ([tx], [])


def test_group_acls_follow_for_the_groups_the_link_carries_alone() -> None:
    """The groups with offsets on the link's topics are the link's own, as its topics are."""
    mine = acl("orders-app", principal="User:app", restype=ResourceType.GROUP)
    revoked = acl("orders-app", principal="User:gone", restype=ResourceType.GROUP)
    theirs = acl("billing", principal="User:app", restype=ResourceType.GROUP)
    create, delete = acl_changes([mine, theirs], [revoked, theirs], ["orders-app"])
    assert (create, delete) == ([mine], [revoked])
