"""A worker's dependencies (``activities.deps.Deps``) on the test's routing root, as a worker builds them,
for tests that run its steps or its clients directly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from activities.deps import Deps
from switchyard.config import Config
from switchyard.routing import RoutingStore
from switchyard.routing.zk import connect


@contextmanager
def worker_deps(routing: RoutingStore, config: Config) -> Iterator[Deps]:
    """A ZooKeeper session of its own, the ledger and root of ``routing``; closed after."""
    store = RoutingStore(connect(config), routing.layout.root, routing.ledger)
    deps = Deps(config, store.zk, routing.ledger, store)
    try:
        yield deps
    finally:
        deps.close()
