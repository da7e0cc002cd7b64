"""The sagas and the routing state in memory, for tests of the receiver: the same rules as Temporal's where
the receiver relies on them (one running run per saga id, an id reusable once its run ended, a rejection
taken only while a saga waits for an approval), and switches to make either unreachable."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from switchyard.alerts.dispatch import SagaState
from switchyard.errors import RoutingUnavailable, StackError
from switchyard.sagas.requests import ApprovalPoint, Decision, Kind, SwitchRequest

_WHERE = {ApprovalPoint.BEFORE_BLOCK: "before the block", ApprovalPoint.BEFORE_FLIP: "before the flip"}


@dataclass
class Run:
    saga: str
    kind: Kind
    request: SwitchRequest
    memo: dict[str, Any]
    started_at: datetime
    status: str = "running"
    closed_at: datetime | None = None
    awaiting_approval: str | None = None
    approvals: list[str] = field(default_factory=list)


class InMemorySagas:
    """A :class:`~switchyard.alerts.dispatch.SagaPort` whose sagas wait where their policy says until a
    test ends them (:meth:`finish`) or a rejection does."""

    def __init__(self, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.clock = clock
        self.runs: list[Run] = []
        """Every run started, oldest first."""
        self.reachable = True

    def latest(self, saga: str) -> Run | None:
        return next((r for r in reversed(self.runs) if r.saga == saga), None)

    def finish(self, saga: str, status: str = "completed") -> None:
        run = self.latest(saga)
        assert run is not None, f"no saga {saga}"
        assert run.status == "running", f"saga {saga} is {run.status} already"
        run.status, run.closed_at, run.awaiting_approval = status, self.clock(), None

    async def start(self, kind: Kind, saga: str, request: SwitchRequest, memo: Mapping[str, Any]) -> bool:
        self._check()
        last = self.latest(saga)
        if last is not None and last.status == "running":
            return False
        approval = request.policy.approval
        where = None
        if approval is not ApprovalPoint.NONE:  # a failover waits before its flip whichever point is named
            where = "before the flip" if kind is Kind.FAILOVER else _WHERE[approval]
        self.runs.append(Run(saga, kind, request, dict(memo), self.clock(), awaiting_approval=where))
        return True

    async def state(self, saga: str) -> SagaState | None:
        self._check()
        run = self.latest(saga)
        if run is None:
            return None
        return SagaState(
            saga, run.status, run.closed_at, run.awaiting_approval, dict(run.memo), tuple(run.approvals)
        )

    async def reject(self, saga: str, decision: Decision) -> bool:
        self._check()
        run = self.latest(saga)
        if run is None or run.status != "running" or run.awaiting_approval is None:
            return False
        said = f"rejected {run.awaiting_approval} by {decision.by}"
        run.approvals.append(f"{said}: {decision.reason}" if decision.reason else said)
        run.status, run.closed_at, run.awaiting_approval = "failed", self.clock(), None
        return True

    async def ready(self) -> None:
        self._check()

    def _check(self) -> None:
        if not self.reachable:
            raise StackError("Temporal at memory cannot be reached")


class StaticKeys:
    """A :class:`~switchyard.alerts.dispatch.KeySource` over a fixed map of binding key to cluster."""

    def __init__(self, bindings: Mapping[str, str] | None = None) -> None:
        self.bindings = dict(bindings or {})
        self.reachable = True

    async def keys_on(self, cluster: str) -> list[str]:
        if not self.reachable:
            raise RoutingUnavailable("ZooKeeper at memory did not answer")
        return sorted(k for k, c in self.bindings.items() if c == cluster)
