"""The routing state: clusters, bindings, mirror links and partition migrations in ZooKeeper, every
change also in the ledger."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from switchyard.config import Config
from switchyard.ledger import Ledger
from switchyard.ledger.kinds import BindingChange, ClusterChange, LinkChange, MigrationChange
from switchyard.routing.store import RoutingStore
from switchyard.routing.zk import connect, disconnect

__all__ = ["BindingChange", "ClusterChange", "LinkChange", "MigrationChange", "RoutingStore", "open_store"]


@contextmanager
def open_store(config: Config) -> Iterator[RoutingStore]:
    """A store on a fresh ZooKeeper session and the configured ledger, both closed afterwards."""
    ledger = Ledger.open(config.ledger_url)
    try:
        zk = connect(config)
        try:
            store = RoutingStore(zk, config.zookeeper.root, ledger)
            store.ensure_layout()
            yield store
        finally:
            disconnect(zk)
    finally:
        ledger.close()
