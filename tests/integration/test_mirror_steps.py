"""A saga's mirror steps on their own, on real Kafka, where a saga's other steps would hide what they do.

The check before the flip must find the target holding exactly what the link copied up to the fenced
end: in a saga the drain has waited for the target to reach that end already, so a check that let a
target one record short through would pass every saga test; here nothing drains. The group sync must
not write a group's offsets on the target while the group has members there (Apache Kafka refuses an
admin's commit to such a group, and a member's own commits would be overwritten): it waits, and names
the group when the wait runs out. The drain brings the copies' settings in line, which the mirror does only
now and then."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.fence import stood_still
from activities.mirror import MirrorActivities
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.errors import FenceBroken
from switchyard.mirror.groups import committed_offsets, group_state, sync_groups
from switchyard.routing import RoutingStore
from switchyard.sagas.steps import (
    CopyCheckRequest,
    DrainRequest,
    GroupSyncRequest,
    PartitionEnd,
)
from tests.helpers.deps import worker_deps
from tests.helpers.records import commit_offset, fill_topic

COPIED = 40


@pytest.fixture
def activities(routing: RoutingStore, stack_config: Config) -> Iterator[MirrorActivities]:
    with worker_deps(routing, stack_config) as deps:
        yield MirrorActivities(deps)


MOVED = rf"FenceBroken.*being written: {{topic}}\[0\] {COPIED - 1} -> {COPIED}"


@pytest.mark.parametrize("at_flip", [False, True], ids=["fenced-here", "fenced-at-flip"])
@pytest.mark.parametrize(
    ("on_target", "fenced", "found"),
    [
        (COPIED, COPIED, None),
        (COPIED - 1, COPIED, f"CopyDiverged.*the target holds {COPIED - 1}, fewer than the {COPIED} to copy"),
        (COPIED + 1, COPIED, f"CopyDiverged.*the target holds {COPIED + 1}, more than the {COPIED} copied"),
        (COPIED, COPIED - 1, MOVED),
        (COPIED - 1, COPIED - 1, MOVED),
    ],
    ids=["exact", "one-short", "one-over", "source-moved", "source-moved-copy-exact"],
)
def test_the_check_before_the_flip_passes_an_exact_copy_and_names_any_record_off(
    on_target: int,
    fenced: int,
    found: str | None,
    at_flip: bool,
    activities: MirrorActivities,
    routing: RoutingStore,
    stack_config: Config,
) -> None:
    """Where the flip closes the fence, the check reads the source only to name why the copy differs: a
    copy exact up to the fenced ends passes, though the source moved (the flip then stops the switch)."""
    if at_flip and (on_target, fenced) == (COPIED - 1, COPIED - 1):
        found = None
    topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("checked-t", "checked-l"))
    fill_topic(stack_config.clusters["primary"].bootstrap, topic, COPIED, partitions=1, size=16)
    fill_topic(stack_config.clusters["standby"].bootstrap, topic, on_target, partitions=1, size=16)
    routing.create_link(link, "primary", "standby", include=[topic], actor="user:test", reason="t")
    check = CopyCheckRequest(link, [PartitionEnd(topic, 0, fenced)], fenced_at_flip=at_flip)
    if found is None:
        assert ActivityEnvironment().run(activities.check_copy, check).verdict == "clean"
    else:
        with pytest.raises(ApplicationError, match=found.replace("{topic}", topic)):
            ActivityEnvironment().run(activities.check_copy, check)


def test_the_drain_brings_the_copys_settings_in_line_with_the_source(
    activities: MirrorActivities, routing: RoutingStore, stack_config: Config
) -> None:
    """The mirror follows a source topic's settings only every ``settings_refresh_s``; a retention
    lengthened just before a switch must still be on the target when clients move there (and not be
    copied back onto the source by the reverse link). Nothing else here would set it: no mirror runs."""
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("drained-t", "drained-l"))
    for bootstrap in (primary, standby):
        fill_topic(bootstrap, topic, COPIED, partitions=1, size=16)
    routing.create_link(link, "primary", "standby", include=[topic], actor="user:test", reason="t")
    lengthened = ConfigEntry("retention.ms", "1209600000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[lengthened])
    source = ClusterAdmin(primary)  # kept until answered: one collected fails
    for future in source.incremental_alter_configs([resource]).values():
        future.result(30)
    drained = ActivityEnvironment().run(
        activities.drain_link, DrainRequest(link, [PartitionEnd(topic, 0, COPIED)], timeout_s=20)
    )
    assert drained.target_ends == [PartitionEnd(topic, 0, COPIED)]
    admin = ClusterAdmin(standby)
    futures = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)])
    (on_target,) = (future.result(10) for future in futures.values())
    assert on_target["retention.ms"].value == "1209600000"
    assert on_target["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value


@pytest.mark.usefixtures("stack")
def test_neither_the_periodic_carry_nor_a_failover_moves_a_groups_offset_back_and_a_planned_switch_does(
    stack_config: Config,
) -> None:
    """A group further along on the target reads there (a reader a switch left on the old source, whose
    topic the reverse link copies back; one whose members' commits the gateways carried over after a
    failover's flip): the mirror's periodic carry leaves it, and so does a failover's sync of the groups
    it moves; a planned switch's, after its drain, writes exactly what the source says."""
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    topic = f"carried-t-{uuid.uuid4().hex[:6]}"
    group = f"{topic}-readers"
    for bootstrap in (primary, standby):
        fill_topic(bootstrap, topic, COPIED, partitions=1, size=16)
    commit_offset(primary, group, topic, 10)
    commit_offset(standby, group, topic, 30)
    source, target = (ClusterAdmin(b) for b in (primary, standby))

    def copies(name: str) -> bool:
        return name == topic

    periodic = sync_groups(source, target, copies, {}, {(topic, 0): COPIED}, groups=None)
    assert committed_offsets(target, group) == {(topic, 0): 30}
    assert f"{group}: {topic}[0] at 30 on the target, further than the source's 10: not moved back" in (
        periodic.skipped
    )
    failed_over = sync_groups(source, target, copies, {}, groups=[group])  # a failover's sync
    assert committed_offsets(target, group) == {(topic, 0): 30}
    assert failed_over.written == []
    named = sync_groups(source, target, copies, {}, groups=[group], rewind=True)
    assert [w.target for w in named.written] == [10]
    assert committed_offsets(target, group) == {(topic, 0): 10}


def test_the_group_sync_waits_while_the_group_has_members_on_the_target_and_names_it(
    activities: MirrorActivities, routing: RoutingStore, stack_config: Config
) -> None:
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("synced-t", "synced-l"))
    group = f"{topic}-readers"
    for bootstrap in (primary, standby):
        fill_topic(bootstrap, topic, COPIED, partitions=1, size=16)
    routing.create_link(link, "primary", "standby", include=[topic], actor="user:test", reason="t")
    commit_offset(primary, group, topic, 7)
    admin = ClusterAdmin(standby)
    member = Consumer({"bootstrap.servers": standby, "group.id": group, "session.timeout.ms": 6000})
    member.subscribe([topic])
    stop = threading.Event()

    def poll() -> None:  # a consumer joins, and stays a member, only while polled
        while not stop.is_set():
            member.poll(0.1)

    polling = threading.Thread(target=poll)
    polling.start()
    try:
        deadline = time.monotonic() + 30
        while _members(admin, group) != 1:
            assert time.monotonic() < deadline, "the consumer never joined on the standby"
            time.sleep(0.2)
        waiting = GroupSyncRequest(link, [group], idle_timeout_s=2)
        with pytest.raises(ApplicationError, match="GroupActive") as refused:
            ActivityEnvironment().run(activities.sync_groups, waiting)
        assert f"still active on standby after 2s: {group} (1 members" in str(refused.value)
        assert (topic, 0) not in committed_offsets(admin, group)  # nothing written under a member
    finally:
        stop.set()
        polling.join(5)
        member.close()  # it leaves the group: idle now
    synced = ActivityEnvironment().run(
        activities.sync_groups, GroupSyncRequest(link, [group], idle_timeout_s=20)
    )
    assert synced.written == 1, synced
    assert committed_offsets(admin, group) == {(topic, 0): 7}


def _members(admin: AdminClient, group: str) -> int | None:
    """How many members ``group`` has (None: its coordinator cannot tell yet, as while it loads)."""
    try:
        return group_state(admin, group)[1]
    except KafkaException:
        return None


def test_a_group_at_the_end_of_a_transaction_is_synced_to_the_copys_end_not_past_it(
    activities: MirrorActivities, routing: RoutingStore, stack_config: Config
) -> None:
    """The source ends with a committed transaction: its marker takes the last source offset and no
    target one, so a consumer that read to the end commits one past the copy's end. Written there as the
    map alone says, the group would skip the first record written to the target after the switch."""
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    topic, link = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("txn-t", "txn-l"))
    group = f"{topic}-readers"
    fill_topic(primary, topic, 5, partitions=1, size=16)
    transactional = Producer({"bootstrap.servers": primary, "transactional.id": f"{topic}-writer"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    for value in (b"in", b"transaction"):
        transactional.produce(topic, value, partition=0)
    transactional.commit_transaction(30)
    fill_topic(standby, topic, 7, partitions=1, size=16)  # the copy: the 7 records, no marker
    routing.create_link(link, "primary", "standby", include=[topic], actor="user:test", reason="t")
    commit_offset(primary, group, topic, 8)  # past the marker at 7: read to the end
    synced = ActivityEnvironment().run(
        activities.sync_groups, GroupSyncRequest(link, [group], idle_timeout_s=20)
    )
    assert synced.written == 1, synced
    assert committed_offsets(ClusterAdmin(standby), group) == {(topic, 0): 7}


@pytest.mark.parametrize("moved_by", ["an abort's marker", "a record"])
def test_the_fence_lets_transaction_markers_pass_and_stops_at_a_record(
    activities: MirrorActivities, routing: RoutingStore, stack_config: Config, moved_by: str
) -> None:
    """A transaction aborted (or committed) while the fence's window is open writes only a marker on the
    source: nothing a client wrote, so nothing left behind (a blocked application's abort lands there
    so). One record written then is a writer around the gateway, and stops the switch. The window's two
    reads are the drain's and the check's or the flip's; here, one read and then the check itself."""
    primary = stack_config.clusters["primary"].bootstrap
    topic = f"fenced-t-{uuid.uuid4().hex[:6]}"
    fill_topic(primary, topic, 3, partitions=1, size=16)
    producer = Producer({"bootstrap.servers": primary, "transactional.id": f"fenced-{uuid.uuid4().hex[:6]}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"in a transaction", partition=0)
    assert producer.flush(10) == 0
    first = activities.deps.ends("primary", [(topic, 0)])  # the window opens
    if moved_by == "a record":
        producer.produce(topic, b"around the gateway", partition=0)
        assert producer.flush(10) == 0
    producer.abort_transaction(30)
    marked = 6 if moved_by == "a record" else 5  # the coordinator writes the marker after it answers
    deadline = time.monotonic() + 20
    while activities.deps.ends("primary", [(topic, 0)])[(topic, 0)] != marked:
        assert time.monotonic() < deadline, "the abort's marker never landed"
        time.sleep(0.05)
    if moved_by == "a record":
        with pytest.raises(FenceBroken, match=rf"source kept being written: {topic}\[0\] 4 -> 6"):
            stood_still(activities.deps, "primary", first)
    else:
        assert stood_still(activities.deps, "primary", first) == {(topic, 0): 5}  # 3, 1 aborted, its marker
