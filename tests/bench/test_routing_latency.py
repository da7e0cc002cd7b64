"""How long a routing change takes to reach a gateway, against a bare ZooKeeper watch in the same run.

- raw watch: one client sets a node, another is woken by a data watch (the floor).
- fenced write: RoutingStore.apply, ledger on SQLite (intent, ZooKeeper multi, commit).
- write -> view: from the start of the write until a BindingView on another session publishes it.
- write -> acked: until a gateway registration that acknowledges from the view is seen by the barrier.
"""

from __future__ import annotations

import statistics
import threading
import time
from pathlib import Path

from kazoo.client import KazooClient

from switchyard.config import Config
from switchyard.keys import BindingKey
from switchyard.ledger import Ledger
from switchyard.routing import BindingChange, RoutingStore
from switchyard.routing.gateways import GatewayRegistration, wait_for_acks
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.view import BindingView
from switchyard.routing.zk import connect, disconnect
from switchyard.stack import Stack
from switchyard.table import render

ROUNDS = 200
KEY = BindingKey.for_app("bench")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def raw_watch(writer: KazooClient, reader: KazooClient, root: str) -> list[float]:
    path = f"{root}/raw"
    writer.ensure_path(path)
    fired = threading.Event()
    reader.DataWatch(path, lambda *_: fired.set())
    samples = []
    for i in range(ROUNDS):
        fired.clear()
        started = time.perf_counter()
        writer.set(path, str(i).encode())
        fired.wait(5)
        samples.append(time.perf_counter() - started)
    return samples


def test_routing_change_latency(
    stack: Stack, stack_config: Config, zk: KazooClient, zk_root: str, tmp_path: Path
) -> None:
    gateway_zk = connect(stack_config)
    ledger = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    store = RoutingStore(zk, zk_root, ledger)
    store.ensure_layout()
    store.register_cluster("primary", "p:9092", actor="user:bench", reason="bench")
    store.register_cluster("standby", "s:9092", actor="user:bench", reason="bench")
    view = BindingView(gateway_zk, store.layout, "primary")
    registration = GatewayRegistration(gateway_zk, store.layout, "gw-bench")
    published = threading.Event()
    target = [0]

    def on_change(snapshot: RoutingSnapshot) -> None:
        registration.acknowledge(snapshot.epoch)
        if snapshot.epoch >= target[0]:
            published.set()

    view.on_change(on_change)
    view.start()
    registration.register()
    try:
        baseline = raw_watch(zk, gateway_zk, zk_root)
        write, to_view, to_ack = [], [], []
        epoch = 0
        for i in range(ROUNDS):
            published.clear()
            started = time.perf_counter()
            new = store.apply(
                [BindingChange(KEY, epoch, ("standby", "primary")[i % 2])], actor="user:bench", reason=""
            )
            wrote = time.perf_counter()
            target[0] = new
            assert published.wait(5) or view.snapshot.epoch >= new
            seen = time.perf_counter()
            wait_for_acks(zk, store.layout, new, timeout_s=5)
            acked = time.perf_counter()
            write.append(wrote - started)
            to_view.append(seen - started)
            to_ack.append(acked - started)
            epoch = new
    finally:
        view.stop()
        registration.close()
        disconnect(gateway_zk)
        ledger.close()

    base = statistics.median(baseline) * 1000
    rows = [
        (name, f"{pct(s, 0.5):.2f}", f"{pct(s, 0.99):.2f}", f"{pct(s, 0.5) / base:.1f}x")
        for name, s in [
            ("raw watch", baseline),
            ("fenced write", write),
            ("write -> view", to_view),
            ("write -> acked", to_ack),
        ]
    ]
    print(f"\nrouting change latency, {ROUNDS} rounds, one gateway, ledger on SQLite")
    print(render(("measure", "p50 ms", "p99 ms", "p50 vs raw watch"), rows))
