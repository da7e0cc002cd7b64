"""The planned switch, which the switchover and the switchback both are: the keys move from the cluster
they are on to the target of the link that copies it, with nothing lost or copied twice.

plan → approval? → lock → split the link? → block → open transactions end → drain → sync groups →
check → approval? → the fence closed + flip + promote (the point of no return) → every gateway applied
it → reverse link → unlock → record

The fence's window runs from the drain's read of the source's ends to the flip's second read of them:
the whole stretch while clients are held, with no wait of its own. Those steps, from the block to the
flip, run on the saga's worker (local steps): none waits on a trip through the Temporal server.

A link that also carries topics of applications that stay behind is split first (switchyard/sharing.py):
the keys' topics get a link of their own, which is the one promoted.

Before the flip, every failure (and a cancellation, a rejection, an approval not given in time)
compensates: the keys are unblocked where they were and the lock released; a split stays made once its
new link is (it copies the topics as the old one did). Every step there gives up in bounded time (its
``give_up_s``) and is retried on another worker when its own dies (a heartbeat of a few seconds), so
clients are never held for long. After the flip, the saga only goes forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from temporalio import workflow

from workflows.base import (
    HEARTBEAT_S,
    ONCE,
    RETRY,
    SagaAbandoned,
    SagaWorkflow,
    guarded,
    millis,
)
from workflows.compensation import Compensations

with workflow.unsafe.imports_passed_through():
    from switchyard.sagas import steps
    from switchyard.sagas.failures import error_type, reason
    from switchyard.sagas.requests import (
        ApprovalPoint,
        Policy,
        SagaResult,
        SwitchRequest,
    )
    from switchyard.sagas.steps import (
        Acked,
        AcksRequest,
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
        LockRequest,
        PartitionEnd,
        Plan,
        PlanRequest,
        Reversed,
        ReverseRequest,
        Settled,
        SettleRequest,
        Split,
        SplitRequest,
        Unblocked,
        UnblockRequest,
        VerifyOutcome,
        VerifyRequest,
    )

STEPS = [
    "plan", "lock", "block", "settle transactions", "fence", "drain", "sync groups",
    "check copy", "flip", "acknowledged", "reverse link", "unlock",
]  # fmt: skip
FENCE_BESIDE_COPY = "fence-beside-copy"
"""The patch that runs the fence's window beside drain, group sync and check (less time clients are held)."""
HELD_BRIEFLY = "held-briefly"
"""The patch that runs the steps while clients are held on the saga's worker (local steps), with no
fence step of its own: the flip re-reads the source's ends the drain started from before its fenced write
(sagas started before it ran the fence's fixed window beside the copy, the steps through the server)."""
SETTLE_TRANSACTIONS = "settle-transactions"
"""The patch that waits for transactions open on the source to end before the fence (sagas started
before it went straight to the fence)."""
FOREVER_S = 24 * 3600.0
"""How long a step after the flip keeps being retried: the saga cannot turn back there."""
CHECK_GIVE_UP_S = 60.0
"""A step while clients are held that reads a few ends or offsets: retried this long at most."""


@dataclass
class _Moved:
    """What the steps before the flip established, which the ones after it need."""

    plan: Plan
    blocked: Blocked
    fence: Fence
    drained: Drained
    synced: GroupsSynced
    verdict: str
    brief: bool
    """Held briefly: the flip closes the fence's window (:data:`HELD_BRIEFLY`)."""
    landed: bool = False
    """The flip had landed before the saga heard of the steps up to it (see ``_landed``)."""


class PlannedSwitch(SagaWorkflow):
    def __init__(self) -> None:
        super().__init__()
        self._blocked_at: datetime | None = None

    async def _switch(self, request: SwitchRequest, kind: str) -> SagaResult:
        self._begin(kind, request.keys, STEPS)
        await self._record("started", keys=request.keys, actor=request.actor, reason=request.reason)
        result = SagaResult(workflow.info().workflow_id, kind, request.keys, "refused")
        await self._move(request, result, kind, workflow.now())
        return await self._finish(result)

    async def _move(  # noqa: PLR0917 - what differs between the sagas that switch
        self,
        request: SwitchRequest,
        result: SagaResult,
        kind: str,
        started: datetime,
        reverse: str = "",
        left: str = "",
    ) -> Plan:
        """Switch ``request.keys`` and fill ``result`` in; a refusal or a compensated failure ends the
        saga. ``started`` is what the RTO counts from, ``reverse`` names the reverse link, ``left``
        says what a compensation leaves in place."""
        saga = workflow.info().workflow_id
        asked = PlanRequest(
            saga, kind, request.keys, request.target, request.link, unknown_keys=request.unknown_keys
        )
        plan = await self._plan(asked, result)

        undo = Compensations()
        try:
            moved = await self._up_to_the_flip(request, plan, undo)
            epochs = {k: moved.blocked.epoch for k in plan.keys}
            ends = moved.fence.ends
            flip = FlipRequest(
                saga, plan.keys, epochs, plan.source, plan.target, plan.link, ends, fence=moved.brief
            )
            flipped = await self._step(
                "flip", steps.FLIP, flip, Flipped, timeout_s=60, give_up_s=120, local=moved.brief
            )
            if moved.brief and not moved.landed:
                self._mark("fence", "done", "the source's ends stood still from the drain's read to the flip")
        except BaseException as exc:
            why = reason(exc)
            if error_type(exc) == "FenceBroken":  # at the flip, which closes the fence's window
                self._mark("fence", "failed", why)
            undone = await undo.run()
            if any(isinstance(r, Unblocked) and r.flipped for _, r in undone):
                raise  # the flip landed after all; a rerun of the saga finds it done
            failed = [f"{name}: {reason(r)}" for name, r in undone if isinstance(r, BaseException)]
            unblocked = [r for _, r in undone if isinstance(r, Unblocked) and r.epoch]
            if unblocked and self._blocked_at is not None:  # held from the block until the unblock took
                result.pause_ms = millis(workflow.now() - self._blocked_at)
            if error_type(exc) == "LockHeld" and self._at(exc) == " at lock":  # nothing was changed
                result.detail = f"refused: {why}"
                await self._fail(result, "SwitchRefused")
            result.outcome = "compensated"
            split = plan.split
            kept = split is not None and any(n == "undo split" and r is False for n, r in undone)
            stays = (
                f"; link {split.new_link} stays made: it copies {', '.join(split.topics)}"
                if (split is not None and kept)
                else ""
            )
            result.detail = (
                f"switch abandoned before the flip{self._at(exc)}: {why}"
                + (
                    f"; compensation failed ({'; '.join(failed)})"
                    if failed
                    else "; keys unblocked where they were"
                )
                + stays
                + (f"; {left}" if left else "")
            )
            for step_state in self._progress.steps:
                if step_state.state == "done" and step_state.name in ("lock", "block"):
                    step_state.state = "compensated"
            await self._fail(result, "SwitchAbandoned")
            raise  # not reached: _fail raises

        reverse = reverse or f"{plan.target}-to-{plan.source}-e{flipped.epoch}"
        await self._after_the_flip(request, moved, flipped, result, started, reverse)
        return plan

    async def _up_to_the_flip(self, request: SwitchRequest, plan: Plan, undo: Compensations) -> _Moved:
        saga, policy = workflow.info().workflow_id, request.policy
        if policy.approval is ApprovalPoint.BEFORE_BLOCK:
            await self._await_approval("before the block", policy.approval_timeout_s)
        locks = LockRequest(saga, plan.keys, plan.link, plan.groups)
        undo.add("unlock", lambda: self._undo(steps.UNLOCK, locks, type(None)))
        await self._step("lock", steps.LOCK, locks, type(None), timeout_s=30, give_up_s=120)
        if plan.split is not None:  # before the block: clients are not held while it is made
            self._step_after("lock", "split link")
            split = SplitRequest(saga, plan.split)
            undo.add("undo split", lambda: self._undo(steps.UNSPLIT, split, bool))
            await self._step(
                "split link", steps.SPLIT, split, Split, timeout_s=2 * split.wait_s + 30,
                give_up_s=2 * split.wait_s + 60,
            )  # fmt: skip

        brief = workflow.patched(HELD_BRIEFLY)
        unbound = [k for k in plan.keys if not plan.epochs.get(k)]
        unblock = UnblockRequest(saga, plan.keys, plan.source, 0, policy.acks_timeout_s, unbound)
        undo.add("unblock", lambda: self._undo(steps.UNBLOCK, unblock, Unblocked))
        block = BlockRequest(saga, plan.keys, plan.epochs, plan.source, policy.acks_timeout_s)
        acks_s = policy.acks_timeout_s
        self._blocked_at = workflow.now()  # clients may be held from here: the figure errs long, not short
        blocked = await self._step(
            "block", steps.BLOCK, block, Blocked, timeout_s=acks_s + 10, give_up_s=acks_s + 30, local=brief
        )
        unblock.block_epoch = blocked.epoch
        if blocked.flipped:
            return self._landed(plan, blocked)
        try:
            fence, drained, synced = await self._held(plan, policy, brief=brief)
        except Exception as exc:  # one held step found the flip landed (the block had not: see ``_landed``)
            if error_type(exc) != "FlipLanded":
                raise
            return self._landed(plan, blocked)
        for state, end in zip(self._progress.partitions, fence.ends, strict=True):
            state.source_end = end.end
        for state, end in zip(self._progress.partitions, drained.target_ends, strict=True):
            state.target_end, state.copied = end.end, True
        verdict = "clean (fast check)"
        if policy.spark_verify:
            spark = await self._step(
                "verify (Spark)", steps.VERIFY, VerifyRequest(f"{workflow.info().run_id}-verify", plan.link),
                VerifyOutcome, timeout_s=3600, heartbeat_s=30, retry=ONCE,
            )  # fmt: skip  # once: a job cut short is not run again with clients held; it compensates
            if spark.verdict != "clean":
                raise SagaAbandoned(
                    f"verification found the copy diverged: {', '.join(spark.divergent_partitions[:5])}"
                    f"{' groups ' + ', '.join(spark.wrong_groups[:5]) if spark.wrong_groups else ''}"
                )
            verdict = f"clean (Spark, {spark.records} records)"
        if policy.approval is ApprovalPoint.BEFORE_FLIP:
            await self._await_approval("before the flip", policy.approval_timeout_s)
        return _Moved(plan, blocked, fence, drained, synced, verdict, brief)

    async def _held(self, plan: Plan, policy: Policy, *, brief: bool) -> tuple[Fence, Drained, GroupsSynced]:
        """The steps between the block and the checks before the flip."""
        if workflow.patched(SETTLE_TRANSACTIONS):
            wait_s = policy.transaction_wait_s
            await self._step(
                "settle transactions", steps.SETTLE, SettleRequest(plan.link, plan.partitions, wait_s),
                Settled, timeout_s=wait_s + 30, give_up_s=wait_s + CHECK_GIVE_UP_S, local=brief,
            )  # fmt: skip
        if brief:
            return await self._copy_then_fence_at_the_flip(plan, policy)
        return await self._fence_beside_copy(plan, policy)

    def _landed(self, plan: Plan, blocked: Blocked) -> _Moved:
        """The flip had landed: a worker ran the steps while clients were held, the flip among them, and
        died before the saga heard of them all (local steps reach its history when their worker next
        reports to Temporal: none of them, or, when they took long, those up to some step). The next
        worker's block, or the first held step it ran again, found the flip made. The copy was checked
        before that flip; the saga goes forward from it, and the flip step, asked again, reads what it
        stored."""
        for name in ("settle transactions", "fence", "drain", "sync groups", "check copy"):
            self._mark(name, "done", "before the flip, by a worker that died after it")
        return _Moved(
            plan, blocked, Fence([]), Drained([], 0), GroupsSynced(0, 0), "clean (fast check)", brief=True,
            landed=True,
        )  # fmt: skip

    async def _fence_beside_copy(self, plan: Plan, policy: Policy) -> tuple[Fence, Drained, GroupsSynced]:
        """The fence's window beside the copy's steps (clients are held meanwhile): the drain copies up to
        the ends it reads when it starts, the groups come over, the copy is checked — and the fence
        checks that those ends stood still."""
        fence_step = self._step(
            "fence", steps.FENCE, FenceRequest(plan.link, plan.partitions, policy.fence_window_s), Fence,
            timeout_s=policy.fence_window_s + 30, give_up_s=policy.fence_window_s + CHECK_GIVE_UP_S,
        )  # fmt: skip
        if not workflow.patched(FENCE_BESIDE_COPY):  # sagas started before it: one after the other
            fence = await fence_step
            drained = await self._drain(DrainRequest(plan.link, fence.ends, policy.drain_timeout_s), policy)
            return fence, drained, await self._carry_and_check(plan, policy, fence.ends)
        fence, (drained, synced) = await guarded(fence_step, self._copy(plan, policy))
        read = {(e.topic, e.partition): e.end for e in drained.source_ends}
        moved = [f"{e.topic}[{e.partition}] {read.get((e.topic, e.partition))} -> {e.end}" for e in fence.ends
                 if read.get((e.topic, e.partition)) != e.end]  # fmt: skip
        if moved:
            raise SagaAbandoned(f"FenceBroken: the source moved after the block: {', '.join(moved)}")
        return fence, drained, synced

    async def _copy_then_fence_at_the_flip(
        self, plan: Plan, policy: Policy
    ) -> tuple[Fence, Drained, GroupsSynced]:
        """The copy's steps, one after the other on this worker; the fence's window opens with the ends
        the drain reads when it starts and closes in the flip, which reads them again before its write."""
        self._mark("fence", "running", "the window is open until the flip")
        drained, synced = await self._copy(plan, policy, local=True)
        if policy.fence_window_s > 0:  # the operator asked for a longer watch than the held steps take
            await workflow.sleep(policy.fence_window_s)
        return Fence(drained.source_ends), drained, synced

    async def _copy(self, plan: Plan, policy: Policy, *, local: bool = False) -> tuple[Drained, GroupsSynced]:
        drained = await self._drain(
            DrainRequest(plan.link, [], policy.drain_timeout_s, plan.partitions), policy, local=local
        )
        return drained, await self._carry_and_check(plan, policy, drained.source_ends, local=local)

    async def _drain(self, request: DrainRequest, policy: Policy, *, local: bool = False) -> Drained:
        return await self._step(
            "drain", steps.DRAIN, request, Drained, timeout_s=policy.drain_timeout_s + 30,
            give_up_s=policy.drain_timeout_s + 30, local=local,
        )  # fmt: skip

    async def _carry_and_check(
        self, plan: Plan, policy: Policy, ends: list[PartitionEnd], *, local: bool = False
    ) -> GroupsSynced:
        """The groups' offsets carried, then the copy checked against the source's ``ends``."""
        sync = GroupSyncRequest(plan.link, plan.groups, policy.group_sync_timeout_s, keys=plan.keys)
        synced = await self._step(
            "sync groups", steps.SYNC_GROUPS, sync, GroupsSynced, timeout_s=sync.idle_timeout_s + 30,
            give_up_s=sync.idle_timeout_s + 5, local=local,
        )  # fmt: skip
        assert self._blocked_at is not None
        check = CopyCheckRequest(
            plan.link, ends, synced.groups, self._blocked_at.isoformat(), fenced_at_flip=local
        )  # the local steps are the held-briefly ones, whose flip closes the fence
        await self._step(
            "check copy", steps.CHECK_COPY, check, CopyChecked, timeout_s=30, give_up_s=CHECK_GIVE_UP_S,
            local=local,
        )  # fmt: skip
        return synced

    async def _after_the_flip(  # noqa: PLR0917 - the saga's state, handed from one half to the other
        self,
        request: SwitchRequest,
        moved: _Moved,
        flipped: Flipped,
        result: SagaResult,
        started: datetime,
        reverse: str,
    ) -> None:
        saga, plan = workflow.info().workflow_id, moved.plan
        acks_s = request.policy.acks_timeout_s
        acked = await self._step(
            "acknowledged", steps.AWAIT_ACKS, AcksRequest(flipped.epoch, acks_s), Acked,
            timeout_s=acks_s + 30, give_up_s=FOREVER_S,
        )  # fmt: skip
        flipped_at = workflow.now()
        try:
            reversed_link = await self._step(
                "reverse link", steps.REVERSE, ReverseRequest(saga, plan.link, reverse), Reversed,
                timeout_s=180, give_up_s=600,
            )  # fmt: skip
            result.reverse_link = reversed_link.link
            if not reversed_link.followed:
                result.detail = (
                    f"no mirror process copies {reversed_link.link} yet: start one before a switch back"
                )
        except Exception as exc:  # the switch stands; the operator can reverse the link by hand
            result.detail = f"no reverse link ({reason(exc)}): switchyard links reverse {plan.link} {reverse}"
        await self._step(
            "unlock",
            steps.UNLOCK,
            LockRequest(saga, plan.keys),
            type(None),
            timeout_s=30,
            give_up_s=FOREVER_S,
        )
        assert self._blocked_at is not None
        result.outcome = "switched"
        result.block_epoch, result.flip_epoch = moved.blocked.epoch, acked.epoch
        result.rto_ms = millis(flipped_at - started)
        result.pause_ms = millis(flipped_at - self._blocked_at)
        result.records_copied = flipped.records if moved.landed else moved.drained.records
        result.groups_synced = moved.synced.written + moved.synced.unchanged
        result.verdict = moved.verdict

    async def _undo(self, activity: str, request: object, result_type: type) -> object:
        """A compensation: retried for a long while, since leaving keys blocked is the worst outcome."""
        return await workflow.execute_activity(
            activity, request, result_type=result_type, start_to_close_timeout=timedelta(minutes=2),
            schedule_to_close_timeout=timedelta(minutes=30), retry_policy=RETRY,
            heartbeat_timeout=timedelta(seconds=HEARTBEAT_S),
        )  # fmt: skip
