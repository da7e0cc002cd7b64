"""Partition migration (seed 004): one partition's writes, and its reads from its end offset on, move to
another cluster at the gateways; its records stay where they are.

plan → approval? → hold writes (every gateway holds the partition's writes) → take effect (the origin's
exact end read and recorded as the end offset, writes released to the target) → check the origin

Until it takes effect, a failure (or a cancellation, a rejection, an approval not given in time) calls
the migration off: its record removed, the held writes released where they were. Once in effect the
saga only goes forward: the end offset is fixed for good. A fault migration (the origin unreachable)
holds nothing and takes effect at once, its end offset chosen beyond anything the origin acknowledged.
"""

from __future__ import annotations

from temporalio import workflow

from workflows.base import SagaAbandoned, SagaWorkflow, millis
from workflows.compensation import Compensations

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.failures import reason
    from switchyard.sagas.requests import ApprovalPoint, Kind, PartitionMigrationRequest, SagaResult
    from switchyard.sagas.steps import (
        OriginChecked,
        PartitionHeld,
        PartitionMigrated,
        PartitionPlan,
        PartitionPlanRequest,
        PartitionStep,
    )

STEPS = ["plan", "hold writes", "take effect", "check origin"]
FOREVER_S = 7 * 24 * 3600.0


@workflow.defn(name="PartitionMigration")
class PartitionMigration(SagaWorkflow):
    @workflow.run
    async def run(self, request: PartitionMigrationRequest) -> SagaResult:
        saga = workflow.info().workflow_id
        name = f"{request.topic}[{request.partition}]"
        self._begin(Kind.PARTITION_MIGRATION, [name], STEPS)
        why = f"migrate partition {name} to {request.target}: {request.reason}".strip(": ")
        await self._record("started", actor=request.actor, reason=why)
        result = SagaResult(saga, Kind.PARTITION_MIGRATION, [name], "refused", target=request.target)
        ask = PartitionPlanRequest(saga, request.topic, request.partition, request.target, request.fault)
        plan = await self._step("plan", steps.PLAN_PARTITION, ask, PartitionPlan, timeout_s=60, give_up_s=300)
        if plan.refusal is not None:
            result.detail = plan.refusal
            await self._fail(result, "SwitchRefused")
        result.source = plan.origin
        self._set_route(plan.origin, request.target, "")
        policy = request.policy
        at = PartitionStep(
            saga, request.topic, request.partition, plan.origin, request.target, policy.acks_timeout_s,
            request.ignore_origin, request.fault, policy.fault_margin,
        )  # fmt: skip
        started = workflow.now()
        undo = Compensations()
        try:
            if policy.approval is not ApprovalPoint.NONE:
                await self._await_approval("before the partition moves", policy.approval_timeout_s)
            undo.add("call off", lambda: self._call_off(at))
            if request.fault:
                self._mark("hold writes", "skipped", "a fault migration: its origin is unreachable")
            else:
                held = await self._step(
                    "hold writes", steps.HOLD_PARTITION, at, PartitionHeld,
                    timeout_s=policy.acks_timeout_s + 30, give_up_s=policy.acks_timeout_s + 60,
                )  # fmt: skip
                result.block_epoch = held.epoch
            migrated = await self._step(
                "take effect", steps.MIGRATE_PARTITION, at, PartitionMigrated,
                timeout_s=policy.acks_timeout_s + 60, give_up_s=policy.acks_timeout_s + 120,
            )  # fmt: skip
        except BaseException as exc:
            undone = await undo.run()
            took = [r for _, r in undone if isinstance(r, PartitionMigrated) and r.end_offset >= 0]
            if not took:  # called off: its writes go on to the origin
                failed = [f"{n}: {reason(e)}" for n, e in undone if isinstance(e, BaseException)]
                result.outcome = "compensated"
                result.detail = f"{name} stays on {plan.origin}: {reason(exc)}{self._at(exc)}" + (
                    f"; compensation failed ({'; '.join(failed)})" if failed else ""
                )
                await self._fail(
                    result, "SwitchAbandoned" if isinstance(exc, SagaAbandoned) else "MigrationAbandoned"
                )
            migrated = took[0]  # it took effect after all (its acknowledgement was what failed): forward
            self._mark("take effect", "done", f"in effect at epoch {migrated.epoch} ({reason(exc)})")
        result.outcome = "migrated"
        result.flip_epoch, result.end_offset = migrated.epoch, migrated.end_offset
        result.rto_ms = millis(workflow.now() - started)
        result.detail = f"{name} migrated to {request.target} at end offset {migrated.end_offset}"
        if request.fault:
            self._mark("check origin", "skipped", "the origin's end is recorded when it answers again")
        else:
            await self._check_origin(at, migrated, result)
        return await self._finish(result)

    async def _call_off(self, at: PartitionStep) -> PartitionMigrated:
        """Remove the migration if it has not taken effect; one that has is said (end offset >= 0)."""
        return await self._step(
            "call off", steps.CALL_OFF_PARTITION, at, PartitionMigrated,
            timeout_s=at.acks_timeout_s + 30, give_up_s=FOREVER_S,
        )  # fmt: skip

    async def _check_origin(self, at: PartitionStep, migrated: PartitionMigrated, result: SagaResult) -> None:
        """Whether anything was written to the origin past the end offset (a writer around the gateway):
        reported, never undone — those records are not the partition's any more."""
        try:
            checked = await self._step(
                "check origin", steps.CHECK_ORIGIN, at, OriginChecked, timeout_s=60, give_up_s=120
            )
        except Exception as exc:
            result.detail += f"; the origin could not be checked: {reason(exc)}"
            return
        if checked.overrun:
            result.detail += (
                f"; {checked.overrun} records were written to {at.origin} past the end offset "
                f"{migrated.end_offset}, around the gateway: no client reads them"
            )
