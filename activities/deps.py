"""What activities share, built once per worker: the configuration, one ZooKeeper session, the ledger,
the routing store, and Kafka clients per cluster — never re-read, re-migrated or re-connected per call,
and never a file path in a workflow's history."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient

from switchyard import kafka
from switchyard.admins import Admins
from switchyard.config import Config
from switchyard.errors import BindingRefused, KafkaOperationError
from switchyard.ledger import Ledger
from switchyard.mirror.mapstore import LinkRecords, MapFollower, ensure_map_topic
from switchyard.model import Link
from switchyard.routing.store import RoutingStore
from switchyard.routing.zk import connect, disconnect

Key = tuple[str, int]
log = logging.getLogger(__name__)
WARM_TIMEOUT_S = 5.0
"""How long a cluster's metadata may take for its clients to be started ahead of the sagas."""
KEPT_READER_S = 5.0
"""How long the log-end reader is given at a call's first try before it is made anew (the new one gets
``kafka.LOG_ENDS_WAIT_S``): a healthy one reads the ends in well under a second, and one left fetching
from a broker that restarted read nothing for its whole 30 s while a drill's clients were held (31.7 s).
A reader the call itself made gets the short try too: a slow one costs a second reader, no more."""


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

    def warm(self) -> list[threading.Thread]:
        """Start every cluster's clients now, a thread per cluster, rather than at a saga's first steps:
        a new idempotent producer takes 0.5-1 s to get its id, and a first read of a map topic reads
        all of it, both while the first switch after a start holds clients. Best effort: a cluster
        that does not answer its metadata at once is left to the steps (a failover's dead source
        must not keep a lock they wait on)."""
        threads = [
            threading.Thread(target=self._warm, args=(cluster,), name=f"warm-{cluster}", daemon=True)
            for cluster in self.config.clusters
        ]
        for thread in threads:
            thread.start()
        return threads

    def _warm(self, cluster: str) -> None:
        try:
            with self.admins.asking(cluster) as admin:  # one that failed is not kept
                admin.list_topics(timeout=WARM_TIMEOUT_S)
            lock, consumer = self._probe(cluster)
            with lock:
                consumer.list_topics(timeout=WARM_TIMEOUT_S)
            self.map_producer(cluster)
            self.link_records(cluster, "")
        except Exception as exc:  # the steps that need the cluster say what is wrong with it
            log.info("cluster %s: clients not started ahead of the sagas (%s)", cluster, exc)
        else:
            log.info("cluster %s: clients started ahead of the sagas", cluster)

    def map_producer(self, cluster: str) -> Producer:
        """An idempotent producer for offset-map records on ``cluster``, kept (one takes 0.5-1 s to start,
        and the flip stores final positions while clients are held); the map topic made sure of once,
        outside the lock (a cluster that does not answer holds up only its own callers)."""
        with self._lock:
            producer = self._producers.get(cluster)
        if producer is not None:
            return producer
        ensure_map_topic(self.admins.get(cluster))
        with self._lock:
            producer = self._producers.get(cluster)
            if producer is None:
                producer = Producer(
                    {"bootstrap.servers": self.bootstrap(cluster), "enable.idempotence": True}
                )
                self._producers[cluster] = producer
            return producer

    def ends(self, cluster: str, keys: Iterable[Key]) -> dict[Key, int]:
        """Each partition's exact log end on ``cluster``, read on a consumer kept for the purpose (a new
        one costs a connection per call, and a saga reads ends several times while clients wait)."""
        keys, renewed = list(keys), False
        while True:
            probe = self._probe(cluster)
            lock, consumer = probe
            with lock:
                if self._probes.get(cluster) is not probe:
                    continue  # made anew while this waited for it
                try:
                    wait_s = kafka.LOG_ENDS_WAIT_S if renewed else KEPT_READER_S
                    return kafka.log_ends(consumer, keys, timeout_s=wait_s)
                except KafkaOperationError as exc:
                    if renewed:
                        raise
                    # its metadata may predate the topic (one a partition migration just created), and
                    # librdkafka kept such a topic unknown for over a minute; or it holds on to a broker
                    # that restarted: every ListOffsets failed at once (_DESTROY_BROKER) for 4 minutes,
                    # a switchover's drain with it (tried again now, the leaders asked for between); or
                    # its fetches never reached a partition's end (position -1001) after a broker's
                    # restart, for 30 s. Asked on a new one
                    log.info("cluster %s: the log-end reader is made anew: %s", cluster, exc)
                    with self._lock:
                        del self._probes[cluster]
                    consumer.close()
                    renewed = True

    def _probe(self, cluster: str) -> tuple[threading.Lock, Consumer]:
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
            return probe

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
