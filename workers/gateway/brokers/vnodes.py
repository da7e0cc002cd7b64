"""Virtual broker ids: one per (cluster, real node id), the same in every gateway instance.

Clients only ever see virtual brokers. Each is allocated a slot once in ZooKeeper
(``vnodes/<cluster>/<node id>`` holds the slot; ``vnodes`` holds the last one given out, advanced by
compare-and-set) so that every gateway instance, and a restarted one, answers with the same ids and the
same ports: the broker in slot ``n`` (from 1) has the id ``FIRST_ID + n - 1`` and listens on
``bootstrap_port + n``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from switchyard.routing.layout import Layout

log = logging.getLogger(__name__)
FIRST_ID = 1 << 30
"""Virtual ids start far above the node ids of real clusters (operators number KRaft nodes from 0 or 1;
ZooKeeper-era generated ids start just above ``reserved.broker.max.id``, 1000), so they cannot be taken
for each other: a real id that reached a client unrewritten (a leader hint of a newer API version) would
name no broker the client knows, and the client would look the leader up again, through the gateway,
rather than send to whichever virtual broker had that number."""


def slot(virtual_id: int) -> int:
    """Where ``virtual_id`` listens: ``bootstrap_port`` plus this."""
    return virtual_id - FIRST_ID + 1


@dataclass(frozen=True, order=True)
class RealBroker:
    cluster: str
    node_id: int


class VirtualNodes:
    def __init__(self, zk: KazooClient, layout: Layout) -> None:
        self.zk = zk
        self.folder = layout.folder("vnodes")
        self._by_real: dict[RealBroker, int] = {}
        self._by_virtual: dict[int, RealBroker] = {}
        self._lock = threading.Lock()

    def load(self) -> dict[int, RealBroker]:
        """Read every allocated id (at start-up, and when another instance allocated one)."""
        self.zk.ensure_path(self.folder)
        for cluster in self.zk.get_children(self.folder):
            for node in self.zk.get_children(f"{self.folder}/{cluster}"):
                data, _ = self.zk.get(f"{self.folder}/{cluster}/{node}")
                self._remember(RealBroker(cluster, int(node)), FIRST_ID + int(data) - 1)
        return dict(self._by_virtual)

    def virtual_id(self, broker: RealBroker) -> int:
        """The broker's virtual id, allocating it on first sight (blocking: call off the event loop)."""
        with self._lock:
            known = self._by_real.get(broker)
        if known is not None:
            return known
        if broker.node_id >= FIRST_ID:
            log.warning(
                "cluster %s has a node id of %d: virtual ids start at %d",
                broker.cluster,
                broker.node_id,
                FIRST_ID,
            )
        path = f"{self.folder}/{broker.cluster}/{broker.node_id}"
        self.zk.ensure_path(f"{self.folder}/{broker.cluster}")
        while True:
            try:
                data, _ = self.zk.get(path)
                return self._remember(broker, FIRST_ID + int(data) - 1)
            except NoNodeError:
                pass
            counter, stat = self.zk.get(self.folder)
            allocated = int(counter or b"0") + 1
            t = self.zk.transaction()
            t.set_data(self.folder, str(allocated).encode(), stat.version)
            t.create(path, str(allocated).encode())
            results = t.commit()
            if not any(isinstance(r, BadVersionError | NodeExistsError) for r in results):
                return self._remember(broker, FIRST_ID + allocated - 1)

    def real(self, virtual_id: int) -> RealBroker | None:
        with self._lock:
            return self._by_virtual.get(virtual_id)

    def known(self, broker: RealBroker) -> int | None:
        with self._lock:
            return self._by_real.get(broker)

    def of(self, clusters: Collection[str]) -> list[int]:
        """The virtual ids given to brokers of ``clusters``, in order."""
        with self._lock:
            return sorted(v for b, v in self._by_real.items() if b.cluster in clusters)

    def _remember(self, broker: RealBroker, virtual_id: int) -> int:
        with self._lock:
            self._by_real[broker] = virtual_id
            self._by_virtual[virtual_id] = broker
        return virtual_id
