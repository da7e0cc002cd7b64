"""The source's ACLs on a link's topics, kept on the target: a client switched to the target is allowed
there exactly what it was allowed on the source, and no more once a grant is revoked.

Topic ACLs only. Every binding whose pattern covers a copied topic (its name, a prefix of it, or ``*``) is
created on the target; a literal binding on a copied topic that the source no longer has is deleted
there, since the source decides who may use its topics — unless the source has no topic ACL at all: a
broker without an authorizer answers like one without ACLs, and that must not strip the target's.
Prefixed and wildcard bindings on the target cover other topics too, so they are only ever added. A
principal named otherwise on the target (``mirror.principals``) is granted there under that name.
Group and transactional-id ACLs are not per link: grant them on both clusters."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

TOPIC_ACLS = AclBindingFilter(
    ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,  # type: ignore[arg-type]
    AclPermissionType.ANY,
)  # fmt: skip
"""Every topic ACL (None: any name, principal or host)."""


def covers(binding: AclBinding, topics: Iterable[str]) -> bool:
    """Whether ``binding`` applies to at least one of ``topics``."""
    if binding.resource_pattern_type is ResourcePatternType.PREFIXED:
        return any(topic.startswith(binding.name) for topic in topics)
    return binding.name == "*" or binding.name in set(topics)


def acl_changes(
    source: Iterable[AclBinding],
    target: Iterable[AclBinding],
    topics: Iterable[str],
    principals: Mapping[str, str] | None = None,
) -> tuple[list[AclBinding], list[AclBinding]]:
    """What to create on the target and what to delete there so that its ACLs on ``topics`` follow the
    source's, each source principal named as ``principals`` says it is on the target."""
    copied, source, renamed = set(topics), list(source), principals or {}
    wanted = {_as(b, renamed.get(b.principal, b.principal)) for b in source if covers(b, copied)}
    there = set(target)
    stale = [
        b for b in there - wanted
        if source and b.resource_pattern_type is ResourcePatternType.LITERAL and b.name in copied
    ]  # fmt: skip
    return sorted(wanted - there), sorted(stale)


def sync_acls(
    source: AdminClient, target: AdminClient, topics: list[str], principals: Mapping[str, str]
) -> str | None:
    """Bring the target's ACLs on ``topics`` in line with the source's; why that failed, or None. A
    source without an authorizer has no ACLs to copy; a target without one refuses those it is given."""
    try:
        create, delete = acl_changes(
            source.describe_acls(TOPIC_ACLS).result(10),
            target.describe_acls(TOPIC_ACLS).result(10),
            topics,
            principals,
        )
        futures = list(target.create_acls(create).values()) if create else []
        if delete:
            futures += target.delete_acls([exactly(b) for b in delete]).values()
        for future in futures:
            future.result(10)
    except KafkaException as exc:
        return f"topic ACLs not copied: {exc.args[0].str()}"
    except TimeoutError:
        return "topic ACLs not copied: the clusters did not answer within 10 s"
    return None


def _as(binding: AclBinding, principal: str) -> AclBinding:
    if principal == binding.principal:
        return binding
    return AclBinding(
        binding.restype, binding.name, binding.resource_pattern_type, principal, binding.host,
        binding.operation, binding.permission_type,
    )  # fmt: skip


def exactly(binding: AclBinding) -> AclBindingFilter:
    """The filter that matches ``binding`` alone."""
    return AclBindingFilter(
        binding.restype, binding.name, binding.resource_pattern_type, binding.principal, binding.host,
        binding.operation, binding.permission_type,
    )  # fmt: skip
