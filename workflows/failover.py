"""The unplanned failover: the source cluster is gone, the keys move to the copy at once.

plan → the source does not answer (else refused, unless forced) → approval? → lock → (forced: the groups
carried) → flip + promote + shield the source → every gateway applied it → what the copy lacks (RPO) →
unlock → when the old primary answers again (if the policy waits for it): the exact lost window, from
the Spark job

No drain, no fence: there is nothing to drain from. Group offsets are those the mirror last carried, or,
where the source still answers (a forced failover), those its groups had just before the flip.
The old primary is shielded, so no binding moves back onto it by itself. Its records the copy never
got stay there; the lost window says which, and ``switchyard reconcile republish`` can write them to
the new primary.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.base import HEARTBEAT_S, RETRY, SPARK_JOB, SagaWorkflow, millis
from workflows.compensation import Compensations
from workflows.planned import FOREVER_S

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.failures import reason
    from switchyard.sagas.requests import ApprovalPoint, Kind, SagaResult, SwitchRequest
    from switchyard.sagas.steps import (
        Acked,
        AcksRequest,
        Flipped,
        FlipRequest,
        GroupsSynced,
        GroupSyncRequest,
        LockRequest,
        Loss,
        LossRequest,
        LostWindowOutcome,
        LostWindowRequest,
        Plan,
        PlanRequest,
        Probe,
        ProbeRequest,
    )

STEPS = ["plan", "probe source", "lock", "flip", "acknowledged", "measure loss", "unlock"]
GROUPS_BEFORE_FLIP = "groups-before-flip"
"""The patch that carries a forced failover's groups just before its flip (sagas started before it
carried them after the flip only, when members rejoining the target had read older offsets already)."""
EARLY_SYNC_S = 5.0
"""How long the carry before a failover's flip may hold the flip up."""
PROBE_EVERY_S = 5.0


@workflow.defn(name="Failover")
class Failover(SagaWorkflow):
    @workflow.run
    async def run(self, request: SwitchRequest) -> SagaResult:
        saga, started = workflow.info().workflow_id, workflow.now()
        self._begin(Kind.FAILOVER, request.keys, STEPS)
        await self._record("started", keys=request.keys, actor=request.actor, reason=request.reason)
        result = SagaResult(saga, Kind.FAILOVER, request.keys, "refused")
        asked = PlanRequest(
            saga, Kind.FAILOVER, request.keys, request.target, request.link, request.source, True,
            unknown_keys=request.unknown_keys,
        )  # fmt: skip
        plan = await self._plan(asked, result)

        probe = await self._step(
            "probe source", steps.PROBE, ProbeRequest(plan.source), Probe, timeout_s=30, give_up_s=120
        )
        if probe.reachable and not request.force:
            result.detail = (
                f"{plan.source} still answers ({probe.detail}): fail over only from a cluster that is gone; "
                "a switchover loses nothing (or force the failover)"
            )
            await self._fail(result, "SwitchRefused")
        locks = LockRequest(saga, plan.keys, plan.link, plan.groups)
        undo = Compensations()
        undo.add("unlock", lambda: self._compensate(steps.UNLOCK, locks))
        try:  # a rejection, or no approval in time, ends the saga here as compensated (nothing changed)
            if request.policy.approval is not ApprovalPoint.NONE:
                await self._await_approval("before the flip", request.policy.approval_timeout_s)
            await self._step("lock", steps.LOCK, locks, type(None), timeout_s=30, give_up_s=120)
            carried_early, early = False, ""
            if probe.reachable and workflow.patched(GROUPS_BEFORE_FLIP):
                early = await self._groups_before_flip(plan, result)
                carried_early = not early
            flip = FlipRequest(
                saga, plan.keys, plan.epochs, plan.source, plan.target, plan.link, shield_source=True
            )
            flipped = await self._step("flip", steps.FLIP, flip, Flipped, timeout_s=120, give_up_s=600)
        except BaseException as exc:
            await undo.run()
            result.outcome, result.detail = (
                "compensated",
                f"failover abandoned before the flip{self._at(exc)}: {reason(exc)}",
            )
            await self._fail(result, "SwitchAbandoned")
            raise  # not reached

        acks_s = request.policy.acks_timeout_s
        acked = await self._step(
            "acknowledged", steps.AWAIT_ACKS, AcksRequest(flipped.epoch, acks_s), Acked,
            timeout_s=acks_s + 30, give_up_s=FOREVER_S,
        )  # fmt: skip
        flipped_at = workflow.now()
        unsynced = ""
        if probe.reachable and not carried_early:  # forced: the groups' last offsets can still come over
            sync = GroupSyncRequest(
                plan.link, plan.groups, request.policy.group_sync_timeout_s, keys=plan.keys, rewind=False
            )
            try:
                synced = await self._step(
                    "sync groups", steps.SYNC_GROUPS, sync, GroupsSynced, timeout_s=sync.idle_timeout_s + 30,
                    give_up_s=sync.idle_timeout_s + 5,
                )  # fmt: skip
                result.groups_synced = synced.written + synced.unchanged
            except Exception as exc:  # past the flip: the groups keep the offsets the mirror last carried
                unsynced = f"; groups not synced ({reason(exc)}): they resume where the mirror last carried"
        loss = await self._step(
            "measure loss", steps.MEASURE_LOSS, LossRequest(plan.link, flipped.final), Loss,
            timeout_s=60, give_up_s=FOREVER_S,
        )  # fmt: skip
        result.rpo = loss.partitions
        await self._step("unlock", steps.UNLOCK, locks, type(None), timeout_s=30, give_up_s=FOREVER_S)
        result.outcome, result.flip_epoch = "switched", acked.epoch
        result.rto_ms = result.pause_ms = millis(flipped_at - started)
        result.records_copied = sum(f.end for f in flipped.final)
        lost = sum(p.records for p in loss.partitions)
        result.detail = f"{plan.source} shielded; at least {lost} records the copy never got (RPO)"
        result.detail += early + unsynced
        if request.policy.recovery_wait_s > 0:
            await self._lost_window(plan, request.policy.recovery_wait_s, result)
        return await self._finish(result)

    async def _groups_before_flip(self, plan: Plan, result: SagaResult) -> str:
        """A forced failover's groups carried just before its flip, while their members still commit on
        the source (empty), or why not. Members rejoining on the target then resume about where they
        were, not at the mirror's last carry (up to ``mirror.group_sync_interval_s`` behind: records
        they would process again). Only where no member is on the target already, within a few seconds:
        otherwise the flip goes on, and the sync is tried again after it, never moving a group back
        there (the gateways carry its members' commits after the flip)."""
        sync = GroupSyncRequest(plan.link, plan.groups, 0.0, keys=plan.keys)  # the source is the truth yet
        try:
            synced = await self._step(
                "sync groups", steps.SYNC_GROUPS, sync, GroupsSynced, timeout_s=EARLY_SYNC_S,
                give_up_s=EARLY_SYNC_S,
            )  # fmt: skip
        except Exception as exc:
            return f"; groups not carried before the flip ({reason(exc)})"
        result.groups_synced = synced.written + synced.unchanged
        return ""

    async def _lost_window(self, plan: Plan, wait_s: float, result: SagaResult) -> None:
        """Wait (durably) for the old primary to answer again, then measure exactly what it holds that
        the copy does not."""
        deadline = workflow.now() + timedelta(seconds=wait_s)
        self._mark("lost window", "running", f"waiting for {plan.source} to answer")
        while True:
            probe = await self._step(
                "probe old primary",
                steps.PROBE,
                ProbeRequest(plan.source),
                Probe,
                timeout_s=30,
                give_up_s=120,
            )
            if probe.reachable:
                break
            if workflow.now() >= deadline:
                result.detail += (
                    f"; {plan.source} did not answer within {wait_s:g}s: lost window not measured"
                )
                self._mark("lost window", "skipped", "the old primary did not come back in time")
                return
            await workflow.sleep(PROBE_EVERY_S)
        find = LostWindowRequest(f"{workflow.info().run_id}-lost", plan.link)
        try:
            window = await self._step(
                "lost window", steps.FIND_LOST_WINDOW, find, LostWindowOutcome, timeout_s=3600,
                heartbeat_s=30, retry=SPARK_JOB,
            )  # fmt: skip
        except Exception as exc:  # past the flip the clients are moved: the saga switched all the same
            result.detail += (
                f"; lost window not measured ({reason(exc)}): "
                f"switchyard reconcile find {plan.link} --parquet DIR"
            )
            return
        result.lost_window_records = window.records
        result.detail += f"; lost window measured on {plan.source}: {window.records} records"

    async def _compensate(self, activity: str, request: object) -> object:
        return await workflow.execute_activity(
            activity, request, start_to_close_timeout=timedelta(minutes=2),
            schedule_to_close_timeout=timedelta(minutes=30), retry_policy=RETRY,
            heartbeat_timeout=timedelta(seconds=HEARTBEAT_S),
        )  # fmt: skip
