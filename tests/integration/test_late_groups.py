"""A consumer group that read shortly before a switch — before the gateways reported it — is carried
while clients are held, like the groups the plan knew: its next consumer, on the new cluster, reads
nothing twice.

The gateways here report what their clients used only when they acknowledge a routing change (their
periodic report is an hour apart), and the mirror's periodic carry of group offsets is an hour apart
too, so nothing but the saga can carry the group: the plan cannot know it, and the group sync step
must find it in the reports the gateways wrote before acknowledging the block.

Also here: a member's commit carried while its client rejoins on the new cluster lands, in whatever order
the client pipelines its commit and its join."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, ConsumerGroupDescription
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from switchyard import kafka
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import request_schema
from switchyard.keys import BindingKey
from switchyard.mirror.groups import committed_offsets
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.usage import groups_of, read_usage
from tests.helpers.live import Live, unique, wait_for_approval
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import (
    RawClient,
    commit_offset,
    committed,
    consumer_heartbeat,
    coordinator_port,
    join_fields,
    join_group,
    send_commit,
    send_sync,
    sync_group,
)
from tests.integration.test_sagas import ACTOR, prepare
from workers.gateway.routing import apis
from workers.gateway.routing.holds import KIP848_HEARTBEAT_S, SHARE_OF_SESSION, UNKNOWN_SESSION_S

SLOW = "3600"
LIVE_OVERRIDES = {  # the module's deployment (tests/conftest.py)
    "SWITCHYARD__GATEWAY__USAGE_PUBLISH_S": SLOW,
    "SWITCHYARD__MIRROR__GROUP_SYNC_INTERVAL_S": SLOW,
}


def read_and_commit(bootstrap: str, app: str, topic: str, group: str, count: int) -> list[int]:
    """A consumer of ``group`` (the application's, through the gateway) reads ``count`` records, commits
    after each batch and leaves; the values it read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": f"{app}@reader", "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    values: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < count:
            assert time.monotonic() < deadline, f"read {len(values)} of {count}"
            batch = [m for m in consumer.consume(100, 0.5) if m.error() is None]
            values += [int(m.value() or b"0") for m in batch]
            if batch:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


def test_a_group_that_read_just_before_the_plan_is_carried_at_the_switch(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """Its consumers read and committed, then stopped, just before the switch: the next one to start,
    after it, on the standby, must begin where they left off — not at the start of the topic."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config)
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    writer = {"client.id": f"{app}@writer"}
    first = [kafka.Record(None, str(i).encode()) for i in range(30)]
    assert kafka.produce(live.gateway.bootstrap, topic, first, settings=writer) == 30
    # the gateways report the application's writes (acknowledging a routing change), so the plan knows
    # it; its group reads after that report, and no other comes before the switch
    elsewhere = routing.set_binding(BindingKey.for_app(unique("other")), "primary", actor=ACTOR, reason="t")
    wait_for_acks(routing.zk, routing.layout, elsewhere, timeout_s=10)
    group = unique("group")
    assert sorted(read_and_commit(live.gateway.bootstrap, app, topic, group, 30)) == list(range(30))
    uses = read_usage(routing.zk, routing.layout, within_s=3600)
    assert group not in groups_of(uses, [BindingKey.for_app(app)])  # the plan will not know it
    committed = committed_offsets(ClusterAdmin(primary), group)
    assert sum(committed.values()) == 30

    over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a late group")
    assert over.returncode == 0, over.stdout + over.stderr
    assert committed_offsets(ClusterAdmin(standby), group) == committed  # carried
    later = [kafka.Record(None, str(i).encode()) for i in range(30, 40)]
    assert kafka.produce(live.gateway.bootstrap, topic, later, settings=writer) == 10
    assert sorted(read_and_commit(live.gateway.bootstrap, app, topic, group, 10)) == list(range(30, 40))


def test_a_commit_carried_while_its_consumer_rejoins_lands_before_the_join(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """librdkafka's way after a switch: told to rejoin, its consumer asks for a member id (KIP-394), and
    the commit it makes meanwhile goes out between that answer and the join that enters the group. The
    join must not reach the new cluster first (a group with a member there refuses a commit from outside
    it), nor may the carry wait for that join to end: its answer would queue behind the commit's. Once,
    the carry waited, then went out into a rebalancing group: UNKNOWN_MEMBER_ID, and a consumer of a
    topic migration processed a batch again."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config)
    records = [kafka.Record(None, str(i).encode(), 0) for i in range(30)]
    writer = {"client.id": f"{app}@writer"}
    assert kafka.produce(live.gateway.bootstrap, topic, records, settings=writer) == 30
    group, timeout = unique("group"), timedelta(seconds=30)
    join = join_fields(group, topic, timeout)
    with RawClient(live.gateway.port, client_id=f"{app}@reader") as reader:
        member, generation = joined_then_switched(live, reader, link, group, topic, timeout)
        asked = reader.answer(reader.send(apis.JOIN_GROUP, 5, member_id=member, **join))
        assert asked.error_code == ErrorCode.member_id_required, asked.error_code
        commit = send_commit(reader, group, member, generation, topic, 20)
        entering = reader.send(apis.JOIN_GROUP, 5, member_id=asked.member_id, **join)
        assert committed(reader.answer(commit)) == ErrorCode.none
        joined = reader.answer(entering)
        assert joined.error_code == ErrorCode.none, joined.error_code
        sync_group(reader, group, asked.member_id, joined.generation_id)
    standby = stack_config.clusters["standby"].bootstrap
    assert committed_offsets(ClusterAdmin(standby), group) == {(topic, 0): 20}


def test_an_old_memberships_commit_goes_as_the_member_its_client_became_on_another_connection(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """kafkajs after a switch: its rejoin runs on its connection to the new coordinator, as a new member
    (the old id unknown there), while it commits over its connection to the old one as the member of its
    last completed sync. Carried from outside the group, such a commit was refused UNKNOWN_MEMBER_ID once
    the group had the new member (a chaos trial; the records processed again). It goes as that member."""
    assert live.gateway is not None
    app, topic, link = prepared_with_records(live, routing, stack_config)
    group, timeout, reader_id = unique("group"), timedelta(seconds=45), f"{app}@reader"
    join = join_fields(group, topic, timeout)
    with RawClient(live.gateway.port, client_id=reader_id) as old:
        member, generation = joined_then_switched(live, old, link, group, topic, timeout)
        with RawClient(coordinator_port(live.gateway.port, group, reader_id), client_id=reader_id) as new:
            asked = new.answer(new.send(apis.JOIN_GROUP, 5, member_id="", **join))
            joined = new.answer(new.send(apis.JOIN_GROUP, 5, member_id=asked.member_id, **join))
            assert joined.error_code == ErrorCode.none, joined.error_code
            sync = send_sync(new, group, asked.member_id, joined.generation_id, (topic, 0))
            assert new.answer(sync).error_code == ErrorCode.none
            code = commit_offset(old, group, member, generation, topic, 20)
    assert code == ErrorCode.none, code
    standby = stack_config.clusters["standby"].bootstrap
    assert committed_offsets(ClusterAdmin(standby), group) == {(topic, 0): 20}


@pytest.mark.parametrize("through", ["the same gateway", "the other gateway of a pair"])
def test_an_old_memberships_commit_goes_as_the_member_its_client_became_whose_sync_was_refused(
    live: Live, routing: RoutingStore, stack_config: Config, zk: KazooClient, tmp_path: Path, through: str
) -> None:
    """kafkajs after a switchover whose target lost the group's coordinator: its rejoin there was answered,
    its sync refused, and the group, loaded again by another broker, kept the new member at that
    generation. kafkajs then committed as the member of its last completed sync — its old membership —
    over its connection to the old coordinator, and joins again only once that commit is answered.
    Carried from outside the group, the commit was refused UNKNOWN_MEMBER_ID; told to send it again,
    kafkajs sent it as the old member again, and the refusal reached it (a chaos trial: the join had
    gone through the other process of the gateway). It goes as the new member, at the generation of the
    refused sync, whichever gateway process saw that."""
    assert live.gateway is not None
    app, topic, link = prepared_with_records(live, routing, stack_config)
    group, timeout, reader_id = unique("group"), timedelta(seconds=45), f"{app}@reader"
    join = join_fields(group, topic, timeout)
    other = None
    with RawClient(live.gateway.port, client_id=reader_id) as old:
        member, generation = joined_then_switched(live, old, link, group, topic, timeout)
        port = live.gateway.port
        if through == "the other gateway of a pair":
            other = GatewayProcess(
                live.path, root=live.root, gateway_id="gw-pair", log=tmp_path / "pair.log", overrides=live.env
            )
            other.start()
            port = other.port
        try:
            with RawClient(coordinator_port(port, group, reader_id), client_id=reader_id) as new:
                asked = new.answer(new.send(apis.JOIN_GROUP, 5, member_id="", **join))
                joined = new.answer(new.send(apis.JOIN_GROUP, 5, member_id=asked.member_id, **join))
                assert joined.error_code == ErrorCode.none, joined.error_code
                itself = make(  # the leader of a group of one, as kafkajs's
                    element_type(request_schema(apis.SYNC_GROUP, 5), "assignments"),
                    member_id=asked.member_id, assignment=b"",
                )  # fmt: skip
                refused = new.answer(new.send(
                    apis.SYNC_GROUP, 5, group_id=group, generation_id=joined.generation_id,
                    member_id=asked.member_id, protocol_type="consumer", protocol_name="not-range",
                    assignments=(itself,),
                ))  # fmt: skip
                assert refused.error_code == ErrorCode.inconsistent_group_protocol, refused.error_code
            stored = (
                f"{routing.layout.folder('unsynced')}/standby/g-{group}/m-{quote(asked.member_id, safe='')}"
            )
            deadline = time.monotonic() + 10
            while zk.exists(stored) is None:  # written as the gateway answered: another process reads it
                assert time.monotonic() < deadline, f"the refused sync was not stored at {stored}"
                time.sleep(0.1)
            # the group settles at that generation behind the gateway's back, as one loaded again does
            standby = stack_config.clusters["standby"].bootstrap
            standby_port = int(standby.rpartition(":")[2])
            with RawClient(coordinator_port(standby_port, group, reader_id), client_id=reader_id) as direct:
                sync_group(direct, group, asked.member_id, joined.generation_id)
            started = time.monotonic()
            code = commit_offset(old, group, member, generation, topic, 20)
            waited = time.monotonic() - started
        finally:
            if other is not None:
                other.stop()
    assert code == ErrorCode.none, code
    held = min(stack_config.gateway.block_hold_s, timeout.total_seconds() * SHARE_OF_SESSION)
    assert waited < held / 2, f"the commit was held {waited:.1f} s, as for a sync to come"
    assert committed_offsets(ClusterAdmin(standby), group) == {(topic, 0): 20}


def test_a_moved_members_joins_sent_at_once_make_one_member_where_it_moved(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """kafkajs, its fetches refused at a switch by each broker it fetches from, sends a join for each at
    once, naming its old member. Each sent as a new member's, the new cluster gave each a member id; the
    client went on as one, the group waited for the other until its session time-out, and refused
    meanwhile the commits of the old membership: a chaos trial processed 89 records twice. The second
    join must go as the member the first became."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config)
    group, timeout = unique("group"), timedelta(seconds=45)
    join = join_fields(group, topic, timeout)
    with RawClient(live.gateway.port, client_id=f"{app}@reader") as reader:
        member, _ = joined_then_switched(live, reader, link, group, topic, timeout)
        first = reader.send(apis.JOIN_GROUP, 5, member_id=member, **join)
        second = reader.send(apis.JOIN_GROUP, 5, member_id=member, **join)
        asked = reader.answer(first)
        assert asked.error_code == ErrorCode.member_id_required, asked.error_code
        entering = reader.send(apis.JOIN_GROUP, 5, member_id=asked.member_id, **join)  # the first goes on
        joined = reader.answer(second)
        assert (joined.error_code, joined.member_id) == (ErrorCode.none, asked.member_id)
        again = reader.answer(entering)
        assert again.error_code == ErrorCode.none, again.error_code
        sync_group(reader, group, asked.member_id, again.generation_id)
        standby = ClusterAdmin(stack_config.clusters["standby"].bootstrap)
        assert [m.member_id for m in described(standby, group).members] == [asked.member_id]


def test_a_commit_waits_for_no_join_whose_sync_the_gateway_refused(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """kafkajs rejoined on the standby's coordinator, and a switch back came before its sync: the gateway
    refused the sync itself (that broker is the standby's), and the client joined again elsewhere. The
    connection still counted a join under way, so a commit of the old membership, carried to the
    primary, waited the whole hold for it — and with it a Metadata request the group's new leader sent
    behind it: the leader never synced, and the group was stuck for 50 s (a chaos trial). The commit
    must be carried at once."""
    assert live.gateway is not None
    app, topic, link = prepared_with_records(live, routing, stack_config)
    over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a sync refused")
    assert over.returncode == 0, over.stdout + over.stderr
    group, timeout, reader_id = unique("group"), timedelta(seconds=45), f"{app}@reader"
    with RawClient(coordinator_port(live.gateway.port, group, reader_id), client_id=reader_id) as reader:
        member, _ = join_group(reader, group, topic, timeout)  # on the standby's coordinator
        again = reader.answer(
            reader.send(apis.JOIN_GROUP, 5, member_id=member, **join_fields(group, topic, timeout))
        )
        assert again.error_code == ErrorCode.none, again.error_code
        back = live.cli("switchback", app, "--wait", "--reason", "a sync refused")
        assert back.returncode == 0, back.stdout + back.stderr
        sync = {"group_id": group, "generation_id": again.generation_id, "assignments": ()}
        synced = reader.answer(reader.send(apis.SYNC_GROUP, 3, member_id=member, **sync))
        assert synced.error_code == ErrorCode.not_coordinator, synced.error_code  # the gateway's own
        started = time.monotonic()
        code = committed(reader.answer(send_commit(reader, group, member, again.generation_id, topic, 20)))
        waited = time.monotonic() - started
    assert code == ErrorCode.none, code
    held = min(stack_config.gateway.block_hold_s, timeout.total_seconds() * SHARE_OF_SESSION)
    assert waited < held / 2, f"the commit was held {waited:.1f} s, as for a join under way"
    primary = stack_config.clusters["primary"].bootstrap
    assert committed_offsets(ClusterAdmin(primary), group) == {(topic, 0): 20}


@pytest.mark.parametrize("sent", ["after the join's answer", "behind the join"])
def test_a_commit_of_the_generation_its_members_next_join_passed_goes_in_that_one_once_synced(
    live: Live, stack_config: Config, sent: str
) -> None:
    """kafkajs commits with the generation of its last completed sync while its next join waits for its
    own: a chaos trial's consumer joined twice in 0.3 s (a rejoin it had queued), and its commits in
    between, of the generation before, were refused ILLEGAL_GENERATION three times and the records
    processed again. Sent on the connection whose join it follows, such a commit waits for that join's
    sync and goes in its generation when the sync assigned the member every partition it names. So does
    one sent behind the join before its answer, which the broker takes only after it (another chaos
    trial: refused 3 ms after the join's answer)."""
    assert live.gateway is not None
    primary = stack_config.clusters["primary"].bootstrap
    group, topic, timeout, reader_id = (
        unique("group"),
        unique("t"),
        timedelta(seconds=45),
        f"{unique('a')}@reader",
    )
    kafka.create_topics(primary, [topic], partitions=1)
    with RawClient(coordinator_port(live.gateway.port, group, reader_id), client_id=reader_id) as reader:
        join = join_fields(group, topic, timeout)
        member = reader.answer(reader.send(apis.JOIN_GROUP, 5, member_id="", **join)).member_id
        first = reader.answer(reader.send(apis.JOIN_GROUP, 5, member_id=member, **join)).generation_id
        assert reader.answer(send_sync(reader, group, member, first, (topic, 0))).error_code == ErrorCode.none
        joining = reader.send(apis.JOIN_GROUP, 5, member_id=member, **join)
        if sent == "behind the join":
            commit = send_commit(reader, group, member, first, topic, 20)
        again = reader.answer(joining)
        assert again.error_code == ErrorCode.none, again.error_code
        assert again.generation_id > first
        if sent == "after the join's answer":
            commit = send_commit(reader, group, member, first, topic, 20)  # of the generation before
        # held for the sync either way: here the join's answer reaches the gateway before it decides the
        # commit behind it (the single member's join is answered at once); a commit decided before the
        # answer (the chaos trial's, its join answered 200 ms later) is the unit tests' case
        assert reader.quiet_for(1.0), "the commit was answered before the join's sync was sent"
        sync = send_sync(reader, group, member, again.generation_id, (topic, 0))
        code = committed(reader.answer(commit))
        assert reader.answer(sync).error_code == ErrorCode.none
    assert code == ErrorCode.none, code
    assert committed_offsets(ClusterAdmin(primary), group) == {(topic, 0): 20}


def prepared_with_records(live: Live, routing: RoutingStore, config: Config) -> tuple[str, str, str]:
    """``prepare``'s application, topic and link, 30 records written to the topic through the gateway."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, config)
    records = [kafka.Record(None, str(i).encode(), 0) for i in range(30)]
    assert (
        kafka.produce(live.gateway.bootstrap, topic, records, settings={"client.id": f"{app}@writer"}) == 30
    )
    return app, topic, link


def joined_then_switched(
    live: Live, reader: RawClient, link: str, group: str, topic: str, timeout: timedelta
) -> tuple[str, int]:
    """``reader`` (an application's client, through the gateway) joins ``group`` on the primary, then its
    application is switched over; its member id and generation there."""
    joined = join_group(reader, group, topic, timeout)
    app = reader.client_id.partition("@")[0]
    over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a member moved")
    assert over.returncode == 0, over.stdout + over.stderr
    return joined


def test_a_member_that_joined_before_the_gateway_started_is_removed_where_it_joined_when_it_rejoins(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """A gateway started again mid-switch knows none of its clients' members. The Java client, moved,
    rejoins under its old member id: the gateway must find where that member joined and have that
    cluster forget it — left there, it would hold its group's next switch back for its whole session
    time-out, clients held (a chaos trial's switch back waited 28 s for it)."""
    app, topic, link = prepare(live, routing, stack_config)
    assert live.gateway is not None
    primary = stack_config.clusters["primary"].bootstrap
    group, timeout = unique("group"), timedelta(seconds=45)
    with RawClient(int(primary.rpartition(":")[2]), client_id=f"{app}@reader") as before:
        member, _ = join_group(before, group, topic, timeout)  # joined where the gateway did not see it
    over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a member left behind")
    assert over.returncode == 0, over.stdout + over.stderr
    admin = ClusterAdmin(primary)
    assert [m.member_id for m in described(admin, group).members] == [member]
    with RawClient(live.gateway.port, client_id=f"{app}@reader") as after:
        rejoined = after.answer(
            after.send(apis.JOIN_GROUP, 5, member_id=member, **join_fields(group, topic, timeout))
        )
        # the standby never had it: it joins there as a new member
        assert rejoined.error_code in (ErrorCode.member_id_required, ErrorCode.unknown_member_id)
    left_within(admin, group, 10, "the member stayed on the primary")


def test_a_consumer_protocol_member_that_joined_before_the_gateway_started_is_removed_where_it_joined(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """The same for a member of the consumer protocol (KIP-848): told its member is unknown on the new
    cluster, the client joins again under the same member id (epoch 0); the cluster it joined on must
    forget it (librdkafka's, left there after a gateway restart, held a chaos trial's switch back 21 s
    for its 45 s session)."""
    app, topic, link = prepare(live, routing, stack_config)
    assert live.gateway is not None
    primary = stack_config.clusters["primary"].bootstrap
    group, member = unique("group"), str(uuid.uuid4())
    with RawClient(int(primary.rpartition(":")[2]), client_id=f"{app}@reader") as before:
        joined = consumer_heartbeat(before, group, member, 0, topic=topic)  # where the gateway did not see it
        assert joined.error_code == ErrorCode.none, joined.error_code
    over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a member left behind")
    assert over.returncode == 0, over.stdout + over.stderr
    admin = ClusterAdmin(primary)
    assert [m.member_id for m in described(admin, group).members] == [member]
    with RawClient(live.gateway.port, client_id=f"{app}@reader") as after:
        consumer_heartbeat(after, group, member, 0, topic=topic)  # joins the standby under its id
    left_within(admin, group, 10, "the member stayed on the primary")


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_whose_client_joined_again_as_a_new_one_is_removed_where_it_was_left(
    live: Live, routing: RoutingStore, stack_config: Config, protocol: str
) -> None:
    """A client that crashed and started again joins as a new member: kafkajs does so when its
    connections are refused for a few seconds, as across a gateway restart. Its old member, which no
    gateway knows, stayed on the cluster it left until its session expired, and held a chaos trial's next
    switch 17 s, clients held. The new member's join through the gateway has it removed."""
    app, topic, link = prepare(live, routing, stack_config)
    assert live.gateway is not None
    primary = stack_config.clusters["primary"].bootstrap
    group, timeout = unique("group"), timedelta(seconds=45)
    with RawClient(int(primary.rpartition(":")[2]), client_id=f"{app}@reader") as before:
        if protocol == "classic":  # where the gateway did not see it
            join_group(before, group, topic, timeout)
        else:
            joined = consumer_heartbeat(before, group, str(uuid.uuid4()), 0, topic=topic)
            assert joined.error_code == ErrorCode.none, joined.error_code
    over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a member left behind")
    assert over.returncode == 0, over.stdout + over.stderr
    admin = ClusterAdmin(primary)
    assert len(described(admin, group).members) == 1
    with RawClient(live.gateway.port, client_id=f"{app}@reader") as after:  # the client, started again
        if protocol == "classic":
            after.answer(after.send(apis.JOIN_GROUP, 5, member_id="", **join_fields(group, topic, timeout)))
        else:
            consumer_heartbeat(after, group, str(uuid.uuid4()), 0, topic=topic)
    left_within(admin, group, 10, "the old member stayed on the primary")


UNSEEN_HOLD_S = UNKNOWN_SESSION_S * SHARE_OF_SESSION
"""How long the gateway holds a request of a member it never saw join (``workers.gateway.routing.holds``)."""


def test_a_commit_held_at_the_block_from_a_member_the_gateway_never_saw_is_carried_at_the_flip(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """A gateway started again while its keys are blocked knows none of its clients' members. A commit
    held then, from a member of the consumer protocol that joined on the primary, cannot be placed yet:
    no link copies into the primary. Let go at the flip, it goes to the standby, which never knew the
    member, so it must be looked up again and carried as a commit of the primary's. Sent as it is, it was
    refused (UNKNOWN_MEMBER_ID), and a chaos trial's KIP-848 consumer processed two records again.

    A hold of an unseen member's request lasts a third of the shortest default session (3.3 s); on a
    loaded machine the approval and the flip took longer once, and the hold ended with the retriable
    NOT_COORDINATOR. The commit is sent again then, as a client does, and held again until the flip; a
    NOT_COORDINATOR that comes sooner than the hold's end is a refusal, and fails the test."""
    app, topic, link = prepare(live, routing, stack_config)
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.produce(primary, topic, [kafka.Record(None, str(n).encode(), partition=0) for n in range(5)])
    group, member = unique("group"), str(uuid.uuid4())
    with RawClient(int(primary.rpartition(":")[2]), client_id=f"{app}@reader") as before:
        joined = consumer_heartbeat(before, group, member, 0, topic=topic)  # where the gateway did not see it
        assert joined.error_code == ErrorCode.none, joined.error_code
    started = live.cli("switchover", app, "--link", link, "--approval", "before-flip", "--reason", "held")
    assert started.returncode == 0, started.stdout + started.stderr
    saga = saga_id([app])
    wait_for_approval(live, saga)
    with RawClient(live.gateway.port, client_id=f"{app}@reader") as after, ThreadPoolExecutor(1) as reader:

        def commit() -> tuple[ErrorCode, float]:
            """The commit's answer, and how long after its sending it came."""
            sent = time.monotonic()
            held = send_commit(after, group, member, joined.member_epoch, topic, 3, version=9)
            return committed(after.answer(held)), time.monotonic() - sent

        first = reader.submit(commit)  # answered while the approval below is sent
        time.sleep(0.5)  # held: the key is blocked
        approved = live.cli("sagas", "approve", saga, "--reason", "go on")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        answered, waited = first.result(60)
        deadline = time.monotonic() + 60
        while answered == ErrorCode.not_coordinator:  # held out: sent again, as a client does
            assert waited > UNSEEN_HOLD_S - 0.2, f"refused after {waited:.2f}s, not held until its hold ended"
            assert time.monotonic() < deadline, "the commit was never let go"
            answered, waited = commit()
        assert answered == ErrorCode.none
    live.follow_to_switched(saga, "switchover", app)
    assert committed_offsets(ClusterAdmin(standby), group) == {(topic, 0): 3}


def left_within(admin: AdminClient, group: str, seconds: float, why: str) -> None:
    """Until ``group`` has no members where ``admin`` asks; ``why`` fails the test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while described(admin, group).members:
        assert time.monotonic() < deadline, why
        time.sleep(0.2)


def described(admin: AdminClient, group: str) -> ConsumerGroupDescription:
    return admin.describe_consumer_groups([group])[group].result(30)


LONG_BLOCK_S = 26.0
"""Longer than librdkafka spends on a commit sent into a block: six sends held 3.3 s each, with a
parking between them (about 21 s), after which the commit failed to the application."""


def test_a_consumer_protocol_members_commit_made_through_a_long_block_lands_once_it_ends(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """librdkafka's member of the consumer protocol (KIP-848) commits while its group is blocked, and the
    block lasts longer than the client sends a commit for (a saga waiting at an approval here; a worker
    or a broker struck mid-switch in the chaos trials). The gateway holds the commit only as long as the
    member's heartbeat allows, then answers NOT_COORDINATOR; the client looks its coordinator up, is told
    there is none yet, and sends the commit where the flip sends the group. Its coordinator found at once,
    the client sent the commit into the block until it gave up and failed it to the application, which
    then processed its batch again (a chaos trial, and the suite's sample on CI)."""
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.produce(primary, topic, [kafka.Record(None, str(n).encode(), partition=0) for n in range(5)])
    group = unique("group")
    consumer = Consumer({"bootstrap.servers": live.gateway.bootstrap, "client.id": f"{app}@reader",
                         "group.id": group, "group.protocol": "consumer", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([topic])
    try:
        read: list[bytes | None] = []
        deadline = time.monotonic() + 60
        while len(read) < 5:
            assert time.monotonic() < deadline, f"read {len(read)} of 5"
            read += [m.value() for m in consumer.consume(10, 0.5) if m.error() is None]
        started = live.cli("switchover", app, "--link", link, "--approval", "before-flip", "--reason", "held")
        assert started.returncode == 0, started.stdout + started.stderr
        saga = saga_id([app])
        wait_for_approval(live, saga)
        with ThreadPoolExecutor(1) as committing:
            sent = time.monotonic()
            commit = committing.submit(consumer.commit, asynchronous=False)
            while not commit.done() and time.monotonic() - sent < LONG_BLOCK_S:
                time.sleep(0.5)
            if commit.done():
                pytest.fail(
                    f"answered in the block, {time.monotonic() - sent:.1f} s in: {commit.exception()}"
                )
            approved = live.cli("sagas", "approve", saga, "--reason", "go on")
            assert approved.returncode == 0, approved.stdout + approved.stderr
            assert [(p.topic, p.partition, p.offset, p.error) for p in commit.result(60)] == [
                (topic, 0, 5, None)
            ]
        live.follow_to_switched(saga, "switchover", app)
    finally:
        consumer.close()
    assert committed_offsets(ClusterAdmin(standby), group) == {(topic, 0): 5}


def test_a_consumer_protocol_member_moved_while_it_processes_commits_what_it_read_before_it_polls(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """librdkafka's member of the consumer protocol (KIP-848) reads, and is switched over while it
    processes (it does not poll), then commits what it read. Fenced at its first heartbeat to the new
    cluster, it had lost its partitions, and the commit failed ``_ASSIGNMENT_LOST``: what it processed
    it would process again (a chaos trial). Told to give them up instead, it revokes them at its next
    poll, the commit made before that lands, and it reads on where it committed, nothing twice."""
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.produce(primary, topic, [kafka.Record(None, str(n).encode(), partition=0) for n in range(10)])
    group = unique("group")
    revoked: list[int] = []
    lost: list[int] = []
    consumer = Consumer({"bootstrap.servers": live.gateway.bootstrap, "client.id": f"{app}@reader",
                         "group.id": group, "group.protocol": "consumer", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe(
        [topic], on_revoke=lambda _c, ps: revoked.append(len(ps)), on_lost=lambda _c, ps: lost.append(len(ps))
    )
    read: list[bytes | None] = []

    def read_to(count: int) -> None:
        deadline = time.monotonic() + 60
        while len(read) < count:
            assert time.monotonic() < deadline, f"read {len(read)} of {count}"
            read.extend(m.value() for m in consumer.consume(1, 0.5) if m.error() is None)

    try:
        read_to(5)
        over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "a member moved")
        assert over.returncode == 0, over.stdout + over.stderr
        time.sleep(KIP848_HEARTBEAT_S + 2)  # its first heartbeat after the flip is answered before it polls
        committed = consumer.commit(asynchronous=False)
        assert [(p.topic, p.partition, p.offset, p.error) for p in committed or []] == [(topic, 0, 5, None)]
        read_to(10)
        read.extend(m.value() for m in consumer.consume(10, 3) if m.error() is None)
        let_go = (list(revoked), list(lost))  # before its close revokes what it holds on the standby
    finally:
        consumer.close()
    assert read == [str(n).encode() for n in range(10)]  # nothing twice, nothing skipped
    assert let_go == ([1], [])  # revoked once, at the switch; lost never
    assert committed_offsets(ClusterAdmin(standby), group)[(topic, 0)] >= 5
