"""The gateway process: listeners, routing view, virtual brokers, and epoch acknowledgement.

Failure behaviour:
- a malformed or oversized frame closes that one connection; the process goes on;
- a broker that cannot be reached or drops the connection closes the client connections waiting on it
  (the clients reconnect and retry), never leaving a request unanswered on an open connection;
- ZooKeeper lost: requests keep being routed by the last known bindings, the view says it is stale,
  and no new epoch is acknowledged until it is fresh again;
- a restart loses nothing: bindings and virtual broker ids come back from ZooKeeper.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import socket
from datetime import timedelta
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kio.schema.errors import ErrorCode

from switchyard.acked import decode as decode_acked
from switchyard.acked import encode as encode_acked
from switchyard.config import Config, split_hostport
from switchyard.errors import ConfigError, GatewayError
from switchyard.identity import Identity
from switchyard.mirror.mapstore import LinkRecords, read_link
from switchyard.model import ClusterState, Link, LinkState
from switchyard.routing.gateways import GatewayRegistration
from switchyard.routing.layout import Layout, ensure_layout
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.view import BindingView
from switchyard.usage import encode
from workers.gateway import apis, readiness
from workers.gateway.acked import AckedEnds
from workers.gateway.entities import element_type, make
from workers.gateway.holds import RoutingChanges
from workers.gateway.inflight import InFlight, describe
from workers.gateway.intake import ByteBudget
from workers.gateway.members import Members
from workers.gateway.metrics import Metrics
from workers.gateway.moved import Moved
from workers.gateway.producers import ProducerRoute, Translation
from workers.gateway.protocol import (
    API_VERSIONS,
    Request,
    known_versions,
    request_schema,
    response_schema,
)
from workers.gateway.rewrite import real_nodes, rewrite
from workers.gateway.sasl import Credentials, SaslError, UsersFile, authenticate, parse_plain
from workers.gateway.session import ClientSession, Listener
from workers.gateway.upstream import Upstream, UpstreamError
from workers.gateway.usage import UsageTracker
from workers.gateway.vnodes import RealBroker, VirtualNodes

log = logging.getLogger(__name__)
CLUSTER_ID = "switchyard"
"""The cluster id clients see, whichever real cluster answers: to them it is one cluster."""
LOCAL_APIS = {apis.API_VERSIONS: (0, 3), apis.SASL_HANDSHAKE: (1, 1), apis.SASL_AUTHENTICATE: (0, 2)}
"""SaslHandshake v0 would be followed by unframed tokens; v1 (Kafka 1.0 on) frames them."""


class Gateway:
    def __init__(self, config: Config, zk: KazooClient, *, gateway_id: str | None = None) -> None:
        self.config = config
        self.zk = zk
        self.id = gateway_id or config.gateway.id or socket.gethostname()
        self.layout = Layout(config.zookeeper.root)
        self.view = BindingView(zk, self.layout, config.default_cluster)
        self.vnodes = VirtualNodes(zk, self.layout)
        self.registration = GatewayRegistration(
            zk, self.layout, self.id, takeover_wait_s=config.zookeeper.session_timeout_s + 2
        )
        self.inflight = InFlight(config.gateway.limits.stale_request_grace_s)
        self.budget = ByteBudget(config.gateway.limits.buffer_bytes)
        """Request bytes every connection together may hold (``gateway.limits.buffer_bytes``)."""
        users_file = config.gateway.sasl.users_file
        self.users = UsersFile(users_file) if users_file is not None else None
        self.metrics = Metrics.create()
        self.metrics.watch_epochs(
            self.id, lambda: (self.view.snapshot.epoch, self.registration.applied_epoch)
        )
        self.brokers: dict[str, dict[int, tuple[str, int]]] = {c: {} for c in config.clusters}
        self.offered: dict[int, tuple[int, int]] = {}
        self.usage = UsageTracker()
        self.acked = AckedEnds()
        self._acked_lock = asyncio.Lock()
        self.producers: dict[tuple[Identity, int], ProducerRoute] = {}
        """Where each client's idempotent producer writes now, and as whom (from InitProducerId on)."""
        self._new_routes = asyncio.Lock()
        self._mirrored: dict[tuple[str, str], bool] = {}
        self._mirrored_in: RoutingSnapshot | None = None
        self._servers: dict[int | None, asyncio.Server] = {}
        self._health: asyncio.Server | None = None
        self._registered = False
        self._binding: dict[int | None, asyncio.Future[None]] = {}
        self._sessions: set[ClientSession] = set()
        self._reported: set[tuple[str, int]] = set()
        self._closed_clusters: set[str] = set()
        """Invalid links already logged (by id and epoch)."""
        self._epoch_changed = asyncio.Event()
        self.changes = RoutingChanges(lambda: self.view.snapshot)
        """Wakes the requests held while their identity is blocked (see :mod:`workers.gateway.holds`)."""
        self.members = Members()
        self.moved = Moved(self._topic_metadata, self._producer_id)
        """Partitions migrations moved: their leaders, and producers' ids on their targets."""
        self._link_records: dict[tuple[str, int], asyncio.Future[LinkRecords]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.users is not None:
            try:
                await asyncio.to_thread(self.users.load)
            except SaslError as exc:
                raise ConfigError(f"gateway.sasl.users_file: {exc}") from exc
        await asyncio.to_thread(ensure_layout, self.zk, self.layout)
        await asyncio.to_thread(self._recall_acked)
        self.view.on_change(self._on_snapshot)
        await asyncio.to_thread(self.view.start)
        known = await asyncio.to_thread(self.vnodes.load)
        for cluster in self.config.clusters:
            await self._discover(cluster)
        for virtual_id in known:
            await self._listen(virtual_id)
        await self._listen(None)
        health = self.config.gateway.health_port
        if health is not None:
            self._health = await readiness.serve(self.config.gateway.host, health, self.readiness)
        await asyncio.to_thread(self.registration.register)
        self._registered = True
        self._tasks.append(asyncio.create_task(self._acknowledge()))
        self._tasks.append(asyncio.create_task(self._probe_clusters()))
        self._tasks.append(asyncio.create_task(self._watch()))
        self._tasks.append(asyncio.create_task(self._publish_usage()))
        log.info(
            "gateway %s serving on %s:%d",
            self.id,
            self.config.gateway.host,
            self.config.gateway.bootstrap_port,
        )

    async def stop(self, *, grace_s: float = 5.0) -> None:
        """Stop listening, end every client connection (their waiting requests fail, so clients retry
        elsewhere), deregister."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in [*self._servers.values(), *([self._health] if self._health else [])]:
            server.close()
        self._registered = False
        sessions = [asyncio.create_task(self._end(session, grace_s)) for session in list(self._sessions)]
        await asyncio.gather(*sessions, return_exceptions=True)
        await asyncio.to_thread(self.registration.close)
        await asyncio.to_thread(self.view.stop)

    async def _end(self, session: ClientSession, grace_s: float) -> None:
        session.close()
        task = session.task
        if task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_s)
        except TimeoutError:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _listen(self, virtual_id: int | None) -> None:
        """Listen for ``virtual_id`` (None: the bootstrap port), once: connections asking about a new
        broker at the same moment share one bind (a second bind of the port would fail)."""
        binding = self._binding.get(virtual_id)
        if binding is None or (binding.done() and binding.exception() is not None):
            binding = self._binding[virtual_id] = asyncio.ensure_future(self._bind(virtual_id))
        await asyncio.shield(binding)

    async def _bind(self, virtual_id: int | None) -> None:
        listener = Listener(virtual_id, self.vnodes.real(virtual_id) if virtual_id is not None else None)
        port = self.config.gateway.bootstrap_port + (virtual_id or 0)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            session = ClientSession(self, listener, reader, writer)
            session.task = asyncio.current_task()
            self._sessions.add(session)
            try:
                await session.run()
            finally:
                self._sessions.discard(session)

        host = self.config.gateway.host
        try:
            self._servers[virtual_id] = await asyncio.start_server(serve, host, port)
        except OSError as exc:
            what = "gateway.bootstrap_port" if virtual_id is None else f"virtual broker {virtual_id}'s port"
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise GatewayError(f"cannot listen on {host}:{port} ({what}): {reason}") from exc

    # ---- epochs

    def _on_snapshot(self, snapshot: RoutingSnapshot) -> None:  # on the view's thread
        for link in snapshot.links.values():
            if link.problem is not None and (link.id, link.epoch) not in self._reported:
                self._reported.add((link.id, link.epoch))
                log.error("gateway %s: link %s is ignored: %s", self.id, link.id, link.problem)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._snapshot_arrived)

    def _snapshot_arrived(self) -> None:
        self._epoch_changed.set()
        self.changes.publish()

    async def _acknowledge(self) -> None:
        """Acknowledge each new epoch once nothing sent under an older one is still in flight."""
        while True:
            await self._epoch_changed.wait()
            self._epoch_changed.clear()
            snapshot = self.view.snapshot
            epoch = snapshot.epoch
            woken = self.inflight.supersede(snapshot)
            if woken:
                log.info("gateway %s: epoch %d answered %d long polls early", self.id, epoch, woken)
            await self._leave_closed_clusters(snapshot)
            drained = asyncio.ensure_future(self.inflight.drained_before(epoch))
            try:
                if not (await asyncio.wait({drained}, timeout=_SLOW_ACK_S))[0]:
                    held = self.inflight.holding(epoch)
                    log.warning(
                        "gateway %s: epoch %d waits for %d requests routed the old way: %s",
                        self.id, epoch, len(held), ", ".join(describe(what) for what in held[:10]),
                    )  # fmt: skip
                await drained
            finally:
                drained.cancel()
            if self.view.stale:
                continue  # acknowledged when fresh again: the reconnect publishes a new snapshot
            try:
                await self._publish_acked()  # what was acknowledged under older epochs, known with this one
                await asyncio.to_thread(self.registration.acknowledge, epoch)
            except Exception:
                log.exception("gateway %s: cannot acknowledge epoch %d", self.id, epoch)

    async def _leave_closed_clusters(self, snapshot: RoutingSnapshot) -> None:
        """Drop every broker connection to a cluster that is shielded or down: a request waiting on a
        failed cluster may never be answered, and must not hold the acknowledgement of the change that
        shielded it. What waited is answered with the retriable error, the client's connection kept, and
        retried where it is routed now (what the failed cluster still does with it is its lost window)."""
        closed = {c for c, cluster in snapshot.clusters.items() if cluster.state is not ClusterState.ACTIVE}
        newly, self._closed_clusters = closed - self._closed_clusters, closed
        if newly:
            log.info("gateway %s: %s shielded or down: its broker connections are closed", self.id, newly)
            for session in list(self._sessions):
                await session.drop_upstreams(newly)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready once it listens, is registered and has its routing: never on the clusters' account (a
        shielded or unreachable one is said, not a reason to leave the load balancer)."""
        snapshot = self.view.snapshot
        listening = None in self._servers
        registered = self._registered
        clusters = {c: self._cluster_word(snapshot, c) for c in self.config.clusters}
        said = {"gateway": self.id, "epoch": snapshot.epoch, "stale": self.view.stale, "clusters": clusters}
        return listening and registered, said

    def _cluster_word(self, snapshot: RoutingSnapshot, cluster: str) -> str:
        known = snapshot.clusters.get(cluster)
        if known is not None and known.state is not ClusterState.ACTIVE:
            return str(known.state)
        return "unreachable" if self.metrics.reachable.get(cluster) is False else "reachable"

    # ---- answers the gateway gives itself

    def api_versions_response(self, request: Request) -> Any:
        """The APIs and versions offered; a too-new request gets UNSUPPORTED_VERSION in the v0 form."""
        supported = request.api_version <= LOCAL_APIS[API_VERSIONS][1]
        cls = response_schema(API_VERSIONS, request.api_version if supported else 0)
        entry = element_type(cls, "api_keys")
        keys = tuple(
            make(entry, api_key=k, min_version=low, max_version=high)
            for k, (low, high) in sorted(self.offered.items())
        )
        error = ErrorCode.none if supported else ErrorCode.unsupported_version
        return make(cls, error_code=error, api_keys=keys)

    def sasl_handshake(self, request: Request, *, authenticated: bool) -> Any:
        """Accept PLAIN, the one mechanism offered; a second login on one connection is refused."""
        cls = response_schema(request.api_key, request.api_version)
        if self.users is None:
            return make(cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=())
        if authenticated:
            return make(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=("PLAIN",))
        ok = request.api_version >= 1 and request.body.mechanism == "PLAIN"  # v0 means unframed tokens
        error = ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism
        return make(cls, error_code=error, mechanisms=("PLAIN",))

    async def sasl_authenticate(
        self, request: Request, *, handshaken: bool
    ) -> tuple[Any, Credentials | None]:
        """The answer to a PLAIN token, and the credentials it proved (None: refused, close after)."""
        cls = response_schema(request.api_key, request.api_version)
        if self.users is None or not handshaken:
            return make(cls, error_code=ErrorCode.illegal_sasl_state, error_message="no SASL handshake"), None
        refused = "authentication failed: unknown user or wrong password"
        try:
            credentials = parse_plain(request.body.auth_bytes)
            known = await asyncio.to_thread(self.users.verify, credentials)
        except SaslError as exc:
            log.warning("gateway %s: SASL refused: %s", self.id, exc)
            refused, known = f"authentication failed: {exc}", False
        if not known:
            return make(cls, error_code=ErrorCode.sasl_authentication_failed, error_message=refused), None
        return make(cls, error_code=ErrorCode.none, auth_bytes=b""), credentials

    async def local_metadata(self, request: Request, cluster: str) -> Any:
        """Metadata with an empty topic list: the bound cluster's brokers, as virtual brokers."""
        if not self.brokers[cluster]:
            await self._discover(cluster)
        cls = response_schema(request.api_key, request.api_version)
        broker_cls = element_type(cls, "brokers")
        virtual = await self._virtual_ids(cluster, set(self.brokers[cluster]))
        listed = sorted(virtual.values()) + self._elsewhere(cluster)
        brokers = tuple(
            make(broker_cls, node_id=v, host=self.address(v)[0], port=self.address(v)[1]) for v in listed
        )
        controller = min(virtual.values(), default=-1)
        return make(cls, brokers=tuple(brokers), cluster_id=CLUSTER_ID, controller_id=controller, topics=())

    async def rewrite(self, api_key: int, body: Any, cluster: str) -> Any:
        if api_key == apis.METADATA:
            self.brokers[cluster] = {b.node_id: (b.host, b.port) for b in body.brokers} or self.brokers[
                cluster
            ]
        virtual = await self._virtual_ids(cluster, real_nodes(api_key, body))
        rewritten = rewrite(api_key, body, virtual, self.address, cluster_id=CLUSTER_ID)
        if api_key != apis.METADATA:
            return rewritten
        broker_cls = element_type(type(rewritten), "brokers")
        others = tuple(
            make(broker_cls, node_id=v, host=self.address(v)[0], port=self.address(v)[1])
            for v in self._elsewhere(cluster)
        )
        return dataclasses.replace(rewritten, brokers=rewritten.brokers + others)

    def _elsewhere(self, cluster: str) -> list[int]:
        """The virtual brokers of the other clusters, listed in every Metadata answer though they lead
        nothing there: a client whose partitions or coordinator move to another cluster in a switch
        then finds the new leader among brokers it knows and goes straight to it, and a client still
        holding an old broker never finds it missing (librdkafka otherwise drops the broker and waits
        for its next periodic refresh, about a second, before producing again)."""
        found = []
        for other, nodes in self.brokers.items():
            if other != cluster:
                found += [
                    v for node in nodes if (v := self.vnodes.known(RealBroker(other, node))) is not None
                ]
        return sorted(found)

    def mirrored(self, snapshot: RoutingSnapshot, cluster: str, topic: str) -> bool:
        """Whether ``topic`` on ``cluster`` is a mirror's copy: only the mirror writes it until promoted."""
        if snapshot is not self._mirrored_in:
            self._mirrored, self._mirrored_in = {}, snapshot
        found = self._mirrored.get((cluster, topic))
        if found is None:
            found = self._mirrored[(cluster, topic)] = any(
                link.target == cluster and link.state is not LinkState.PROMOTED and link.copies(topic)
                for link in snapshot.links.values()
            )
        return found

    def carrying_link(
        self, snapshot: RoutingSnapshot, source: str, target: str, topics: tuple[str, ...]
    ) -> Link | None:
        """The link that copies all of ``topics`` from ``source`` to ``target``: the one whose offset map
        carries a commit made on ``source`` over to ``target`` (None: there is none)."""
        for link in snapshot.links.values():
            if link.source == source and link.target == target and all(link.copies(t) for t in topics):
                return link
        return None

    async def link_records(self, link: Link) -> LinkRecords:
        """A link's offset map and final positions, from its target. Read once per promoted link (its
        map is final then); a link still copying is read each time."""
        if link.state is not LinkState.PROMOTED:
            return await asyncio.to_thread(read_link, self.config.clusters[link.target].bootstrap, link.id)
        key = (link.id, link.epoch)
        found = self._link_records.get(key)
        if found is None or (found.done() and found.exception() is not None):
            bootstrap = self.config.clusters[link.target].bootstrap
            found = self._link_records[key] = asyncio.ensure_future(
                asyncio.to_thread(read_link, bootstrap, link.id)
            )
            if len(self._link_records) > _LINKS_REMEMBERED:
                del self._link_records[next(iter(self._link_records))]
        return await asyncio.shield(found)

    def offers(self, api_key: int, api_version: int) -> bool:
        """Whether this gateway offers ``api_key`` at ``api_version`` (what ApiVersions tells clients)."""
        versions = self.offered.get(api_key)
        return versions is not None and versions[0] <= api_version <= versions[1]

    def issued(self, identity: Identity, producer_id: int, cluster: str) -> None:
        _remember(self.producers, (identity, producer_id), ProducerRoute(cluster, None))

    async def translation(self, identity: Identity, producer_id: int, cluster: str) -> Translation | None:
        """As whom a client's idempotent producer writes to ``cluster``: None for its own id (issued there,
        never moved, or unknown to this gateway); else the gateway's own id there, taken afresh each time
        the producer's batches move to another cluster (see :mod:`workers.gateway.producers`)."""
        key = (identity, producer_id)
        route = self.producers.get(key)
        if route is None or route.cluster == cluster:
            return route.translation if route else None
        async with self._new_routes:
            route = self.producers[key]
            if route.cluster != cluster:
                route = ProducerRoute(cluster, await self._producer_id(cluster))
                _remember(self.producers, key, route)
        return route.translation

    async def _topic_metadata(self, cluster: str, topic: str) -> Any:
        """One topic's Metadata on ``cluster`` (real node ids), asked over a connection of its own."""
        version = min(self.offered.get(apis.METADATA, (0, 0))[1], apis.VERSION_CAPS[apis.METADATA])
        entry = element_type(request_schema(apis.METADATA, version), "topics")
        upstream = self.upstream(cluster, None)
        try:
            answer = await upstream.ask(
                apis.METADATA, version, topics=(make(entry, name=topic),), allow_auto_topic_creation=False
            )
        finally:
            await upstream.close()
        self.brokers[cluster] = {b.node_id: (b.host, b.port) for b in answer.brokers} or self.brokers[cluster]
        return answer

    async def virtual_id(self, cluster: str, node: int) -> int:
        return (await self._virtual_ids(cluster, {node}))[node]

    async def _producer_id(self, cluster: str) -> Translation:
        upstream = self.upstream(cluster, None)
        try:
            version = self.offered.get(apis.INIT_PRODUCER_ID, (0, 0))[1]
            answer = await upstream.ask(
                apis.INIT_PRODUCER_ID,
                version,
                transactional_id=None,
                transaction_timeout=timedelta(minutes=1),
                producer_id=-1,
                producer_epoch=-1,
            )
        finally:
            await upstream.close()
        if answer.error_code != ErrorCode.none:
            raise UpstreamError(f"{cluster}: InitProducerId failed: {answer.error_code.name}")
        return Translation(answer.producer_id, answer.producer_epoch)

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
            node=node,
        )  # fmt: skip

    def address(self, virtual_id: int) -> tuple[str, int]:
        gateway = self.config.gateway
        return gateway.advertised_host or gateway.host, gateway.bootstrap_port + virtual_id

    def real_address(self, cluster: str, node: int | None) -> tuple[str, int]:
        if node is not None and node in self.brokers[cluster]:
            return self.brokers[cluster][node]
        return split_hostport(self.config.clusters[cluster].bootstrap.split(",")[0])

    async def _virtual_ids(self, cluster: str, nodes: set[int]) -> dict[int, int]:
        virtual = {}
        for node in nodes:
            broker = RealBroker(cluster, node)
            vid = self.vnodes.known(broker)
            if vid is None:
                vid = await asyncio.to_thread(self.vnodes.virtual_id, broker)
            await self._listen(vid)
            virtual[node] = vid
        return virtual

    async def _watch(self) -> None:
        """Ask every connection, a few times a second, whether it has run past a time-out."""
        limits = self.config.gateway.limits
        shortest = min(limits.frame_read_timeout_s, limits.idle_timeout_s, limits.login_timeout_s)
        interval = min(max(shortest / 4, 0.1), 1.0)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = loop.time()
            for session in list(self._sessions):
                session.check(now)

    async def _publish_usage(self) -> None:
        """Every few seconds, what the clients used (an ephemeral node) and how far their writes were
        acknowledged (a persistent one: it outlives the gateway), where sagas read them."""
        usage = self.layout.usage(self.id)
        while True:
            await asyncio.sleep(_USAGE_EVERY_S)
            data = encode(self.usage.uses())
            try:
                await asyncio.to_thread(self._write, usage, data, ephemeral=True)
                await self._publish_acked()
            except Exception:
                log.warning("gateway %s: usage not published", self.id, exc_info=True)

    async def _publish_acked(self) -> None:
        """How far each partition's writes were acknowledged, if it changed: every few seconds, and before
        each epoch is acknowledged, so a saga that waited for the acknowledgements reads it whole (a
        smooth migration's end must reach it: acks=1 writes may run ahead of the high watermark)."""
        async with self._acked_lock:  # one write at a time: a later one never carries older ends
            if not self.acked.changed:
                return
            self.acked.changed = False
            try:
                await asyncio.to_thread(
                    self._write, self.layout.acked(self.id), encode_acked(self.acked.ends), ephemeral=False
                )
            except BaseException:
                self.acked.changed = True
                raise

    def _recall_acked(self) -> None:
        """What this gateway published before a restart: the next publication starts from it, so a
        restart never lowers the ends a fault migration chooses its end offset from."""
        try:
            data, _ = self.zk.get(self.layout.acked(self.id))
            self.acked.ends.update(decode_acked(data))
        except NoNodeError:
            pass
        except (ValueError, TypeError, AttributeError):
            log.warning(
                "gateway %s: its published acknowledged ends are unreadable; starting afresh", self.id
            )

    def _write(self, path: str, data: bytes, *, ephemeral: bool) -> None:
        try:
            self.zk.set(path, data)
        except NoNodeError:
            self.zk.create(path, data, ephemeral=ephemeral, makepath=True)

    async def _probe_clusters(self) -> None:
        """Ask every cluster for its brokers every few seconds, side by side: a cluster not reached yet
        joins the offer when it answers, a known one's broker list stays fresh, and the answers are the
        clusters' reachability as this gateway sees it (off the request path, whatever the traffic)."""
        while True:
            await asyncio.sleep(_PROBE_S)
            await asyncio.gather(*(self._discover(cluster) for cluster in self.config.clusters))

    async def _discover(self, cluster: str) -> None:
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
                    versions = await upstream.ask(API_VERSIONS, 3)
                    theirs = {a.api_key: (a.min_version, a.max_version) for a in versions.api_keys}
                    metadata = await upstream.ask(apis.METADATA, 9, topics=())
            except Exception as exc:
                failures.append(f"{address}: {exc!r}")
                continue
            finally:
                await upstream.close()
            first = not self.brokers[cluster]
            self.brokers[cluster] = {b.node_id: (b.host, b.port) for b in metadata.brokers}
            self.metrics.reachable[cluster] = True
            if was is False:
                log.info("gateway %s: cluster %s reachable again (%s)", self.id, cluster, address)
            if first:
                self._offer(theirs)
            return
        self.metrics.reachable[cluster] = False
        if was is not False:  # once per outage: the probe runs every few seconds
            log.warning("gateway %s: cluster %s not reachable: %s", self.id, cluster, "; ".join(failures))

    def _offer(self, theirs: dict[int, tuple[int, int]]) -> None:
        """Offer each API at the versions every reachable cluster, kio and the gateway all handle."""
        for key, (their_low, their_high) in theirs.items():
            ours = known_versions(key)
            if ours is None or key in LOCAL_APIS:
                continue
            low = max(their_low, ours[0])
            high = min(their_high, ours[1], apis.VERSION_CAPS.get(key, their_high))
            if key in self.offered:
                low, high = max(low, self.offered[key][0]), min(high, self.offered[key][1])
            if low <= high:
                self.offered[key] = (low, high)
        self.offered.update(LOCAL_APIS)


_REMEMBERED = 100_000
_LINKS_REMEMBERED = 100
_PROBE_S = 5.0
_PROBE_TIMEOUT_S = 10.0
"""A probe unanswered this long counts as unreachable (a host that drops packets never refuses)."""
_SLOW_ACK_S = 5.0
_USAGE_EVERY_S = 2.0
"""An acknowledgement held up longer than this is logged with the requests holding it."""


def _remember(table: dict[Any, Any], key: Any, value: Any) -> None:
    """Insert, dropping the oldest entries past a bound (these tables grow with client restarts)."""
    table[key] = value
    while len(table) > _REMEMBERED:
        del table[next(iter(table))]
