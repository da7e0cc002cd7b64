"""A three-broker cluster, shared by this module: replication with one broker killed (and a kept admin
client whose group's coordinator moved meanwhile), a partition's leadership moving while an application
writes and reads through the gateway — the application sees nothing but retriable errors, loses nothing
and never learns a real broker's address — a group's requests reaching its coordinator whichever of
the gateway's brokers they were sent to, a write to a killed leader held until its partition is led
elsewhere, the ends of partitions whose leader was killed read once they are, and records a leader
appended but has not committed, with a follower frozen."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from activities.deps import KEPT_READER_S
from switchyard import appended, kafka
from switchyard.admins import Admins
from switchyard.config import Config
from switchyard.mirror.groups import group_state
from switchyard.routing import RoutingStore
from switchyard.stack import Stack
from switchyard.wire import Wire
from tests.compat.app_io import value_of
from tests.helpers.asker import Asker
from tests.helpers.clusters import SOLO, cluster_config, cluster_stack, discard, kill, read_all, records
from tests.helpers.compat import App, unaccounted_sends, wait_until
from tests.helpers.processes import GatewayProcess, freeze, own_gateway
from tests.helpers.raw import RawClient, commit_offset, consumer_heartbeat, join_group
from tests.helpers.sockets import connected_ports
from workers.gateway.routing import apis

RECORDS = 3000
ANSWERED_WITHIN_S = 240
"""How long a writer's flush waits for its last sends' answers: inside librdkafka's default message
time-out (300 s), past which a send fails, so a send never answered is still caught; a cluster slow to
take writes again is waited for (CI failed at 60 s once, 260 sends unanswered, on a machine running
the suite 2.4 times slower than the one it passed on)."""


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path = cluster_config(tmp_path_factory.mktemp("three"), brokers=3, properties={"min.insync.replicas": 2})
    stack = cluster_stack(path)
    try:
        stack.up(timeout_s=120)
        yield stack
    finally:
        discard(stack)


def _on_three(request: pytest.FixtureRequest) -> dict[str, str]:
    """The gateway's default cluster, ``primary``, is the three-broker cluster."""
    three: Stack = request.getfixturevalue("three")
    return {"SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": three.config.clusters[SOLO].bootstrap}


gateway = own_gateway("gw-leaders", _on_three)


def _partitions(admin: AdminClient, topic: str) -> list[Any]:
    return list(admin.list_topics(topic, timeout=10).topics[topic].partitions.values())


def leader(admin: AdminClient, topic: str, partition: int) -> int:
    return int(admin.list_topics(topic, timeout=10).topics[topic].partitions[partition].leader)


def test_three_brokers_replicate_and_one_may_die(
    three: Stack, routing: RoutingStore, stack_config: Config, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """And a kept admin client, whose group's coordinator moved while the broker was down and moved back
    once it was in sync again, is answered NOT_COORDINATOR until a new client asks: a chaos trial's group
    sync was, for the 30 s of its step, and the switch compensated with clients held. A group's
    committed offsets asked then come (librdkafka's own request killed the process that asked: the
    answer NOT_COORDINATOR made it touch the consumer group an admin client lacks, librdkafka#5040).
    And a gateway whose first bootstrap server is the broker killed still answers on its bootstrap
    port: it sent every request there (Metadata, FindCoordinator) to that broker, and closed the
    client's connection until it was back — 28 s in a chaos trial, and kafkajs gave its sends up."""
    assert [s.name for s in three.services] == ["kafka-solo-1", "kafka-solo-2", "kafka-solo-3"]
    bootstrap = three.config.clusters[SOLO].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert sorted(b.id for b in admin.list_topics(timeout=10).brokers.values()) == [1, 2, 3]
    topic = f"triple-{uuid.uuid4().hex[:8]}"
    kafka.create_topics(bootstrap, [topic], partitions=3, config={"min.insync.replicas": "2"})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    assert all(sorted(p.replicas) == [1, 2, 3] for p in partitions)
    assert kafka.produce(bootstrap, topic, records(100, "a")) == 100
    assert len(read_all(bootstrap, topic, 100)) == 100  # __consumer_offsets made while all three are up

    group, preferred = f"kept-{uuid.uuid4().hex[:8]}", coordinator_at_home(admin)
    offsets = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 7)])]
    for committed in admin.alter_consumer_group_offsets(offsets).values():
        committed.result(30)
    admins = Admins(lambda _: bootstrap)
    asker = Asker(bootstrap, group)  # a worker's kept clients asking the group's offsets, apart
    request.addfinalizer(asker.close)
    assert asker.ask() == {(topic, 0): 7}

    def state(clients: list[AdminClient], timeout_s: float) -> ConsumerGroupState:
        return group_state(clients[0], group, timeout_s)[0]

    listed = sorted(admin.list_topics(timeout=10).brokers.values(), key=lambda b: b.id != preferred)
    first_killed = ",".join(f"{b.host}:{b.port}" for b in listed)
    assert stack_config.source is not None
    first_gone = GatewayProcess(
        stack_config.source, root=routing.layout.root, gateway_id="gw-first-gone", log=tmp_path / "gw.log",
        overrides={"SWITCHYARD__CLUSTERS__PRIMARY__BOOTSTRAP": first_killed},
    )  # fmt: skip
    first_gone.start()
    try:
        kill(three, f"kafka-solo-{preferred}")  # two of three remain: a quorum, and min.insync.replicas met
        for _ in range(2):  # a connection of its own each time
            with RawClient(first_gone.port, client_id="anyone") as client:
                asked = client.send(apis.METADATA, 12, topics=None, allow_auto_topic_creation=False)
                assert client.answer(asked).brokers, "answered with no broker"
    finally:
        first_gone.stop()
    assert kafka.produce(bootstrap, topic, records(100, "b")) == 100
    assert len(read_all(bootstrap, topic, 200)) == 200
    assert admins.retried([SOLO], state, 60) == ConsumerGroupState.EMPTY  # the kept client: another broker
    assert asker.ask(60) == {(topic, 0): 7}
    three.up(timeout_s=120)  # whole again for the module's next test
    deadline = time.monotonic() + 60
    while any(len(p.isrs) < 3 for p in [*_partitions(admin, topic), *_partitions(admin, OFFSETS_TOPIC)]):
        assert time.monotonic() < deadline, f"broker {preferred} never caught up"
        time.sleep(0.5)
    assert coordinator_at_home(admin) == preferred
    kept = admins.get(SOLO)
    refused_within(lambda: state([kept], 2), "NOT_COORDINATOR", 30)  # once the broker before unloaded it
    assert admins.retried([SOLO], state, 30) == ConsumerGroupState.EMPTY  # asked again on a new client
    assert admins.get(SOLO) is not kept
    # librdkafka's ListConsumerGroupOffsets, sent to the coordinator before, segfaulted on its answer
    assert (asker.ask(30), asker.restarts) == ({(topic, 0): 7}, 0)


OFFSETS_TOPIC = "__consumer_offsets"


def refused_within(ask: Callable[[], object], error: str, seconds: float) -> None:
    """Until ``ask`` raises ``error``; it stays refused (librdkafka's admin client keeps the coordinator
    it found until the entry goes unused for long)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            ask()
        except KafkaException as exc:
            if error in str(exc):
                return
        assert time.monotonic() < deadline, f"never refused {error}"
        time.sleep(0.2)


def coordinator_at_home(admin: AdminClient) -> int:
    """The broker that coordinates every group (the testbed's offsets topic has one partition), once it
    leads its preferred replica."""
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(OFFSETS_TOPIC, 0)])
    elected.result(30)  # an error for the partition (led by its preferred replica already) is no matter
    deadline = time.monotonic() + 30
    while (offsets := _partitions(admin, OFFSETS_TOPIC)[0]).leader != offsets.replicas[0]:
        assert time.monotonic() < deadline, f"{OFFSETS_TOPIC} never went back to its preferred leader"
        time.sleep(0.2)
    return int(offsets.leader)


def test_a_leader_moves_while_clients_write_through_the_gateway(
    three: Stack, gateway: GatewayProcess, tmp_path: Path
) -> None:
    """Three writers: librdkafka at its defaults (at least once: a batch the stopping broker wrote but
    never answered is sent again, gateway or not), an idempotent one (exactly once), and the Java client
    at its defaults (idempotent), in a process of its own whose connections are watched: told of the new
    leader in Produce answers (KIP-951), it must never connect to a real broker's port."""
    real = three.config.clusters[SOLO].bootstrap
    admin = AdminClient({"bootstrap.servers": real})
    topic, app = f"lead-{uuid.uuid4().hex[:8]}", f"lead-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(real, [topic], partitions=3)
    acked: list[bytes] = []
    failed: list[str] = []
    errors: list[KafkaError] = []
    seen_brokers: set[str] = set()
    unanswered: dict[str, tuple[int, float]] = {}

    def delivered(error: KafkaError | None, message: Message) -> None:
        if error is None:
            acked.append(message.value() or b"")
        else:
            failed.append(str(error))

    def stats(text: str) -> None:
        seen_brokers.update(b["name"] for b in json.loads(text)["brokers"].values() if b["nodeid"] >= 0)

    def write(tag: str, settings: dict[str, object]) -> None:
        producer = Producer({
            "bootstrap.servers": gateway.bootstrap, "client.id": app, "error_cb": errors.append,
            "statistics.interval.ms": 500, "stats_cb": stats, **settings,
        })  # fmt: skip
        for i in range(RECORDS):
            producer.produce(topic, f"{tag}{i}".encode(), f"k{i}".encode(), on_delivery=delivered)
            producer.poll(0.002)
        unanswered[tag] = _flushed(producer)

    writers = [
        threading.Thread(target=write, args=("p", {}), daemon=True),
        threading.Thread(target=write, args=("i", {"enable.idempotence": True}), daemon=True),
    ]
    real_ports = {b.port for b in admin.list_topics(timeout=10).brokers.values()}
    java = App("java", "one gateway", app, topic, tmp_path / "java")
    with java_writing(java, gateway) as watch:
        for writer in writers:
            writer.start()
        time.sleep(1.5)
        moved_from, moved_to = move_away_and_back(three, admin, topic)
        for writer in writers:
            writer.join(ANSWERED_WITHIN_S + 60)

    keys = [(topic, p) for p in range(3)]
    on_log = Counter(r.value for records in kafka.read_partitions(real, topic).values() for r in records)
    judge_java(java, watch, real_ports, gateway, on_log)
    assert sum(on_log.values()) == sum(kafka.ends_of(real, keys).values())
    got = kafka.consume(gateway.bootstrap, topic, group=f"{app}-readers", count=sum(on_log.values()),
                        settings={"client.id": app})  # fmt: skip
    said = sorted({e.name() for e in errors})
    print(f"\nleader of {topic}[0]: {moved_from} -> {moved_to} -> {leader(admin, topic, 0)}; "
          f"client errors: {said}; brokers it knew: {sorted(seen_brokers)}; "
          f"unanswered after the flush, and its seconds: {unanswered}; "
          f"written twice: {sorted(v.decode() for v, n in on_log.items() if v and n > 1)}")  # fmt: skip
    assert moved_to != moved_from
    assert failed == []
    held = [line for line in gateway.log.read_text().splitlines() if "held" in line]
    assert len(acked) == 2 * RECORDS, f"unanswered, flush's seconds: {unanswered}; the gateway: {held[-5:]}"
    assert Counter(r.value for r in got) == on_log  # the reader through the gateway saw the log, once
    for tag, most in (("p", None), ("i", 1)):
        counts = [on_log[f"{tag}{i}".encode()] for i in range(RECORDS)]
        assert min(counts) == 1, f"{counts.count(0)} of writer {tag}'s records are not on the log"
        assert most is None or max(counts) == most, f"{tag}: {len(counts) - counts.count(1)} written twice"
    assert not [e for e in errors if e.fatal() or not _retriable(e)], errors
    gateway_ports = {str(gateway.port + i) for i in range(16)}
    assert {name.rsplit("/", 1)[0].rsplit(":", 1)[1] for name in seen_brokers} <= gateway_ports, seen_brokers


def test_a_groups_requests_reach_its_coordinator_whichever_broker_they_were_sent_to(
    three: Stack, gateway: GatewayProcess
) -> None:
    """A client keeps the coordinator it found: kafkajs until it next joins. Once the group's offsets
    partition has another leader (a broker killed, or back and preferred again), the broker it keeps
    answers NOT_COORDINATOR; a chaos trial's kafkajs consumer was refused so for 22 s after a broker kill,
    and processed 143 records twice. Sent to a broker of the gateway's that is not the coordinator, a
    classic member's join, commit and heartbeat, and a consumer-protocol member's heartbeat, are
    answered by the coordinator."""
    real = three.config.clusters[SOLO].bootstrap
    topic, app = f"coord-{uuid.uuid4().hex[:8]}", f"coord-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(real, [topic], partitions=1)
    classic, consumer = f"{app}-classic", f"{app}-consumer"
    with RawClient(gateway.port, client_id=app) as boot:
        found = {g: _coordinator(boot, g) for g in (classic, consumer)}
    # the cluster's brokers as the gateway shows them: the topic's replicas (it lists the other
    # cluster's brokers too, which lead nothing here)
    shown = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(topic, timeout=10)
    replicas = {r for p in shown.topics[topic].partitions.values() for r in p.replicas}
    listed = {i: b for i, b in shown.brokers.items() if i in replicas}
    assert len(listed) == 3, (replicas, shown.brokers)

    def away(group: str) -> RawClient:
        port = next(b.port for b in listed.values() if b.id != found[group])
        return RawClient(port, client_id=app)

    with away(classic) as client:
        member, generation = join_group(client, classic, topic, timedelta(seconds=30))
        assert commit_offset(client, classic, member, generation, topic, 7) is ErrorCode.none
        beat = client.send(
            apis.HEARTBEAT, 4, group_id=classic, generation_id=generation, member_id=member,
            group_instance_id=None,
        )  # fmt: skip
        assert client.answer(beat).error_code is ErrorCode.none
    with away(consumer) as client:
        joined = consumer_heartbeat(client, consumer, str(uuid.uuid4()), 0, topic=topic)
        assert joined.error_code is ErrorCode.none, joined
    admin = AdminClient({"bootstrap.servers": real})  # kept: the answer comes from its threads
    offsets = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(classic, [TopicPartition(topic, 0)])]
    )
    assert offsets[classic].result(30).topic_partitions[0].offset == 7


def test_a_write_to_a_killed_broker_waits_until_its_partitions_are_led_elsewhere(
    three: Stack, gateway: GatewayProcess, tmp_path: Path
) -> None:
    """kafkajs at its defaults (not idempotent) writes through the gateway while the broker leading its
    partition is killed (SIGKILL). The cluster names a new leader only once it gives up on the broker
    (~9 s); told at once, kafkajs asked the bootstrap port for metadata, was sent straight back to the
    dead broker, and its retries ran out first (a chaos trial: 24 sends failed). Held until the partition
    is led elsewhere, no send fails, and every acknowledged record is on the log."""
    real = three.config.clusters[SOLO].bootstrap
    admin = AdminClient({"bootstrap.servers": real})
    topic, app = f"dead-{uuid.uuid4().hex[:8]}", f"dead-{uuid.uuid4().hex[:6]}"
    kafka.create_topics(real, [topic], partitions=1)  # its only broker connection the dead one's
    writer = App("kafkajs", "one gateway", app, topic, tmp_path / "kafkajs")
    writer.start(gateway.bootstrap, rate=100, consume=False)
    try:
        wait_until("kafkajs's first records", [writer], lambda _, s: len(s.acked) >= 50, 60)
        victim = leader(admin, topic, 0)
        kill(three, f"kafka-{SOLO}-{victim}")
        deadline = time.monotonic() + 60
        while leader(admin, topic, 0) == victim:
            assert time.monotonic() < deadline, f"broker {victim} killed, and still the leader"
            time.sleep(0.2)
        time.sleep(2)  # writes to the new leader
        writer.signal("stop-producing")
        wait_until("kafkajs's last records", [writer], lambda _, s: s.produced is not None, 120)
    finally:
        writer.stop()
        back_in_sync(three, admin, topic)
    sent = writer.seen()
    on_log = Counter(r.value for records in kafka.read_partitions(real, topic).values() for r in records)
    held = [line for line in gateway.log.read_text().splitlines() if "which cannot be reached, held" in line]
    print(f"\nkafkajs: {len(sent.acked)} acknowledged, {len(sent.failed)} failed; the gateway held "
          f"{len(held)} writes to broker {victim}: {held[:1]}")  # fmt: skip
    assert unaccounted_sends(sent) == [], unaccounted_sends(sent)
    assert sent.failed == [], sent.failed[:3]
    assert held, "no write was held for the killed broker"
    missing = [n for n in sent.acked if on_log[value_of(n)] == 0]
    assert missing == [], f"{len(missing)} acknowledged records not on the log: {missing[:5]}"


def test_the_ends_of_partitions_whose_leader_was_killed_are_read_once_they_are_led_elsewhere(
    three: Stack,
) -> None:
    """A saga's worker reads a cluster's ends on a consumer it keeps (the drain, the flip's fence), with
    clients held. With a partition's leader SIGKILLed, that consumer sent its ListOffsets to the dead
    broker until its time-out and never learned the new leader, or failed ``_DESTROY_BROKER`` once the
    cluster dropped the broker (a chaos trial's flip took 21 s so). Asked for the topic's leaders
    between tries, it reads the ends once the partitions are led elsewhere, as they were."""
    real = three.config.clusters[SOLO].bootstrap
    admin = AdminClient({"bootstrap.servers": real})
    topic = f"ends-{uuid.uuid4().hex[:8]}"
    kafka.create_topics(real, [topic], partitions=3)
    assert kafka.produce(real, topic, records(300, "e")) == 300
    keys = [(topic, p) for p in range(3)]
    settings = {"bootstrap.servers": real, "group.id": "switchyard-saga-probe",
                "enable.partition.eof": True, "fetch.wait.max.ms": kafka.READ_WAIT_MS}  # fmt: skip
    kept = Consumer(settings)
    try:
        before = kafka.log_ends(kept, keys, timeout_s=10)
        victim = leader(admin, topic, 0)
        kill(three, f"kafka-{SOLO}-{victim}")
        made_after = Consumer(settings)  # as the worker's reader, made anew when the kept one failed
        try:
            assert kafka.log_ends(made_after, keys, timeout_s=60) == before
        finally:
            made_after.close()
        assert leader(admin, topic, 0) != victim
        assert kafka.log_ends(kept, keys, timeout_s=KEPT_READER_S) == before  # the first try's time
    finally:
        kept.close()
        back_in_sync(three, admin, topic)


def test_records_a_leader_appended_but_has_not_committed_are_told_by_its_log_end(three: Stack) -> None:
    """With a follower frozen (SIGSTOP) and still in sync, a leader appends an acks=all producer's records
    and commits none until the follower copies them or the cluster drops it. Every reader's end, the high
    watermark, leaves them out, so a switch fenced there found the source moved when they came in (a
    chaos trial's topic migration, a follower killed: FenceBroken 45 -> 46). The leader's log end
    (:func:`switchyard.appended.leader_ends`, which the saga's settle step waits for) tells them."""
    real = three.config.clusters[SOLO].bootstrap
    admin = AdminClient({"bootstrap.servers": real})
    topic = f"appended-{uuid.uuid4().hex[:8]}"
    kafka.create_topics(real, [topic], partitions=1)
    assert kafka.produce(real, topic, records(20, "a")) == 20
    key, wire = (topic, 0), Wire(real)
    partition = _partitions(admin, topic)[0]
    follower = next(r for r in partition.replicas if r != partition.leader)
    process = next(three.process(s) for s in three.services if s.name == f"kafka-{SOLO}-{follower}")
    # A broker reads a connection's next request only once it has answered the last, and an acks=all
    # produce is answered when committed: the five records must go in one request, gathered by the linger.
    producer = Producer({"bootstrap.servers": real, "linger.ms": 500})
    try:
        producer.produce(topic, b"connected", partition=0)  # its connection to the leader made
        assert producer.flush(30) == 0
        assert appended.leader_ends(wire, [key], 10) == kafka.ends_of(real, [key]) == {key: 21}
        pid = freeze(process.pid())
        try:
            for record in records(5, "b"):
                producer.produce(topic, record.value, record.key, partition=0)
            producer.poll(0)
            deadline = time.monotonic() + 5  # well inside the cluster's 9 s before it drops the follower
            while (ends := appended.leader_ends(wire, [key], 5)) != {key: 26}:
                assert time.monotonic() < deadline, f"the leader's end {ends}, not 26"
                time.sleep(0.05)
            assert kafka.ends_of(real, [key]) == {key: 21}, "committed with a follower in sync frozen"
        finally:
            os.kill(pid, signal.SIGCONT)
        assert producer.flush(60) == 0
        assert kafka.ends_of(real, [key]) == appended.leader_ends(wire, [key], 10) == {key: 26}
    finally:
        wire.close()
        back_in_sync(three, admin, topic)


def back_in_sync(three: Stack, admin: AdminClient, topic: str) -> None:
    """Every broker up again and in sync on ``topic``, each partition led by its preferred replica: the
    module's next test finds the cluster as it was."""
    three.up(timeout_s=120)
    deadline = time.monotonic() + 60
    while any(len(p.isrs) < 3 for p in _partitions(admin, topic)):
        assert time.monotonic() < deadline, f"{topic} never back in sync"
        time.sleep(0.5)
    partitions = [TopicPartition(topic, p.id) for p in _partitions(admin, topic)]
    admin.elect_leaders(ElectionType.PREFERRED, partitions).result(30)


def _coordinator(client: RawClient, group: str) -> int:
    """The group's coordinator as the gateway names it, asked until the cluster has one."""
    deadline = time.monotonic() + 30
    while True:
        found = client.answer(client.send(apis.FIND_COORDINATOR, 3, key=group, key_type=0))
        if found.error_code is ErrorCode.none:
            return int(found.node_id)
        assert time.monotonic() < deadline, found
        time.sleep(0.2)


@contextmanager
def java_writing(java: App, gateway: GatewayProcess) -> Iterator[PortWatch]:
    """The Java application producing through ``gateway`` (its first records acknowledged), its
    connections watched; once done, its last records acknowledged too."""
    java.start(gateway.bootstrap, rate=200, consume=False)
    watch = PortWatch(java)
    try:
        wait_until("the Java producer's first records", [java], lambda _, s: len(s.acked) >= 50, 60)
        yield watch
        java.signal("stop-producing")
        wait_until("the Java producer's last records", [java], lambda _, s: s.produced is not None, 150)
    finally:
        watch.stop()
        java.stop()


def judge_java(
    java: App, watch: PortWatch, real_ports: set[int], gateway: GatewayProcess, on_log: Counter[bytes | None]
) -> None:
    """The Java producer connected to the gateway only, and every send it made is on the log once."""
    sent = java.seen()
    assert watch.seen & {gateway.port + i for i in range(16)}, (
        f"not seen connected to the gateway: {watch.seen}"
    )
    assert not watch.seen & real_ports, (
        f"the Java client connected to a real broker: {watch.seen & real_ports}"
    )
    assert unaccounted_sends(sent) == [], unaccounted_sends(sent)
    assert sent.failed == [], sent.failed[:3]
    wrong = {n: on_log[value_of(n)] for n in sent.acked if on_log[value_of(n)] != 1}
    assert wrong == {}, f"idempotent, yet acknowledged records not once on the log (record: copies): {wrong}"


class PortWatch:
    """The ports an application's process connects to, looked at every 50 ms until stopped: a client
    told of a real broker keeps a connection to it while it writes there."""

    def __init__(self, app: App) -> None:
        assert app.process is not None
        self.seen: set[int] = set()
        self._pid, self._stop = app.process.pid, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            self.seen |= connected_ports(self._pid)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def move_away_and_back(three: Stack, admin: AdminClient, topic: str) -> tuple[int, int]:
    """Stop partition 0's leader (a controlled shutdown moves its leadership to another broker), start
    it again, and once it is back in sync elect the preferred leaders: (first leader, the one between)."""
    moved_from = leader(admin, topic, 0)
    service = next(s for s in three.services if s.name == f"kafka-{SOLO}-{moved_from}")
    three.process(service).stop()
    moved_to = leader(admin, topic, 0)
    time.sleep(1)
    back_in_sync(three, admin, topic)  # back, a follower, then the preferred leader again
    return moved_from, moved_to


def _flushed(producer: Producer) -> tuple[int, float]:
    """How many sends a flush left unanswered, and how long it took."""
    began = time.monotonic()
    return producer.flush(ANSWERED_WITHIN_S), round(time.monotonic() - began, 1)


def _retriable(error: KafkaError) -> bool:
    """What a client rides through: a connection closed or a request that timed out, asked again."""
    return bool(error.retriable()) or error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
