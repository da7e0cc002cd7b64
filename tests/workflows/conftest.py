"""Sagas against the session's real Temporal server, with every activity replaced by a scripted stand-in
registered under the same name: the workflows' decisions, order and compensation, without Kafka.

Set ``SWITCHYARD_CAPTURE_HISTORIES=<dir>`` to write each run's history there as JSON (how the committed
histories under ``histories/`` were made).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.client import Client, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from switchyard import launch, temporal
from switchyard.config import Config
from switchyard.sagas import evacuations, steps
from switchyard.sagas.drills import (
    CanaryFindings,
    CanaryRequest,
    DrillSetup,
    DrillState,
    GroupResume,
    PartitionFigures,
    PrepareRequest,
    TidyRequest,
    Timeline,
)
from switchyard.sagas.evacuations import (
    CopyClusterRequest,
    EvacuationBatch,
    EvacuationPlan,
    EvacuationPlanRequest,
    RetiredEvacuated,
    RetireEvacuatedRequest,
)
from switchyard.sagas.requests import PartitionLoss, SagaResult
from switchyard.sagas.steps import (
    Acked,
    AcksRequest,
    Aged,
    AgingCheck,
    Blocked,
    BlockRequest,
    CopyChecked,
    CopyCheckRequest,
    Drained,
    DrainRequest,
    Fence,
    FenceRequest,
    Flipped,
    FlipRequest,
    GroupsSynced,
    GroupSyncRequest,
    LinkSplit,
    LockRequest,
    Loss,
    LossRequest,
    LostWindowOutcome,
    LostWindowRequest,
    MigrationLink,
    MigrationLinkRequest,
    OriginChecked,
    OriginEnds,
    OriginTopicChecked,
    OriginTopicStep,
    Partition,
    PartitionEnd,
    PartitionHeld,
    PartitionMigrated,
    PartitionPlan,
    PartitionPlanRequest,
    PartitionStep,
    Plan,
    PlanRequest,
    Probe,
    ProbeRequest,
    RetirableTopic,
    Retired,
    RetireRequest,
    Reversed,
    ReverseRequest,
    SagaRecord,
    Settled,
    SettleRequest,
    Split,
    SplitRequest,
    TopicUser,
    TopicUsers,
    Unblocked,
    UnblockRequest,
    UsersRequest,
    VerifyOutcome,
    VerifyRequest,
)
from switchyard.stack import Stack
from workers.worker.registry import WORKFLOWS

ENDS = [PartitionEnd("orders", 0, 100), PartitionEnd("orders", 1, 80)]


@dataclass
class Script:
    """Stand-ins for every activity: they answer what a saga expects, log each call in order, and fail
    where the test says (``fail[name]``), or wait until released (``hold[name]``)."""

    calls: list[str] = field(default_factory=list)
    requests: dict[str, list[Any]] = field(default_factory=dict)
    fail: dict[str, Exception | list[Exception]] = field(default_factory=dict)
    hold: dict[str, asyncio.Event] = field(default_factory=dict)
    refusal: str | None = None
    reachable: bool = False
    bound: bool = True
    """Whether the plan finds the keys bound (else at epoch 0)."""
    drained_from: list[PartitionEnd] = field(default_factory=lambda: list(ENDS))
    """The source ends the drain reads when it starts (where the fence's window opens)."""
    overrun: int = 0
    """Records a partition migration's origin check finds past the end offset."""
    call_off: PartitionMigrated = field(default_factory=lambda: PartitionMigrated(22, 2, -1, None))
    """What calling a partition migration off finds (an end offset: it had taken effect after all)."""
    split: LinkSplit | None = None
    """A split the plan finds the keys need (their topics then move along ``split.new_link``)."""
    split_given_back: bool = True
    """What undoing the split finds: the new link was not made yet (else it stays)."""

    def activities(self) -> list[Callable[..., Any]]:
        answers: dict[str, tuple[type, Callable[[Any], Any]]] = {
            steps.PLAN: (PlanRequest, self._plan),
            steps.PROBE: (ProbeRequest, lambda r: Probe(r.cluster, self.reachable, "stand-in")),
            steps.LOCK: (LockRequest, lambda _: None),
            steps.UNLOCK: (LockRequest, lambda _: None),
            steps.BLOCK: (BlockRequest, lambda _: Blocked(10, 2)),
            steps.UNBLOCK: (UnblockRequest, lambda r: Unblocked(11 if r.block_epoch else 0)),
            steps.SETTLE: (SettleRequest, lambda _: Settled(0.0)),
            steps.FENCE: (FenceRequest, lambda _: Fence(ENDS)),
            steps.DRAIN: (DrainRequest, lambda r: Drained(ENDS, 180, r.ends or self.drained_from)),
            steps.SYNC_GROUPS: (GroupSyncRequest, lambda _: GroupsSynced(1, 1, [], ["billing"])),
            steps.CHECK_COPY: (CopyCheckRequest, lambda _: CopyChecked("clean")),
            steps.VERIFY: (VerifyRequest, lambda r: VerifyOutcome(r.run_id, "clean", 180, [], [])),
            steps.FLIP: (FlipRequest, lambda _: Flipped(12, ENDS)),
            steps.AWAIT_ACKS: (AcksRequest, lambda r: Acked(r.epoch, 2)),
            steps.REVERSE: (ReverseRequest, lambda r: Reversed(r.new_link)),
            steps.SPLIT: (SplitRequest, lambda r: Split(r.split.new_link, 9)),
            steps.UNSPLIT: (SplitRequest, lambda _: self.split_given_back),
            steps.MEASURE_LOSS: (LossRequest, self._loss),
            steps.FIND_LOST_WINDOW: (
                LostWindowRequest,
                lambda r: LostWindowOutcome(r.run_id, 14, {"orders[0]": 7, "orders[1]": 7}),
            ),
            steps.RECORD: (SagaRecord, lambda _: None),
            steps.TOPIC_USERS: (UsersRequest, self._users),
            steps.PREPARE_MIGRATION: (MigrationLinkRequest, lambda r: MigrationLink(r.link, 2, 180)),
            steps.RETIRE_TOPIC: (RetireRequest, lambda r: Retired(r.links, r.delete_topic)),
            steps.DRILL_PREPARE: (PrepareRequest, _drill_setup),
            steps.DRILL_CANARY: (CanaryRequest, lambda _: _canary()),
            steps.DRILL_TIDY: (TidyRequest, lambda r: list(r.links)),
            steps.PLAN_PARTITION: (PartitionPlanRequest, self._partition_plan),
            steps.HOLD_PARTITION: (PartitionStep, lambda _: PartitionHeld(20, 2, 0)),
            steps.MIGRATE_PARTITION: (PartitionStep, lambda _: PartitionMigrated(21, 2, 1200, 1200)),
            steps.CALL_OFF_PARTITION: (PartitionStep, lambda _: self.call_off),
            steps.CHECK_ORIGIN: (PartitionStep, lambda _: OriginChecked(1200 + self.overrun, self.overrun)),
            steps.RECORD_ORIGIN_ENDS: (AgingCheck, lambda _: OriginEnds([_AWAY])),
            steps.AGE_MIGRATIONS: (AgingCheck, lambda _: _aged()),
            steps.CHECK_ORIGIN_TOPIC: (OriginTopicStep, lambda _: OriginTopicChecked(2, self.refusal)),
            steps.RETIRE_ORIGIN_TOPIC: (OriginTopicStep, lambda _: OriginTopicChecked(2, deleted=True)),
            evacuations.PLAN_EVACUATION: (EvacuationPlanRequest, self._evacuation_plan),
            evacuations.COPY_CLUSTER: (CopyClusterRequest, lambda r: MigrationLink(r.link, 9, 900)),
            evacuations.RETIRE_EVACUATED: (
                RetireEvacuatedRequest,
                lambda r: RetiredEvacuated(r.links, r.topics),
            ),
        }
        return [self._stand_in(name, kind, answer) for name, (kind, answer) in answers.items()]

    def _stand_in(self, name: str, kind: type, answer: Callable[[Any], Any]) -> Callable[..., Any]:
        async def run(request: Any) -> Any:
            if name != steps.RECORD:
                self.calls.append(name)
            self.requests.setdefault(name, []).append(request)
            if name in self.hold:  # heartbeating meanwhile, as a real step's pulse does
                while not self.hold[name].is_set():
                    activity.heartbeat()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.hold[name].wait(), 1)
            failing = self.fail.get(name)
            if isinstance(failing, list):  # one failure per attempt, then the answer
                failing = failing.pop(0) if failing else None
            if failing is not None:
                raise failing
            answered = answer(request)
            return await answered if inspect.isawaitable(answered) else answered

        run.__annotations__ = {"request": kind, "return": Any}
        return activity.defn(name=name)(run)

    @staticmethod
    def _loss(request: LossRequest) -> Loss:
        return Loss([PartitionLoss(e.topic, e.partition, e.end + 7, e.end) for e in request.final])

    def _users(self, request: UsersRequest) -> TopicUsers:
        if self.refusal:
            return TopicUsers(request.topic, refusal=self.refusal)
        users = [TopicUser("shop", "produce"), TopicUser("billing", "consume", "billing")]
        keys = ["billing##billing", f"billing#{request.topic}", f"shop#{request.topic}"]
        return TopicUsers(request.topic, users, keys, "primary", 2, ["stand-in users"])

    def _evacuation_plan(self, request: EvacuationPlanRequest) -> EvacuationPlan:
        """Three batches of one application each, and a topic nobody uses."""
        plan = EvacuationPlan(request.source, request.target, request.link, unused=["idle"])
        if self.refusal:
            plan.cannot_move.append(self.refusal)
            return plan
        plan.batches = [
            EvacuationBatch(n, [f"{app}-events"], [app], [app], 3, 10 * n)
            for n, app in enumerate(("shop", "billing", "audit"), start=1)
        ]
        return plan

    def _partition_plan(self, request: PartitionPlanRequest) -> PartitionPlan:
        if self.refusal:
            return PartitionPlan(refusal=self.refusal)
        return PartitionPlan("primary", ["stand-in plan"])

    def _plan(self, request: Any) -> Plan:
        epochs = {k: 3 if self.bound else 0 for k in request.keys}
        if self.refusal:
            return Plan(request.keys, epochs, refusal=self.refusal)
        return Plan(
            request.keys, epochs, "primary", "standby",
            self.split.new_link if self.split else "primary-to-standby",
            [Partition("orders", 0), Partition("orders", 1)], ["stand-in plan"], split=self.split,
        )  # fmt: skip


_AWAY = "orders[2]: its origin does not answer yet"


def _aged() -> Aged:
    return Aged(
        ["orders[0]: aged, its origin's log starts at 1200, at or past the origin's end 1200"],
        ["orders[2]: not aged, its origin's end is not recorded yet (the origin is away)"],
        [RetirableTopic("primary", "orders", 2)],
    )


def _drill_setup(request: PrepareRequest) -> DrillSetup:
    topic = f"drill-{request.name}-{request.tag}"
    return DrillSetup(
        f"drill-{request.name}", topic, topic, f"{topic}-canary", "primary", "standby", "gateway:9192"
    )


async def _canary() -> CanaryFindings:
    """Tells its drill it is live, asks until the switches are over, and saw nothing go wrong."""
    info = activity.info()
    drill = activity.client().get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
    await drill.signal("canary_live")
    while not (state := await drill.query("drill_state", result_type=DrillState)).done:
        activity.heartbeat()
        await asyncio.sleep(0.1)
    spans = [(kind, 0.0, 1.0) for kind, _, _ in state.switches]
    return CanaryFindings(
        sent=10, acked=10, failed=0, longest_wait_s=0.5, waits_s=[0.5 for _ in spans],
        partitions=[PartitionFigures(0, 10, 0, 0, 0)], groups=[GroupResume("g", True, 0, 0, 0)],
        out_of_order=None, stopped_by="switches over",
        timeline=Timeline("2026-11-24T00:00:00+00:00", 100, [1], [1], switches=spans),
    )  # fmt: skip


def refused(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind, non_retryable=True)


@pytest.fixture(scope="session")
def temporal_ready(stack: Stack, stack_config: Config) -> Config:
    """The session's Temporal server, with the search attributes sagas set."""

    async def register() -> None:
        await temporal.register_search_attributes(await temporal.connect(stack_config))

    asyncio.run(register())
    return stack_config


@dataclass
class Sagas:
    """Runs sagas on a worker of the test's own (its own task queue) with the script's activities."""

    config: Config
    script: Script = field(default_factory=Script)
    queue: str = field(default_factory=lambda: f"saga-test-{uuid.uuid4().hex[:8]}")
    client: Client | None = None

    def run(self, scenario: Callable[[Sagas], Any]) -> Any:
        """Run ``scenario(self)`` (a coroutine function) with a worker serving the test's task queue."""

        async def go() -> Any:
            self.client = await temporal.connect(self.config)
            worker = Worker(
                self.client, task_queue=self.queue, workflows=WORKFLOWS, activities=self.script.activities()
            )
            async with worker:
                return await scenario(self)

        return asyncio.run(go())

    async def start(
        self, workflow: str, request: Any, *, workflow_id: str | None = None, result_type: type = SagaResult
    ) -> WorkflowHandle[Any, Any]:
        """Start ``workflow`` as ``launch`` starts every saga: its decision time-out is the production one,
        which is also how often a query reaches a saga whose held (local) step is running (the worker
        answers it when it extends the decision, at four fifths of the time-out; Temporal's default of
        10 s left a progress query unanswered for over 10 s on a loaded machine)."""
        assert self.client is not None
        return await self.client.start_workflow(
            workflow, request, id=workflow_id or f"test-{uuid.uuid4().hex[:10]}", task_queue=self.queue,
            result_type=result_type, task_timeout=launch.WORKFLOW_TASK_TIMEOUT,
        )  # fmt: skip


@pytest.fixture
def sagas(temporal_ready: Config) -> Sagas:
    return Sagas(temporal_ready)


async def capture(handle: WorkflowHandle[Any, Any], name: str) -> None:
    """Write the run's history to $SWITCHYARD_CAPTURE_HISTORIES/<name>.json when asked to."""
    directory = os.environ.get("SWITCHYARD_CAPTURE_HISTORIES")
    if not directory:
        return
    history = await handle.fetch_history()
    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / f"{name}.json").write_text(history.to_json())
