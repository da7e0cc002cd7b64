"""The gateway process: listeners, routing view, virtual brokers, and epoch acknowledgement.

Failure behaviour:
- a malformed or oversized frame closes that one connection; the process goes on;
- a broker that cannot be reached or drops the connection closes the client connections waiting on it
  (the clients reconnect and retry), never leaving a request unanswered on an open connection;
- ZooKeeper lost: requests keep being routed by the last known bindings while the process can vouch
  for its session (:mod:`switchyard.routing.lease`: two thirds of the session time-out after its last
  answer), the view says it is stale, and no new epoch is acknowledged until it is fresh again; past
  that, requests that write, commit or read partitions are held as for a block (a saga may have moved
  on without this process), until the routing is read again in a session it can vouch for;
- a restart loses nothing: bindings and virtual broker ids come back from ZooKeeper.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Any

from kazoo.client import KazooClient

from switchyard.config import Config
from switchyard.errors import ConfigError, GatewayError
from switchyard.identity import Identity
from switchyard.model import BindingState
from switchyard.resolution import resolve
from switchyard.routing.gateways import GatewayRegistration
from switchyard.routing.layout import Layout, ensure_layout
from switchyard.routing.lease import SessionLease
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.view import BindingView
from workers.gateway.brokers.answers import LocalAnswers
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.real_ids import RealIds
from workers.gateway.brokers.vnodes import VirtualNodes, slot
from workers.gateway.framing.intake import ByteBudget
from workers.gateway.framing.sasl import SaslError, UsersFile
from workers.gateway.groups.coordinator import Coordinators
from workers.gateway.groups.members import Member, Members
from workers.gateway.groups.protocols import ConsumerGroups
from workers.gateway.groups.unsynced import UnsyncedMembers
from workers.gateway.migrated.moved import Moved
from workers.gateway.process import readiness
from workers.gateway.process.metrics import Metrics
from workers.gateway.process.publishing import Publisher
from workers.gateway.process.shields import SHIELD_GRACE_S, Shields
from workers.gateway.process.usage import UsageTracker
from workers.gateway.producers.acked import AckedEnds
from workers.gateway.producers.ids import ProducerIds
from workers.gateway.producers.issuers import IssuerStore
from workers.gateway.producers.sequences import Sequences
from workers.gateway.producers.store import ProducerStore
from workers.gateway.producers.transactions import Carrier
from workers.gateway.routing.holds import RoutingChanges
from workers.gateway.routing.inflight import InFlight, describe
from workers.gateway.routing.links import LinkLookup
from workers.gateway.session import ClientSession, Listener

log = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self, config: Config, zk: KazooClient, *, gateway_id: str | None = None, reuse_port: bool = False
    ) -> None:
        self.config = config
        self.zk = zk
        self.id = gateway_id or config.gateway.id or socket.gethostname()
        self.reuse_port = reuse_port
        """Whether its ports are shared with the other processes of the same gateway (SO_REUSEPORT)."""
        self.layout = Layout(config.zookeeper.root)
        self.view = BindingView(
            zk, self.layout, config.default_cluster, registered_in=lambda: self.registration.registered_in
        )
        self.registration = GatewayRegistration(
            zk, self.layout, self.id, takeover_wait_s=config.zookeeper.session_timeout_s + 2,
            registered=self.view.refresh,
        )  # fmt: skip
        self.lease = SessionLease(
            zk, self.layout.epoch, config.zookeeper.session_timeout_s, regained=self._lease_regained
        )
        self.vnodes = VirtualNodes(zk, self.layout)
        self.inflight = InFlight(config.gateway.limits.stale_request_grace_s)
        self.budget = ByteBudget(config.gateway.limits.buffer_bytes)
        """Request bytes every connection together may hold (``gateway.limits.buffer_bytes``)."""
        users_file = config.gateway.sasl.users_file
        self.users = UsersFile(users_file) if users_file is not None else None
        self.metrics = Metrics.create()
        self.metrics.watch_epochs(
            self.id, lambda: (self.view.snapshot.epoch, self.registration.applied_epoch)
        )
        self.brokers = BrokerDirectory(config, self.vnodes, self.metrics, self._listen, self.id)
        self.answers = LocalAnswers(self.brokers, self.users, self.id)
        self.producers = ProducerIds(self.brokers, ProducerStore(zk, self.layout))
        self.transactions = Carrier(self.brokers, list(config.clusters), IssuerStore(zk, self.layout))
        """Transactional producers across a switch (:mod:`workers.gateway.producers.transactions`)."""
        self.links = LinkLookup(config, zk, self.layout)
        self.real_ids = RealIds(self.brokers.topic_ids)
        self.usage = UsageTracker(config.gateway.usage_window_s)
        self.acked = AckedEnds()
        self.publisher = Publisher(
            zk, self.layout, self.id, self.usage, self.acked, config.gateway.usage_publish_s
        )
        self.changes = RoutingChanges(lambda: self.view.snapshot)
        """Wakes the requests held while their identity is blocked (:mod:`workers.gateway.routing.holds`)."""
        self.members = Members()
        self.consumer_groups, self.unsynced = (
            ConsumerGroups(zk, self.layout),
            UnsyncedMembers(zk, self.layout),
        )
        """Groups of the consumer protocol, and members whose sync was refused, as every process saw
        (:mod:`workers.gateway.groups.protocols`, :mod:`workers.gateway.groups.unsynced`)."""
        self.moved = Moved(self.brokers.topic_metadata, self.producers.take, self.producers.store)
        """Partitions migrations moved: their leaders, and producers' ids on their targets."""
        self.sequences = Sequences(self.brokers, self.moved.leaders)
        """Which of a moved producer's batches may go to its new cluster."""
        self._servers: dict[int | None, asyncio.Server] = {}
        self._health: asyncio.Server | None = None
        self._registered = False
        self._binding: dict[int | None, asyncio.Future[None]] = {}
        self._sessions: set[ClientSession] = set()
        self._reported: set[tuple[str, int]] = set()
        """Invalid links already logged (by id and epoch)."""
        self.shields = Shields(config.default_cluster)
        """When this process closed each shielded cluster, and moved routes off it."""
        self._epoch_changed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._leaving: set[asyncio.Task[None]] = set()
        """Members moved by a change, being removed where they joined (``_leave_moved``)."""
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
        await asyncio.to_thread(self.publisher.recall)
        self.view.on_change(self._on_snapshot)
        await asyncio.to_thread(self.view.start)
        self.lease.start()
        health = self.config.gateway.health_port
        if health is not None:
            self._health = await readiness.serve(
                self.config.gateway.host, health, self.readiness, reuse_port=self.reuse_port
            )
        # Registered, and acknowledging, before it serves a client: a saga's barrier counts it from its
        # first request on (after a crash, the takeover of the dead one's registration is waited out first)
        await asyncio.to_thread(self.registration.register)
        self._registered = True
        self._tasks.append(asyncio.create_task(self._acknowledge()))
        known = await asyncio.to_thread(self.vnodes.load)
        for cluster in self.config.clusters:
            await self.brokers.discover(cluster)
        for virtual_id in known:
            await self._listen(virtual_id)
        await self._listen(None)
        self._tasks.append(asyncio.create_task(self.brokers.probe()))
        self._tasks.append(asyncio.create_task(self._watch()))
        self._tasks.append(asyncio.create_task(self.publisher.run()))
        self._tasks.append(asyncio.create_task(self._prune_producers()))
        log.info(
            "gateway %s serving on %s:%d",
            self.id,
            self.config.gateway.host,
            self.config.gateway.bootstrap_port,
        )

    async def stop(self, *, grace_s: float = 5.0) -> None:
        """Stop listening, end every client connection once the answers on their way are written (those
        still waiting after ``grace_s`` fail, so their clients retry elsewhere), deregister."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in [*self._servers.values(), *([self._health] if self._health else [])]:
            server.close()
        self._registered = False
        sessions = [asyncio.create_task(self._end(session, grace_s)) for session in list(self._sessions)]
        await asyncio.gather(*sessions, return_exceptions=True)
        await asyncio.to_thread(self.registration.close)
        await asyncio.to_thread(self.lease.stop)
        await asyncio.to_thread(self.view.stop)

    async def _end(self, session: ClientSession, grace_s: float) -> None:
        task = session.task
        if task is None:
            session.close()
            return
        session.finish(grace_s)
        try:
            await asyncio.wait_for(asyncio.shield(task), grace_s + 1)
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
        port = self.config.gateway.bootstrap_port + (0 if virtual_id is None else slot(virtual_id))

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
            self._servers[virtual_id] = await asyncio.start_server(
                serve, host, port, reuse_port=self.reuse_port
            )
        except OSError as exc:
            what = "gateway.bootstrap_port" if virtual_id is None else f"virtual broker {virtual_id}'s port"
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise GatewayError(f"cannot listen on {host}:{port} ({what}): {reason}") from exc

    # ---- epochs

    def settling(self, cluster: str) -> bool:
        """Whether a write sent to ``cluster`` before it was shielded (or marked down) may still wait
        there, in this process or another of the gateway's (:meth:`Shields.settling`)."""
        return self.shields.settling(cluster, self.view.snapshot, time.monotonic())

    def shield_fresh(self, cluster: str) -> bool:
        """Whether ``cluster`` was shielded a short while ago here (:meth:`Shields.fresh`)."""
        return self.shields.fresh(cluster, time.monotonic())

    def vouched(self, snapshot: RoutingSnapshot | None = None) -> bool:
        """Whether ``snapshot`` (default: the current one) may be acted on: the current one, read while
        registered in a ZooKeeper session this process can vouch is alive, so any change since waits for
        its acknowledgement (:meth:`BindingView.session_of`)."""
        return self.lease.vouches_for(self.view.session_of(snapshot or self.view.snapshot))

    def _lease_regained(self) -> None:  # on the lease's thread
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.changes.publish)  # held requests look again

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
        """Acknowledge each new epoch once nothing sent under an older one is still in flight; a failure
        is tried again, sooner at first (the loop must outlive anything one epoch does)."""
        failures = 0
        while True:
            await self._epoch_changed.wait()
            self._epoch_changed.clear()
            epoch = self.view.snapshot.epoch
            try:
                await self._apply(self.view.snapshot)
                failures = 0
            except Exception:
                failures += 1
                if failures == 1 or failures % 20 == 0:
                    log.exception(
                        "gateway %s: cannot acknowledge epoch %d (%d tries)", self.id, epoch, failures
                    )
                await asyncio.sleep(min(_ACK_AGAIN_S * failures, _ACK_AGAIN_MOST_S))
                self._epoch_changed.set()

    async def _apply(self, snapshot: RoutingSnapshot) -> None:
        """Write ``snapshot``'s epoch into the registration once it is in effect here."""
        epoch = snapshot.epoch
        self.moved.note(snapshot)
        woken = self.inflight.supersede(snapshot)
        self._leave_moved(snapshot)
        if woken:
            log.info("gateway %s: epoch %d answered %d long polls early", self.id, epoch, woken)
        self._leave_closed_clusters(snapshot)
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
            return  # acknowledged when fresh again: the reconnect publishes a new snapshot
        await self.publisher.publish_acked()  # what was acknowledged under older epochs, known with this one
        await self.publisher.publish_usage(new_only=True)  # every group its clients used, for a switch's sync
        await asyncio.to_thread(self.registration.acknowledge, epoch)

    def _leave_moved(self, snapshot: RoutingSnapshot) -> None:
        """Group members this gateway saw join on a cluster their group is no longer routed to are removed
        there at once (LeaveGroup on their behalf), not at their next request: a member between
        heartbeats, or silent, would keep the group there non-empty for seconds (a heartbeat interval)
        to minutes (its session time-out), and a switch back could not write the group's offsets there
        meanwhile, clients held. A member whose join the change cut goes the same way: Apache Kafka ends
        the round without it, and elects another leader if it led."""

        def now_on(identity: Identity, group: str) -> str | None:
            routed = resolve(identity, snapshot.bindings, self.config.default_cluster, group=group)
            return routed.cluster if routed.state is BindingState.ACTIVE else None

        async def leave(group: str, member_id: str, member: Member) -> None:
            coordinators = Coordinators(self.brokers, member.credentials)
            if not await coordinators.leave(member, group, member_id):
                self.members.still_there(group, member_id)

        for group, member_id, member in self.members.moved(now_on):
            if not snapshot.shielded(member.cluster):  # a shielded or down cluster is not contacted
                task = asyncio.create_task(leave(group, member_id, member))
                self._leaving.add(task)
                task.add_done_callback(self._leaving.discard)

    def _leave_closed_clusters(self, snapshot: RoutingSnapshot) -> None:
        """Drop every broker connection to a cluster that is shielded or down, each once what waits on
        it is answered or after ``SHIELD_GRACE_S``: a request waiting on a failed cluster may never be
        answered, and must not hold the acknowledgement of the change that shielded it for longer. What
        still waits then is answered with the retriable error, the client's connection kept, and retried
        where it is routed now (what the failed cluster still does with it is its lost window)."""
        newly = self.shields.newly_closed(snapshot)
        if newly:
            log.info("gateway %s: %s shielded or down: its broker connections are closed", self.id, newly)
            for session in list(self._sessions):
                session.drop_upstreams(newly, SHIELD_GRACE_S)
        # only once done: a failure is retried with the epoch's ack
        self.shields.apply(snapshot, time.monotonic())

    async def _prune_producers(self) -> None:
        """Every hour, the producer routes and transactional ids' issuers no gateway touched for as long as
        their brokers keep them (their brokers forgot the ids), the consumer-protocol groups none
        touched for a week, and the members refused their sync a day ago."""
        while True:
            await asyncio.sleep(_PRUNE_EVERY_S)
            for what, prune in (("producer routes", self.producers.store.prune),
                                ("transactional ids' issuers", self.transactions.store.prune),
                                ("consumer-protocol groups", self.consumer_groups.prune),
                                ("members refused their sync", self.unsynced.prune)):  # fmt: skip
                try:
                    removed = await asyncio.to_thread(prune)
                except Exception:
                    log.warning("gateway %s: %s not pruned", self.id, what, exc_info=True)
                    continue
                if removed:
                    log.info("gateway %s: %d idle %s removed", self.id, removed, what)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Ready once it listens, is registered and has its routing: never on the clusters' account (a
        shielded or unreachable one is said, not a reason to leave the load balancer)."""
        snapshot = self.view.snapshot
        listening = None in self._servers
        registered = self._registered
        clusters = {c: self._cluster_word(snapshot, c) for c in self.config.clusters}
        said = {
            "gateway": self.id, "epoch": snapshot.epoch, "stale": self.view.stale,
            "vouched": self.vouched(snapshot), "clusters": clusters,
        }  # fmt: skip
        return listening and registered, said

    def _cluster_word(self, snapshot: RoutingSnapshot, cluster: str) -> str:
        if snapshot.shielded(cluster):
            return str(snapshot.clusters[cluster].state)
        return "unreachable" if self.metrics.reachable.get(cluster) is False else "reachable"

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


_PRUNE_EVERY_S = 3600.0
_ACK_AGAIN_S, _ACK_AGAIN_MOST_S = 0.5, 5.0
"""How soon a failed acknowledgement is tried again: 0.5 s more each time, at most 5 s."""
_SLOW_ACK_S = 5.0
"""An acknowledgement held up longer than this is logged with the requests holding it."""
