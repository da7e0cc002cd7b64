"""A consumer group whose coordinator keeps refusing its offsets, on the cluster a switch leaves: a switch
of keys that do not use it goes through, and a switch that must carry it gives up in bounded time,
unblocks its keys and names the group. (Once, the group sync read every group of the source, so one
broken group held every switch of the link — clients blocked — until someone cancelled the saga.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from switchyard import kafka
from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.mirror.status import read_status
from switchyard.model import BindingState
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.stack import Stack
from switchyard.usage import decode
from tests.helpers.live import Live, deployed, unique
from tests.helpers.poison import PoisonProxy, poisoned_cluster

ACTOR = "user:test"
POISONED = "poisoned-group"
GIVE_UP_S = 3


@pytest.fixture(scope="module")
def flaky(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PoisonProxy]:
    with poisoned_cluster(tmp_path_factory.mktemp("flaky") / "broker.log", {POISONED}) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def live(
    stack: Stack,
    routing: RoutingStore,
    stack_config: Config,
    ledger_path: Path,
    flaky: PoisonProxy,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Live]:
    """A gateway, a mirror and a worker that know a third cluster, ``flaky``."""
    bootstrap = f"127.0.0.1:{flaky.port}"
    routing.register_cluster("flaky", bootstrap, actor=ACTOR, reason="test")
    overrides = {
        "SWITCHYARD__CLUSTERS__FLAKY__BOOTSTRAP": bootstrap,
        "SWITCHYARD__SAGAS__GROUP_SYNC_TIMEOUT_S": str(GIVE_UP_S),
    }
    logs = tmp_path_factory.mktemp("live-flaky")
    with deployed(stack_config, routing.layout.root, ledger_path, logs, overrides) as deployment:
        yield deployment


def prepare(live: Live, routing: RoutingStore) -> tuple[str, str, str]:
    """An application bound to ``flaky``, a topic there, a link copying it to the standby; and the
    poisoned group holding offsets on it. (app, topic, link)"""
    app, topic, link = unique("app"), unique("orders"), unique("link")
    flaky = live.effective.clusters["flaky"].bootstrap
    kafka.create_topics(flaky, [topic])
    assert kafka.produce(flaky, topic, [kafka.Record(b"k", b"v")]) == 1
    committer = Consumer({"bootstrap.servers": flaky, "group.id": POISONED, "enable.auto.commit": False})
    committer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)  # commits pass; fetches don't
    committer.close()
    routing.create_link(link, "flaky", "standby", include=[topic], actor=ACTOR, reason="test")
    epoch = routing.set_binding(BindingKey.for_app(app), "flaky", actor=ACTOR, reason="test")
    wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=10)
    deadline = time.monotonic() + 60
    while not [p for m in read_status(routing.zk, routing.layout, link) for p in m.partitions]:
        assert time.monotonic() < deadline, "the mirror never took up the link"
        time.sleep(0.2)
    return app, topic, link


def test_a_broken_group_no_switched_key_uses_never_holds_a_switch_up(
    live: Live, routing: RoutingStore, flaky: PoisonProxy
) -> None:
    assert live.gateway is not None
    app, topic, link = prepare(live, routing)
    produced = [kafka.Record(b"k", str(i).encode()) for i in range(20)]
    assert kafka.produce(live.gateway.bootstrap, topic, produced, settings={"client.id": app}) == 20
    switched = live.cli("switchover", app, "--link", link, "--wait")
    assert switched.returncode == 0, switched.stdout + switched.stderr
    assert f"switchover switched: {app}" in switched.stdout
    assert flaky.refused > 0  # the group is broken: the mirror's periodic carry met it (and went on)
    run = routing.ledger.saga_runs(f"switchyard:{app}")[0]
    (synced,) = [s for s in routing.ledger.saga_steps(run.run_id) if s.step == "sync_groups"]
    assert synced.figures == {"written": 0, "unchanged": 0, "skipped": [], "groups": []}  # none touched


def test_a_switch_whose_own_group_cannot_be_read_gives_up_and_names_it(
    live: Live, routing: RoutingStore, flaky: PoisonProxy
) -> None:
    assert live.gateway is not None
    app, topic, link = prepare(live, routing)
    consumer = Consumer(
        {"bootstrap.servers": live.gateway.bootstrap, "client.id": f"{app}@reader", "group.id": POISONED,
         "session.timeout.ms": 6000, "enable.auto.commit": False},
    )  # fmt: skip
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while not uses_group(routing, app, POISONED):  # the gateway saw the app work in the group
            assert time.monotonic() < deadline, "the gateway never reported the app's group"
            consumer.poll(0.2)
    finally:
        consumer.close()
    switched = live.cli("switchover", app, "--link", link, "--wait")
    assert switched.returncode == 8, switched.stdout + switched.stderr
    assert "switchover compensated" in switched.stdout
    assert "switch abandoned before the flip at sync groups" in switched.stdout
    assert f"KafkaOperationError: group {POISONED}: " in switched.stdout
    assert "Group authorization failed" in switched.stdout
    binding = routing.binding(BindingKey.for_app(app))
    assert binding is not None
    assert (binding.cluster, binding.state) == ("flaky", BindingState.ACTIVE)  # unblocked where it was
    run = routing.ledger.saga_runs(f"switchyard:{app}")[0]
    attempts = [s for s in routing.ledger.saga_steps(run.run_id) if s.step == "sync_groups"]
    assert len(attempts) > 1, attempts  # retried until its give-up time, not once and not for ever
    assert live.cli("sagas", "unlock", app).stdout == f"{app}: not locked\n"


def uses_group(routing: RoutingStore, app: str, group: str) -> bool:
    node = routing.layout.usage("gw-live")
    if routing.zk.exists(node) is None:
        return False
    data, _ = routing.zk.get(node)
    return any(u.app == app and u.group == group for u in decode(data))
