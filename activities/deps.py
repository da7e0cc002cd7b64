"""What activities share, built once per worker: the configuration, one ZooKeeper session, the ledger,
the routing store, and Kafka clients per cluster — never re-read, re-migrated or re-connected per call,
and never a file path in a workflow's history."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient

from switchyard import kafka
from switchyard.admins import Admins
from switchyard.config import Config
from switchyard.errors import BindingRefused
from switchyard.ledger import Ledger
from switchyard.mirror.mapstore import LinkRecords, MapFollower, ensure_map_topic
from switchyard.model import Link
from switchyard.routing.store import RoutingStore
from switchyard.routing.zk import connect, disconnect

Key = tuple[str, int]


@dataclass
class Deps:
    config: Config
    zk: KazooClient
    ledger: Ledger
    store: RoutingStore
    admins: Admins = field(init=False)
    _probes: dict[str, tuple[threading.Lock, Consumer]] = field(default_factory=dict)
    _producers: dict[str, Producer] = field(default_factory=dict)
    _maps: dict[str, MapFollower] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.admins = Admins(self.bootstrap)

    @classmethod
    def build(cls, config: Config) -> Deps:
        ledger = Ledger.open(config.ledger_url)
        try:
            zk = connect(config)
        except BaseException:
            ledger.close()
            raise
        store = RoutingStore(zk, config.zookeeper.root, ledger)
        store.ensure_layout()
        return cls(config, zk, ledger, store)

    def close(self) -> None:
        with self._lock:
            for lock, consumer in self._probes.values():
                with lock:
                    consumer.close()
            self._probes.clear()
            for producer in self._producers.values():
                producer.flush(10)
            self._producers.clear()
            for follower in self._maps.values():
                follower.close()
            self._maps.clear()
        disconnect(self.zk)
        self.ledger.close()

    def bootstrap(self, cluster: str) -> str:
        found = self.config.clusters.get(cluster)
        if found is None:
            raise BindingRefused(f"cluster {cluster!r} is not in the configuration")
        return found.bootstrap

    def map_producer(self, cluster: str) -> Producer:
        """An idempotent producer for offset-map records on ``cluster``, kept (one takes 0.5-1 s to start,
        and the flip stores final positions while clients are held); the map topic made sure of once."""
        with self._lock:
            producer = self._producers.get(cluster)
            if producer is None:
                ensure_map_topic(self.admins.get(cluster))
                producer = Producer(
                    {"bootstrap.servers": self.bootstrap(cluster), "enable.idempotence": True}
                )
                self._producers[cluster] = producer
            return producer

    def ends(self, cluster: str, keys: Iterable[Key]) -> dict[Key, int]:
        """Each partition's exact log end on ``cluster``, read on a consumer kept for the purpose (a new
        one costs a connection per call, and a saga reads ends several times while clients wait)."""
        with self._lock:
            probe = self._probes.get(cluster)
            if probe is None:
                consumer = Consumer(
                    {
                        "bootstrap.servers": self.bootstrap(cluster),
                        "group.id": "switchyard-saga-probe",
                        "enable.partition.eof": True,
                        "fetch.wait.max.ms": kafka.READ_WAIT_MS,
                    }
                )
                probe = self._probes[cluster] = (threading.Lock(), consumer)
        lock, consumer = probe
        with lock:
            return kafka.log_ends(consumer, keys)

    def link_records(self, cluster: str, link_id: str) -> LinkRecords:
        """A link's offset map and final positions stored on ``cluster``, read on from where the last
        read of that cluster's map topic ended."""
        with self._lock:
            follower = self._maps.get(cluster)
            if follower is None:
                follower = self._maps[cluster] = MapFollower(self.bootstrap(cluster))
        return follower.link(link_id)

    def link(self, link_id: str) -> Link:
        link = self.store.link(link_id)
        if link is None:
            raise BindingRefused(f"link {link_id!r} does not exist")
        return link
