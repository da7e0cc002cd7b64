"""Two gateway instances on one routing root: the same virtual brokers, both acknowledging epochs,
and a producer that loses no acknowledged record when one of them is killed under it."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.offset_commit.v8.request import OffsetCommitRequestPartition, OffsetCommitRequestTopic

from switchyard import kafka
from switchyard.config import Config
from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import decode_response, encode_request, request_schema, with_size
from switchyard.keys import BindingKey
from switchyard.routing.gateways import registered, wait_for_acks
from switchyard.routing.store import RoutingStore
from tests.helpers.processes import GatewayProcess
from tests.helpers.raw import (
    RawClient,
    commit_offset,
    consumer_heartbeat,
    coordinator_port,
    join_fields,
    join_group,
    sync_group,
)
from tests.helpers.records import join
from workers.gateway.brokers.vnodes import slot
from workers.gateway.routing import apis


@pytest.fixture(scope="module")
def pair(
    routing: RoutingStore,
    stack_config: Config,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayProcess, GatewayProcess]]:
    assert stack_config.source is not None
    logs = tmp_path_factory.mktemp("pair")
    gateways = tuple(
        GatewayProcess(
            stack_config.source, root=routing.layout.root, gateway_id=name, log=Path(logs / f"{name}.log")
        )
        for name in ("gw-1", "gw-2")
    )
    for g in gateways:
        g.start()
    yield gateways  # type: ignore[misc]
    for g in gateways:
        g.stop()


def brokers(gateway: GatewayProcess) -> dict[int, int]:
    """Virtual broker id -> port, as a client of this gateway sees them."""
    found = AdminClient({"bootstrap.servers": gateway.bootstrap}).list_topics(timeout=10).brokers
    return {b.id: b.port for b in found.values()}


def test_both_present_the_same_virtual_brokers(pair: tuple[GatewayProcess, GatewayProcess]) -> None:
    one, two = pair
    seen_one, seen_two = brokers(one), brokers(two)
    assert seen_one.keys() == seen_two.keys()
    assert (
        {p - one.port for p in seen_one.values()}
        == {p - two.port for p in seen_two.values()}
        == {slot(v) for v in seen_one}
    )


def test_both_acknowledge_every_epoch(
    pair: tuple[GatewayProcess, GatewayProcess],
    routing: RoutingStore,
) -> None:
    assert set(registered(routing.zk, routing.layout)) == {"gw-1", "gw-2"}
    epoch = routing.set_binding(
        BindingKey.for_app(f"acked-{uuid.uuid4().hex[:6]}"), "standby", actor="user:test", reason="test"
    )
    assert wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10) == {"gw-1": epoch, "gw-2": epoch}


def test_killing_one_gateway_loses_and_doubles_nothing_and_the_other_carries_on(
    routing: RoutingStore, stack_config: Config, tmp_path: Path
) -> None:
    """A producer that lists both gateways; one is killed (-9) under it. Its own pair of gateways: the
    module's pair stays whole for the other tests."""
    assert stack_config.source is not None
    one, two = (
        GatewayProcess(
            stack_config.source, root=routing.layout.root, gateway_id=name, log=tmp_path / f"{name}.log"
        )
        for name in ("gw-k1", "gw-k2")
    )
    for g in (one, two):
        g.start()
    try:
        topic = f"ha-{uuid.uuid4().hex[:8]}"
        primary = stack_config.clusters["primary"].bootstrap
        kafka.create_topics(primary, [topic], partitions=3)
        producer = Producer(
            {
                "bootstrap.servers": f"{one.bootstrap},{two.bootstrap}",
                "client.id": "ha@producer",
                "acks": "all",
                "enable.idempotence": True,  # a batch retried through the other gateway is not doubled
                "linger.ms": 2,
                "message.timeout.ms": 60000,
            }
        )
        acked: list[int] = []
        failed: list[str] = []
        sent = 0

        def delivered(err: object, msg: object) -> None:
            if err is None:
                acked.append(int(msg.value()))  # type: ignore[attr-defined]
            else:
                failed.append(str(err))

        def produce_until(count: int, deadline: float, problem: str) -> None:
            nonlocal sent
            while len(acked) < count:
                assert time.monotonic() < deadline, problem
                if len(producer) >= 5000:  # waiting on the broker: do not pile up more
                    producer.poll(0.05)
                    continue
                producer.produce(topic, value=str(sent).encode(), on_delivery=delivered)
                sent += 1
                producer.poll(0.0005)

        produce_until(2000, time.monotonic() + 60, "no traffic through the pair")
        one.stop(signal.SIGKILL)
        produce_until(len(acked) + 4000, time.monotonic() + 90, "traffic did not go on through the other")
        assert producer.flush(60) == 0

        assert failed == []
        assert sorted(acked) == list(range(sent))
        stored = [int(r.value or b"-1") for rs in kafka.read_partitions(primary, topic).values() for r in rs]
        assert sorted(stored) == list(range(sent)), "records lost or stored twice"

        deadline = time.monotonic() + 60  # the dead one's registration goes with its session...
        while "gw-k1" in registered(routing.zk, routing.layout):
            assert time.monotonic() < deadline, "the dead gateway is still registered"
            time.sleep(0.2)
        epoch = routing.set_binding(  # ...and a change is acknowledged by those alive, without it
            BindingKey.for_app(f"after-{uuid.uuid4().hex[:6]}"), "standby", actor="user:test", reason="t"
        )
        acks = wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
        assert acks.get("gw-k2") == epoch
        assert "gw-k1" not in acks
    finally:
        for g in (one, two):
            g.stop()


def ask(gateway: GatewayProcess, client_id: str, api_key: int, version: int, **fields: Any) -> Any:
    """One request to ``gateway`` as client ``client_id``, and its answer."""
    request = encode_request(api_key, version, fields, client_id=client_id)
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=30) as conn:
        conn.sendall(with_size(request.frame))
        head = conn.recv(4, socket.MSG_WAITALL)
        frame = conn.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL)
    return decode_response(request, frame)


def test_a_member_the_gateway_never_saw_join_is_still_moved_and_its_commit_carried(
    pair: tuple[GatewayProcess, GatewayProcess], routing: RoutingStore, stack_config: Config
) -> None:
    """A consumer that joined elsewhere (through the other gateway of a pair; here straight on the
    primary) heartbeats and commits through this gateway after its application moved to the standby:
    it is told to rejoin (not that it is unknown, on which clients drop what they hold) and its commit
    lands on the standby."""
    _, two = pair
    app, topic, group = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("elsewhere", "ew", "ew-g"))
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    for bootstrap in (primary, standby):  # the standby's copy, as a mirror would have made it
        kafka.create_topics(bootstrap, [topic], partitions=1)
    routing.create_link(app, "primary", "standby", include=[topic], actor="user:test", reason="test")
    consumer = Consumer(
        {"bootstrap.servers": primary, "group.id": group, "session.timeout.ms": 6000, "client.id": app}
    )
    try:
        join(consumer, topic, "the consumer (on the primary)", timeout_s=60)
        member, generation = consumer.memberid(), 1
        epoch = routing.set_binding(BindingKey.for_app(app), "standby", actor="user:test", reason="test")
        wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)

        deadline = time.monotonic() + 30
        while (
            True
        ):  # a standby that never had a group loads its coordinator first: asked again, as clients do
            beat = ask(
                two, app, apis.HEARTBEAT, 4, group_id=group, generation_id=generation, member_id=member
            )
            if beat.error_code not in (ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
                break
            assert time.monotonic() < deadline, f"the standby's coordinator never answered: {beat}"
            time.sleep(0.2)
        assert beat.error_code == ErrorCode.rebalance_in_progress  # the standby alone: unknown member

        partition = make(OffsetCommitRequestPartition, partition_index=0, committed_offset=7)
        commit = ask(
            two, app, apis.OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=generation,
            member_id=member, topics=(make(OffsetCommitRequestTopic, name=topic, partitions=(partition,)),),
        )  # fmt: skip
        assert commit.topics[0].partitions[0].error_code == ErrorCode.none
        assert committed_on(standby, group, topic) == 7
    finally:
        consumer.close()


def test_a_consumer_protocol_member_the_gateway_never_saw_join_commits_where_it_is(
    pair: tuple[GatewayProcess, GatewayProcess], routing: RoutingStore, stack_config: Config
) -> None:
    """A member of the consumer protocol (KIP-848) that joined elsewhere (a gateway restarted since, or the
    other of a pair; here straight on the standby, where its application is bound) commits through this
    gateway: it is a member where it commits, so its commit goes through as sent. DescribeGroups answers a
    consumer-protocol group as Dead, without members: the gateway once took that for the member having
    joined on the cluster a link copies from, carried its commit as one from outside the group, and the
    group, which has the member, refused it (UNKNOWN_MEMBER_ID)."""
    _, two = pair
    app, topic, group = linked_app(routing, stack_config, "kip848")
    bound(routing, BindingKey.for_app(app), "standby")
    member_id = str(uuid.uuid4())
    standby = stack_config.clusters["standby"].bootstrap
    direct = RawClient(int(standby.rsplit(":", 1)[1]), client_id=app)
    try:
        joined = consumer_heartbeat(direct, group, member_id, 0, topic=topic)
        assert joined.error_code == ErrorCode.none, joined
        deadline = time.monotonic() + 30
        while (code := commit_through(two, app, group, member_id, joined.member_epoch, topic)) in (
            ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
        ):  # fmt: skip
            assert time.monotonic() < deadline, code
            time.sleep(0.2)
        assert code == ErrorCode.none
    finally:
        direct.close()


def commit_through(
    gateway: GatewayProcess, app: str, group: str, member_id: str, epoch: int, topic: str, *,
    version: int = 9, offset: int = 7,
) -> ErrorCode:  # fmt: skip
    """``offset`` of ``topic``'s partition 0 committed through ``gateway`` as a member (``epoch``: its
    member epoch, a consumer-protocol member's at ``version`` 9; its generation, a classic one's, before)."""
    topic_cls = element_type(request_schema(apis.OFFSET_COMMIT, version), "topics")
    partition = make(element_type(topic_cls, "partitions"), committed_offset=offset)
    commit = ask(
        gateway, app, apis.OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=epoch,
        member_id=member_id, topics=(make(topic_cls, name=topic, partitions=(partition,)),),
    )  # fmt: skip
    return ErrorCode(commit.topics[0].partitions[0].error_code)


def test_a_consumer_protocol_member_seen_before_its_switch_and_joined_again_elsewhere_commits_where_it_is(
    pair: tuple[GatewayProcess, GatewayProcess], routing: RoutingStore, stack_config: Config
) -> None:
    """A member of the consumer protocol (KIP-848) keeps its id when it joins again on the cluster a switch
    moved it to. This gateway saw it join the primary; it joined the standby again elsewhere (through the
    other gateway, or another process of this one, killed since; here straight on the standby); its
    commit through this gateway goes to the standby as sent. Taken for the primary's still (a chaos
    trial: the gateway process a KIP-848 consumer was connected to killed, of two), the commit was carried
    as one from outside the group, which has the member, and refused UNKNOWN_MEMBER_ID."""
    _, two = pair
    app, topic, group = linked_app(routing, stack_config, "rejoined")
    key = BindingKey.for_app(app)
    standby = stack_config.clusters["standby"].bootstrap
    bound(routing, key, "primary")
    member_id = str(uuid.uuid4())
    with RawClient(two.port, client_id=app) as through:
        assert consumer_heartbeat(through, group, member_id, 0, topic=topic).error_code == ErrorCode.none
    bound(routing, key, "standby")
    with RawClient(int(standby.rsplit(":", 1)[1]), client_id=app) as direct:
        joined = consumer_heartbeat(direct, group, member_id, 0, topic=topic)
        assert joined.error_code == ErrorCode.none, joined
        assert commit_through(two, app, group, member_id, joined.member_epoch, topic) == ErrorCode.none


def test_a_member_moved_by_one_gateway_rejoins_through_the_other_as_one_member_its_old_commit_resent(
    pair: tuple[GatewayProcess, GatewayProcess], routing: RoutingStore, stack_config: Config
) -> None:
    """kafkajs's classic member joined the primary through one gateway (or process of one), which has the
    primary forget it at the flip; kafkajs rejoins the standby under its old id through the other, two
    joins at once, and commits its old membership through the first. Taken for a member unknown, the
    joins were refused UNKNOWN_MEMBER_ID, kafkajs became two members, and the old membership's commit,
    carried from outside a group that now had members, was refused (chaos run, 2026-12-05). Now the two
    joins make one member, and the commit is answered NOT_COORDINATOR: the client sends it again as the
    member it has become, and it lands."""
    one, two = pair
    app, topic, group = linked_app(routing, stack_config, "moved")
    key = BindingKey.for_app(app)
    held = timedelta(seconds=30)
    bound(routing, key, "primary")
    with RawClient(coordinator_port(one.port, group, app), client_id=app) as old:
        member, generation = join_group(old, group, topic, held)
    primary, standby = (stack_config.clusters[c].bootstrap for c in ("primary", "standby"))
    bound(routing, key, "standby")
    deadline = time.monotonic() + 30
    while member in listed(primary, group):  # the flip has the primary forget it (asynchronously)
        assert time.monotonic() < deadline, "the primary still lists the member moved"
        time.sleep(0.2)

    with RawClient(coordinator_port(two.port, group, app), client_id=app) as new:
        rejoins = [new.send(apis.JOIN_GROUP, 5, member_id=member, **join_fields(group, topic, held))
                   for _ in range(2)]  # fmt: skip
        first, second = (new.answer(r) for r in rejoins)
        assert first.error_code == ErrorCode.member_id_required, first  # UNKNOWN_MEMBER_ID: left unknown
        assert (second.error_code, second.member_id) == (ErrorCode.none, first.member_id), second
        became = first.member_id
        sync_group(new, group, became, int(second.generation_id))
        assert set(listed(standby, group)) == {became}

        old_commit = commit_through(one, app, group, member, generation, topic, version=8, offset=20)
        assert old_commit == ErrorCode.not_coordinator, old_commit  # UNKNOWN_MEMBER_ID: final
        assert "told to send it again" in one.log.read_text()
        assert commit_offset(new, group, became, int(second.generation_id), topic, 20) == ErrorCode.none
    assert committed_on(standby, group, topic) == 20


def committed_on(bootstrap: str, group: str, topic: str) -> int:
    """``group``'s committed offset of ``topic``'s partition 0 on the cluster at ``bootstrap``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
    finally:
        consumer.close()
    return int(committed.offset)


def listed(bootstrap: str, group: str) -> dict[str, str]:
    """``group``'s members (id: client id) as the one broker at ``bootstrap`` describes them."""
    with RawClient(int(bootstrap.rsplit(":", 1)[1])) as direct:
        answer = direct.answer(
            direct.send(apis.DESCRIBE_GROUPS, 5, groups=(group,), include_authorized_operations=False)
        )
    (described,) = answer.groups
    return {m.member_id: m.client_id for m in described.members}


def bound(routing: RoutingStore, key: BindingKey, cluster: str) -> None:
    """``key`` bound to ``cluster``, every gateway told."""
    epoch = routing.set_binding(key, cluster, actor="user:test", reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)


def linked_app(routing: RoutingStore, config: Config, name: str) -> tuple[str, str, str]:
    """An application, its topic (on both clusters, a link copying it to the standby) and its group."""
    app, topic, group = (f"{name}-{p}{uuid.uuid4().hex[:6]}" for p in ("", "t-", "g-"))
    for cluster in ("primary", "standby"):
        kafka.create_topics(config.clusters[cluster].bootstrap, [topic], partitions=1)
    routing.create_link(app, "primary", "standby", include=[topic], actor="user:test", reason="test")
    return app, topic, group
