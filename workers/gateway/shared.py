"""The seam between a client connection and the gateway's shared state.

A session (:mod:`workers.gateway.session`) sees the gateway only through :class:`Shared`: the routing
view and what hangs on it, the answers the gateway gives itself, and what it remembers across
connections (producer ids, group members, link offset maps). The gateway process
(:mod:`workers.gateway.server`) implements it; neither module imports the other.
"""

from __future__ import annotations

from typing import Any, Protocol

from switchyard.config import Config
from switchyard.identity import Identity
from switchyard.mirror.mapstore import LinkRecords
from switchyard.model import Link
from switchyard.routing.snapshot import RoutingSnapshot
from switchyard.routing.view import BindingView
from workers.gateway.acked import AckedEnds
from workers.gateway.holds import RoutingChanges
from workers.gateway.inflight import InFlight
from workers.gateway.intake import ByteBudget
from workers.gateway.members import Members
from workers.gateway.metrics import Metrics
from workers.gateway.moved import Moved
from workers.gateway.producers import Translation
from workers.gateway.protocol import Request
from workers.gateway.sasl import Credentials
from workers.gateway.upstream import Upstream
from workers.gateway.usage import UsageTracker


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
    moved: Moved
    offered: dict[int, tuple[int, int]]
    """API key -> (lowest, highest) version offered to clients."""

    def offers(self, api_key: int, api_version: int) -> bool: ...

    def api_versions_response(self, request: Request) -> Any: ...

    def sasl_handshake(self, request: Request, *, authenticated: bool) -> Any: ...

    async def sasl_authenticate(
        self, request: Request, *, handshaken: bool
    ) -> tuple[Any, Credentials | None]: ...

    async def local_metadata(self, request: Request, cluster: str) -> Any: ...

    async def rewrite(self, api_key: int, body: Any, cluster: str) -> Any: ...

    def mirrored(self, snapshot: RoutingSnapshot, cluster: str, topic: str) -> bool: ...

    def issued(self, identity: Identity, producer_id: int, cluster: str) -> None: ...

    async def translation(self, identity: Identity, producer_id: int, cluster: str) -> Translation | None: ...

    def carrying_link(
        self, snapshot: RoutingSnapshot, source: str, target: str, topics: tuple[str, ...]
    ) -> Link | None: ...

    async def link_records(self, link: Link) -> LinkRecords: ...

    async def virtual_id(self, cluster: str, node: int) -> int: ...

    def address(self, virtual_id: int) -> tuple[str, int]: ...

    def upstream(
        self, cluster: str, node: int | None, credentials: Credentials | None = None
    ) -> Upstream: ...
