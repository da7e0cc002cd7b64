"""One partition of three moved between clusters through the gateway under live traffic (seed 004),
by driving the routing store the way the partition migration saga does.

A producer and a consumer group run through the gateway the whole time. The migration is recorded
(writes to the partition held at the gateway), acknowledged by the gateway, the origin's exact end read
and recorded as the end offset, and the writes released to the target. Judged by what the application
saw: every send acknowledged, each record once across the two clusters, nothing written to the origin's
partition after its end, and the consumer's offsets for the partition going on from the end offset
without a gap or a repeat.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kio.schema.describe_topic_partitions.v0.request import TopicRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic
from temporalio.client import Schedule, ScheduleActionExecutionStartWorkflow

from switchyard import kafka, temporal
from switchyard.acked import acked_end
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.model import LinkState, MigrationState, PartitionId
from switchyard.routing import RoutingStore
from switchyard.routing.gateways import wait_for_acks
from switchyard.sagas.ids import aging_schedule_id, origin_retirement_id, partition_migration_id
from switchyard.sagas.requests import AgingReport, Decision, Progress
from switchyard.traffic import Traffic
from tests.helpers.live import Live, capture, unique
from tests.helpers.migrations import migrate
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import RawClient, fetch_fields
from tests.helpers.traffic import judge_consumer
from tests.integration.test_gateway import gateway  # noqa: F401 - a shared module fixture
from workers.gateway.routing import apis

PARTITIONS = 3
MOVED = 1
ACTOR = "user:test"


def pause(traffic: Traffic, partition: int, held_at: float, released_at: float) -> float:
    """The longest time between two acknowledgements of ``partition``'s records around the hold."""
    times = [t for t, (p, _) in zip(traffic.acked_at, traffic.acked_where, strict=False) if p == partition]
    before = max(t for t in times if t <= held_at)
    after = [t for t in times if t >= before]
    return max(b - a for a, b in itertools.pairwise(after) if a <= released_at + 1)


def values(bootstrap: str, topic: str, partition: int) -> list[int]:
    return [int(r.value or b"-1") for r in kafka.read_partitions(bootstrap, topic).get(partition, [])]


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent-producer", "plain-producer"])
def test_a_smooth_migration_moves_one_partitions_writes_and_keeps_its_offsets_going_on(
    gateway: GatewayProcess,  # noqa: F811
    routing: RoutingStore,
    stack_config: Config,
    idempotent: bool,
) -> None:
    app, topic = f"mig-{uuid.uuid4().hex[:6]}", f"migrating-{uuid.uuid4().hex[:6]}"
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    for bootstrap in (primary, standby):
        kafka.create_topics(bootstrap, [topic], partitions=PARTITIONS)
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="start")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    moved = PartitionId(topic, MOVED)

    traffic = Traffic(gateway.bootstrap, app, topic, f"g-{uuid.uuid4().hex[:6]}", idempotent=idempotent,
                      rate_per_s=400)  # fmt: skip
    traffic.start()
    try:
        traffic.wait_for(300)
        held_at = time.monotonic()
        end = migrate(routing, stack_config, moved, "primary", "standby")
        released_at = time.monotonic()
        traffic.wait_for(600)
    finally:
        traffic.stop()

    assert traffic.failed == []
    assert sorted(traffic.acked) == list(range(traffic.sent))
    on_origin = {p: values(primary, topic, p) for p in range(PARTITIONS)}
    on_target = values(standby, topic, MOVED)
    assert len(on_origin[MOVED]) == end  # nothing written to the origin's partition after its end
    held = Counter(v for vs in on_origin.values() for v in vs) + Counter(on_target)
    assert set(held) == set(traffic.acked)
    assert max(held.values()) == 1  # each record once, on one side
    moved_acks = sorted(o for p, o in traffic.acked_where if p == MOVED)
    assert moved_acks == list(range(end + len(on_target)))  # acknowledged at client offsets, no gap
    assert on_target, "nothing was written to the target"
    if idempotent:
        leaders_agree(gateway, app, topic)
    print(
        f"\nend offset {end}; {len(on_target)} records on the target; the partition's writes paused "
        f"{pause(traffic, MOVED, held_at, released_at):.3f}s (held to released: {released_at - held_at:.3f}s)"
    )
    print(judge_consumer(traffic))  # every record, offsets in order per partition (continuous across E)


def test_a_fetch_waiting_at_the_origin_as_its_partition_migrates_is_answered_by_the_broker(
    gateway: GatewayProcess,  # noqa: F811
    routing: RoutingStore,
    stack_config: Config,
) -> None:
    """A Fetch only reads: one waiting at the origin's broker while a migration of a partition it names
    takes effect goes on there, without holding the migration's acknowledgements up (the origin keeps
    its records below the end offset where they were, and takes no write past it), and is answered by
    that broker. Answered NOT_LEADER_OR_FOLLOWER instead, kafkajs joins its group again (it does at any
    stale-leader fetch error), and a commit racing that join is refused ILLEGAL_GENERATION: its batch
    processed twice (a chaos trial, with the gateway frozen as the partition moved)."""
    app, topic = f"mig-{uuid.uuid4().hex[:6]}", f"waiting-{uuid.uuid4().hex[:6]}"
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    for bootstrap in (primary, standby):
        kafka.create_topics(bootstrap, [topic], partitions=PARTITIONS)
    keys = [(topic, p) for p in range(PARTITIONS)]
    assert kafka.ends_of(primary, keys) == dict.fromkeys(keys, 0)  # led: a Fetch now waits
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="start")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    with RawClient(gateway.port, client_id=app, timeout_s=60) as client:
        waiting = client.send(
            apis.FETCH, 12, **fetch_fields(topic, max_wait_ms=30_000, partitions=tuple(range(PARTITIONS)))
        )
        time.sleep(0.5)  # at the broker
        migrate(routing, stack_config, PartitionId(topic, MOVED), "primary", "standby")  # acks within 10 s
        kafka.produce(primary, topic, [kafka.Record(b"k", b"v", partition=0)])  # what the broker answers
        answer = client.answer(waiting)
    errors = {(p.partition_index, ErrorCode(p.error_code)) for t in answer.responses for p in t.partitions}
    assert errors == {(p, ErrorCode.none) for p in range(PARTITIONS)}
    (records,) = [p.records for t in answer.responses for p in t.partitions if p.partition_index == 0]
    assert records, "the record written on the origin's partition 0 was not in the answer"


def leaders_agree(gateway: GatewayProcess, app: str, topic: str) -> None:  # noqa: F811
    """DescribeTopicPartitions (how newer admin clients describe topics) names the leaders Metadata
    names: the migrated partition's on the target, its epoch unknown."""
    client = RawClient(gateway.port, client_id=app)
    try:
        metadata = client.answer(client.send(
            apis.METADATA, 12, topics=(MetadataRequestTopic(topic_id=None, name=topic),),
            allow_auto_topic_creation=False,
        ))  # fmt: skip
        described = client.answer(client.send(
            apis.DESCRIBE_TOPIC_PARTITIONS, 0, topics=(TopicRequest(name=topic),),
            response_partition_limit=100,
        ))  # fmt: skip
    finally:
        client.close()
    led = {p.partition_index: (p.leader_id, p.leader_epoch) for p in metadata.topics[0].partitions}
    said = {p.partition_index: (p.leader_id, p.leader_epoch) for p in described.topics[0].partitions}
    assert said == led
    assert said[MOVED][1] == -1
    assert said[MOVED][0] not in {said[p][0] for p in said if p != MOVED}  # the target's broker


def test_the_saga_migrates_a_partition_under_traffic_and_a_switch_of_its_topic_is_refused(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """``switchyard migrate-partition`` end to end on the live worker and gateway: the plan finds the
    origin from the gateway's usage report, the saga holds, records the end, releases; then a
    switchover along a link that copies the topic is refused by its plan, naming the migration."""
    assert live.gateway is not None
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    app, topic = unique("pm"), unique("pmt")
    kafka.create_topics(primary, [topic], partitions=PARTITIONS)  # the saga creates it on the standby
    traffic = Traffic(live.gateway.bootstrap, app, topic, unique("pmg"), idempotent=True, rate_per_s=300)
    traffic.start()
    try:
        traffic.wait_for(300)
        dry = live.cli("migrate-partition", topic, str(MOVED), "--to", "standby", "--dry-run")
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert f"ok: {topic}'s users are routed to primary" in dry.stdout
        migrated = live.cli("migrate-partition", topic, str(MOVED), "--to", "standby", "--wait")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        traffic.wait_for(300)
    finally:
        traffic.stop()

    saga = partition_migration_id(topic, MOVED)
    assert f"partition-migration migrated: {topic}[{MOVED}]" in migrated.stdout
    migration = routing.migration(PartitionId(topic, MOVED))
    assert migration is not None
    assert migration.end_offset is not None
    assert (migration.origin, migration.target, migration.state) == ("primary", "standby", "migrated")
    end = migration.end_offset
    assert f"end offset {end}" in migrated.stdout
    assert len(values(primary, topic, MOVED)) == end
    on_target = values(standby, topic, MOVED)
    held = Counter(v for p in range(PARTITIONS) for v in values(primary, topic, p)) + Counter(on_target)
    assert set(held) == set(traffic.acked)
    assert max(held.values()) == 1
    assert sorted(traffic.acked) == list(range(traffic.sent))
    print(f"\npartition migration saga: {judge_consumer(traffic, carried=True)}")  # no commit refused

    listed = live.cli("migrations", "list")
    row = rf"{re.escape(topic)}\[{MOVED}\]\s+primary\s+standby\s+smooth\s+migrated\s+{end}\s+{end}\s+no"
    assert re.search(row, listed.stdout), listed.stdout
    shown = live.cli("migrations", "show", topic, str(MOVED))
    assert f"client offsets from {end} on: the target's" in shown.stdout
    assert "migrating -> migrated" in shown.stdout
    assert "- -> migrating" in shown.stdout
    runs = routing.ledger.saga_runs(saga)
    assert [(r.kind, r.outcome) for r in runs] == [("partition-migration", "migrated")]
    capture(live, saga, runs[0].run_id, "partition-migration-live")

    refused_while_a_link_copies_it(live, routing, app, topic)


def refused_while_a_link_copies_it(live: Live, routing: RoutingStore, app: str, topic: str) -> None:
    """A switchover along a link that copies a topic with a migrated partition is refused by its plan;
    so is a migration of a topic a link copies."""
    link = unique("pm-link")
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="a later switch")
    try:
        switch = live.cli("switchover", app, "--link", link, "--dry-run")
        assert switch.returncode == 5, switch.stdout + switch.stderr
        assert f"refused: {topic}[{MOVED}] was migrated from primary to standby" in switch.stdout
        again = live.cli("migrate-partition", topic, "0", "--to", "standby", "--dry-run")
        assert again.returncode == 5
        assert f"refused: link {link} copies {topic} between primary and standby" in again.stdout
    finally:
        routing.set_link_state(link, LinkState.DELETED, actor=ACTOR, reason="done")


def test_the_scheduled_check_ages_emptied_origins_and_a_retirement_deletes_after_approval(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """The workers keep the aging schedule; fired, it ages a migration whose origin holds nothing below
    its end and not one whose origin holds records, and starts the retirement of each origin topic every
    partition of which aged: approved, it deletes the topic there; rejected, the topic stays and the
    check stops asking. A topic a group on the origin holds offsets for is refused. An origin emptied
    by retention after its migration ages like one migrated while empty."""
    primary = stack_config.clusters["primary"].bootstrap
    empty, rejected, grouped, held = unique("aged"), unique("agedr"), unique("agedg"), unique("aging")
    expired = unique("agede")
    kafka.create_topics(primary, [empty, rejected, grouped, held, expired], partitions=1)
    for topic in (held, expired):
        kafka.produce(primary, topic, [kafka.Record(None, b"%d" % i, partition=0) for i in range(5)])
    group = unique("holder")
    holder = Consumer({"bootstrap.servers": primary, "group.id": group})
    holder.commit(offsets=[TopicPartition(grouped, 0, 0)], asynchronous=False)
    holder.close()
    mine = {empty, rejected, grouped, held, expired}
    migrations = [("migrate-partition", t, "0", "--to", "standby", "--wait") for t in sorted(mine)]
    runs = live.cli_together(*migrations)
    assert [code for code, _ in runs] == [0] * 5, runs
    expire(primary, expired)  # its 5 records, held at the migration, go by retention

    schedule, report = asyncio.run(run_aging(live))
    every = float(live.env["SWITCHYARD__SAGAS__AGING_EVERY_S"])  # the live deployment's, not the file's
    assert schedule.spec.intervals[0].every == timedelta(seconds=every)
    aged = sorted(line.split(":")[0] for line in report.aged if line.split("[")[0] in mine)
    assert aged == sorted(f"{t}[0]" for t in (empty, rejected, grouped, expired)), report
    assert f"{held}[0]: not aged, its origin holds records from offset 0 below its end 5" in report.waiting
    assert f"{grouped} on primary stays: groups {group} on primary hold offsets for {grouped}" in "".join(
        report.waiting
    )
    for topic in (empty, rejected, grouped, expired):
        migration = routing.migration(PartitionId(topic, 0))
        assert migration is not None
        assert migration.state is MigrationState.AGED
    sagas = {t: origin_retirement_id("primary", t) for t in (empty, rejected, expired)}
    started = sorted(f"{saga}: started, waits for an approval" for saga in sagas.values())
    assert sorted(r for r in report.retirements if r.split(":")[2].split("/")[1] in mine) == started

    for topic, decision in ((empty, "approve"), (rejected, "reject"), (expired, "approve")):
        outcome = "retired" if decision == "approve" else "kept"
        assert asyncio.run(decide(live, sagas[topic], decision))["outcome"] == outcome
        assert [(r.kind, r.outcome) for r in routing.ledger.saga_runs(sagas[topic])] == [
            ("origin-retirement", outcome)
        ]
    left = kafka.partitions(primary, lambda name: name in mine)
    assert left == sorted((t, 0) for t in (rejected, grouped, held))

    refused = live.cli("migrations", "retire", "primary", grouped, "--wait")
    assert refused.returncode == 8, refused.stdout + refused.stderr
    assert f"groups {group} on primary hold offsets for {grouped}" in refused.stdout + refused.stderr
    checked = live.cli("migrations", "check")
    assert f"{held}[0]: not aged, its origin holds records from offset 0 below its end 5" in checked.stdout
    assert f"{rejected} on primary stays: its last retirement was not approved" in checked.stdout


def expire(bootstrap: str, topic: str) -> None:
    """Set the topic's retention to a second, and wait until the broker has deleted every record."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    end = kafka.ends_of(bootstrap, [(topic, 0)])[(topic, 0)]
    deadline = time.monotonic() + 60
    while kafka.starts_of(bootstrap, [(topic, 0)])[(topic, 0)] < end:
        assert time.monotonic() < deadline, f"retention never emptied {topic}"
        time.sleep(0.5)


async def run_aging(live: Live) -> tuple[Schedule, AgingReport]:
    """Fire the aging schedule the live worker keeps, and wait for the check it starts."""
    client = await temporal.connect(live.config)
    handle = client.get_schedule_handle(aging_schedule_id(live.queue))
    before = await handle.describe()
    await handle.trigger()
    deadline = time.monotonic() + 30
    while (now := await handle.describe()).info.num_actions == before.info.num_actions:
        assert time.monotonic() < deadline, "the aging schedule started nothing"
        await asyncio.sleep(0.2)
    started = now.info.recent_actions[-1].action
    assert isinstance(started, ScheduleActionExecutionStartWorkflow)
    run = client.get_workflow_handle(
        started.workflow_id, run_id=started.first_execution_run_id, result_type=AgingReport
    )
    report = await run.result()
    capture(live, started.workflow_id, started.first_execution_run_id, "migration-aging-live")
    return now.schedule, report


async def decide(live: Live, saga: str, decision: str) -> dict[str, Any]:
    """Once the saga waits for its approval, ``decision`` (the Web UI's update); its result."""
    client = await temporal.connect(live.config)
    handle = client.get_workflow_handle(saga)
    deadline = time.monotonic() + 60
    while (await handle.query("progress", result_type=Progress)).awaiting_approval is None:
        assert time.monotonic() < deadline, f"{saga} never waited for an approval"
        await asyncio.sleep(0.2)
    await handle.execute_update(decision, Decision("user:test", "nothing reads it"), result_type=str)
    result: dict[str, Any] = await handle.result()
    return result


def test_a_gateway_publishes_what_was_acknowledged_before_it_acknowledges_an_epoch(
    gateway: GatewayProcess,  # noqa: F811
    routing: RoutingStore,
    stack_config: Config,
) -> None:
    """A saga that waited for every gateway's acknowledgement reads how far each partition's writes were
    acknowledged whole — a smooth migration's end must reach it (acks=1 writes may run ahead of the
    high watermark) — not as published up to 2 s before."""
    topic = unique("acked")
    kafka.create_topics(stack_config.clusters["primary"].bootstrap, [topic], partitions=1)
    records = [kafka.Record(None, b"%d" % i, partition=0) for i in range(7)]
    assert kafka.produce(gateway.bootstrap, topic, records, settings={"client.id": unique("acker")}) == 7
    later = BindingKey.for_app(unique("later"))
    epoch = routing.set_binding(later, "primary", actor=ACTOR, reason="a change")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    assert acked_end(routing.zk, routing.layout, "primary", topic, 0) == 7
