"""The watched view and gateway registrations on real ZooKeeper, including lost sessions."""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import KazooException

from switchyard.config import Config
from switchyard.errors import AcksTimeout, GatewayIdInUse, LockHeld
from switchyard.identity import Identity
from switchyard.keys import BindingKey
from switchyard.ledger import Ledger
from switchyard.model import BindingState, now
from switchyard.routing import BindingChange, RoutingStore
from switchyard.routing.gateways import GatewayRegistration, registered, wait_for_acks
from switchyard.routing.layout import epoch_data
from switchyard.routing.locks import SagaLocks
from switchyard.routing.snapshot import RoutingSnapshot, read_snapshot
from switchyard.routing.view import BindingView
from switchyard.routing.zk import connect, disconnect
from tests.helpers.services import PrivateService

ORDERS = BindingKey.for_app("orders")
HOST7 = BindingKey.instance("orders", "host-7")
ACTOR = "user:test"


@pytest.fixture
def second_zk(stack_config: Config) -> Iterator[KazooClient]:
    client = connect(stack_config)
    yield client
    if client.connected:
        disconnect(client)


def test_view_sees_a_change_through_its_watch(sqlite_store: RoutingStore, second_zk: KazooClient) -> None:
    view = BindingView(second_zk, sqlite_store.layout, "primary")
    seen: queue.Queue[RoutingSnapshot] = queue.Queue()
    view.on_change(seen.put)
    view.start()
    try:
        assert not view.stale
        assert view.resolve(Identity("orders")).cluster == "primary"  # default: nothing bound yet
        assert seen.get(timeout=5).epoch == sqlite_store.epoch()  # listeners get the first load too
        epoch = sqlite_store.set_binding(ORDERS, "standby", actor=ACTOR, reason="switch")
        snapshot = seen.get(timeout=5)
        assert snapshot.epoch == epoch
        assert view.snapshot is snapshot
        resolution = view.resolve(Identity("orders", instance="host-1"))
        assert (resolution.cluster, resolution.keys, resolution.epoch) == ("standby", (ORDERS,), epoch)
    finally:
        view.stop()


def test_view_never_shows_half_a_change(sqlite_store: RoutingStore, second_zk: KazooClient) -> None:
    """A writer moves two keys together, again and again; every snapshot has them on one cluster."""
    epochs = {
        ORDERS: sqlite_store.set_binding(ORDERS, "primary", actor=ACTOR, reason="init"),
        HOST7: sqlite_store.set_binding(HOST7, "primary", actor=ACTOR, reason="init"),
    }
    view = BindingView(second_zk, sqlite_store.layout, "primary")
    split: list[RoutingSnapshot] = []
    snapshots: list[int] = []

    def check(snapshot: RoutingSnapshot) -> None:
        snapshots.append(snapshot.epoch)
        if snapshot.bindings[ORDERS].cluster != snapshot.bindings[HOST7].cluster:
            split.append(snapshot)

    view.on_change(check)
    view.start()
    try:
        for i in range(40):
            target = ("standby", "primary")[i % 2]
            epoch = sqlite_store.apply(
                [BindingChange(k, e, target) for k, e in epochs.items()], actor=ACTOR, reason="flip"
            )
            epochs = dict.fromkeys(epochs, epoch)
        assert view.wait_for_epoch(epoch, 5)
    finally:
        view.stop()
    assert split == []
    assert snapshots == sorted(snapshots)
    assert snapshots[-1] == epoch


def test_a_reader_of_an_earlier_epoch_reads_only_what_changed_and_gets_the_whole_tree(
    sqlite_store: RoutingStore, second_zk: KazooClient
) -> None:
    """Following the counter's list of what each epoch changed gives exactly the tree a full read gives,
    with one read per changed node; a gap in the list (a rebuild names nothing) means a full read."""
    keys = [BindingKey.for_app(f"estate-{i}") for i in range(300)]
    sqlite_store.apply([BindingChange(k, 0, "primary") for k in keys], actor=ACTOR, reason="estate")
    since = read_snapshot(second_zk, sqlite_store.layout)
    epochs = {k: since.epoch for k in keys}
    moved = [keys[0], keys[7]]
    for target in ("standby", "primary", "standby"):
        epoch = sqlite_store.apply(
            [BindingChange(k, epochs[k], target) for k in moved], actor=ACTOR, reason="t"
        )
        epochs.update(dict.fromkeys(moved, epoch))
    sqlite_store.register_cluster("dr", "dr:9092", actor=ACTOR, reason="t")
    sqlite_store.set_binding(keys[9], "dr", actor=ACTOR, reason="t")

    gets = []
    original = second_zk.get_async
    second_zk.get_async = lambda path, *a, **kw: (gets.append(path), original(path, *a, **kw))[1]  # type: ignore[method-assign]
    try:
        followed = read_snapshot(second_zk, sqlite_store.layout, since=since)
    finally:
        second_zk.get_async = original  # type: ignore[method-assign]
    assert followed == read_snapshot(second_zk, sqlite_store.layout)
    assert followed.bindings[keys[0]].cluster == "standby"
    assert followed.bindings[keys[9]].cluster == "dr"
    read = sorted(
        path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1] for path in gets if "/epoch" not in path
    )
    assert read == ["bindings/estate-0", "bindings/estate-7", "bindings/estate-9", "clusters/dr"]  # not 300

    data, stat = second_zk.get(sqlite_store.layout.epoch)  # a writer that names nothing (as a rebuild)
    counter = json.loads(data)
    second_zk.set(sqlite_store.layout.epoch, epoch_data(counter["epoch"] + 1, "rebuild", now()), stat.version)
    second_zk.set(
        sqlite_store.layout.binding(keys[1]), second_zk.get(sqlite_store.layout.binding(keys[9]))[0]
    )
    gets.clear()
    second_zk.get_async = lambda path, *a, **kw: (gets.append(path), original(path, *a, **kw))[1]  # type: ignore[method-assign]
    try:
        after_gap = read_snapshot(second_zk, sqlite_store.layout, since=followed)
    finally:
        second_zk.get_async = original  # type: ignore[method-assign]
    assert len(gets) > 300  # the whole tree, and with it the change the counter did not name
    assert after_gap == read_snapshot(second_zk, sqlite_store.layout)
    assert after_gap.bindings[keys[1]].cluster == "dr" != followed.bindings[keys[1]].cluster

    # another history reusing the epoch numbers (a rebuild at the same epoch), then a change that names
    # what it wrote: the reader's epoch is not the one the counter's history starts from
    data, stat = second_zk.get(sqlite_store.layout.epoch)
    second_zk.set(
        sqlite_store.layout.epoch, epoch_data(json.loads(data)["epoch"], "rebuild", now()), stat.version
    )
    second_zk.set(
        sqlite_store.layout.binding(keys[2]), second_zk.get(sqlite_store.layout.binding(keys[9]))[0]
    )
    sqlite_store.set_binding(keys[3], "standby", actor=ACTOR, reason="t")
    after_rebuild = read_snapshot(second_zk, sqlite_store.layout, since=after_gap)
    assert after_rebuild.bindings[keys[2]].cluster == "dr"  # seen: the whole tree was read
    assert after_rebuild == read_snapshot(second_zk, sqlite_store.layout)


def test_registration_and_the_ack_barrier(sqlite_store: RoutingStore, second_zk: KazooClient) -> None:
    layout = sqlite_store.layout
    fast = GatewayRegistration(sqlite_store.zk, layout, "gw-fast")
    slow = GatewayRegistration(second_zk, layout, "gw-slow")
    fast.register()
    slow.register()
    epoch = sqlite_store.set_binding(ORDERS, "standby", actor=ACTOR, reason="flip")
    fast.acknowledge(epoch)

    with pytest.raises(AcksTimeout) as timeout:
        wait_for_acks(sqlite_store.zk, layout, epoch, timeout_s=0.5)
    assert timeout.value.laggards == {"gw-slow": 0}
    assert f"had not applied epoch {epoch} after 0.5s: gw-slow (at epoch 0)" in str(timeout.value)

    releaser = threading.Timer(0.3, slow.acknowledge, args=(epoch,))
    releaser.start()
    started = time.monotonic()
    assert wait_for_acks(sqlite_store.zk, layout, epoch, timeout_s=30) == {"gw-fast": epoch, "gw-slow": epoch}
    assert time.monotonic() - started < 5  # woken by the watch, long before the deadline would look again
    releaser.join()

    slow.acknowledge(epoch - 1)  # epochs only go forward
    assert registered(sqlite_store.zk, layout)["gw-slow"].applied_epoch == epoch


def test_a_second_live_gateway_cannot_take_the_same_id(
    sqlite_store: RoutingStore, second_zk: KazooClient
) -> None:
    GatewayRegistration(sqlite_store.zk, sqlite_store.layout, "gw-1").register()
    with pytest.raises(GatewayIdInUse, match="gw-1"):
        GatewayRegistration(second_zk, sqlite_store.layout, "gw-1", takeover_wait_s=0.5).register()


@pytest.mark.parametrize("host", ["here", "elsewhere"])
def test_a_registration_left_by_a_dead_process_of_this_host_is_taken_over_at_once(
    sqlite_store: RoutingStore, second_zk: KazooClient, host: str
) -> None:
    """A gateway killed (-9) and started again under its id on the same host serves at once: its dead
    predecessor's node, whose session lives on until it expires, is taken over — its clients would find
    the port closed meanwhile (kafkajs gives a send up after 9 s of them). Of another host, no process
    can tell whether the holder is dead: that node is waited out."""
    layout = sqlite_store.layout
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid: of this host, and no process's now
    pid = gone.pid
    name = socket.gethostname() if host == "here" else "another-host"
    left = {"applied_epoch": 3, "host": name, "pid": pid, "started_at": "2026-11-30T00:00:00+00:00"}
    second_zk.create(layout.gateway("gw-1"), json.dumps(left).encode(), ephemeral=True, makepath=True)
    again = GatewayRegistration(sqlite_store.zk, layout, "gw-1", takeover_wait_s=0.5)
    if host == "elsewhere":
        with pytest.raises(GatewayIdInUse, match="gw-1"):
            again.register()
        return
    again.register()
    assert registered(sqlite_store.zk, layout)["gw-1"].pid == os.getpid()


def test_a_registration_disappears_with_its_session(
    sqlite_store: RoutingStore, second_zk: KazooClient
) -> None:
    layout = sqlite_store.layout
    GatewayRegistration(second_zk, layout, "gw-gone").register()
    assert "gw-gone" in registered(sqlite_store.zk, layout)
    epoch = sqlite_store.set_binding(ORDERS, "standby", actor=ACTOR, reason="flip")
    with pytest.raises(AcksTimeout):
        wait_for_acks(sqlite_store.zk, layout, epoch, timeout_s=0.2)
    disconnect(second_zk)  # the gateway process dies: its session closes
    assert "gw-gone" not in registered(sqlite_store.zk, layout)
    assert wait_for_acks(sqlite_store.zk, layout, epoch, timeout_s=1) == {}


def test_saga_locks(sqlite_store: RoutingStore) -> None:
    locks = SagaLocks(sqlite_store.zk, sqlite_store.layout)
    locks.acquire(ORDERS, "workflow:switchover-orders")
    locks.acquire(ORDERS, "workflow:switchover-orders")  # a retried activity: still ours
    with pytest.raises(LockHeld, match="orders: locked by workflow:switchover-orders since"):
        locks.acquire(ORDERS, "workflow:failover-orders")
    with pytest.raises(LockHeld, match="orders@host-7: locked by workflow:switchover-orders since"):
        locks.acquire(HOST7, "workflow:failover-orders")  # a key of the same application overlaps
    with pytest.raises(LockHeld, match="orders#payments: locked by workflow:switchover-orders since"):
        locks.acquire(BindingKey.topic("orders", "payments"), "workflow:failover-orders")
    locks.acquire(BindingKey.for_app("billing"), "workflow:failover-orders")  # other applications don't
    assert not locks.release(ORDERS, "workflow:failover-orders")  # not its lock: left to its owner
    assert locks.holder(ORDERS).owner == "workflow:switchover-orders"  # type: ignore[union-attr]
    assert locks.release(ORDERS, "workflow:switchover-orders")
    assert not locks.release(ORDERS, "workflow:switchover-orders")
    locks.acquire(ORDERS, "workflow:failover-orders")
    assert locks.holder(ORDERS).owner == "workflow:failover-orders"  # type: ignore[union-attr]


def wait_until(condition: Callable[[], bool], timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _answers(zk: KazooClient) -> bool:
    try:
        zk.exists("/")
    except KazooException:
        return False
    return True


def test_view_serves_its_last_routes_while_zookeeper_is_away(tmp_path: Path, stack_config: Config) -> None:
    zookeeper = PrivateService.zookeeper(tmp_path)
    zookeeper.start()
    config = stack_config.model_copy(
        update={"zookeeper": stack_config.zookeeper.model_copy(update={"connect": zookeeper.connect})}
    )
    gateway_zk, writer_zk = connect(config), connect(config)
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    store = RoutingStore(writer_zk, "/switchyard", ledger)
    store.ensure_layout()
    store.register_cluster("standby", "s:9092", actor=ACTOR, reason="setup")
    view = BindingView(gateway_zk, store.layout, "primary")
    states: list[str] = []
    gateway_zk.add_listener(states.append)

    def where() -> str:
        return f"view at epoch {view.snapshot.epoch}, stale={view.stale}, session states {states}"

    try:
        view.start()
        first = store.set_binding(ORDERS, "standby", actor=ACTOR, reason="before")
        assert view.wait_for_epoch(first, 5), where()

        zookeeper.stop()
        assert wait_until(lambda: view.stale), where()
        assert view.resolve(Identity("orders")).cluster == "standby"  # last known routes still served
        heard: list[int] = []
        view.on_change(lambda snapshot: heard.append(snapshot.epoch))
        zookeeper.start()

        assert wait_until(lambda: not view.stale), where()
        assert wait_until(lambda: first in heard), f"fresh again, unannounced: {where()}"
        # the writer's session may have expired while ZooKeeper was away (longer than its 10 s under
        # load): it writes once kazoo has given it a new one
        assert wait_until(lambda: _answers(writer_zk), timeout_s=30), "the writer never reconnected"
        second = store.set_binding(ORDERS, "standby", BindingState.BLOCKED, actor=ACTOR, reason="after")
        assert view.wait_for_epoch(second, 10), f"waiting for epoch {second}: {where()}"
        assert view.resolve(Identity("orders")).state is BindingState.BLOCKED
    finally:
        view.stop()
        disconnect(gateway_zk)
        disconnect(writer_zk)
        ledger.close()
        zookeeper.stop()


def test_view_and_registration_come_back_after_the_session_expires(
    sqlite_store: RoutingStore, stack_config: Config
) -> None:
    """A new session has no watches and no ephemeral nodes: both must be restored without help."""
    gateway_zk = connect(stack_config)
    view = BindingView(gateway_zk, sqlite_store.layout, "primary")
    registration = GatewayRegistration(gateway_zk, sqlite_store.layout, "gw-1")
    states: list[str] = []
    gateway_zk.add_listener(states.append)
    try:
        view.start()
        registration.register()
        first = sqlite_store.set_binding(ORDERS, "standby", actor=ACTOR, reason="before")
        assert view.wait_for_epoch(first, 5)
        registration.acknowledge(first)

        # Expire the gateway's session for real: a second client takes it over and closes it.
        session_id, password = gateway_zk.client_id
        thief = KazooClient(hosts=stack_config.zookeeper.connect, client_id=(session_id, password))
        thief.start(timeout=10)
        thief.stop()
        thief.close()

        assert wait_until(lambda: KazooState.LOST in states)
        assert wait_until(lambda: (gateway_zk.client_id or (session_id,))[0] != session_id)
        assert wait_until(lambda: not view.stale)
        assert wait_until(lambda: "gw-1" in registered(sqlite_store.zk, sqlite_store.layout))
        assert registered(sqlite_store.zk, sqlite_store.layout)["gw-1"].applied_epoch == first

        second = sqlite_store.set_binding(
            ORDERS, "primary", BindingState.BLOCKED, actor=ACTOR, reason="after", expected_epoch=first
        )
        assert view.wait_for_epoch(second, 5)  # the watch was set again on the new session
        assert view.resolve(Identity("orders")).state is BindingState.BLOCKED
    finally:
        view.stop()
        registration.close()
        disconnect(gateway_zk)
