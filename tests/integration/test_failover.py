"""An unplanned failover: the primary frozen (SIGSTOP of its broker — a partition, its data kept), the
saga moving the application at once, measuring what the copy never got, and — once the primary is back
— the exact lost window. On brokers of this module's own, so that freezing one disturbs nothing else."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from switchyard import kafka
from switchyard.admins import ClusterAdmin
from switchyard.keys import BindingKey
from switchyard.mirror.groups import committed_offsets
from switchyard.mirror.mapstore import read_link
from switchyard.mirror.status import read_status
from switchyard.model import ClusterState, LinkState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.sagas.ids import saga_id
from tests.helpers import ports
from tests.helpers.live import Live, capture, ready_said
from tests.helpers.migrations import seen_by_gateway
from tests.helpers.processes import GatewayProcess, freeze
from tests.helpers.raw import RawClient, RawProducer, commit_offset, join_group, leave_group
from tests.helpers.services import PrivateService, live_on_brokers, private_brokers  # noqa: F401 - fixtures
from workers.gateway.process.shields import SETTLED_S, SHIELD_GRACE_S

ACTOR = "user:test"
HEALTH_PORT = ports.reserve(1)[0]
LIVE_SETTINGS = {"SWITCHYARD__GATEWAY__HEALTH_PORT": str(HEALTH_PORT)}  # its routing epoch, asked


def test_a_failover_moves_clients_at_once_and_accounts_for_every_record_left_behind(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    assert live.gateway is not None
    primary, standby = brokers
    app, topic, link = (
        f"app-{uuid.uuid4().hex[:6]}",
        f"ledger-{uuid.uuid4().hex[:6]}",
        f"link-{uuid.uuid4().hex[:6]}",
    )
    kafka.create_topics(primary.connect, [topic], partitions=2)
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    through = {"client.id": app}
    sent = [kafka.Record(f"k{i}".encode(), f"v{i}".encode(), partition=i % 2) for i in range(200)]
    assert kafka.produce(live.gateway.bootstrap, topic, sent, settings=through) == 200
    copied = [(topic, 0), (topic, 1)]
    wait_until(  # the mirror creates the topic on the standby first: until then it has no ends to list
        lambda: (
            kafka.partitions(standby.connect, lambda name: name == topic) == copied
            and kafka.ends_of(standby.connect, copied) == {(topic, 0): 100, (topic, 1): 100}
        )
    )

    # the copy stops short: the mirror sees the primary's ends, copies nothing more
    routing.set_link_state(link, LinkState.PAUSED, actor=ACTOR, reason="test")
    wait_until(lambda: statuses(routing, link) == {"paused"})
    never_copied = [
        kafka.Record(b"late", f"late-{i}".encode(), partition=0 if i < 4 else 1) for i in range(7)
    ]
    kafka.produce(live.gateway.bootstrap, topic, never_copied, settings=through)
    wait_until(lambda: seen_ends(routing, link) == {(topic, 0): 104, (topic, 1): 103})

    # a consumer of the application's, a member of its group on the primary, has read all 104 records
    group = f"{app}-readers"
    with RawClient(live.gateway.port, client_id=app) as reader:
        member_id, generation = join_group(reader, group, topic, timedelta(seconds=60))

    freeze(primary.process.pid())  # the primary stops answering, its data kept
    mirror_log = live.logs / "mirror.log"
    wait_until(  # it was the mirror group's coordinator: the group's session ends with it
        lambda: f"link {link}: 2 partitions let go" in mirror_log.read_text(errors="replace"), timeout_s=30
    )
    started = time.monotonic()
    saga = live.cli_in_background("failover", app, "--from", "primary", "--wait-recovery", "180", "--wait")
    to_standby_s = acknowledged_at(live.gateway.bootstrap, f"{app}@after", topic) - started
    # the promoted link's status, for good, keeps what its sessions last saw of the partitions they let
    # go with the frozen source (once, it kept none, and a failover that read it measured no loss)
    try:
        wait_until(lambda: statuses(routing, link) == {"promoted"})
        assert seen_ends(routing, link) == {(topic, 0): 104, (topic, 1): 103}
    finally:
        os.kill(primary.process.pid() or 0, signal.SIGCONT)  # back: the lost window can be measured
    out, err = saga.communicate(timeout=300)
    assert saga.returncode == 0, out + err
    print(f"\nfailover: a record acknowledged on the standby {to_standby_s:.1f}s after the saga began\n{out}")

    assert f"failover switched: {app}" in out
    assert re.search(rf"RPO {topic}\[0\]: 4 records", out), out
    assert re.search(rf"RPO {topic}\[1\]: 3 records", out), out
    assert "lost window measured: 7 records" in out
    assert routing.cluster("primary").state is ClusterState.SHIELDED  # type: ignore[union-attr]
    assert routing.binding(BindingKey.for_app(app)).cluster == "standby"  # type: ignore[union-attr]
    # the copy, and the record written after
    assert sum(len(r) for r in kafka.read_partitions(standby.connect, topic).values()) == 201
    # the records written since are presented past those the gateway saw the frozen primary acknowledge
    assert read_link(standby.connect, link).resumes == {(topic, 0): 104, (topic, 1): 103}
    (run,) = routing.ledger.saga_runs(saga_id([app]))
    assert run.outcome == "switched"
    assert run.result is not None
    assert run.result["lost_window_records"] == 7
    assert sorted(p["copied_to"] for p in run.result["rpo"]) == [100, 100]
    capture(live, run.saga_id, run.run_id, "failover-live")

    # its commit past the copy is carried to the standby held at the standby's end at the failover: the
    # four records it read beyond the copy never reached the standby, and the standby's record 100 and on
    # were written since, not read (after a planned switch the same commit would land at 104)
    assert carried(live, standby.connect, app, group, (member_id, generation), topic, 104) == 100


def test_a_forced_failover_brings_a_groups_commit_over_held_to_the_copy(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    """The source still answers, so the failover carries the groups' offsets just before its flip; one past
    the copy's end (a record left behind) is held to that end: the new cluster's records from it on are
    written after the flip, and a group resuming past them would skip them."""
    _, standby = brokers
    app, topic, link, group = read_past_the_copy(live, routing, brokers)

    failed_over = live.cli("failover", app, "--from", "primary", "--link", link, "--force", "--wait")
    assert failed_over.returncode == 0, failed_over.stdout + failed_over.stderr
    (run,) = routing.ledger.saga_runs(saga_id([app]))
    assert run.result is not None
    assert run.result["groups_synced"] == 1, run.result["detail"]
    capture(live, run.saga_id, run.run_id, "failover-forced-live")
    try:
        on_standby = committed_offsets(ClusterAdmin(standby.connect), group)
        assert on_standby == {(topic, 0): 50}
    finally:
        live.cli("clusters", "unshield", "primary", "--reason", "test")


def test_a_group_carried_after_a_failovers_flip_resumes_at_the_records_written_since(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    """A member on the standby keeps the group from being carried before the flip; by the time it leaves
    and the saga carries the group, the application has written records on the standby. The group's
    offset past the copy's end (records left behind) comes over held to the standby's end at the flip,
    not its end now: a group resuming there would skip what was written since (a chaos trial's kafkajs
    group skipped two records so)."""
    _, standby = brokers
    app, topic, link, group = read_past_the_copy(live, routing, brokers)
    assert live.gateway is not None
    with RawClient(int(standby.connect.rsplit(":", 1)[1]), client_id="elsewhere") as there:
        member_there, _ = join_group(there, group, topic, timedelta(seconds=60))
        saga = live.cli_in_background(
            "failover", app, "--from", "primary", "--link", link, "--force", "--wait"
        )
        try:
            key = BindingKey.for_app(app)
            wait_until(lambda: routing.binding(key).cluster == "standby")  # type: ignore[union-attr]
            since = [kafka.Record(b"k", f"after-{i}".encode()) for i in range(3)]
            assert kafka.produce(live.gateway.bootstrap, topic, since, settings={"client.id": app}) == 3
            assert kafka.ends_of(standby.connect, [(topic, 0)]) == {(topic, 0): 53}
            assert leave_group(there, group, member_there) == ErrorCode.none
            out, err = saga.communicate(timeout=120)
        finally:
            saga.kill()
    try:
        assert saga.returncode == 0, out + err
        (run,) = routing.ledger.saga_runs(saga_id([app]))
        assert run.result is not None
        assert "groups not carried before the flip" in run.result["detail"], run.result["detail"]
        assert run.result["groups_synced"] == 1, run.result["detail"]
        on_standby = committed_offsets(ClusterAdmin(standby.connect), group)
        assert on_standby == {(topic, 0): 50}  # the three records written since are read
    finally:
        live.cli("clusters", "unshield", "primary", "--reason", "test")


def test_a_forced_failover_stops_the_copy_before_it_reads_where_the_copy_stands(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    """The source still answers, and is written to as the failover runs. The flip pauses the link and
    waits for the mirror to stop before it reads where the copy stands, so the standby holds nothing
    past the final position stored. (Before, the mirror copied on until it saw the promotion, some
    100 ms after the flip read it: records the saga counted as never copied, and one copied after a
    client's first write there would have been presented as that client's.)"""
    primary, standby = brokers
    app, topic, link = bound_to_the_primary(routing, primary.connect, "busy")
    stop = threading.Event()

    def write() -> None:  # straight to the primary, a few hundred records a second
        producer = Producer({"bootstrap.servers": primary.connect, "linger.ms": 5})
        while not stop.is_set():
            producer.produce(topic, b"busy")
            producer.poll(0.002)
        producer.flush(10)

    writer = threading.Thread(target=write, name="writer")
    writer.start()
    try:
        wait_until(lambda: kafka.partitions(standby.connect, lambda name: name == topic) == [(topic, 0)])
        wait_until(lambda: kafka.ends_of(standby.connect, [(topic, 0)])[(topic, 0)] >= 200)
        failed_over = live.cli("failover", app, "--from", "primary", "--link", link, "--force", "--wait")
    finally:
        stop.set()
        writer.join(30)
    try:
        assert failed_over.returncode == 0, failed_over.stdout + failed_over.stderr
        (copied, target_end) = read_link(standby.connect, link).ends[(topic, 0)]
        assert kafka.ends_of(standby.connect, [(topic, 0)]) == {(topic, 0): target_end}
        assert copied == target_end  # identical offsets
    finally:
        live.cli("clusters", "unshield", "primary", "--reason", "test")


def test_records_written_after_a_forced_failover_reach_a_consumer_that_read_past_the_copy(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    """A consumer that read the primary's records the copy never got is positioned past them, in its own
    memory; the standby's first records are presented after them, so it reads those on. (They were
    presented where the copy stood: a chaos trial's kafkajs group went on past the first one.)"""
    standby = brokers[1]
    assert live.gateway is not None
    app, topic, link = copied_short(routing, brokers, "read")
    reader = Consumer({"bootstrap.servers": live.gateway.bootstrap, "client.id": app, "group.id": app,
                       "enable.auto.commit": False})  # fmt: skip
    try:
        reader.assign([TopicPartition(topic, 0, 0)])
        assert [offset for offset, _ in polled(reader, 55)] == list(range(55))
        failed_over = live.cli("failover", app, "--from", "primary", "--link", link, "--force", "--wait")
        assert failed_over.returncode == 0, failed_over.stdout + failed_over.stderr
        assert read_link(standby.connect, link).resumes == {(topic, 0): 55}
        written = [kafka.Record(b"k", f"after-{i}".encode()) for i in range(3)]
        assert kafka.produce(live.gateway.bootstrap, topic, written, settings={"client.id": app}) == 3
        assert polled(reader, 3) == [(55, b"after-0"), (56, b"after-1"), (57, b"after-2")]
        # on the standby they are the records after the copy
        assert kafka.ends_of(standby.connect, [(topic, 0)]) == {(topic, 0): 53}
    finally:
        reader.close()
        live.cli("clusters", "unshield", "primary", "--reason", "test")


def test_a_batch_in_flight_to_the_frozen_primary_is_written_before_those_sent_after_it(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> None:
    """An idempotent producer's batch b is in flight to the frozen primary when the failover shields it;
    the gateway gives up on it after its grace, with the retriable error, and the client resends it. Its
    next batch c, sent to the standby's leader meanwhile (the Java client does so once its metadata
    names the new leader), reached the standby first: the gateway took it as the start of the
    partition's sequences there and wrote it, then refused b as out of order at every resend (a chaos
    trial's Java producer failed 79 records at its delivery time-out). Now no start is taken while the
    primary's shield is fresh: c is refused with the retriable error, and b, resent, goes first."""
    primary, standby = brokers
    assert live.gateway is not None
    app, topic, key = one_partition(routing, brokers, "inflight")
    wait_for_acks(routing.zk, routing.layout,
                  routing.set_binding(key, "primary", actor=ACTOR, reason="test"), timeout_s=10)  # fmt: skip
    first = RawProducer(live.gateway.port, app)
    then = RawProducer(live.gateway.port, app, (first.producer_id, first.epoch))  # its other connection
    try:
        assert first.produce(topic, {0: (0, "a")}) == {0: ErrorCode.none}
        freeze(primary.process.pid())
        try:
            in_flight = first.send(topic, {0: (3, "b")})
            shielded = routing.set_cluster_state("primary", ClusterState.SHIELDED, actor=ACTOR, reason="t")
            wait_for_acks(routing.zk, routing.layout, shielded, timeout_s=10)
            # the failover's flip: acknowledged only once b is given up on, but routed by at once
            flipped = routing.set_binding(key, "standby", actor=ACTOR, reason="test")
            wait_until(lambda: ready_said(HEALTH_PORT)[1]["epoch"] >= flipped, timeout_s=10)
            assert then.produce(topic, {0: (6, "c")}) == {0: ErrorCode.not_leader_or_follower}
            assert first.answered(in_flight) == {0: ErrorCode.not_leader_or_follower}  # given up on
            b_then_c(then, topic)
        finally:
            os.kill(primary.process.pid() or 0, signal.SIGCONT)
    finally:
        first.close()
        then.close()
        live.cli("clusters", "unshield", "primary", "--reason", "test")
    on_standby = [r.value for r in kafka.read_partitions(standby.connect, topic)[0]]
    assert on_standby == [f"{t}{n}".encode() for t in "bc" for n in range(3)]


def test_a_batch_held_by_a_gateway_process_frozen_through_the_shield_is_written_before_those_sent_after_it(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService], tmp_path: Path
) -> None:
    """Two gateways on one routing root, as two processes of one; one, F, SIGSTOPped as the failover
    shields the primary, applies the shield seconds after the other, L, and then holds the producer's
    batch b for the flip, answering it with the retriable error once the flip comes (its shield is
    fresh). The producer's next batch c,
    sent meanwhile to the new leader through L, was taken there as the start on the standby, L having
    counted its own shield out long before, and b was refused as out of order at every resend (a chaos
    trial's Java producer: 5 records failed at its delivery time-out). Now both count from the flip: c
    is refused with the retriable error, and b, resent, goes first."""
    standby = brokers[1]
    assert live.gateway is not None
    app, topic, key = one_partition(routing, brokers, "frozen")
    frozen = GatewayProcess(
        live.path, root=live.root, gateway_id="gw-frozen", log=tmp_path / "frozen.log",
        overrides={**live.env, "SWITCHYARD__GATEWAY__HEALTH_PORT": str(ports.reserve(1)[0])},
    )  # fmt: skip
    frozen.start()
    try:
        bound = routing.set_binding(key, "primary", actor=ACTOR, reason="test")
        wait_for_acks(routing.zk, routing.layout, bound, timeout_s=10)
        first = RawProducer(frozen.port, app)
        then = RawProducer(live.gateway.port, app, (first.producer_id, first.epoch))
        try:
            assert first.produce(topic, {0: (0, "a")}) == {0: ErrorCode.none}
            pid = freeze(frozen.process.pid if frozen.process else None)
            try:
                shielded = routing.set_cluster_state(
                    "primary", ClusterState.SHIELDED, actor=ACTOR, reason="t"
                )
                wait_until(lambda: ready_said(HEALTH_PORT)[1]["epoch"] >= shielded, timeout_s=10)
                time.sleep(SHIELD_GRACE_S + SETTLED_S + 0.5)  # L has counted its shield out
            finally:
                os.kill(pid, signal.SIGCONT)
            wait_for_acks(routing.zk, routing.layout, shielded, timeout_s=10)
            held = first.send(topic, {0: (3, "b")})  # held by F for the routing change
            flipped = routing.set_binding(key, "standby", actor=ACTOR, reason="test")
            wait_until(lambda: ready_said(HEALTH_PORT)[1]["epoch"] >= flipped, timeout_s=10)
            assert first.answered(held) == {0: ErrorCode.not_leader_or_follower}  # F: its shield is fresh
            assert then.produce(topic, {0: (6, "c")}) == {0: ErrorCode.not_leader_or_follower}
            b_then_c(then, topic)
        finally:
            first.close()
            then.close()
    finally:
        frozen.stop()
        live.cli("clusters", "unshield", "primary", "--reason", "test")
    on_standby = [r.value for r in kafka.read_partitions(standby.connect, topic)[0]]
    assert on_standby == [f"{t}{n}".encode() for t in "bc" for n in range(3)]


def one_partition(
    routing: RoutingStore, brokers: tuple[PrivateService, PrivateService], name: str
) -> tuple[str, str, BindingKey]:
    """A new application and a topic of one partition on both clusters, the primary active: the
    application, the topic and the application's binding key."""
    app, topic = f"app-{uuid.uuid4().hex[:6]}", f"{name}-{uuid.uuid4().hex[:6]}"
    if routing.cluster("primary").state is ClusterState.SHIELDED:  # type: ignore[union-attr]  # failed over from
        routing.set_cluster_state("primary", ClusterState.ACTIVE, actor=ACTOR, reason="test")
    for broker in brokers:
        kafka.create_topics(broker.connect, [topic], partitions=1)
    return app, topic, BindingKey.for_app(app)


def b_then_c(producer: RawProducer, topic: str) -> None:
    """Batch b (sequence 3) resent until written, refused meanwhile with the retriable error alone; then
    batch c (sequence 6) written after it."""
    deadline = time.monotonic() + 10
    while (resent := producer.produce(topic, {0: (3, "b")})) != {0: ErrorCode.none}:
        assert resent == {0: ErrorCode.not_leader_or_follower}
        assert time.monotonic() < deadline, "b was refused for 10 s"
        time.sleep(0.1)
    assert producer.produce(topic, {0: (6, "c")}) == {0: ErrorCode.none}


def polled(consumer: Consumer, count: int, timeout_s: float = 60) -> list[tuple[int, bytes]]:
    """The next ``count`` records ``consumer`` reads (within ``timeout_s``): offset and value."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append((message.offset() or 0, message.value() or b""))
    return got


def read_past_the_copy(
    live: Live, routing: RoutingStore, brokers: tuple[PrivateService, PrivateService]
) -> tuple[str, str, str, str]:
    """An application bound to the primary whose group committed offset 55 of a topic the link copied up
    to 50: the application, topic, link and group."""
    app, topic, link = copied_short(routing, brokers, "orders")
    group = f"{app}-readers"
    assert live.gateway is not None
    with RawClient(
        live.gateway.port, client_id=app
    ) as reader:  # it read everything, the records left behind too
        member = join_group(reader, group, topic, timedelta(seconds=60))
        assert commit_offset(reader, group, *member, topic, 55) == ErrorCode.none
    seen_by_gateway(routing, topic, {app}, {(app, group)})
    return app, topic, link, group


def copied_short(
    routing: RoutingStore, brokers: tuple[PrivateService, PrivateService], name: str
) -> tuple[str, str, str]:
    """An application bound to the primary, and a topic whose link copied 50 records and was paused
    before 5 more: the application, topic and link."""
    primary, standby = brokers
    app, topic, link = bound_to_the_primary(routing, primary.connect, name)
    kafka.produce(primary.connect, topic, [kafka.Record(b"k", f"v{i}".encode()) for i in range(50)])
    wait_until(lambda: kafka.partitions(standby.connect, lambda name: name == topic) == [(topic, 0)])
    wait_until(lambda: kafka.ends_of(standby.connect, [(topic, 0)]) == {(topic, 0): 50})
    routing.set_link_state(link, LinkState.PAUSED, actor=ACTOR, reason="test")
    wait_until(lambda: statuses(routing, link) == {"paused"})
    kafka.produce(primary.connect, topic, [kafka.Record(b"late", b"late")] * 5)  # never copied
    return app, topic, link


def bound_to_the_primary(routing: RoutingStore, primary: str, name: str) -> tuple[str, str, str]:
    """An application bound to the primary (active again if an earlier failover shielded it), a topic
    of one partition there and a link copying it to the standby: the application, topic and link."""
    app, topic, link = (
        f"app-{uuid.uuid4().hex[:6]}",
        f"{name}-{uuid.uuid4().hex[:6]}",
        f"link-{uuid.uuid4().hex[:6]}",
    )
    if routing.cluster("primary").state is ClusterState.SHIELDED:  # type: ignore[union-attr]  # failed over from
        routing.set_cluster_state("primary", ClusterState.ACTIVE, actor=ACTOR, reason="test")
    kafka.create_topics(primary, [topic], partitions=1)
    routing.create_link(link, "primary", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "primary", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    return app, topic, link


def carried(
    live: Live, standby: str, app: str, group: str, member: tuple[str, int], topic: str, offset: int
) -> int | None:
    """Where ``member``'s commit of ``offset`` (partition 0), made through the gateway, lands on the
    standby."""
    assert live.gateway is not None
    with RawClient(live.gateway.port, client_id=app) as reader:
        assert commit_offset(reader, group, *member, topic, offset) == ErrorCode.none
    return committed_offsets(ClusterAdmin(standby), group).get((topic, 0))


ASKER = """
import sys, time
from confluent_kafka.admin import AdminClient
from switchyard.mirror.groups import group_state
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
admin.list_topics(timeout=10)
print("connected", flush=True)
sys.stdin.readline()  # the broker is frozen
try:
    group_state(admin, sys.argv[2], timeout_s=1.0)
    print("answered while frozen", flush=True)
except Exception as exc:  # ours (TimeoutError) or librdkafka's (_TIMED_OUT)
    print("timed out" if "TIMED_OUT" in repr(exc) or isinstance(exc, TimeoutError) else repr(exc), flush=True)
sys.stdin.readline()  # thawed
time.sleep(2)  # the coordinator's answer comes in
print(group_state(admin, sys.argv[2], timeout_s=10.0)[0].name, flush=True)
"""


def test_a_group_request_that_timed_out_while_its_coordinator_was_sought_leaves_its_process_running(
    brokers: tuple[PrivateService, PrivateService],
) -> None:
    """librdkafka (2.16, and its master) frees a coordinator request's state when the request's own
    time-out passes before the coordinator is found; the FindCoordinator answer arriving later touches
    it, and the process aborts (an assertion on a freed reference count) or segfaults. Chaos trials
    lost a worker and a mirror so with a broker killed, and a drill's canary died with its worker. Asked
    of a frozen broker about a group it has not asked of before, a group request times out for its
    caller; once thawed, the process goes on and the client still answers."""
    primary, _ = brokers
    pid = primary.process.pid()
    assert pid is not None
    asker = subprocess.Popen(
        [sys.executable, "-c", ASKER, primary.connect, f"never-asked-{uuid.uuid4().hex[:6]}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert asker.stdin is not None
    assert asker.stdout is not None
    try:
        assert asker.stdout.readline().strip() == "connected"
        freeze(pid)
        try:
            asker.stdin.write("frozen\n")
            asker.stdin.flush()
            assert asker.stdout.readline().strip() == "timed out"
        finally:
            os.kill(pid, signal.SIGCONT)
        asker.stdin.write("thawed\n")
        asker.stdin.flush()
        said = asker.stdout.readline().strip()
        assert asker.wait(30) == 0, f"the process ended {asker.returncode}"
        assert said in {"EMPTY", "DEAD"}, said
    finally:
        asker.kill()


def acknowledged_at(bootstrap: str, client_id: str, topic: str) -> float:
    """When a record produced now is acknowledged (within 60 s)."""
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id})
    acked_at: list[float] = []
    producer.produce(
        topic,
        b"after the failover",
        on_delivery=lambda e, _m: acked_at.append(time.monotonic()) if e is None else None,
    )
    deadline = time.monotonic() + 60
    while not acked_at and time.monotonic() < deadline:
        producer.poll(0.1)
    assert acked_at, "nothing could be produced after the failover"
    return acked_at[0]


def wait_until(check: object, timeout_s: float = 60) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "never came to pass"
        time.sleep(0.2)


def statuses(routing: RoutingStore, link: str) -> set[str]:
    return {p.state for m in read_status(routing.zk, routing.layout, link) for p in m.partitions}


def seen_ends(routing: RoutingStore, link: str) -> dict[tuple[str, int], int]:
    return {
        (p.topic, p.partition): p.source_end
        for m in read_status(routing.zk, routing.layout, link)
        for p in m.partitions
    }
