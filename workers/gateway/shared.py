"""The seam between a client connection and the gateway's shared state.

A session (:mod:`workers.gateway.session`) sees the gateway only through :class:`Shared`: the routing
view and what hangs on it, and a few collaborators with one job each — where brokers are
(:class:`BrokerDirectory`), the answers the gateway gives itself (:class:`LocalAnswers`), idempotent
producers' ids (:class:`ProducerIds`), mirror links (:class:`LinkLookup`). The gateway process
(:mod:`workers.gateway.process.server`) implements it; neither module imports the other.
"""

from __future__ import annotations

from typing import Protocol

from switchyard.config import Config
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.view import BindingView
from workers.gateway.brokers.answers import LocalAnswers
from workers.gateway.brokers.directory import BrokerDirectory
from workers.gateway.brokers.real_ids import RealIds
from workers.gateway.framing.intake import ByteBudget
from workers.gateway.groups.members import Members
from workers.gateway.groups.protocols import ConsumerGroups
from workers.gateway.groups.unsynced import UnsyncedMembers
from workers.gateway.migrated.moved import Moved
from workers.gateway.process.metrics import Metrics
from workers.gateway.process.usage import UsageTracker
from workers.gateway.producers.acked import AckedEnds
from workers.gateway.producers.ids import ProducerIds
from workers.gateway.producers.sequences import Sequences
from workers.gateway.producers.transactions import Carrier
from workers.gateway.routing.holds import RoutingChanges
from workers.gateway.routing.inflight import InFlight
from workers.gateway.routing.links import LinkLookup


class Shared(Protocol):
    config: Config
    view: BindingView
    """The routing snapshot every request is decided by."""
    changes: RoutingChanges
    inflight: InFlight
    budget: ByteBudget
    metrics: Metrics
    usage: UsageTracker
    acked: AckedEnds
    members: Members
    consumer_groups: ConsumerGroups
    unsynced: UnsyncedMembers
    moved: Moved
    brokers: BrokerDirectory
    answers: LocalAnswers
    producers: ProducerIds
    transactions: Carrier
    sequences: Sequences
    links: LinkLookup
    real_ids: RealIds

    def settling(self, cluster: str) -> bool:
        """Whether a request sent to ``cluster`` before it was shielded may still wait there."""
        ...

    def shield_fresh(self, cluster: str) -> bool:
        """Whether ``cluster`` was shielded a short while ago: its clients' writes are held, not refused."""
        ...

    def vouched(self, snapshot: RoutingSnapshot | None = None) -> bool:
        """Whether ``snapshot`` (default: the current one) may be acted on: current, and its ZooKeeper
        session alive."""
        ...
