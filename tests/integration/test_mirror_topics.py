"""What a link carries besides records, from the older Apache Kafka line (3.9) to the default one, both
with an authorizer on: a source log that starts above 0 (DeleteRecords), partitions the source gains,
topic settings (one the target refuses), topic, group and transactional-id ACLs. On brokers of this
module's own: their versions and their authorizer are not the shared stack's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack
from functools import partial
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from switchyard import kafka
from switchyard.config import Config
from switchyard.mirror.mapstore import read_maps
from switchyard.mirror.status import read_status
from switchyard.model import now
from switchyard.routing.store import RoutingStore
from tests.helpers.mirrors import Mirrors, records, unique, wait_drained, wait_group_offset
from tests.helpers.records import commit_offset
from tests.helpers.services import PrivateService
from tests.helpers.stacks import QUICK_CONSUMER
from workers.mirror.acls import GROUP_ACLS, TOPIC_ACLS, TRANSACTIONAL_ID_ACLS, exactly

ACTOR = "user:test"
OLDER = "3.9.2"
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",  # whoever comes through the plaintext listener: the mirror, the tests
    "allow.everyone.if.no.acl.found": "true",
}
BROKER_WIDE = {"log.cleaner.delete.retention.ms": "4321000"}
"""A broker-level setting of the source's: every topic there shows it (``delete.retention.ms``), as its
broker's, not its own."""


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A 3.9 source and a default-version target, each one broker with an authorizer."""
    directory = tmp_path_factory.mktemp("pair")
    source = PrivateService.kafka(directory / "source", version=OLDER, properties=AUTHORIZER | BROKER_WIDE)
    target = PrivateService.kafka(directory / "target", properties=AUTHORIZER)
    with ExitStack() as stack:
        for broker in (source, target):
            stack.callback(broker.stop)
            broker.start()
        yield source.connect, target.connect


@pytest.fixture(scope="module")
def mirror(
    stack_config: Config,
    routing: RoutingStore,
    ledger_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    pair: tuple[str, str],
) -> Iterator[Mirrors]:
    """One mirror process for the module, the pair as its primary and standby; each test adds a link."""
    mirrors = Mirrors(stack_config, routing, ledger_path, tmp_path_factory.mktemp("mirror"))
    source, target = pair
    mirrors.start(
        SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP=source,
        SWITCHYARD__CLUSTERS__STANDBY__BOOTSTRAP=target,
        SWITCHYARD__MIRROR__PRINCIPALS__DAVE__PRIMARY="User:dave",  # dave is someone else on the target
        SWITCHYARD__MIRROR__PRINCIPALS__DAVE__STANDBY="User:dave-dr",
        SWITCHYARD__MIRROR__SETTINGS_REFRESH_S="1",  # the default's 30 s would outlast a test's wait
    )
    yield mirrors
    mirrors.stop_all()


def link(routing: RoutingStore, *topics: str) -> str:
    name = unique("link")
    routing.create_link(name, "primary", "standby", include=list(topics), actor=ACTOR, reason="t")
    return name


def test_a_source_log_that_starts_above_zero_is_copied_with_an_exact_map(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    """Retention or DeleteRecords leave a source log starting above 0; a producer cannot choose offsets,
    so the copy starts at 0 and the map places every record — and a group's position with it."""
    source, target = pair
    topic = unique("trimmed")
    kafka.create_topics(source, [topic])
    kafka.produce(source, topic, records(100))
    delete_before(source, topic, 40)
    name = link(routing, topic)
    wait_drained(routing, name, [(topic, 0)], since=now())

    kafka.produce(source, topic, records(10, "later"))
    delete_before(source, topic, 80)  # the log start moves on behind the copy: nothing changes for it
    wait_drained(routing, name, [(topic, 0)], since=now())
    copy = kafka.read_partitions(target, topic)[0]
    assert [r.offset for r in copy] == list(range(70))
    written = records(100)[40:] + records(10, "later")
    assert [(r.key, r.value) for r in copy] == [(r.key, r.value) for r in written]
    offset_map = read_maps(target, name)[(topic, 0)]
    assert [offset_map.target_of(s) for s in range(40, 110)] == list(range(70))

    group = unique("g")
    commit_offset(source, group, topic, 90)  # the group read up to source offset 89
    assert wait_group_offset(target, group, topic, 50) == 50
    resumed = kafka.consume(target, topic, group=group, count=1, settings=QUICK_CONSUMER)
    assert resumed[0].value == written[50].value


def test_partitions_the_source_gains_are_added_and_copied(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    source, target = pair
    topic = unique("grown")
    kafka.create_topics(source, [topic], partitions=1)
    kafka.produce(source, topic, records(50))
    name = link(routing, topic)
    wait_drained(routing, name, [(topic, 0)], since=now())

    admin = AdminClient({"bootstrap.servers": source})
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    grown = time.monotonic()
    kafka.produce(source, topic, [kafka.Record(f"k{i}".encode(), b"v", partition=i % 3) for i in range(30)])
    wait_drained(routing, name, [(topic, p) for p in range(3)], since=now())
    print(f"\nthe grown partitions copied {time.monotonic() - grown:.1f}s after they were added")
    on_source, on_target = kafka.read_partitions(source, topic), kafka.read_partitions(target, topic)
    assert {p: len(r) for p, r in on_target.items()} == {0: 60, 1: 10, 2: 10}
    for partition, written in on_source.items():
        assert [(r.offset, r.key) for r in on_target[partition]] == [(r.offset, r.key) for r in written]


def test_a_setting_the_target_refuses_is_left_out_and_reported_for_that_topic_alone(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    """3.9 knows message.downconversion.enable, 4.x no longer does: the copy is created without it, its
    other settings kept, its records copied; the link's status says so; the link's other topic is whole."""
    source, target = pair
    odd, plain = unique("odd"), unique("plain")
    kafka.create_topics(source, [plain])
    admin = AdminClient({"bootstrap.servers": source})
    settings = {"retention.ms": "86400000", "message.downconversion.enable": "false"}
    admin.create_topics([NewTopic(odd, 1, config=settings)])[odd].result(30)
    for topic in (odd, plain):
        kafka.produce(source, topic, records(20))
    name = link(routing, odd, plain)
    wait_drained(routing, name, [(odd, 0), (plain, 0)], since=now())

    assert len(kafka.read_partitions(target, odd)[0]) == len(kafka.read_partitions(target, plain)[0]) == 20
    assert described(target, odd)["retention.ms"].value == "86400000"
    notes = [note for member in read_status(routing.zk, routing.layout, name) for note in member.notes]
    assert notes == [
        f"topic {odd} created without message.downconversion.enable=false (the target: "
        "Unknown topic config name: message.downconversion.enable)"
    ]


def test_only_what_the_topic_itself_sets_is_copied_not_its_brokers_settings(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    """A copy made with the source broker's settings as its own would keep them on a target whose brokers
    are set otherwise, and past any later change of the target's defaults."""
    source, target = pair
    topic = unique("overrides")
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic(topic, 1, config={"retention.bytes": "123456789"})])[topic].result(30)
    on_source = described(source, topic)
    assert on_source["delete.retention.ms"].value == "4321000"
    assert on_source["delete.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    kafka.produce(source, topic, records(5))
    name = link(routing, topic)
    wait_drained(routing, name, [(topic, 0)], since=now())

    on_target = described(target, topic)
    overrides = {n for n, e in on_target.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}
    assert overrides == {"retention.bytes"}, overrides
    assert on_target["retention.bytes"].value == "123456789"
    assert on_target["delete.retention.ms"].value == "86400000"  # the target's own default


def test_settings_changed_on_the_source_after_the_copy_follow_onto_it(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    """A retention lengthened on the source, once the copy exists, is lengthened on the copy within a
    settings refresh: the standby must still hold what the primary holds when clients switch to it."""
    source, target = pair
    topic = unique("changed")
    admin = AdminClient({"bootstrap.servers": source})
    admin.create_topics([NewTopic(topic, 1, config={"retention.ms": "86400000"})])[topic].result(30)
    kafka.produce(source, topic, records(5))
    name = link(routing, topic)
    wait_drained(routing, name, [(topic, 0)], since=now())
    assert described(target, topic)["retention.ms"].value == "86400000"

    change = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
              for k, v in {"retention.ms": "604800000", "max.message.bytes": "2097152"}.items()]  # fmt: skip
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=change)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while (on_target := described(target, topic))["retention.ms"].value != "604800000":
        assert time.monotonic() < deadline, "the copy's retention never followed the source's"
        time.sleep(0.5)
    assert on_target["max.message.bytes"].value == "2097152"
    notes = [note for member in read_status(routing.zk, routing.layout, name) for note in member.notes]
    assert notes == []


def described(bootstrap: str, topic: str) -> dict[str, ConfigEntry]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until answered: a client collected fails
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    (entries,) = (future.result(10) for future in futures.values())
    return dict(entries)


def test_topic_acls_follow_the_source_onto_the_target(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    """The bindings covering the link's topics are created on the target, others are not; a principal
    the configuration names otherwise on the target is granted there under that name; a grant revoked on
    the source is revoked on the target."""
    source, target = pair
    topic, elsewhere = unique("guarded"), unique("elsewhere")
    prefix = topic[: len("guarded-")]
    alice, bob, carol, dave = (
        acl(topic, "User:alice", AclOperation.READ),
        acl(prefix, "User:bob", AclOperation.WRITE, ResourcePatternType.PREFIXED),
        acl(elsewhere, "User:carol", AclOperation.READ),
        acl(topic, "User:dave", AclOperation.DESCRIBE),
    )
    dave_there = acl(topic, "User:dave-dr", AclOperation.DESCRIBE)
    on_source = AdminClient({"bootstrap.servers": source})
    for future in on_source.create_acls([alice, bob, carol, dave]).values():
        future.result(10)
    kafka.create_topics(source, [topic])
    kafka.produce(source, topic, records(5))
    name = link(routing, topic)
    wait_drained(routing, name, [(topic, 0)], since=now())
    granted = {alice, bob, dave_there}  # not carol: her topic is not the link's
    names = {topic, prefix, elsewhere}
    assert wait_for_acls(target, granted, names=names) == granted

    for future in on_source.delete_acls([exactly(alice)]).values():
        future.result(10)
    assert wait_for_acls(target, {bob, dave_there}, names=names) == {bob, dave_there}


def test_group_and_transactional_id_acls_follow_the_source_onto_the_target(
    mirror: Mirrors, routing: RoutingStore, pair: tuple[str, str]
) -> None:
    """A client switched to the target joins its group and runs its transactions there. The grants on
    the groups with offsets on the link's topics follow the source, a revoked one revoked; a group that
    reads elsewhere brings none. The transactional ids of those allowed to write the link's topics are
    granted, their denials not (only ever added, a lifted one would stay); another principal's are not."""
    source, target = pair
    topic, elsewhere = unique("grouped"), unique("elsewhere")
    group, other_group, tx, other_tx = unique("reads"), unique("reads-elsewhere"), unique("tx"), unique("tx")
    group_acl = partial(acl, restype=ResourceType.GROUP)
    tx_acl = partial(acl, restype=ResourceType.TRANSACTIONAL_ID)
    frank, grace = (
        group_acl(group, "User:frank", AclOperation.READ),
        group_acl(group, "User:grace", AclOperation.READ),
    )
    elsewhere_group = group_acl(other_group, "User:frank", AclOperation.READ)
    erin_tx, frank_tx = (
        tx_acl(tx, "User:erin", AclOperation.WRITE),
        tx_acl(other_tx, "User:frank", AclOperation.WRITE),
    )
    on_source = AdminClient({"bootstrap.servers": source})
    erin_writes = acl(topic, "User:erin", AclOperation.WRITE)
    erin_denied = AclBinding(
        ResourceType.TRANSACTIONAL_ID, other_tx, ResourcePatternType.LITERAL, "User:erin", "*",
        AclOperation.WRITE, AclPermissionType.DENY,
    )  # fmt: skip
    for future in on_source.create_acls(
        [erin_writes, frank, grace, elsewhere_group, erin_tx, frank_tx, erin_denied]
    ).values():
        future.result(10)
    kafka.create_topics(source, [topic, elsewhere])
    kafka.produce(source, topic, records(5))
    commit_offset(source, group, topic, 3)
    commit_offset(source, other_group, elsewhere, 0)
    name = link(routing, topic)
    wait_drained(routing, name, [(topic, 0)], since=now())

    groups, ids = {group, other_group}, {tx, other_tx}
    assert wait_for_acls(target, {frank, grace}, GROUP_ACLS, groups) == {frank, grace}
    assert wait_for_acls(target, {erin_tx}, TRANSACTIONAL_ID_ACLS, ids) == {erin_tx}
    for future in on_source.delete_acls([exactly(grace)]).values():
        future.result(10)
    assert wait_for_acls(target, {frank}, GROUP_ACLS, groups) == {frank}


def acl(
    name: str,
    principal: str,
    operation: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    restype: ResourceType = ResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(restype, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)


def wait_for_acls(
    bootstrap: str,
    expected: set[AclBinding],
    kind: AclBindingFilter = TOPIC_ACLS,
    names: set[str] | None = None,
    timeout_s: float = 30,
) -> set[AclBinding]:
    """The ACLs of ``kind`` on ``bootstrap`` (those on ``names``; None: all) once they are ``expected``
    (or what they are at the deadline)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while True:
        found = {b for b in admin.describe_acls(kind).result(10) if names is None or b.name in names}
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def delete_before(bootstrap: str, topic: str, offset: int) -> None:
    """DeleteRecords: ``topic``[0]'s log starts at ``offset`` from now on."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a client collected fails its futures
    deleted = admin.delete_records([TopicPartition(topic, 0, offset)])
    (result,) = (future.result(30) for future in deleted.values())
    assert result.low_watermark == offset, result
