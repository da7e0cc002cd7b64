"""What every saga shares: its progress (a query), approvals (updates the Web UI can send), and running a
step — an activity by name — with its progress, details and phase shown as it goes.

Deterministic: no I/O, no clock but ``workflow.now()``; activities are called by name, so nothing that
talks to Kafka, ZooKeeper or SQL is imported here.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from dataclasses import asdict
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as StepTimeout

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.failures import reason
    from switchyard.sagas.ids import (
        KEYS_ATTRIBUTE,
        KIND_ATTRIBUTE,
        PHASE_ATTRIBUTE,
        SOURCE_ATTRIBUTE,
        TARGET_ATTRIBUTE,
    )
    from switchyard.sagas.requests import Decision, PartitionState, Progress, SagaResult, StepState
    from switchyard.sagas.steps import Plan, PlanRequest, SagaRecord

Result = TypeVar("Result")

RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
"""Retry what can be retried quickly, for as long as the step's schedule-to-close time allows."""
ONCE = RetryPolicy(maximum_attempts=1)
"""A Spark step while clients are held: a job cut short is not run again, lengthening the hold."""
SPARK_JOB = RetryPolicy(initial_interval=timedelta(seconds=2), backoff_coefficient=2.0, maximum_attempts=3)
"""A Spark step with no client held: tried again when its worker died or what comes before its job failed
(a broker just back, as after a failover, may refuse the first reads). The job's own failure is not
retried (``SparkJobFailed``: it would fail the same way), and a run recorded in the ledger is not run
again."""
HEARTBEAT_S = 4.0
"""Every step heartbeats each second while it runs (``activities/pulse.py``): a step whose worker died is
given to another within this, not after its whole start-to-close time — while clients may be held."""
PHASE = SearchAttributeKey.for_keyword(PHASE_ATTRIBUTE)


class SagaAbandoned(Exception):
    """The saga stops before its point of no return: refused, rejected, timed out, or a step failed."""


class SagaWorkflow:
    def __init__(self) -> None:
        self._progress = Progress(kind="", keys=[])
        self._decision: tuple[bool, Decision] | None = None
        self._approvals: list[str] = []
        self._failed_steps: dict[int, str] = {}
        """Which step each failure came from (by the exception's id), to name it in the result."""

    # ---- what operators ask and send

    @workflow.query
    def progress(self) -> Progress:
        """The current step, every step's state, and the partitions being moved."""
        return self._progress

    @workflow.update
    async def approve(self, decision: Decision) -> str:
        """Let the saga go on past the point where it waits (sendable from the Web UI)."""
        self._decision = (True, decision)
        return f"approved by {decision.by}"

    @approve.validator
    def _may_approve(self, decision: Decision) -> None:
        self._check_decision(decision)

    @workflow.update
    async def reject(self, decision: Decision) -> str:
        """Stop the saga where it waits; it undoes what it did."""
        self._decision = (False, decision)
        return f"rejected by {decision.by}"

    @reject.validator
    def _may_reject(self, decision: Decision) -> None:
        self._check_decision(decision)

    def _check_decision(self, decision: Decision) -> None:
        """Refused without touching the history: nobody waits, already decided, no approver named."""
        if self._progress.awaiting_approval is None:
            raise ValueError("this saga is not waiting for an approval")
        if self._decision is not None:
            raise ValueError("this saga has its decision already")
        if not decision.by.strip():
            raise ValueError("name who decides: by")

    # ---- running it

    def _begin(self, kind: str, keys: list[str], step_names: list[str]) -> None:
        self._progress = Progress(kind, keys, steps=[StepState(name) for name in step_names])
        workflow.upsert_search_attributes(
            [
                SearchAttributeKey.for_keyword(KIND_ATTRIBUTE).value_set(kind),
                SearchAttributeKey.for_keyword_list(KEYS_ATTRIBUTE).value_set(keys),
            ]
        )

    def _set_keys(self, keys: list[str]) -> None:
        """The keys, once a saga has found them (a topic migration finds them from the topic)."""
        self._progress.keys = list(keys)
        workflow.upsert_search_attributes(
            [SearchAttributeKey.for_keyword_list(KEYS_ATTRIBUTE).value_set(keys)]
        )

    def _set_route(self, source: str, target: str, link: str) -> None:
        self._progress.source, self._progress.target, self._progress.link = source, target, link
        workflow.upsert_search_attributes(
            [
                SearchAttributeKey.for_keyword(SOURCE_ATTRIBUTE).value_set(source),
                SearchAttributeKey.for_keyword(TARGET_ATTRIBUTE).value_set(target),
            ]
        )

    def _phase(self, phase: str, detail: str = "") -> None:
        self._progress.phase = phase
        workflow.set_current_details(f"**{phase}** {detail}".strip())
        workflow.upsert_search_attributes([PHASE.value_set(phase)])

    def _step_after(self, before: str, name: str) -> None:
        """Show step ``name``, one a saga takes only sometimes, in its place: after ``before``."""
        names = [entry.name for entry in self._progress.steps]
        at = names.index(before) + 1 if before in names else len(names)
        self._progress.steps.insert(at, StepState(name))

    def _mark(self, name: str, state: str, detail: str = "") -> None:
        for entry in self._progress.steps:
            if entry.name == name:
                entry.state, entry.detail = state, detail
                return
        self._progress.steps.append(StepState(name, state, detail))

    async def _step(
        self,
        name: str,
        activity: str,
        request: Any,
        result_type: type[Result],
        *,
        timeout_s: float,
        heartbeat_s: float = HEARTBEAT_S,
        retry: RetryPolicy = RETRY,
        give_up_s: float | None = None,
        local: bool = False,
    ) -> Result:
        """Run one step's activity, showing it as the current step; its failure is the step's. Retried
        steps stop at ``give_up_s`` (Temporal's schedule-to-close time), their last error kept.

        A ``local`` step runs on the worker running the saga, with no trip through the server before or
        after it (tens of milliseconds a step): for the steps while clients are held. A worker that
        dies there is noticed by its decision's time-out (``launch.WORKFLOW_TASK_TIMEOUT``), not by a
        heartbeat, and another runs the step again."""
        self._phase(name)
        self._mark(name, "running")
        try:
            result: Result = await (
                self._local(activity, request, result_type, timeout_s, give_up_s, retry)
                if local
                else workflow.execute_activity(
                    activity, request, result_type=result_type, retry_policy=retry,
                    start_to_close_timeout=timedelta(seconds=timeout_s),
                    schedule_to_close_timeout=timedelta(seconds=give_up_s) if give_up_s else None,
                    heartbeat_timeout=timedelta(seconds=heartbeat_s),
                )
            )  # fmt: skip
        except BaseException as exc:
            self._mark(name, "failed", reason(exc))
            self._failed_steps[id(exc)] = name
            raise
        self._mark(name, "done")
        return result

    async def _local(  # noqa: PLR0917 - a step's bounds, as _step takes them
        self,
        activity: str,
        request: Any,
        result_type: type[Result],
        timeout_s: float,
        give_up_s: float | None,
        retry: RetryPolicy,
    ) -> Result:
        """A local step, each attempt run once and retried here: the SDK's own give-up time for a local
        step is not kept in temporalio 1.35 (once an attempt has failed, the core's timer for it panics
        and the step is retried for ever) — and a step retried for ever with clients held is the worst
        outcome. Retried as ``retry`` says, until the next attempt would start past ``give_up_s``."""
        deadline = workflow.now() + timedelta(seconds=give_up_s) if give_up_s else None
        interval = retry.initial_interval or timedelta(seconds=1)
        attempt = 1
        while True:
            try:
                done: Result = await workflow.execute_local_activity(
                    activity, request, result_type=result_type, retry_policy=ONCE,
                    start_to_close_timeout=timedelta(seconds=timeout_s),
                )  # fmt: skip
                return done
            except (ActivityError, ApplicationError, StepTimeout) as exc:  # a local step's own: unwrapped
                cause = exc.cause if isinstance(exc, ActivityError) else exc
                final = isinstance(cause, ApplicationError) and cause.non_retryable
                if final or isinstance(cause, CancelledError) or attempt == retry.maximum_attempts:
                    raise
                if deadline is not None and workflow.now() + interval >= deadline:
                    raise
            await workflow.sleep(interval)
            attempt += 1
            interval = min(interval * retry.backoff_coefficient, retry.maximum_interval or interval * 100)

    def _at(self, exc: BaseException) -> str:
        """`` at <step>`` for a failure that came from a step, else nothing."""
        name = self._failed_steps.get(id(exc))
        return f" at {name}" if name else ""

    async def _plan(self, request: PlanRequest, result: SagaResult) -> Plan:
        """The plan step; a refusal ends the saga with the reason, a plan sets where the saga goes."""
        plan = await self._step("plan", steps.PLAN, request, Plan, timeout_s=60, give_up_s=300)
        if plan.refusal is not None:
            result.detail = plan.refusal
            await self._fail(result, "SwitchRefused")
        result.source, result.target, result.link = plan.source, plan.target, plan.link
        result.partitions = len(plan.partitions)
        self._set_route(plan.source, plan.target, plan.link)
        self._progress.partitions = [PartitionState(p.topic, p.partition) for p in plan.partitions]
        return plan

    async def _await_approval(self, where: str, timeout_s: float) -> Decision:
        """Wait for an operator's decision at ``where``; a rejection or no decision in time abandons."""
        self._asking(where, timeout_s)
        try:
            await workflow.wait_condition(
                lambda: self._decision is not None, timeout=timedelta(seconds=timeout_s)
            )
        except TimeoutError:
            raise SagaAbandoned(f"no approval {where} within {timeout_s:g}s") from None
        finally:
            self._progress.awaiting_approval = None
        return await self._take_decision(where)

    def _asking(self, where: str, timeout_s: float) -> None:
        """Show that the saga waits for a decision at ``where``, and how to send one."""
        self._progress.awaiting_approval = where
        saga = workflow.info().workflow_id
        self._phase(
            "awaiting approval",
            f"{where}, at most {timeout_s:g}s.\n\nApprove: send the Update `approve` from this page with "
            '`{"by": "<your name>", "reason": "<why>"}`, or `reject` to stop it and undo what it did; '
            f"or run `switchyard sagas approve '{saga}'`.",
        )

    async def _take_decision(self, where: str) -> Decision:
        """The decision sent at ``where``, recorded; a rejection abandons."""
        assert self._decision is not None
        approved, decision = self._decision
        self._decision = None
        said = f"{'approved' if approved else 'rejected'} {where} by {decision.by}"
        self._approvals.append(f"{said}: {decision.reason}" if decision.reason else said)
        await self._record("approved" if approved else "rejected", actor=decision.by, reason=decision.reason)
        if not approved:
            raise SagaAbandoned(f"{said}" + (f": {decision.reason}" if decision.reason else ""))
        return decision

    async def _record(self, event: str, **fields: Any) -> None:
        info = workflow.info()
        record = SagaRecord(info.workflow_id, info.run_id, self._progress.kind, event, **fields)
        await workflow.execute_activity(
            steps.RECORD, record, start_to_close_timeout=timedelta(seconds=30), retry_policy=RETRY,
            schedule_to_close_timeout=timedelta(minutes=5),
        )  # fmt: skip

    async def _finish(self, result: SagaResult) -> SagaResult:
        result.steps = list(self._progress.steps)
        result.approvals = list(self._approvals)
        self._phase(result.outcome, result.detail)
        await self._record(
            "ended", outcome=result.outcome, detail=result.detail, result=json.dumps(asdict(result))
        )
        return result

    async def _fail(self, result: SagaResult, error_type: str) -> None:
        """End as failed in Temporal's eyes (the UI shows it), with the whole result as the failure's
        details, after recording it."""
        await self._finish(result)
        raise ApplicationError(result.detail, asdict(result), type=error_type, non_retryable=True)


async def guarded(guard: Awaitable[Any], work: Awaitable[Any]) -> tuple[Any, Any]:
    """Run ``work`` beside ``guard``, whose failure names the cause where the work's names a symptom: a
    failed guard cancels the work at once, and a failed work waits for the guard's verdict, raising the
    guard's error if it has one, else its own."""
    checking, working = asyncio.ensure_future(guard), asyncio.ensure_future(work)
    checking.add_done_callback(lambda _: working.cancel() if _failed(checking) else None)
    try:
        worked = await working
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError) and not _failed(checking):  # the saga is cancelled
            checking.cancel()
            await asyncio.gather(checking, return_exceptions=True)
            raise
        await asyncio.gather(checking, return_exceptions=True)
        if not _failed(checking):
            raise
    else:
        return await checking, worked
    raise checking.exception()  # type: ignore[misc]  # outside the handler: its cause chain stays its own


def _failed(task: asyncio.Future[Any]) -> bool:
    return task.done() and not task.cancelled() and task.exception() is not None


def millis(delta: timedelta) -> int:
    return int(delta.total_seconds() * 1000)
