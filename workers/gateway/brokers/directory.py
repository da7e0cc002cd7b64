"""Where each cluster's brokers are, and the virtual brokers clients see in their place.

The directory learns a cluster's brokers and API versions by probing it every few seconds (the probe's
answers are also the cluster's reachability), gives every real broker a virtual id and has the gateway
listen for it, and rewrites broker addresses in answers. It is the one place a session asks for a
connection to a real broker.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from switchyard import __version__
from switchyard.config import Config, split_hostport
from switchyard.frames.entities import element_type, make
from switchyard.frames.protocol import (
    API_VERSIONS,
    Request,
    known_versions,
    request_schema,
    response_schema,
)
from workers.gateway.brokers.rewrite import real_nodes, rewrite
from workers.gateway.brokers.upstream import Unlisted, Upstream
from workers.gateway.brokers.vnodes import RealBroker, VirtualNodes, slot
from workers.gateway.framing.sasl import Credentials, authenticate
from workers.gateway.process.metrics import Metrics
from workers.gateway.routing import apis

log = logging.getLogger(__name__)
CLUSTER_ID = "switchyard"
"""The cluster id clients see, whichever real cluster answers: to them it is one cluster."""
LOCAL_APIS = {
    apis.API_VERSIONS: (0, 3),
    apis.SASL_HANDSHAKE: (1, 1),  # v0 would be followed by unframed tokens; v1 (Kafka 1.0 on) frames them
    apis.SASL_AUTHENTICATE: (0, 2),
}
"""APIs the gateway answers itself, offered whatever the clusters offer."""
TRANSACTION_VERSION = "transaction.version"
SOFTWARE = {
    "client_software_name": "switchyard-gateway",
    "client_software_version": re.sub(r"[^A-Za-z0-9.-]", "-", __version__),
}
"""How the gateway names itself in ApiVersions v3: Apache Kafka refuses the request (INVALID_REQUEST,
no APIs listed) unless both match ``[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?``."""
PROBE_S = 5.0
_PROBE_TIMEOUT_S = 10.0
"""A probe unanswered this long counts as unreachable (a host that drops packets never refuses)."""

Listen = Callable[[int], Awaitable[None]]
"""Have the gateway listen for a virtual broker (once; later calls return at once)."""


class BrokerDirectory:
    def __init__(
        self, config: Config, vnodes: VirtualNodes, metrics: Metrics, listen: Listen, gateway_id: str
    ) -> None:
        self.config = config
        self.vnodes = vnodes
        self.metrics = metrics
        self._listen = listen
        self._id = gateway_id
        self.brokers: dict[str, dict[int, tuple[str, int]]] = {c: {} for c in config.clusters}
        """Per cluster, each real broker's address."""
        self._any: dict[str, tuple[str, int]] = {}
        """Per cluster, the address a request for any of its brokers goes to: the bootstrap server or
        broker that answered last (``any_broker``)."""
        self.offered: dict[int, tuple[int, int]] = {}
        """API key -> (lowest, highest) version offered to clients."""
        self._features: dict[str, dict[str, int]] = {}
        """Per cluster (from its first answer): each finalized feature's level."""
        self.features: dict[str, int] = {}
        """Finalized features offered to clients (see ``_offer_features``)."""
        self._unnamed: set[str] = set()
        """Clusters whose brokers the last probe could not give virtual ids (warned once)."""

    def offers(self, api_key: int, api_version: int) -> bool:
        """Whether this gateway offers ``api_key`` at ``api_version`` (what ApiVersions tells clients)."""
        versions = self.offered.get(api_key)
        return versions is not None and versions[0] <= api_version <= versions[1]

    def version(self, api_key: int, cap: int | None = None) -> int:
        """The highest version of ``api_key`` offered (0 if none), at most ``cap``: what the gateway's
        own requests use."""
        highest = self.offered.get(api_key, (0, 0))[1]
        return highest if cap is None else min(highest, cap)

    def upstream(
        self,
        cluster: str,
        node: int | None,
        credentials: Credentials | None = None,
        *,
        at: tuple[str, int] | None = None,
    ) -> Upstream:
        """A connection to a broker of ``cluster`` (``at`` a given address), logged in as ``credentials``
        (else as the gateway)."""
        host, port = at or self.real_address(cluster, node)
        others = self._others(cluster, (host, port)) if node is None and at is None else ()
        sasl = self.config.clusters[cluster].sasl
        login = None
        if sasl is not None:
            login = functools.partial(
                authenticate,
                mechanism=sasl.mechanism,
                credentials=credentials or Credentials(sasl.username, sasl.password),
            )
        return Upstream(
            host, port, max_frame_bytes=self.config.gateway.max_frame_bytes, login=login, cluster=cluster,
            node=node, others=others, reached=functools.partial(self._reached, cluster),
        )  # fmt: skip

    def address(self, virtual_id: int) -> tuple[str, int]:
        gateway = self.config.gateway
        return gateway.advertised_host or gateway.host, gateway.bootstrap_port + slot(virtual_id)

    def real_address(self, cluster: str, node: int | None) -> tuple[str, int]:
        """Where broker ``node`` of ``cluster`` listens (None: any broker, ``any_broker``). A broker the
        cluster's metadata does not list now (stopped, restarting) is refused with
        :class:`Unlisted` (the client reconnects and follows the new leader): a request meant for
        it went to the first bootstrap server before, a broker it was not meant for."""
        known = self.brokers[cluster]
        if node is None or not known:  # nothing learned yet (a gateway just started): the bootstrap
            return self.any_broker(cluster)
        if node not in known:
            raise Unlisted(f"broker {node} of cluster {cluster} is not in its metadata now")
        return known[node]

    def any_broker(self, cluster: str) -> tuple[str, int]:
        """Where a request for any broker of ``cluster`` goes (Metadata and FindCoordinator from the
        bootstrap port, the gateway's own): the address that answered last, at first the first bootstrap
        server. Always the first, a killed broker of three took the bootstrap port's requests with it
        until it was back, 28 s in a chaos trial, and kafkajs gave its sends up."""
        first = split_hostport(self.config.clusters[cluster].bootstrap.split(",")[0])
        return self._any.get(cluster, first)

    def _others(self, cluster: str, tried: tuple[str, int]) -> tuple[tuple[str, int], ...]:
        """Where a connection to any broker of ``cluster`` goes if ``tried`` refuses it: the other
        bootstrap servers, then the brokers the cluster's metadata listed (a bootstrap name may be one
        load balancer's)."""
        bootstrap = [split_hostport(a) for a in self.config.clusters[cluster].bootstrap.split(",")]
        listed = list(self.brokers[cluster].values())
        return tuple(a for a in dict.fromkeys([*bootstrap, *listed]) if a != tried)

    def _reached(self, cluster: str, address: tuple[str, int]) -> None:
        """A connection to any broker of ``cluster`` was made at ``address``: the next go there first."""
        self._any[cluster] = address

    async def virtual_id(self, cluster: str, node: int) -> int:
        return (await self.virtual_ids(cluster, {node}))[node]

    async def virtual_ids(self, cluster: str, nodes: set[int]) -> dict[int, int]:
        virtual = {}
        for node in nodes:
            broker = RealBroker(cluster, node)
            vid = self.vnodes.known(broker)
            if vid is None:
                vid = await asyncio.to_thread(self.vnodes.virtual_id, broker)
            await self._listen(vid)
            virtual[node] = vid
        return virtual

    async def local_metadata(self, request: Request, cluster: str) -> Any:
        """Metadata with an empty topic list: the bound cluster's brokers, as virtual brokers."""
        if not self.brokers[cluster]:
            await self.discover(cluster)
        cls = response_schema(request.api_key, request.api_version)
        broker_cls = element_type(cls, "brokers")
        virtual = await self.virtual_ids(cluster, set(self.brokers[cluster]))
        listed = sorted(virtual.values()) + self._beside(cluster)
        brokers = tuple(
            make(broker_cls, node_id=v, host=self.address(v)[0], port=self.address(v)[1]) for v in listed
        )
        controller = min(virtual.values(), default=-1)
        return make(cls, brokers=tuple(brokers), cluster_id=CLUSTER_ID, controller_id=controller, topics=())

    async def rewrite(self, api_key: int, body: Any, cluster: str) -> Any:
        """A broker's answer with virtual brokers in place of real ones."""
        if api_key == apis.METADATA:
            self._learn(cluster, body.brokers)
        virtual = await self.virtual_ids(cluster, real_nodes(api_key, body))
        rewritten = rewrite(api_key, body, virtual, self.address, cluster_id=CLUSTER_ID)
        if api_key != apis.METADATA:
            return rewritten
        broker_cls = element_type(type(rewritten), "brokers")
        others = tuple(
            make(broker_cls, node_id=v, host=self.address(v)[0], port=self.address(v)[1])
            for v in self._beside(cluster)
        )
        return dataclasses.replace(rewritten, brokers=rewritten.brokers + others)

    def _beside(self, cluster: str) -> list[int]:
        """The virtual brokers of the other configured clusters — every one given an id, whether its
        cluster lists it now or not — listed in every Metadata answer beside the answering cluster's
        own, though they lead nothing there. A client whose partitions or coordinator move to another
        cluster in a switch finds the new leader among brokers it knows; one still holding an old broker
        never finds it missing (librdkafka otherwise drops it and waits for its next periodic refresh,
        about a second, before producing again); and a coordinator named on another cluster than the
        one answering its Metadata is always one it knows. Taken from what this process had last learned
        of that cluster, the list left out a broker killed and back, and kafkajs, which looks its
        coordinator up among its cached brokers, gave a commit up (``KafkaJSBrokerNotFound``, two chaos
        trials). A request sent to another cluster's broker is answered by the bound cluster's
        (``decide``), so one that is down costs nothing. The answering cluster's own brokers are as it
        lists them: to one it leaves out, clients would send what only that broker answers (ListGroups,
        an idempotent producer's InitProducerId), refused while it is down."""
        return self.vnodes.of(set(self.config.clusters) - {cluster})

    def _learn(self, cluster: str, brokers: Any) -> None:
        """A Metadata answer's brokers (an empty list leaves what was known)."""
        self.brokers[cluster] = {b.node_id: (b.host, b.port) for b in brokers} or self.brokers[cluster]

    async def topic_metadata(self, cluster: str, topic: str) -> Any:
        """One topic's Metadata on ``cluster`` (real node ids), asked over a connection of its own."""
        version = self.version(apis.METADATA, apis.VERSION_CAPS[apis.METADATA])
        entry = element_type(request_schema(apis.METADATA, version), "topics")
        upstream = self.upstream(cluster, None)
        try:
            answer = await upstream.ask(
                apis.METADATA, version, topics=(make(entry, name=topic),), allow_auto_topic_creation=False
            )
        finally:
            upstream.close()
        self._learn(cluster, answer.brokers)
        return answer

    async def topic_ids(self, cluster: str) -> list[tuple[str, uuid.UUID]]:
        """Every topic on ``cluster`` with its id there, asked over a connection of its own."""
        version = self.version(apis.METADATA, apis.VERSION_CAPS[apis.METADATA])
        upstream = self.upstream(cluster, None)
        try:
            answer = await upstream.ask(apis.METADATA, version, topics=None, allow_auto_topic_creation=False)
        finally:
            upstream.close()
        return [(t.name, t.topic_id) for t in answer.topics if t.name and getattr(t, "topic_id", None)]

    async def probe(self) -> None:
        """Ask every cluster for its brokers every few seconds, side by side: a cluster not reached yet
        joins the offer when it answers, a known one's broker list stays fresh, and the answers are the
        clusters' reachability as this gateway sees it (off the request path, whatever the traffic)."""
        while True:
            await asyncio.sleep(PROBE_S)
            await asyncio.gather(*(self.discover(cluster) for cluster in self.config.clusters))

    async def discover(self, cluster: str) -> None:
        """Learn a cluster's brokers and API versions from the first of its bootstrap servers that
        answers; note whether any did (one broker down in a rolling restart is not the cluster down).
        The versions are offered at the first answer only: narrowing them later would refuse what
        clients already negotiated."""
        was = self.metrics.reachable.get(cluster)
        failures = []
        for address in self.config.clusters[cluster].bootstrap.split(","):
            upstream = self.upstream(cluster, None, at=split_hostport(address))
            try:
                async with asyncio.timeout(_PROBE_TIMEOUT_S):
                    versions = await upstream.ask(API_VERSIONS, 3, **SOFTWARE)
                    if versions.error_code:
                        raise RuntimeError(f"ApiVersions answered error {versions.error_code}")
                    theirs = {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys}
                    metadata = await upstream.ask(apis.METADATA, 9, topics=())
            except Exception as exc:
                failures.append(f"{address}: {exc!r}")
                continue
            finally:
                upstream.close()
            first = not self.brokers[cluster]
            self._learn(cluster, metadata.brokers)
            await self._name(cluster)
            self._reached(cluster, split_hostport(address))
            self.metrics.reachable[cluster] = True
            if was is False:
                log.info("gateway %s: cluster %s reachable again (%s)", self._id, cluster, address)
            if first:
                self._offer(theirs)
                self._offer_features(cluster, versions.finalized_features)
            return
        self.metrics.reachable[cluster] = False
        if was is not False:  # once per outage: the probe runs every few seconds
            log.warning("gateway %s: cluster %s not reachable: %s", self._id, cluster, "; ".join(failures))

    async def _name(self, cluster: str) -> None:
        """Give each of ``cluster``'s brokers its virtual id, and its port, as soon as it is learned: the
        other clusters' brokers every Metadata answer lists (``_beside``) are then the same in every
        process of a gateway, however long each has run, not only those it happened to look up (kafkajs
        rebalanced its fetchers at each change of the set, pausing them up to 5 s). Not done, it is
        tried again at the next probe."""
        try:
            await self.virtual_ids(cluster, set(self.brokers[cluster]))
        except Exception as exc:  # ZooKeeper away, a port taken: a client that needs one asks itself
            if cluster not in self._unnamed:
                log.warning("gateway %s: cluster %s's brokers not given ids yet: %r", self._id, cluster, exc)
            self._unnamed.add(cluster)
            return
        self._unnamed.discard(cluster)

    def _offer_features(self, cluster: str, finalized: Any) -> None:
        """Offer the transaction protocol version (KIP-890's ``transaction.version``) every configured
        cluster has finalized, once each has answered: a client may be switched to any of them, and one
        that began with version 2 would be refused by a cluster without it. Until then, none: the Java
        client then uses version 1, which every cluster takes."""
        self._features[cluster] = {f.name: f.max_version_level for f in finalized or ()}
        if set(self._features) != set(self.config.clusters) or self.features:
            return
        levels = [found.get(TRANSACTION_VERSION, 0) for found in self._features.values()]
        if min(levels) > 0:
            self.features = {TRANSACTION_VERSION: min(levels)}
            log.info("gateway %s: offering %s %d", self._id, TRANSACTION_VERSION, min(levels))

    def _offer(self, theirs: dict[int, tuple[int, int]]) -> None:
        """Offer each API at the versions every reachable cluster, kio and the gateway all handle."""
        for key, (their_low, their_high) in theirs.items():
            ours = known_versions(key)
            if ours is None or key in LOCAL_APIS or key in apis.WITHHELD:
                continue
            low = max(their_low, ours[0])
            high = min(their_high, ours[1], apis.VERSION_CAPS.get(key, their_high))
            if key in self.offered:
                low, high = max(low, self.offered[key][0]), min(high, self.offered[key][1])
            if low <= high:
                self.offered[key] = (low, high)
        self.offered.update(LOCAL_APIS)
