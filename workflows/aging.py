"""The partition migrations' aging check, run by a Temporal Schedule, and the retirement of an origin
topic it finds unread.

``MigrationAging``: record the true end of each fault migration's origin that answers again → mark aged
each migration whose origin holds nothing below its end any more → for each origin topic every
partition of which aged away from it, start ``RetireOriginTopic`` (once: one under way is left alone).

``RetireOriginTopic``: check (every partition aged from the origin, no link copying it) → approval
(always: a deletion is not undone) → delete the topic on the origin, checked again first. A rejection
or no decision in time keeps the topic; a refusal or a failed step deletes nothing. Either way its
outcome is recorded, and the scheduled check does not ask again (``switchyard migrations retire``
does).
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import WorkflowAlreadyStartedError

from workflows.base import HEARTBEAT_S, RETRY, Result, SagaAbandoned, SagaWorkflow

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.failures import reason
    from switchyard.sagas.ids import origin_retirement_id
    from switchyard.sagas.requests import (
        AgingReport,
        AgingRequest,
        Kind,
        OriginRetirementRequest,
        SagaResult,
    )
    from switchyard.sagas.steps import Aged, AgingCheck, OriginEnds, OriginTopicChecked, OriginTopicStep

RETIRE_STEPS = ["check", "delete topic"]


@workflow.defn(name="MigrationAging")
class MigrationAging:
    @workflow.run
    async def run(self, request: AgingRequest) -> AgingReport:
        check = AgingCheck(request.actor)
        ends = await self._check(steps.RECORD_ORIGIN_ENDS, check, OriginEnds)
        aged = await self._check(steps.AGE_MIGRATIONS, check, Aged)
        report = AgingReport(ends.recorded, aged.aged, aged.waiting)
        for ripe in aged.retirable:
            retire = OriginRetirementRequest(
                ripe.origin, ripe.topic, request.approval_timeout_s, actor=request.actor,
                reason=f"all {ripe.partitions} partitions aged away from {ripe.origin}",
            )  # fmt: skip
            saga = origin_retirement_id(ripe.origin, ripe.topic)
            try:
                await workflow.start_child_workflow(
                    "RetireOriginTopic", retire, id=saga,
                    parent_close_policy=workflow.ParentClosePolicy.ABANDON,
                )  # fmt: skip
            except WorkflowAlreadyStartedError:
                report.retirements.append(f"{saga}: under way already")
                continue
            report.retirements.append(f"{saga}: started, waits for an approval")
        workflow.set_current_details(
            f"{len(report.aged)} aged, {len(report.waiting)} not yet, "
            f"{len(report.retirements)} origin topics to retire"
        )
        return report

    @staticmethod
    async def _check(activity: str, check: AgingCheck, result_type: type[Result]) -> Result:
        result: Result = await workflow.execute_activity(
            activity, check, result_type=result_type, retry_policy=RETRY,
            start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=HEARTBEAT_S),
            schedule_to_close_timeout=timedelta(minutes=15),
        )  # fmt: skip
        return result


@workflow.defn(name="RetireOriginTopic")
class RetireOriginTopic(SagaWorkflow):
    @workflow.run
    async def run(self, request: OriginRetirementRequest) -> SagaResult:
        saga = workflow.info().workflow_id
        name = f"{request.topic}@{request.origin}"
        self._begin(Kind.ORIGIN_RETIREMENT, [name], RETIRE_STEPS)
        why = f"retire {request.topic} from {request.origin}: {request.reason}".strip(": ")
        await self._record("started", actor=request.actor, reason=why)
        result = SagaResult(saga, Kind.ORIGIN_RETIREMENT, [name], "refused", source=request.origin)
        at = OriginTopicStep(saga, request.origin, request.topic)
        try:
            checked = await self._step(
                "check", steps.CHECK_ORIGIN_TOPIC, at, OriginTopicChecked, timeout_s=60, give_up_s=300
            )
        except Exception as exc:  # its outcome recorded: the schedule does not start it again
            result.detail = f"not checked: {reason(exc)}"
            await self._fail(result, "MigrationAbandoned")
        if checked.refusal is not None:
            result.detail = checked.refusal
            await self._fail(result, "SwitchRefused")
        if checked.partitions == 0:
            self._mark("delete topic", "skipped", "gone already")
            result.outcome = "retired"
            result.detail = f"{request.topic} is gone from {request.origin} already"
            return await self._finish(result)
        try:
            await self._await_approval(
                f"before {request.topic} ({checked.partitions} partitions, all aged) is deleted from "
                f"{request.origin}",
                request.approval_timeout_s,
            )
        except SagaAbandoned as exc:
            self._mark("delete topic", "skipped", reason(exc))
            result.outcome = "kept"
            result.detail = f"{request.topic} stays on {request.origin}: {reason(exc)}"
            return await self._finish(result)
        try:
            deleted = await self._step(
                "delete topic", steps.RETIRE_ORIGIN_TOPIC, at, OriginTopicChecked, timeout_s=120,
                give_up_s=600,
            )  # fmt: skip
        except Exception as exc:
            result.detail = f"not deleted: {reason(exc)}"
            await self._fail(result, "MigrationAbandoned")
        if deleted.refusal is not None:
            result.detail = f"not deleted: {deleted.refusal}"
            await self._fail(result, "SwitchRefused")
        result.outcome = "retired"
        result.detail = (
            f"{request.topic} deleted from {request.origin}" if deleted.deleted
            else f"{request.topic} was gone from {request.origin} already"
        )  # fmt: skip
        return await self._finish(result)
