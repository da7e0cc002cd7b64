"""The source's ACLs on what a link carries, kept on the target: a client switched to the target is
allowed there what it was allowed on the source, and no more once a grant is revoked.

Each kind of resource is scoped to what the link owns:

- topics: every binding whose pattern covers a copied topic (its name, a prefix of it, or ``*``);
- consumer groups: every binding covering a group with committed offsets on a copied topic (the groups
  whose offsets the mirror carries, :mod:`workers.mirror.carry`);
- transactional ids: nothing the admin API shows ties one to a topic, so the link takes the grants
  (ALLOW bindings) of the principals allowed to write a copied topic (a transactional producer needs
  both grants). A denial is not copied: only ever added, one lifted on the source would stay.

For topics and groups, a literal binding on an owned name that the source no longer has is deleted on
the target, since the source decides who may use them — unless the source has no binding of that kind
at all: a broker without an authorizer answers like one without ACLs, and that must not strip the
target's. Prefixed and wildcard bindings cover names the link does not own, so they are only ever
added; so are transactional-id bindings, whose names no link owns (a stale one lets nothing be written
without the topic's grant, which is followed). A principal named otherwise on the target
(``mirror.principals``) is granted there under that name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

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

Changes = tuple[list[AclBinding], list[AclBinding]]
"""What to create on the target, and what to delete there."""


def acls_of(restype: ResourceType) -> AclBindingFilter:
    """Every ACL on resources of ``restype`` (None: any name, principal or host)."""
    return AclBindingFilter(
        restype, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,  # type: ignore[arg-type]
        AclPermissionType.ANY,
    )  # fmt: skip


TOPIC_ACLS = acls_of(ResourceType.TOPIC)
GROUP_ACLS = acls_of(ResourceType.GROUP)
TRANSACTIONAL_ID_ACLS = acls_of(ResourceType.TRANSACTIONAL_ID)
WRITING = frozenset({AclOperation.WRITE, AclOperation.ALL})


def covers(binding: AclBinding, names: Iterable[str]) -> bool:
    """Whether ``binding`` applies to at least one of ``names``."""
    if binding.resource_pattern_type is ResourcePatternType.PREFIXED:
        return any(name.startswith(binding.name) for name in names)
    return binding.name == "*" or binding.name in set(names)


def acl_changes(
    source: Iterable[AclBinding],
    target: Iterable[AclBinding],
    names: Iterable[str] | None,
    principals: Mapping[str, str] | None = None,
) -> Changes:
    """What to create on the target and what to delete there so that its ACLs on ``names`` (None: the
    bindings given, whatever they name, none deleted) follow the source's, each source principal named
    as ``principals`` says it is on the target."""
    owned, source, renamed = None if names is None else set(names), list(source), principals or {}
    wanted = {
        _as(b, renamed.get(b.principal, b.principal)) for b in source if owned is None or covers(b, owned)
    }
    there = set(target)
    stale = [
        b for b in there - wanted
        if source and owned is not None and b.resource_pattern_type is ResourcePatternType.LITERAL
        and b.name in owned
    ]  # fmt: skip
    return sorted(wanted - there), sorted(stale)


def writers(bindings: Iterable[AclBinding], topics: Iterable[str]) -> set[str]:
    """The principals ``bindings`` (topic ACLs) allow to write at least one of ``topics``."""
    topics = list(topics)
    return {
        b.principal for b in bindings
        if b.permission_type is AclPermissionType.ALLOW and b.operation in WRITING and covers(b, topics)
    }  # fmt: skip


def sync_acls(
    source: AdminClient, target: AdminClient, topics: list[str], principals: Mapping[str, str]
) -> str | None:
    """Bring the target's ACLs on ``topics`` in line with the source's, and grant there the
    transactional ids of those allowed to write them; why that failed, or None."""

    def changes() -> Changes:
        on_source = source.describe_acls(TOPIC_ACLS).result(10)
        create, delete = acl_changes(
            on_source, target.describe_acls(TOPIC_ACLS).result(10), topics, principals
        )
        writing = writers(on_source, topics)
        theirs = [
            b for b in source.describe_acls(TRANSACTIONAL_ID_ACLS).result(10)
            if b.principal in writing and b.permission_type is AclPermissionType.ALLOW
        ]  # fmt: skip
        there = target.describe_acls(TRANSACTIONAL_ID_ACLS).result(10)
        return create + acl_changes(theirs, there, None, principals)[0], delete

    return _applied("topic and transactional-id ACLs", target, changes)


def sync_group_acls(
    source: AdminClient, target: AdminClient, groups: Iterable[str], principals: Mapping[str, str]
) -> str | None:
    """Bring the target's ACLs on ``groups`` in line with the source's; why that failed, or None."""
    groups = list(groups)

    def changes() -> Changes:
        on_source = source.describe_acls(GROUP_ACLS).result(10)
        return acl_changes(on_source, target.describe_acls(GROUP_ACLS).result(10), groups, principals)

    return _applied("group ACLs", target, changes) if groups else None


def _applied(what: str, target: AdminClient, changes: Callable[[], Changes]) -> str | None:
    """Make the ``changes`` on the target; why that failed (``what`` not copied), or None. A source
    without an authorizer has no ACLs to copy; a target without one refuses those it is given."""
    try:
        create, delete = changes()
        futures = list(target.create_acls(create).values()) if create else []
        if delete:
            futures += target.delete_acls([exactly(b) for b in delete]).values()
        for future in futures:
            future.result(10)
    except KafkaException as exc:
        return f"{what} not copied: {exc.args[0].str()}"
    except TimeoutError:
        return f"{what} not copied: the clusters did not answer within 10 s"
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
