"""What a routing change costs as the estate grows: the time from a saga's write of one binding to every
gateway's acknowledgement, with 10, 1,000 and 10,000 bindings in the routing tree (one gateway, a routing
root of this module's own). Each figure is the median of 5 changes of one binding, back and forth, after
the gateway has acknowledged the estate's creation. A cost that grows with the estate shows here: the
gateway reads the whole routing tree again at every epoch."""

from __future__ import annotations

import statistics
import time

from switchyard.keys import BindingKey
from switchyard.ledger.kinds import BindingChange
from switchyard.routing.gateways import wait_for_acks
from switchyard.routing.store import RoutingStore
from switchyard.table import render
from tests.helpers.processes import GatewayProcess, own_gateway

COUNTS = (10, 1_000, 10_000)
CHANGES = 5
BATCH = 500
"""Bindings created per routing change (one ZooKeeper transaction each)."""
ACTOR, REASON = "user:bench", "scale bench"


gateway = own_gateway("gw-scale")


def grow(routing: RoutingStore, have: int, count: int) -> int:
    """Bindings ``scale-<have>`` .. ``scale-<count - 1>`` on the primary; the last epoch written."""
    epoch = 0
    for start in range(have, count, BATCH):
        changes = [
            BindingChange(BindingKey.for_app(f"scale-{i}"), 0, "primary")
            for i in range(start, min(start + BATCH, count))
        ]
        epoch = routing.apply(changes, actor=ACTOR, reason=REASON)
    return epoch


def test_a_routing_change_is_acknowledged_as_the_estate_grows(
    routing: RoutingStore, gateway: GatewayProcess
) -> None:
    rows, have, first = [], 0, 0.0
    for count in COUNTS:
        started = time.perf_counter()
        wait_for_acks(routing.zk, routing.layout, grow(routing, have, count), timeout_s=300)
        created_s, have = time.perf_counter() - started, count
        taken = []
        for _ in range(CHANGES):
            bound = routing.binding(BindingKey.for_app("scale-0"))
            cluster = "standby" if bound is not None and bound.cluster == "primary" else "primary"
            started = time.perf_counter()
            epoch = routing.set_binding(BindingKey.for_app("scale-0"), cluster, actor=ACTOR, reason=REASON)
            wait_for_acks(routing.zk, routing.layout, epoch, timeout_s=300)
            taken.append(time.perf_counter() - started)
        median = statistics.median(taken)
        first = first or median
        rows.append((
            f"{count:,}", f"{median * 1000:.0f}", f"{max(taken) * 1000:.0f}", f"{median / first:.1f}",
            f"{created_s:.1f}",
        ))  # fmt: skip
    print(f"\none binding changed, to every gateway's acknowledgement (median of {CHANGES}; one gateway)")
    print(render(("bindings", "median ms", "max ms", "vs 10", "creating them s"), rows))
