"""The sagas end to end: real gateway, mirror and worker processes, live clients through the gateway, the
CLI as an operator runs it — and what the application saw."""

from __future__ import annotations

import asyncio
import shlex
import signal
import subprocess
import time
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from switchyard import kafka, launch, temporal
from switchyard.admins import ClusterAdmin
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.launch import policy_of
from switchyard.mirror.groups import committed_offsets, group_state
from switchyard.mirror.status import read_status
from switchyard.model import BindingState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import Decision, Kind, Progress, SwitchRequest
from switchyard.stack import Stack
from switchyard.stack.health import tool
from switchyard.threads import Worker
from switchyard.traffic import Traffic
from tests.helpers.live import Live, capture, unique, wait_for_approval
from tests.helpers.otlp import OtlpReceiver, Span
from tests.helpers.raw import RawClient, commit_offset, consumer_heartbeat, join_group
from tests.helpers.traffic import judge_consumer, judge_sends, topic_ids
from workers.gateway.brokers import topic_identity
from workers.gateway.routing import apis

ACTOR = "user:test"


def prepare(
    live: Live, routing: RoutingStore, config: Config, *, partitions: int = 3
) -> tuple[str, str, str]:
    """An application bound to the primary, a topic, and a link that copies exactly that topic, followed
    by the mirror; (app, topic, link)."""
    app, topic, link = unique("app"), unique("orders"), unique("link")
    kafka.create_topics(config.clusters["primary"].bootstrap, [topic], partitions=partitions)
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    deadline = time.monotonic() + 60
    while len([p for m in read_status(routing.zk, routing.layout, link) for p in m.partitions]) < partitions:
        assert time.monotonic() < deadline, "the mirror never took up the link"
        time.sleep(0.2)
    return app, topic, link


def saga_trace(otlp: OtlpReceiver, workflow: str, activities: set[str], timeout_s: float = 30) -> list[Span]:
    """The trace the CLI began by starting ``workflow``, once the worker's spans of ``activities`` are in it
    (the worker exports in batches, every few seconds)."""
    deadline = time.monotonic() + timeout_s
    while True:
        started = [
            s for s in otlp.spans if s.name == f"StartWorkflow:{workflow}" and s.service == "switchyard-cli"
        ]
        trace = [s for s in otlp.spans if started and s.trace_id == started[-1].trace_id]
        ran = {s.name.removeprefix("RunActivity:") for s in trace if s.service == "switchyard-worker"}
        if activities <= ran:
            return trace
        assert time.monotonic() < deadline, (
            f"{workflow}: activities traced {sorted(ran)}, wanted {activities}"
        )
        time.sleep(0.5)


def test_a_switchover_and_its_switchback_lose_and_double_nothing(
    live: Live, routing: RoutingStore, stack_config: Config, stack: Stack, otlp: OtlpReceiver
) -> None:
    """The primary's broker is restarted first, so its leader epochs are higher than the standby's copy's:
    librdkafka compares epochs before offsets when it decides whether a position is new enough to commit,
    and once shown the standby's lower ones it committed nothing until it rejoined there, then processed
    again what it had read meanwhile (``workers/gateway/brokers/fetches.py``)."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config)
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    stack.process(next(s for s in stack.services if s.name == "kafka-primary")).stop()
    stack.up()
    # a heartbeat every 10 s: after the flip it reads on from the standby, as joined on the primary, for
    # seconds before it is told to rejoin (at the default 3 s, a held heartbeat often tells it at once)
    traffic = Traffic(live.gateway.bootstrap, app, topic, unique("group"), idempotent=True,
                      consumer_settings={"heartbeat.interval.ms": 10_000})  # fmt: skip
    traffic.start()
    try:
        traffic.wait_for(300)
        over = live.cli("switchover", app, "--link", link, "--wait", "--reason", "planned test")
        assert over.returncode == 0, over.stdout + over.stderr
        assert f"switchover switched: {app}" in over.stdout
        assert f"primary -> standby (link {link})" in over.stdout
        traffic.wait_for(300)  # going on, on the standby (the reverse link copies it back to the primary)
        assert routing.binding(BindingKey.for_app(app)).cluster == "standby"  # type: ignore[union-attr]
        # the standby is the application's cluster now: it must hold everything, once. (The switchback
        # copies back only what was written after the flip, so the primary alone cannot tell.)
        holds_each_once(standby, topic, list(traffic.acked), traffic, primary)

        back = live.cli("switchback", app, "--wait", "--reason", "planned test")
        assert back.returncode == 0, back.stdout + back.stderr
        assert f"switchback switched: {app}" in back.stdout
        assert "standby -> primary" in back.stdout
        traffic.wait_for(300)
    finally:
        traffic.stop()

    judge_sends(traffic, primary)  # what was written on the standby came back along the reverse link
    assert first_epoch(primary, topic) > first_epoch(standby, topic) == 0  # as meant: the standby's lower
    print(f"\nswitchover and back: {judge_consumer(traffic, carried=True)}")
    ends = kafka.ends_of(primary, [(topic, p) for p in range(3)])
    committed = committed_offsets(ClusterAdmin(primary), traffic.group)
    assert {k: v for k, v in committed.items() if k[0] == topic} == ends  # resumes exactly at the next record
    runs = routing.ledger.saga_runs(saga_id([app]))
    assert [(r.kind, r.outcome) for r in runs] == [("switchback", "switched"), ("switchover", "switched")]
    for run, name in zip(runs, ("switchback-live", "switchover-live"), strict=True):
        steps = [s.step for s in routing.ledger.saga_steps(run.run_id)]
        expected = {"plan_switch", "block_keys", "drain_link", "check_copy", "flip_keys", "await_acks"}
        assert expected <= set(steps), steps
        capture(live, run.saga_id, run.run_id, name)
    shown = live.cli("sagas", "show", saga_id([app]))  # the newest run, from Temporal and the ledger
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"ledger: run {runs[0].run_id}, switchback by {runs[0].actor} (planned test)" in shown.stdout
    trail = [line.split()[1:5:3] for line in shown.stdout.splitlines() if line.startswith("+")]
    assert {("flip_keys", "ok"), ("unlock_keys", "ok")} <= {tuple(t) for t in trail}, shown.stdout

    # one trace follows each saga from the operator's command through the workflow into every activity
    for workflow in ("Switchover", "Switchback"):
        trace = saga_trace(otlp, workflow, {"plan_switch", "block_keys", "drain_link", "flip_keys"})
        by_id = {s.span_id: s for s in trace}
        started = next(s for s in trace if s.service == "switchyard-cli")
        assert by_id[next(s for s in trace if s.name == f"RunWorkflow:{workflow}").parent_id] == started
        for span in trace:
            if span.name.startswith("RunActivity:"):  # begun by the workflow's StartActivity
                assert by_id[span.parent_id].name == span.name.replace("Run", "Start", 1)
                assert by_id[by_id[span.parent_id].parent_id] == started, span


def first_epoch(bootstrap: str, topic: str) -> int | None:
    """The leader epoch partition 0's first record was written in, read directly from the cluster."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("epoch")})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        message = consumer.consume(1, 10)[0]
        assert message.error() is None, message.error()
        return message.leader_epoch()
    finally:
        consumer.close()


def holds_each_once(
    bootstrap: str, topic: str, acked: list[int], traffic: Traffic | None = None, source: str | None = None
) -> None:
    """Every record in ``acked`` is on the cluster, and no record is there twice (the application may
    have more acknowledged by the time it is read: those may be there too). On a failure, where each
    missing record was acknowledged, and where ``source`` holds it, are named."""
    held = Counter(topic_ids(bootstrap, topic))
    missing, twice = sorted(set(acked) - set(held)), sorted(v for v, n in held.items() if n > 1)
    where = ""
    if missing and traffic is not None:
        at = dict(zip(traffic.acked, traffic.acked_where, strict=False))
        where = f"; acknowledged at (partition, offset): {[at.get(v) for v in missing[:10]]}"
        if source is not None:
            on_source = {
                int(r.value or b"-1"): (p, r.offset)
                for p, rs in kafka.read_partitions(source, topic).items()
                for r in rs
            }
            where += f"; on {source} at {[on_source.get(v) for v in missing[:10]]}"
        partitions = sorted({p for p, _ in traffic.acked_where})
        where += f"; ends there {kafka.ends_of(bootstrap, [(topic, p) for p in partitions])}"
    assert not missing, f"acknowledged, not on {bootstrap}: {missing[:10]}{where}"
    assert not twice, f"twice on {bootstrap}: {twice[:10]}"


def test_a_member_switched_over_and_back_before_it_rejoined_commits_on_and_is_told_to_rejoin(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """A member that heartbeats no more often than its switches come (librdkafka's 10 s above) is
    switched over and back before it rejoins anywhere. The gateway had the primary forget it at the
    switch over, so back there it is a member of no cluster: its commit is carried from the standby it
    read last, its heartbeat told to rejoin, and it rejoins as a new member, as a broker insists.
    Forwarded, the primary refused all three (UNKNOWN_MEMBER_ID: the test above, 6 runs in 6 alone),
    and the application processed again what it had processed since its last commit."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    primary = stack_config.clusters["primary"].bootstrap
    kafka.produce(primary, topic, [kafka.Record(None, b"%d" % i, partition=0) for i in range(10)])
    group = unique("group")
    member = RawClient(live.gateway.port, client_id=f"{app}@consumer")
    try:
        member_id, generation = join_group(member, group, topic, timedelta(seconds=45))
        assert commit_offset(member, group, member_id, generation, topic, 4) is ErrorCode.none
        for kind, more, offset in (("switchover", ("--link", link), 6), ("switchback", (), 10)):
            run = live.cli(kind, app, *more, "--wait", "--reason", "test")
            assert run.returncode == 0, run.stdout + run.stderr
            deadline = time.monotonic() + 30
            while (code := commit_offset(member, group, member_id, generation, topic, offset)) in RETRIABLE:
                assert time.monotonic() < deadline, f"after the {kind}, the commit was refused: {code.name}"
                time.sleep(0.2)  # a coordinator's first load on the new cluster, as clients ask again
            assert code is ErrorCode.none, f"after the {kind}: {code.name}"
        beat = member.answer(
            member.send(apis.HEARTBEAT, 4, group_id=group, generation_id=generation, member_id=member_id)
        )
        assert beat.error_code == ErrorCode.rebalance_in_progress
        rejoined, _ = join_group(member, group, topic, timedelta(seconds=45), member_id)  # new to the primary
        assert rejoined != member_id
    finally:
        member.close()
    assert committed_offsets(ClusterAdmin(primary), group) == {(topic, 0): 10}


RETRIABLE = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress})


def test_a_consumer_protocol_member_switched_over_and_back_commits_on_and_joins_where_it_is_routed(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """A member of the consumer protocol (KIP-848) heartbeats no more often than its switches come (5 s
    by default): switched over and back before it heartbeats, its commits are carried from the standby
    it read last, it is fenced once it has let its partition go, and it joins again on the primary —
    where it then stays a member, not fenced at every heartbeat (the gateway once took it for the
    member it had removed, and the Java client lost and took its partitions every 100 ms for good).
    Before it is fenced it is asked to give up the partition it owns (an assignment of nothing), so
    that it can commit what it processed first. Its assignment names its topic by the id clients see,
    on either cluster."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    primary = stack_config.clusters["primary"].bootstrap
    group, member_id, seen_id = unique("group"), str(uuid.uuid4()), topic_identity.topic_id(topic)
    member = RawClient(live.gateway.port, client_id=f"{app}@consumer")
    try:
        joined = consumer_heartbeat(member, group, member_id, 0, topic=topic)
        assert joined.error_code == ErrorCode.none, joined.error_code
        assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [(seen_id, (0,))]
        epoch = joined.member_epoch
        beat = consumer_heartbeat(member, group, member_id, epoch, owned={seen_id: (0,)})
        assert (beat.error_code, beat.member_epoch) == (ErrorCode.none, epoch)
        for kind, more, offset in (("switchover", ("--link", link), 6), ("switchback", (), 10)):
            run = live.cli(kind, app, *more, "--wait", "--reason", "test")
            assert run.returncode == 0, run.stdout + run.stderr
            deadline = time.monotonic() + 30
            while (code := commit_offset(member, group, member_id, epoch, topic, offset, 9)) in RETRIABLE:
                assert time.monotonic() < deadline, f"after the {kind}, the commit was refused: {code.name}"
                time.sleep(0.2)
            assert code is ErrorCode.none, f"after the {kind}: {code.name}"
        released = consumer_heartbeat(member, group, member_id, epoch)  # owning as before: asked to let go
        assert (released.error_code, released.member_epoch) == (ErrorCode.none, epoch), released.error_code
        assert released.assignment.topic_partitions == ()
        fenced = consumer_heartbeat(member, group, member_id, epoch, owned={})  # let go: fenced
        assert fenced.error_code == ErrorCode.fenced_member_epoch
        joined = consumer_heartbeat(member, group, member_id, 0, topic=topic)
        assert joined.error_code == ErrorCode.none, joined.error_code
        assert [(t.topic_id, t.partitions) for t in joined.assignment.topic_partitions] == [(seen_id, (0,))]
        for _ in range(2):
            beat = consumer_heartbeat(member, group, member_id, joined.member_epoch, owned={seen_id: (0,)})
            assert beat.error_code == ErrorCode.none, beat.error_code
    finally:
        member.close()
    assert committed_offsets(ClusterAdmin(primary), group) == {(topic, 0): 10}


def test_a_switch_with_the_mirror_lagging_at_the_block_waits_for_the_drain(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """The mirror is stopped while the application writes, so the copy is behind when clients are blocked:
    the saga must drain it before the flip (a drain that returned early would flip onto a short copy, and
    the check before the flip refuses that). Nothing lost, nothing twice."""
    assert live.gateway is not None
    assert live.mirror is not None
    assert live.mirror.process is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=2)
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    keys = [(topic, p) for p in range(2)]
    traffic = Traffic(live.gateway.bootstrap, app, topic, unique("group"), idempotent=True)
    traffic.start()
    mirror = live.mirror
    try:
        traffic.wait_for(200)
        mirror.signal_supervised(signal.SIGSTOP)
        try:
            traffic.wait_for(300)  # written on the primary, not copied
            switch = live.cli_in_background("switchover", app, "--link", link, "--wait")
            deadline = time.monotonic() + 60
            while routing.binding(BindingKey.for_app(app)).state is not BindingState.BLOCKED:  # type: ignore[union-attr]
                assert switch.poll() is None, "it ended before it blocked: " + "".join(switch.communicate())
                assert time.monotonic() < deadline, "never blocked"
                time.sleep(0.05)
            source, copy = kafka.ends_of(primary, keys), kafka.ends_of(standby, keys)
            assert sum(source.values()) - sum(copy.values()) >= 300, (source, copy)  # lagging at the block
            time.sleep(1.5)  # the drain waits meanwhile
        finally:
            mirror.signal_supervised(signal.SIGCONT)
        out, err = switch.communicate(timeout=180)
        assert switch.returncode == 0, out + err
        assert f"switchover switched: {app}" in out
        traffic.wait_for(200)
    finally:
        traffic.stop()
    judge_sends(traffic, standby)
    print(f"\nswitch with a lagging mirror: {judge_consumer(traffic, carried=True)}")


@pytest.mark.parametrize("other", ["instance", "topic"])
def test_sagas_on_overlapping_keys_never_run_at_once(
    live: Live, routing: RoutingStore, stack_config: Config, other: str
) -> None:
    """An application and one of its instances (or topics), started at the same moment, again and again:
    exactly one saga runs — here up to its approval before the flip, clients blocked — and the other is
    refused naming it. (Both once took a lock of their own and blocked, drained and flipped one link.)"""
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    keys = [app, f"{app}@host1" if other == "instance" else f"{app}#{topic}"]
    config = live.effective

    async def race(first: int) -> tuple[str, str]:
        client = await temporal.connect(config)
        policy = policy_of(config, Kind.SWITCHOVER, approval="before-flip")
        ids = [saga_id([k]) for k in keys]
        order = [first, 1 - first]
        await asyncio.gather(*(
            launch.start(config, Kind.SWITCHOVER, ids[i],  # no client of theirs ever ran: forced
                         SwitchRequest([keys[i]], link=link, policy=policy, unknown_keys=True))
            for i in order
        ))  # fmt: skip
        handles = [client.get_workflow_handle(i) for i in ids]
        deadline = time.monotonic() + 60
        while True:
            waiting = [h for h in handles if (await progress_of(h)).awaiting_approval]
            ended = [h for h in handles if (await h.describe()).status != WorkflowExecutionStatus.RUNNING]
            assert len(waiting) < 2, "both sagas got past their locks: clients of both keys blocked at once"
            if len(waiting) == 1 and len(ended) == 1:
                break
            assert time.monotonic() < deadline, "neither saga waited for its approval"
            await asyncio.sleep(0.2)
        winner, loser = waiting[0], ended[0]
        with pytest.raises(WorkflowFailureError) as refused:
            await loser.result()
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError)
        assert cause.type == "SwitchRefused", cause
        await winner.execute_update("reject", Decision(by="test", reason="overlap test"))
        with pytest.raises(WorkflowFailureError):
            await winner.result()
        return winner.id, str(cause.details[0]["detail"])

    for round_ in range(4):
        winner, why = asyncio.run(race(round_ % 2))
        assert "locked by" in why, why  # at the plan, or at the lock when both planned before either locked
        assert winner in why, why
        binding = routing.binding(BindingKey.for_app(app))
        assert binding is not None
        assert (binding.cluster, binding.state) == ("primary", BindingState.ACTIVE), round_


async def progress_of(handle: WorkflowHandle[Any, Any]) -> Progress:
    try:
        found: Progress = await handle.query("progress", result_type=Progress)
    except RPCError:  # not picked up by a worker yet
        return Progress("", [])
    return found


def test_a_member_moved_by_a_switch_is_removed_from_the_cluster_it_left(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """A consumer with a session time-out of 20 s (the libraries' defaults: 10 to 45 s). Once it is told
    to rejoin on the standby, the gateway removes its member from the primary: the group there is empty
    at once, so a switch back can write the group's offsets there without waiting for the member to
    expire, clients held."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    primary = stack_config.clusters["primary"].bootstrap
    traffic = Traffic(
        live.gateway.bootstrap, app, topic, unique("group"), idempotent=True, rate_per_s=300, session_s=20
    )
    traffic.start()
    try:
        traffic.wait_for(200, timeout_s=90)  # Tansu's first join takes about half the session time-out
        over = live.cli("switchover", app, "--link", link, "--wait")
        assert over.returncode == 0, over.stdout + over.stderr
        admin = AdminClient({"bootstrap.servers": primary})
        deadline = time.monotonic() + 6  # under a third of the member's session time-out
        while group_state(admin, traffic.group)[0] is not ConsumerGroupState.EMPTY:
            assert time.monotonic() < deadline, "the member stayed in its group on the primary"
            time.sleep(0.2)
        offsets = ConsumerGroupTopicPartitions(traffic.group, [TopicPartition(topic, 0, 0)])
        for future in admin.alter_consumer_group_offsets([offsets]).values():  # a member would refuse it
            assert all(tp.error is None for tp in future.result(10).topic_partitions or ())
        traffic.wait_for(100, timeout_s=90)
    finally:
        traffic.stop()
    judge_sends(traffic, stack_config.clusters["standby"].bootstrap)
    print(f"\nswitchover of a 20 s session member: {judge_consumer(traffic, carried=True)}")
    assert f"group {traffic.group}: member" in live.gateway.log.read_text()


def test_a_member_moved_by_a_switch_is_removed_at_the_flip_so_a_switch_back_waits_for_nobody(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """A member that joined on the primary through the gateway, and sends nothing after the switchover
    (a consumer between heartbeats, or stuck in a long poll): the gateway removes it from the primary at
    the flip, not at its next request, so a switch back at once finds the group there without members
    and writes its offsets without waiting (a member left there stays until its session time-out, here
    60 s, and the group sync gives up after 30 s)."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    primary = stack_config.clusters["primary"].bootstrap
    group = unique("group")
    with RawClient(live.gateway.port, client_id=app) as member:
        member_id, generation = join_group(member, group, topic, timedelta(seconds=60))
        assert commit_offset(member, group, member_id, generation, topic, 0) == ErrorCode.none
        over = live.cli("switchover", app, "--link", link, "--wait")
        assert over.returncode == 0, over.stdout + over.stderr
        state, members = group_state(AdminClient({"bootstrap.servers": primary}), group)
        assert (state, members) == (ConsumerGroupState.EMPTY, 0), "the member stayed on the primary"
        back = live.cli("switchback", app, "--wait")
        assert back.returncode == 0, back.stdout + back.stderr
    runs = {r.kind: r for r in routing.ledger.saga_runs(saga_id([app]))}
    held = {kind: run.result["pause_ms"] for kind, run in runs.items() if run.result is not None}
    assert held["switchback"] <= held["switchover"] + 2000, held  # not the 30 s of a group sync waiting
    assert f"group {group}: member {member_id} removed from primary, which it left" in (
        live.gateway.log.read_text()
    )


def test_a_consumer_reads_every_record_once_across_switches_where_the_copys_offsets_differ(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """Before the link, each partition holds five committed transactions (a marker after each: offsets
    the copy does not have), and the first partition's log starts above 0 (its first records deleted):
    the copy's offsets differ from the source's. A consumer group reads through the gateway while the
    application is switched over, back and over again; its members heartbeat every 10 s, so after each
    flip they read on at the position they held for seconds before they rejoin. While switched over the
    application commits three transactions of its own there: their markers take offsets the way back
    does not copy. Every record it reads must be the next one: the gateway shows it the home's offsets
    on either cluster, so its live position, its commits and its group's offsets name the same records
    there. (Without that, each switch skipped or re-read one record per marker; and until the home was
    translated too, the switch back skipped one per marker written while switched over.)"""
    assert live.gateway is not None
    app, topic, link = unique("app"), unique("orders"), unique("link")
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    kafka.create_topics(primary, [topic], partitions=3)
    keys = [(topic, p) for p in range(3)]
    transactional = Producer({"bootstrap.servers": primary, "transactional.id": unique("before")})
    transactional.init_transactions(30)
    value = 0
    for _ in range(5):
        transactional.begin_transaction()
        for partition in range(3):
            for _ in range(2):
                value -= 1
                transactional.produce(topic, str(value).encode(), partition=partition)
        transactional.commit_transaction(30)
    admin = AdminClient({"bootstrap.servers": primary})
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)])
    for future in deleted.values():
        future.result(10)
    ends = kafka.ends_of(primary, keys)
    assert ends == {k: 15 for k in keys}  # 5 x (2 records and a marker)
    group = unique("group")
    at_ends = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, e) for (t, p), e in ends.items()])
    for future in admin.alter_consumer_group_offsets([at_ends]).values():  # it reads what comes next
        future.result(10)
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    traffic = Traffic(live.gateway.bootstrap, app, topic, group, idempotent=True,
                      consumer_settings={"heartbeat.interval.ms": 10_000})  # fmt: skip
    traffic.start()
    try:
        traffic.wait_for(300)
        status = copied_past(live, link, 15)  # said per partition: translated at the gateway
        written: list[int] = []
        for command in (("switchover", app, "--link", link), ("switchback", app), ("switchover", app)):
            switched = live.cli(*command, "--wait", "--reason", "offsets differ")
            assert switched.returncode == 0, switched.stdout + switched.stderr
            traffic.wait_for(300)
            if command[0] == "switchover" and not written:  # markers the way back does not copy
                written = in_transactions(live.gateway.bootstrap, app, topic, first=-1001, count=3)
                traffic.wait_for(300)
    finally:
        traffic.stop()
    holds_each_once(standby, topic, list(traffic.acked) + written, traffic, primary)
    judged = judge_consumer(traffic, carried=True, also=written)
    print(f"\nthree switches, offsets differing: {judged}")
    said = {line.split()[0]: line.split()[6] for line in status.stdout.splitlines()[1:]}
    assert said == {f"{topic}[{p}]": "translated" for p in range(3)}, status.stdout


def copied_past(live: Live, link: str, offset: int, timeout_s: float = 60) -> Any:
    """``links status`` of ``link`` once the mirror has copied each partition past ``offset``: before it
    copies, it cannot say whether the offsets are the same (a loaded suite's mirror took up the link
    after the application had written 300 records, and the status said "yes" of every partition)."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = live.cli("links", "status", link)
        rows = [line.split() for line in status.stdout.splitlines()[1:] if line.strip()]
        if rows and all(row[3].isdigit() and int(row[3]) >= offset for row in rows):
            return status
        assert time.monotonic() < deadline, (
            f"the mirror did not copy {link} past {offset} in {timeout_s:.0f} s:\n{status.stdout}"
        )
        time.sleep(1)


def in_transactions(bootstrap: str, app: str, topic: str, *, first: int, count: int) -> list[int]:
    """``count`` committed transactions of the application's, two records to each partition of
    ``topic`` in each, valued ``first``, ``first - 1``, ...; the values written."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": app, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    partitions = len(
        AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, 10).topics[topic].partitions
    )
    written = []
    for _ in range(count):
        producer.begin_transaction()
        for partition in range(partitions):
            for _ in range(2):
                written.append(first - len(written))
                producer.produce(topic, str(written[-1]).encode(), partition=partition)
        producer.commit_transaction(30)
    return written


def test_a_writer_around_the_gateway_stops_the_switch_and_is_named(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """Something writes to the primary directly, not through the gateway: blocking the app cannot stop it,
    so its records would be left behind. The saga sees the source move after the block, abandons the
    switch naming the partitions, and the app goes on where it was."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    primary = stack_config.clusters["primary"].bootstrap
    stop = False

    def write_around() -> None:
        producer = Producer({"bootstrap.servers": primary})
        while not stop:  # a hundred records a second: the window is as long as clients are held
            producer.produce(topic, b"around the gateway")
            producer.poll(0.01)
        assert producer.flush(10) == 0

    writer = Worker(write_around, name="writer-around")
    writer.start()
    try:
        switched = live.cli("switchover", app, "--link", link, "--wait")
    finally:
        stop = True
        writer.join(30)
    assert switched.returncode == 8, switched.stdout + switched.stderr
    assert "switchover compensated" in switched.stdout
    assert "FenceBroken: after the block, the source kept being written:" in switched.stdout
    assert f"{topic}[0]" in switched.stdout
    binding = routing.binding(BindingKey.for_app(app))
    assert binding is not None
    assert (binding.cluster, binding.state) == ("primary", BindingState.ACTIVE)  # unblocked where it was
    assert kafka.produce(
        live.gateway.bootstrap, topic, [kafka.Record(b"k", b"after")], settings={"client.id": app}
    )


def test_a_second_saga_on_the_same_keys_is_refused_naming_the_first(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    app, _, link = prepare(live, routing, stack_config, partitions=1)
    first = live.cli("switchover", app, "--link", link, "--approval", "before-block")
    assert first.returncode == 0, first.stderr
    second = live.cli("switchover", app, "--link", link)
    assert second.returncode == 8
    assert f"saga switchyard:{app} (Switchover) is already running on these keys" in second.stderr
    deadline = time.monotonic() + 30
    while "waiting for an approval" not in (shown := live.cli("sagas", "show", f"switchyard:{app}")).stdout:
        assert time.monotonic() < deadline, shown.stdout + shown.stderr
        time.sleep(0.5)
    rejected = live.cli("sagas", "reject", f"switchyard:{app}", "--reason", "not now")
    assert rejected.returncode == 0, rejected.stderr
    assert "rejected by" in rejected.stdout
    ended = live.cli("sagas", "show", f"switchyard:{app}", "--follow")
    assert ended.returncode == 8
    assert "rejected before the block by" in ended.stdout
    assert routing.binding(BindingKey.for_app(app)).state is BindingState.ACTIVE  # type: ignore[union-attr]


@pytest.mark.parametrize("crash", ["worker-kill-9", "temporal-restart"])
def test_a_saga_survives_its_worker_or_temporal_going_down_between_block_and_flip(
    live: Live, routing: RoutingStore, stack_config: Config, stack: Stack, crash: str
) -> None:
    """Held before its flip (an approval it waits for), clients blocked: the worker is killed -9 and
    another takes over — or the Temporal server restarts on the same history file — and the saga
    finishes the switch with nothing lost."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=2)
    standby = stack_config.clusters["standby"].bootstrap
    traffic = Traffic(live.gateway.bootstrap, app, topic, unique("group"), idempotent=True)
    traffic.start()
    saga = f"switchyard:{app}"
    try:
        traffic.wait_for(200)
        started = live.cli("switchover", app, "--link", link, "--approval", "before-flip")
        assert started.returncode == 0, started.stderr
        wait_for_approval(live, saga)
        assert routing.binding(BindingKey.for_app(app)).state is BindingState.BLOCKED  # type: ignore[union-attr]
        if crash == "worker-kill-9":
            live.kill_worker()
            live.start_worker()
        else:
            temporal = next(s for s in stack.services if s.name == "temporal")
            stack.process(temporal).stop()
            stack.up()
            wait_for_approval(live, saga)  # its history is back, still waiting
        approved = live.cli("sagas", "approve", saga, "--reason", "go on")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        live.follow_to_switched(saga, "switchover", app)
        traffic.wait_for(200)
    finally:
        traffic.stop()
    judge_sends(traffic, standby)
    # blocked for longer than a held commit may wait (a third of the session time-out): a commit may be
    # refused (NOT_COORDINATOR) and its batch processed again — at-least-once, and counted
    print(f"\n{crash}: {judge_consumer(traffic)}")
    runs = routing.ledger.saga_runs(saga)
    # the saga went on from its history: the block and the copy's steps, done before the crash, were not
    # done again — one block and one flip of the key, each written by the saga, and one drain
    changes = [
        (e.to_cluster, e.to_state, e.actor) for e in reversed(routing.ledger.history(BindingKey.for_app(app)))
    ]
    assert changes == [
        ("primary", BindingState.ACTIVE, ACTOR),
        ("primary", BindingState.BLOCKED, f"saga:{saga}"),
        ("standby", BindingState.ACTIVE, f"saga:{saga}"),
    ], changes
    succeeded = Counter(s.step for s in routing.ledger.saga_steps(runs[0].run_id) if s.outcome == "ok")
    assert (succeeded["block_keys"], succeeded["drain_link"], succeeded["flip_keys"]) == (1, 1, 1), succeeded
    capture(live, saga, runs[0].run_id, f"switchover-{crash}")


def test_a_worker_dead_right_after_its_flip_leaves_the_saga_going_forward(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """The steps while clients are held run on the saga's worker and reach its history together, when the
    worker next reports to Temporal: a worker killed the moment its flip landed leaves a history without
    any of them, and the worker that takes over runs them again. It must find the flip done and go
    forward — not drain, carry and check a copy its clients already write past, and not compensate a
    switch that happened (a chaos trial once ended so: the saga failed, its key switched, no end
    recorded)."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=2)
    standby = stack_config.clusters["standby"].bootstrap
    key = BindingKey.for_app(app)
    traffic = Traffic(live.gateway.bootstrap, app, topic, unique("group"), idempotent=True)
    saga = f"switchyard:{app}"
    live.workers[-1].stop()  # the saga runs on the worker that dies
    dying = live.start_worker(dies_after="flip_keys")
    traffic.start()
    try:
        traffic.wait_for(200)
        started = live.cli("switchover", app, "--link", link)
        assert started.returncode == 0, started.stdout + started.stderr
        assert dying.process is not None
        assert dying.process.wait(timeout=60) == -signal.SIGKILL
        assert routing.binding(key).cluster == "standby"  # type: ignore[union-attr]
        live.start_worker()
        live.follow_to_switched(saga, "switchover", app)
        traffic.wait_for(200)
    finally:
        traffic.stop()
    judge_sends(traffic, standby)
    print(f"\n{judge_consumer(traffic, carried=True)}")
    changes = [(e.to_cluster, e.to_state) for e in reversed(routing.ledger.history(key))]
    assert changes == [
        ("primary", BindingState.ACTIVE), ("primary", BindingState.BLOCKED), ("standby", BindingState.ACTIVE)
    ], changes  # fmt: skip
    run = routing.ledger.saga_runs(saga)[0]
    assert run.outcome == "switched", (run.outcome, run.result)
    assert run.result is not None
    assert run.result["records_copied"] > 0, run.result  # as the flip stored it
    succeeded = Counter(s.step for s in routing.ledger.saga_steps(run.run_id) if s.outcome == "ok")
    assert succeeded["drain_link"] == 1, succeeded  # not again, once the flip was found done
    assert live.cli("sagas", "unlock", app).stdout == f"{app}: not locked\n"
    capture(live, saga, run.run_id, "switchover-flip-landed")


def test_a_cancelled_switch_of_a_key_never_bound_leaves_it_unbound(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """The block binds a key that had no binding of its own; undone, it must resolve as before (through
    its application's binding), not stay pinned to the cluster it resolved to."""
    app, _, link = prepare(live, routing, stack_config, partitions=1)
    key = BindingKey.instance(app, "host-9")
    saga = saga_id([str(key)])
    started = live.cli("switchover", str(key), "--link", link, "--approval", "before-flip", "--force")
    assert started.returncode == 0, started.stderr
    wait_for_approval(live, saga)
    assert routing.binding(key).state is BindingState.BLOCKED  # type: ignore[union-attr]
    cancelled = live.cli("sagas", "cancel", saga)
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    ended = live.cli("sagas", "show", saga, "--follow")
    assert ended.returncode == 8, ended.stdout + ended.stderr
    assert "switchover compensated" in ended.stdout
    assert routing.binding(key) is None
    assert routing.ledger.history(key)[0].to_state is BindingState.UNBOUND


def test_a_saga_terminated_from_outside_leaves_locks_that_sagas_unlock_releases(
    live: Live, routing: RoutingStore, stack_config: Config
) -> None:
    """Terminating a saga (from the Web UI, say) runs no compensation: its keys stay locked and blocked.
    `sagas unlock` refuses while the saga runs, then releases the lock and says how to unblock."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    saga = saga_id([app])
    started = live.cli("switchover", app, "--link", link, "--approval", "before-flip")
    assert started.returncode == 0, started.stderr
    wait_for_approval(live, saga)
    kept = live.cli("sagas", "unlock", app)
    assert kept.returncode == 8
    assert f"locked by a running saga (switchyard sagas cancel it): {app} by saga {saga}" in kept.stderr

    terminated = subprocess.run(
        [tool("temporal"), "workflow", "terminate", "--address", stack_config.temporal.address,
         "--workflow-id", saga, "--reason", "test"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert terminated.returncode == 0, terminated.stderr
    blocked = routing.binding(BindingKey.for_app(app))
    assert blocked is not None
    assert blocked.state is BindingState.BLOCKED

    released = live.cli("sagas", "unlock", app)
    assert released.returncode == 0, released.stderr
    assert f"{app}: released the lock of saga {saga} (terminated)" in released.stdout
    advice = f"switchyard bindings set '{app}' primary --expect-epoch {blocked.epoch}"
    assert advice in released.stdout
    unblocked = live.cli(*shlex.split(advice)[1:])
    assert unblocked.returncode == 0, unblocked.stderr
    one = [kafka.Record(b"k", b"v")]
    assert kafka.produce(live.gateway.bootstrap, topic, one, settings={"client.id": app}) == 1
    again = live.cli("switchover", app, "--link", link, "--wait")  # nothing left behind stops a new saga
    assert again.returncode == 0, again.stdout + again.stderr
    assert live.cli("sagas", "unlock", app).stdout == f"{app}: not locked\n"


@pytest.mark.parametrize("ends", ["committed-during-the-block", "never"])
def test_a_transaction_open_at_the_block_is_waited_for_and_nothing_behind_it_is_lost(
    live: Live, routing: RoutingStore, stack_config: Config, ends: str
) -> None:
    """Another producer's transaction is open on the application's partition when the switch blocks it:
    the records the application wrote behind it (acknowledged) are above the last stable offset, where
    the mirror, reading committed records, cannot copy them until the transaction ends. The saga waits
    for it (its commit marker lands on the source after the block, which must not pass for a writer
    around the gateway) and switches with every record copied; a transaction that stays open past
    ``sagas.transaction_wait_s`` abandons the switch, naming it, and the application goes on where it was."""
    assert live.gateway is not None
    app, topic, link = prepare(live, routing, stack_config, partitions=1)
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    through = {"client.id": app}
    before = [kafka.Record(b"app", f"before-{i}".encode()) for i in range(20)]
    assert kafka.produce(live.gateway.bootstrap, topic, before, settings=through) == 20
    other = Producer({"bootstrap.servers": primary, "transactional.id": unique("other")})
    other.init_transactions()
    other.begin_transaction()
    other.produce(topic, b"in the other producer's transaction")
    assert other.flush(10) == 0
    behind = [kafka.Record(b"app", f"behind-{i}".encode()) for i in range(30)]
    assert kafka.produce(live.gateway.bootstrap, topic, behind, settings=through) == 30

    switch = live.cli_in_background("switchover", app, "--link", link, "--wait")
    if ends == "committed-during-the-block":
        deadline = time.monotonic() + 60
        while routing.binding(BindingKey.for_app(app)).state is not BindingState.BLOCKED:  # type: ignore[union-attr]
            assert switch.poll() is None, "it ended before it blocked: " + "".join(switch.communicate())
            assert time.monotonic() < deadline, "never blocked"
            time.sleep(0.05)
        time.sleep(1.5)  # the saga waits meanwhile
        other.commit_transaction(10)
    out, err = switch.communicate(timeout=180)
    values = [r.value for r in before + behind]
    if ends == "never":
        assert switch.returncode == 8, out + err
        assert "switchover compensated" in out
        assert f"TransactionsOpen: {topic}[0]: a transaction open since offset 20" in out, out
        binding = routing.binding(BindingKey.for_app(app))
        assert binding is not None
        assert (binding.cluster, binding.state) == ("primary", BindingState.ACTIVE)
        other.abort_transaction(10)
        after = [kafka.Record(b"app", b"after")]
        assert kafka.produce(live.gateway.bootstrap, topic, after, settings=through) == 1
        held = [r.value for r in kafka.read_partitions(primary, topic)[0]]
        assert held == [*values, b"after"]  # read committed: the aborted record is not
        return
    assert switch.returncode == 0, out + err
    assert f"switchover switched: {app}" in out
    on_standby = [r.value for r in kafka.read_partitions(standby, topic)[0]]
    assert sorted(on_standby) == sorted([*values, b"in the other producer's transaction"])
    (run,) = routing.ledger.saga_runs(saga_id([app]))
    settled = [s for s in routing.ledger.saga_steps(run.run_id) if s.step == "settle_transactions"]
    # waited once, never given up on; an attempt Temporal cancelled and ran again (a local activity
    # under a loaded suite, once) is the worker's, not the step's
    ran = [s.outcome for s in settled if not s.detail.startswith("CancelledError")]
    assert ran == ["ok"], [(s.outcome, s.detail) for s in settled]
    capture(live, run.saga_id, run.run_id, "switchover-transaction-settled")


@pytest.mark.parametrize("during_the_block", ["commits", "writes"])
def test_a_blocked_transactional_producers_open_transaction_ends_on_the_old_cluster(
    live: Live, routing: RoutingStore, stack_config: Config, during_the_block: str
) -> None:
    """While its identity is blocked, a transaction open on the old cluster ends there, before the saga
    fences the copy, and no record lands there after the block: its commit goes on (markers only), while
    a write of it is answered with an abortable error at once (held, the transaction would stay open
    until the saga gave up), and the application aborts it there. A transaction begun during the block
    waits for the block to lift."""
    assert live.gateway is not None
    app, topic, _link = prepare(live, routing, stack_config, partitions=1)
    primary = stack_config.clusters["primary"].bootstrap
    producer = Producer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app,
                         "transactional.id": unique("txn")})  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"before the block")
    assert producer.flush(10) == 0
    key = BindingKey.for_app(app)
    wait_for_acks(routing.zk, routing.layout, routing.set_binding(
        key, "primary", BindingState.BLOCKED, actor=ACTOR, reason="test"), timeout_s=10)  # fmt: skip
    admin = AdminClient({"bootstrap.servers": primary})
    if during_the_block == "commits":
        producer.commit_transaction(30)
        kept = [b"before the block"]
    else:
        producer.produce(topic, b"during the block")
        with pytest.raises(KafkaException) as refused:
            producer.commit_transaction(30)
        assert refused.value.args[0].txn_requires_abort(), refused.value
        assert not refused.value.args[0].fatal()
        producer.abort_transaction(30)
        kept = []
    deadline = time.monotonic() + 10  # the coordinator writes the markers after it answered
    while kafka.open_transactions(admin, [(topic, 0)]):
        assert time.monotonic() < deadline, "the transaction never ended on the partition"
        time.sleep(0.1)
    assert [r.value for r in kafka.read_partitions(primary, topic)[0]] == kept  # still blocked
    producer.begin_transaction()  # a new one: its first write waits for the block to lift
    producer.produce(topic, b"after")
    committing = Worker(lambda: producer.commit_transaction(60), name="commit")
    committing.start()
    time.sleep(1.0)
    assert [r.value for r in kafka.read_partitions(primary, topic)[0]] == kept
    wait_for_acks(routing.zk, routing.layout, routing.set_binding(
        key, "primary", actor=ACTOR, reason="test"), timeout_s=10)  # fmt: skip
    committing.join(60)
    deadline = time.monotonic() + 10  # committed: its markers are written after the answer
    while (read := [r.value for r in kafka.read_partitions(primary, topic)[0]]) != [*kept, b"after"]:
        assert time.monotonic() < deadline, read
        time.sleep(0.1)
