"""The receiver's sagas and routing state on the real services: Temporal for the sagas
(:class:`TemporalSagas`), ZooKeeper for the keys bound to a cluster (:class:`ZooKeeperKeys`).

Error handling: every call is bounded by ``webhook.call_timeout_s``; a service that does not answer in
time or refuses the call is raised as :class:`~switchyard.errors.StackError` (Temporal) or
:class:`~switchyard.errors.RoutingUnavailable` (ZooKeeper), which the receiver answers with 503 — the
one answer after which Alertmanager sends the notification again.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from temporalio.client import (
    WorkflowContinuedAsNewError,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError, RPCStatusCode

from switchyard import launch, temporal
from switchyard.alerts.dispatch import SagaState
from switchyard.config import Config
from switchyard.errors import RoutingUnavailable, StackError, TemporalRefused
from switchyard.launch import SagaFailed
from switchyard.routing.layout import Layout
from switchyard.routing.snapshot import read_snapshot
from switchyard.routing.zk import connect, disconnect
from switchyard.sagas.requests import Decision, Kind, Progress, SwitchRequest

if TYPE_CHECKING:
    from temporalio.client import Client

PASSING = frozenset({
    RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.RESOURCE_EXHAUSTED,
    RPCStatusCode.ABORTED, RPCStatusCode.CANCELLED,
})  # fmt: skip
"""What Temporal answers while it is away or overloaded: the receiver answers 503, Alertmanager sends the
notification again. Any other refusal (an unknown namespace, permission denied) is answered 500 naming it:
sending it again would change nothing."""
QUERY_TIMEOUT_S = 5.0
"""The ``progress`` query of a saga no worker has taken up yet waits for one; past this it counts as
"not waiting for an approval"."""


class TemporalSagas:
    """The sagas on Temporal: started through :func:`switchyard.launch.start`, like the CLI's; one client
    for the look-ups, connected at the first and kept."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.timeout_s = config.webhook.call_timeout_s
        self._client: Client | None = None

    async def start(self, kind: Kind, saga: str, request: SwitchRequest, memo: Mapping[str, Any]) -> bool:
        async with self._calling("start a saga"):
            try:
                await launch.start(self.config, kind, saga, request, memo=memo)
            except SagaFailed:  # one runs under the id: started a moment ago, by someone else
                return False
        return True

    async def state(self, saga: str) -> SagaState | None:
        async with self._calling("describe a saga"):
            handle = (await self._connected()).get_workflow_handle(saga)
            try:
                described = await handle.describe()
            except RPCError as exc:
                if exc.status is RPCStatusCode.NOT_FOUND:
                    return None
                raise
            memo = dict(await described.memo())
            status = described.status.name.lower() if described.status else "unknown"
            if described.status is WorkflowExecutionStatus.RUNNING:
                return SagaState(saga, status, awaiting_approval=await self._awaiting(handle), memo=memo)
            run = (await self._connected()).get_workflow_handle(saga, run_id=described.run_id)
            return SagaState(
                saga, status, described.close_time, memo=memo, approvals=await self._approvals(run)
            )

    async def reject(self, saga: str, decision: Decision) -> bool:
        async with self._calling("reject a saga"):
            handle = (await self._connected()).get_workflow_handle(saga)
            try:
                await handle.execute_update("reject", decision, result_type=str)
            except WorkflowUpdateFailedError:  # its validator: not waiting, or decided already
                return False
            except RPCError as exc:
                if exc.status is RPCStatusCode.NOT_FOUND:  # it ended meanwhile
                    return False
                raise
        return True

    async def ready(self) -> None:
        async with self._calling("check its health"):
            client = await self._connected()
            await client.service_client.check_health(timeout=timedelta(seconds=self.timeout_s))

    async def _connected(self) -> Client:
        if self._client is None:
            self._client = await temporal.connect(self.config)
        return self._client

    async def _awaiting(self, handle: WorkflowHandle[Any, Any]) -> str | None:
        try:
            progress: Progress = await handle.query(
                "progress", result_type=Progress, rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S)
            )
        except (WorkflowQueryFailedError, RPCError):
            return None
        return progress.awaiting_approval

    @staticmethod
    async def _approvals(run: WorkflowHandle[Any, Any]) -> tuple[str, ...]:
        """The ended run's approvals, from its result (a saga that failed carries it in its failure)."""
        try:
            result = await run.result(follow_runs=False)
        except WorkflowFailureError as exc:
            details = getattr(exc.cause, "details", None) or ()
            result = details[0] if details else None
        except WorkflowContinuedAsNewError:
            result = None
        approvals = result.get("approvals") if isinstance(result, dict) else None
        return tuple(str(a) for a in approvals or ())

    @asynccontextmanager
    async def _calling(self, what: str) -> AsyncIterator[None]:
        """Bound the call in time; Temporal's errors become StackError, which the receiver answers 503."""
        address = self.config.temporal.address
        try:
            async with asyncio.timeout(self.timeout_s):
                yield
        except TimeoutError:
            raise StackError(
                f"Temporal at {address} did not {what} within webhook.call_timeout_s ({self.timeout_s:g}s)"
            ) from None
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            raise StackError(f"Temporal at {address} could not {what}: {exc}") from exc
        except RPCError as exc:
            if exc.status in PASSING:
                raise StackError(f"Temporal at {address} could not {what}: {exc.status.name}: {exc}") from exc
            raise TemporalRefused(
                f"Temporal at {address} refused to {what}: {exc.status.name}: {exc}"
            ) from exc


class ZooKeeperKeys:
    """The keys bound to a cluster, read from one snapshot of the routing tree; the ZooKeeper session is
    opened at the first read (a receiver whose policies name no cluster never needs one) and kept."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.timeout_s = config.webhook.call_timeout_s
        self.layout = Layout(config.zookeeper.root)
        self._zk: KazooClient | None = None
        self._lock = threading.Lock()

    async def keys_on(self, cluster: str) -> list[str]:
        try:
            return await asyncio.wait_for(asyncio.to_thread(self._read, cluster), self.timeout_s)
        except TimeoutError:
            raise RoutingUnavailable(
                f"ZooKeeper at {self.config.zookeeper.connect} did not answer within webhook.call_timeout_s "
                f"({self.timeout_s:g}s)"
            ) from None

    def _read(self, cluster: str) -> list[str]:
        with self._lock:
            if self._zk is None:
                self._zk = connect(self.config, timeout_s=self.timeout_s)
            zk = self._zk
        snapshot = read_snapshot(zk, self.layout)
        return sorted(str(key) for key, bound in snapshot.bindings.items() if bound.cluster == cluster)

    def close(self) -> None:
        with self._lock:
            if self._zk is not None:
                disconnect(self._zk)
                self._zk = None
