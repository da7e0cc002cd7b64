"""The sagas' decisions with stand-in activities: step order, compensation, approvals, cancellation,
refusals — on the session's real Temporal server."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from switchyard import launch
from switchyard.sagas import steps
from switchyard.sagas.requests import (
    ApprovalPoint,
    Decision,
    MigrationRequest,
    PartitionMigrationRequest,
    Policy,
    Progress,
    SwitchRequest,
)
from switchyard.sagas.steps import LinkSplit, PartitionEnd, PartitionMigrated
from tests.workflows.conftest import Sagas, capture, refused

PLANNED = [
    steps.PLAN, steps.LOCK, steps.BLOCK, steps.SETTLE, steps.DRAIN, steps.SYNC_GROUPS, steps.CHECK_COPY,
    steps.FLIP, steps.AWAIT_ACKS, steps.REVERSE, steps.UNLOCK,
]  # fmt: skip
BEFORE_THE_FLIP_UNDONE = [steps.UNBLOCK, steps.UNLOCK]


def failure(exc: WorkflowFailureError) -> tuple[str, dict[str, Any]]:
    """The saga's failure type and the result it carries."""
    cause = exc.cause
    assert isinstance(cause, ApplicationError), cause
    return str(cause.type), cause.details[0]


def fails(sagas: Sagas, workflow: str, request: Any) -> tuple[str, dict[str, Any]]:
    """Run the saga to its failure: the failure's type and the result it carries."""

    async def scenario(s: Sagas) -> WorkflowFailureError:
        handle = await s.start(workflow, request)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        return failed.value

    return failure(sagas.run(scenario))


async def progress(handle: WorkflowHandle[Any, Any]) -> Progress:
    found: Progress = await handle.query("progress", result_type=Progress)
    return found


async def until(
    handle: WorkflowHandle[Any, Any], check: Any, what: str = "got there", timeout_s: float = 30
) -> Progress:
    """Poll the saga's progress until ``check(progress)`` holds; the failure names the last answer (or the
    query's error: a saga not yet picked up by a worker cannot answer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: object = "no answer"
    while True:
        try:
            found = await progress(handle)
        except Exception as exc:
            last = exc
        else:
            if check(found):
                return found
            last = found
        assert loop.time() < deadline, f"the saga never {what} in {timeout_s:.0f} s; last: {last!r}"
        await asyncio.sleep(0.1)


def test_a_switchover_runs_every_step_in_order_and_reports(sagas: Sagas) -> None:
    async def scenario(s: Sagas) -> Any:
        handle = await s.start("Switchover", SwitchRequest(["orders"], actor="user:test", reason="drill"))
        result = await handle.result()
        await capture(handle, "switchover-switched")
        return result

    result = sagas.run(scenario)
    assert sagas.script.calls == PLANNED
    assert (result.outcome, result.source, result.target, result.link) == (
        "switched", "primary", "standby", "primary-to-standby",
    )  # fmt: skip
    assert (result.block_epoch, result.flip_epoch, result.partitions, result.records_copied) == (
        10,
        12,
        2,
        180,
    )
    assert result.reverse_link == "standby-to-primary-e12"
    assert result.groups_synced == 2
    assert 0 <= result.pause_ms <= result.rto_ms
    assert all(s.state == "done" for s in result.steps)
    block = sagas.script.requests[steps.BLOCK][0]
    flip = sagas.script.requests[steps.FLIP][0]
    assert block.epochs == {"orders": 3}  # fenced on what the plan read...
    assert flip.epochs == {"orders": 10}  # ...and the flip on the block's epoch
    assert (flip.ends[0].end, flip.shield_source) == (100, False)


def test_a_failure_before_the_flip_unblocks_and_unlocks_in_reverse(sagas: Sagas) -> None:
    sagas.script.fail[steps.DRAIN] = refused("DrainTimeout", "link p2s did not copy up to the fenced ends")

    async def scenario(s: Sagas) -> WorkflowFailureError:
        handle = await s.start("Switchover", SwitchRequest(["orders"]))
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        await capture(handle, "switchover-compensated")
        return failed.value

    error = sagas.run(scenario)
    kind, result = failure(error)
    assert kind == "SwitchAbandoned"
    assert result["outcome"] == "compensated"
    assert "DrainTimeout: link p2s did not copy up to the fenced ends" in result["detail"]
    assert "keys unblocked where they were" in result["detail"]
    assert sagas.script.calls == [*PLANNED[:5], *BEFORE_THE_FLIP_UNDONE]
    unblock = sagas.script.requests[steps.UNBLOCK][0]
    assert (unblock.source, unblock.block_epoch, unblock.unbind) == ("primary", 10, [])


def test_a_compensation_leaves_a_key_that_was_not_bound_unbound(sagas: Sagas) -> None:
    sagas.script.bound = False
    sagas.script.fail[steps.DRAIN] = refused("DrainTimeout", "link p2s did not copy up to the fenced ends")
    kind, _ = fails(sagas, "Switchover", SwitchRequest(["orders@host-9"]))
    assert kind == "SwitchAbandoned"
    unblock = sagas.script.requests[steps.UNBLOCK][0]
    assert unblock.unbind == ["orders@host-9"]  # not pinned to where it resolved when the saga began


HELD = [steps.BLOCK, steps.SETTLE, steps.DRAIN, steps.SYNC_GROUPS, steps.CHECK_COPY, steps.FLIP]
"""The steps that run while clients are held."""


@pytest.mark.parametrize("again", [steps.SETTLE, steps.DRAIN, steps.SYNC_GROUPS, steps.CHECK_COPY])
def test_a_held_step_run_again_after_the_flip_landed_takes_the_saga_forward(sagas: Sagas, again: str) -> None:
    """A worker killed just after its flip, whose held steps reached the history only up to some step
    (they had taken long), leaves the next worker to run the rest again: the first of them finds the flip
    made. The saga must take the flip as done — a fresh-clone run once compensated it instead, the copy
    check failing on what clients had written since, and left the keys switched with no end recorded."""
    sagas.script.fail[again] = refused("FlipLanded", "this saga's flip landed at epoch 12")
    result = sagas.run(lambda s: _result(s, SwitchRequest(["orders"])))
    assert result.outcome == "switched", result.detail
    at = PLANNED.index(again)
    assert sagas.script.calls == [*PLANNED[: at + 1], *PLANNED[PLANNED.index(steps.FLIP) :]]
    assert all(s.state == "done" for s in result.steps), result.steps


def test_every_step_while_clients_are_held_runs_on_the_sagas_worker(sagas: Sagas) -> None:
    """Held steps are local: no trip through the server before or after each (tens of milliseconds a
    step, most of a pause once). A worker that dies in one is noticed by the saga's decision time-out —
    two seconds, as ``launch`` starts every saga — and another worker runs the step again."""

    async def scenario(s: Sagas) -> Any:
        assert s.client is not None
        handle = await s.start("Switchover", SwitchRequest(["orders"]))
        await handle.result()
        return await handle.fetch_history()

    history = sagas.run(scenario)
    scheduled = {
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    }
    local = {
        json.loads(e.marker_recorded_event_attributes.details["data"].payloads[0].data)["activity_type"]
        for e in history.events
        if e.HasField("marker_recorded_event_attributes")
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    }
    assert set(HELD) <= local, local
    assert not set(HELD) & scheduled, scheduled
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.workflow_task_timeout.ToTimedelta() == launch.WORKFLOW_TASK_TIMEOUT <= timedelta(seconds=2)


def retryable(kind: str, message: str) -> ApplicationError:
    return ApplicationError(message, type=kind)


def test_a_drain_cut_short_is_retried_not_compensated(sagas: Sagas) -> None:
    """A worker that dies in the drain (here: an attempt failing as a lost connection would) costs a retry."""
    sagas.script.fail[steps.DRAIN] = [retryable("KafkaOperationError", "the worker went away")]
    result = sagas.run(lambda s: _result(s, SwitchRequest(["orders"])))
    assert result.outcome == "switched"
    assert sagas.script.calls.count(steps.DRAIN) == 2


async def _result(s: Sagas, request: SwitchRequest) -> Any:
    return await (await s.start("Switchover", request)).result()


def test_a_group_sync_that_cannot_succeed_gives_up_compensates_and_names_the_group(sagas: Sagas) -> None:
    sagas.script.fail[steps.SYNC_GROUPS] = retryable(
        "KafkaOperationError", "group billing: Broker: Coordinator not available"
    )
    policy = Policy(group_sync_timeout_s=1)
    kind, result = fails(sagas, "Switchover", SwitchRequest(["orders"], policy=policy))
    assert kind == "SwitchAbandoned"
    assert (  # retried until the next attempt would start past the give-up time; the last error kept
        "switch abandoned before the flip at sync groups: "
        "KafkaOperationError: group billing: Broker: Coordinator not available"
    ) in result["detail"]
    assert sagas.script.calls.count(steps.SYNC_GROUPS) > 1  # retried until it gave up
    assert sagas.script.calls[-2:] == BEFORE_THE_FLIP_UNDONE
    assert result["pause_ms"] > 0  # held from the block until the unblock: a compensated switch held them too


def test_a_switch_whose_link_is_shared_splits_it_after_the_lock_and_moves_along_the_new_one(
    sagas: Sagas,
) -> None:
    sagas.script.split = LinkSplit("shared", "shared-split-1a2b3c4d", ["orders"])

    async def scenario(s: Sagas) -> Any:
        handle = await s.start("Switchover", SwitchRequest(["orders"]))
        return await handle.result(), await progress(handle)

    result, shown = sagas.run(scenario)
    assert sagas.script.calls == [*PLANNED[:2], steps.SPLIT, *PLANNED[2:]]  # before the block
    (split,) = sagas.script.requests[steps.SPLIT]
    assert split.split == LinkSplit("shared", "shared-split-1a2b3c4d", ["orders"])
    assert sagas.script.requests[steps.FLIP][0].link == "shared-split-1a2b3c4d"
    assert sagas.script.requests[steps.REVERSE][0].link == "shared-split-1a2b3c4d"
    assert [s.name for s in shown.steps][:4] == ["plan", "lock", "split link", "block"]
    assert (result.outcome, result.link) == ("switched", "shared-split-1a2b3c4d")


def test_a_switch_abandoned_after_its_split_gives_the_topics_back_to_their_link(sagas: Sagas) -> None:
    sagas.script.split = LinkSplit("shared", "shared-split-1a2b3c4d", ["orders"])
    sagas.script.fail[steps.CHECK_COPY] = refused("CopyDiverged", "orders[0]: the target holds 99")
    kind, result = fails(sagas, "Switchover", SwitchRequest(["orders"]))
    assert kind == "SwitchAbandoned"
    assert "switch abandoned before the flip at check copy" in result["detail"]
    assert "stays made" not in result["detail"]
    assert sagas.script.calls[-3:] == [steps.UNBLOCK, steps.UNSPLIT, steps.UNLOCK]
    assert sagas.script.requests[steps.UNSPLIT][0].split.new_link == "shared-split-1a2b3c4d"


def test_a_switch_abandoned_after_its_new_link_was_made_says_it_stays(sagas: Sagas) -> None:
    sagas.script.split = LinkSplit("shared", "shared-split-1a2b3c4d", ["orders"])
    sagas.script.split_given_back = False
    sagas.script.fail[steps.CHECK_COPY] = refused("CopyDiverged", "orders[0]: the target holds 99")
    _, result = fails(sagas, "Switchover", SwitchRequest(["orders"]))
    assert result["detail"].endswith(
        "; keys unblocked where they were; link shared-split-1a2b3c4d stays made: it copies orders"
    )


def test_a_lock_held_by_another_saga_refuses_naming_it(sagas: Sagas) -> None:
    sagas.script.fail[steps.LOCK] = refused(
        "LockHeld", "orders@host-7: locked by switchyard:orders since 2026-11-24T03:00:00+00:00"
    )
    kind, result = fails(sagas, "Switchover", SwitchRequest(["orders@host-7"]))
    assert (kind, result["outcome"]) == ("SwitchRefused", "refused")
    assert "refused: LockHeld: orders@host-7: locked by switchyard:orders since" in result["detail"]
    assert steps.BLOCK not in sagas.script.calls


def test_the_flip_closes_the_fences_window_on_the_ends_the_drain_read(sagas: Sagas) -> None:
    """No fence step waits on its own: the window opens with the ends the drain reads when it starts and
    the flip, asked to, reads them again before its write."""
    sagas.script.drained_from = [PartitionEnd("orders", 0, 99), PartitionEnd("orders", 1, 80)]
    result = sagas.run(lambda s: _result(s, SwitchRequest(["orders"])))
    assert result.outcome == "switched"
    (flip,) = sagas.script.requests[steps.FLIP]
    assert (flip.fence, flip.ends) == (True, sagas.script.drained_from)
    assert steps.FENCE not in sagas.script.calls


def test_a_longer_fence_window_asked_for_waits_before_the_flip(sagas: Sagas) -> None:
    """``sagas.fence_window_s`` above 0 watches that much longer (slow writers around the gateway), at the
    cost of holding clients as long: a timer between the check and the flip."""

    async def scenario(s: Sagas) -> Any:
        handle = await s.start("Switchover", SwitchRequest(["orders"], policy=Policy(fence_window_s=0.3)))
        await handle.result()
        return await handle.fetch_history()

    history = sagas.run(scenario)
    timers = [
        e.timer_started_event_attributes.start_to_fire_timeout.ToTimedelta()
        for e in history.events
        if e.HasField("timer_started_event_attributes")
    ]
    assert timers == [timedelta(seconds=0.3)]
    assert sagas.script.calls == PLANNED


def test_a_fence_broken_at_the_flip_compensates_and_shows_the_fence_failed(sagas: Sagas) -> None:
    sagas.script.fail[steps.FLIP] = refused(
        "FenceBroken", "after the block, the source kept being written: orders[0] 100 -> 101"
    )

    async def scenario(s: Sagas) -> tuple[WorkflowFailureError, Progress]:
        handle = await s.start("Switchover", SwitchRequest(["orders"]))
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        return failed.value, await handle.query("progress", result_type=Progress)

    failed, progress = sagas.run(scenario)
    kind, result = failure(failed)
    assert kind == "SwitchAbandoned"
    named = "at flip: FenceBroken: after the block, the source kept being written: orders[0]"
    assert named in result["detail"]
    assert sagas.script.calls[-2:] == BEFORE_THE_FLIP_UNDONE
    fence = next(s for s in progress.steps if s.name == "fence")
    assert fence.state == "failed", fence
    assert "FenceBroken" in fence.detail, fence


def test_a_transaction_that_stays_open_abandons_the_switch_before_the_fence_naming_it(sagas: Sagas) -> None:
    """Nothing behind an open transaction can be copied: the saga waits for it after the block, for the
    policy's bound, and compensates naming it when it outlasts that."""
    sagas.script.fail[steps.SETTLE] = refused(
        "TransactionsOpen", "orders[0]: a transaction open since offset 20 (31 offsets behind it)"
    )
    request = SwitchRequest(["orders"], policy=Policy(transaction_wait_s=3.5))
    kind, result = fails(sagas, "Switchover", request)
    assert kind == "SwitchAbandoned"
    named = "at settle transactions: TransactionsOpen: orders[0]: a transaction open since offset 20"
    assert named in result["detail"]
    assert sagas.script.calls == [*PLANNED[:4], *BEFORE_THE_FLIP_UNDONE]  # no fence, no drain
    assert sagas.script.requests[steps.SETTLE][0].timeout_s == 3.5


def test_a_failed_copy_check_is_named_when_the_fence_held(sagas: Sagas) -> None:
    sagas.script.fail[steps.CHECK_COPY] = refused("CopyDiverged", "orders[0]: the target holds 120")
    kind, result = fails(sagas, "Switchover", SwitchRequest(["orders"]))
    assert kind == "SwitchAbandoned"
    assert "CopyDiverged: orders[0]: the target holds 120" in result["detail"]
    assert sagas.script.calls[-2:] == BEFORE_THE_FLIP_UNDONE


def test_a_refused_plan_changes_nothing(sagas: Sagas) -> None:
    sagas.script.refusal = "no link copies from primary to dr"

    kind, result = fails(sagas, "Switchover", SwitchRequest(["orders"], target="dr"))
    assert (kind, result["outcome"], result["detail"]) == (
        "SwitchRefused",
        "refused",
        "no link copies from primary to dr",
    )
    assert sagas.script.calls == [steps.PLAN]


def test_an_approval_is_only_taken_while_awaited_and_a_rejection_compensates(sagas: Sagas) -> None:
    policy = Policy(approval=ApprovalPoint.BEFORE_FLIP)

    async def scenario(s: Sagas) -> tuple[str, str, WorkflowFailureError]:
        early = await s.start("Switchover", SwitchRequest(["orders"], policy=policy))
        with pytest.raises(WorkflowUpdateFailedError) as nobody_waits:  # refused by the validator
            await early.execute_update("approve", Decision("user:early"), result_type=str)
        await until(early, lambda p: p.awaiting_approval == "before the flip")
        with pytest.raises(WorkflowUpdateFailedError) as anonymous:
            await early.execute_update("approve", Decision(" "), result_type=str)
        said = await early.execute_update(
            "reject", Decision("user:oncall", "not during the sale"), result_type=str
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await early.result()
        await capture(early, "switchover-rejected")
        return str(nobody_waits.value.cause), said + " | " + str(anonymous.value.cause), failed.value

    nobody, said, error = sagas.run(scenario)
    assert "this saga is not waiting for an approval" in nobody
    assert said.startswith("rejected by user:oncall")
    assert "name who decides" in said
    kind, result = failure(error)
    assert kind == "SwitchAbandoned"
    assert "rejected before the flip by user:oncall: not during the sale" in result["detail"]
    assert result["approvals"] == ["rejected before the flip by user:oncall: not during the sale"]
    assert sagas.script.calls == [*PLANNED[:7], *BEFORE_THE_FLIP_UNDONE]


def test_an_approval_lets_the_switch_go_on(sagas: Sagas) -> None:
    policy = Policy(approval=ApprovalPoint.BEFORE_BLOCK)

    async def scenario(s: Sagas) -> Any:
        handle = await s.start("Switchover", SwitchRequest(["orders"], policy=policy))
        waiting = await until(handle, lambda p: p.awaiting_approval is not None)
        assert sagas.script.calls == [steps.PLAN]  # nothing held while it waits
        assert waiting.phase == "awaiting approval"
        await handle.execute_update("approve", Decision("user:lead", "go"), result_type=str)
        result = await handle.result()
        await capture(handle, "switchover-approved")
        return result

    result = sagas.run(scenario)
    assert result.outcome == "switched"
    assert result.approvals == ["approved before the block by user:lead: go"]
    assert sagas.script.calls == PLANNED


def test_an_approval_not_given_in_time_compensates(sagas: Sagas) -> None:
    policy = Policy(approval=ApprovalPoint.BEFORE_FLIP, approval_timeout_s=1)

    kind, result = fails(sagas, "Switchover", SwitchRequest(["orders"], policy=policy))
    assert kind == "SwitchAbandoned"
    assert "no approval before the flip within 1s" in result["detail"]
    assert sagas.script.calls[-2:] == BEFORE_THE_FLIP_UNDONE


def test_a_failover_not_approved_in_time_ends_compensated_before_its_lock(sagas: Sagas) -> None:
    policy = Policy(approval=ApprovalPoint.BEFORE_FLIP, approval_timeout_s=1)

    kind, result = fails(sagas, "Failover", SwitchRequest(["orders"], policy=policy))
    assert kind == "SwitchAbandoned"
    assert result["outcome"] == "compensated"
    assert "failover abandoned before the flip: no approval before the flip within 1s" in result["detail"]
    assert steps.LOCK not in sagas.script.calls
    assert steps.FLIP not in sagas.script.calls


def test_cancelled_before_the_flip_it_undoes_what_it_did(sagas: Sagas) -> None:
    sagas.script.hold[steps.DRAIN] = asyncio.Event()  # the drain never ends by itself

    async def scenario(s: Sagas) -> BaseException:
        handle = await s.start("Switchover", SwitchRequest(["orders"]))
        await until(handle, lambda p: p.phase == "drain")
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        return failed.value

    kind, result = failure(sagas.run(scenario))
    assert kind == "SwitchAbandoned"
    assert "switch abandoned before the flip at drain: cancelled" in result["detail"]
    assert sagas.script.calls[-2:] == BEFORE_THE_FLIP_UNDONE
    assert steps.FLIP not in sagas.script.calls


def test_a_failover_refuses_a_source_that_answers_unless_forced(sagas: Sagas) -> None:
    sagas.script.reachable = True

    async def scenario(s: Sagas) -> tuple[WorkflowFailureError, Any]:
        handle = await s.start("Failover", SwitchRequest(["orders"]))
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        forced = await s.start("Failover", SwitchRequest(["orders"], force=True))
        return failed.value, await forced.result()

    error, forced = sagas.run(scenario)
    kind, result = failure(error)
    assert kind == "SwitchRefused"
    assert "primary still answers" in result["detail"]
    assert forced.outcome == "switched"
    assert forced.groups_synced == 2  # forced, the source answers: the groups' last offsets come over
    # just before the flip, while their members still commit there, and never moved back on the target
    calls = sagas.script.calls
    assert calls.count(steps.SYNC_GROUPS) == 1
    assert calls.index(steps.LOCK) < calls.index(steps.SYNC_GROUPS) < calls.index(steps.FLIP)
    assert [r.rewind for r in sagas.script.requests[steps.SYNC_GROUPS]] == [True]  # the source the truth


def test_a_forced_failover_whose_groups_cannot_come_over_before_its_flip_flips_and_tries_after(
    sagas: Sagas,
) -> None:
    """A member on the target already (from an earlier switch, until its session ends): the flip is not
    held up for it; the groups are carried after the flip as before, once the target is idle."""
    sagas.script.reachable = True
    sagas.script.fail[steps.SYNC_GROUPS] = [refused("GroupActive", "still active on standby after 0s")]

    async def scenario(s: Sagas) -> Any:
        return await (await s.start("Failover", SwitchRequest(["orders"], force=True))).result()

    forced = sagas.run(scenario)
    assert forced.outcome == "switched"
    assert forced.groups_synced == 2
    assert "groups not carried before the flip (GroupActive" in forced.detail
    assert [r.rewind for r in sagas.script.requests[steps.SYNC_GROUPS]] == [True, False]
    calls = sagas.script.calls
    assert calls.count(steps.SYNC_GROUPS) == 2
    assert (
        calls.index(steps.SYNC_GROUPS)
        < calls.index(steps.FLIP)
        < len(calls) - 1 - calls[::-1].index(steps.SYNC_GROUPS)
    )


def test_a_failover_flips_at_once_shields_and_measures_the_loss(sagas: Sagas) -> None:
    policy = Policy(recovery_wait_s=60)

    async def scenario(s: Sagas) -> Any:
        handle = await s.start("Failover", SwitchRequest(["orders"], policy=policy))
        await until(handle, lambda p: any(st.name == "probe old primary" for st in p.steps))
        sagas.script.reachable = True  # the old primary answers again
        result = await handle.result()
        await capture(handle, "failover-switched")
        return result

    result = sagas.run(scenario)
    calls = sagas.script.calls
    assert calls[:7] == [
        steps.PLAN, steps.PROBE, steps.LOCK, steps.FLIP, steps.AWAIT_ACKS, steps.MEASURE_LOSS, steps.UNLOCK,
    ]  # fmt: skip
    assert steps.BLOCK not in calls  # nothing to hold...
    assert steps.DRAIN not in calls  # ...and nothing to drain from
    flip = sagas.script.requests[steps.FLIP][0]
    assert (flip.shield_source, flip.ends, flip.epochs) == (True, [], {"orders": 3})
    assert [(p.topic, p.partition, p.records) for p in result.rpo] == [("orders", 0, 7), ("orders", 1, 7)]
    assert result.lost_window_records == 14
    assert calls[-1] == steps.FIND_LOST_WINDOW


def _failover_once_the_old_primary_answers(sagas: Sagas) -> Any:
    async def scenario(s: Sagas) -> Any:
        handle = await s.start("Failover", SwitchRequest(["orders"], policy=Policy(recovery_wait_s=60)))
        await until(handle, lambda p: any(st.name == "probe old primary" for st in p.steps))
        sagas.script.reachable = True
        return await handle.result()

    return sagas.run(scenario)


def test_a_lost_window_whose_first_reads_fail_is_measured_on_a_second_attempt(sagas: Sagas) -> None:
    """The old primary, just back, may refuse the job's first reads (a failover in CI met this)."""
    sagas.script.fail[steps.FIND_LOST_WINDOW] = [retryable("KafkaOperationError", "leader not available")]
    result = _failover_once_the_old_primary_answers(sagas)
    assert (result.outcome, result.lost_window_records) == ("switched", 14)
    assert sagas.script.calls.count(steps.FIND_LOST_WINDOW) == 2


def test_a_lost_window_that_cannot_be_measured_leaves_the_failover_switched_and_says_how_to_measure_it(
    sagas: Sagas,
) -> None:
    sagas.script.fail[steps.FIND_LOST_WINDOW] = refused("SparkJobFailed", "the export job failed")
    result = _failover_once_the_old_primary_answers(sagas)
    assert result.outcome == "switched"  # its clients are on the standby: the failover happened
    assert result.lost_window_records is None
    assert "lost window not measured (SparkJobFailed: the export job failed)" in result.detail
    assert "switchyard reconcile find" in result.detail
    assert sagas.script.calls.count(steps.FIND_LOST_WINDOW) == 1  # the job's own failure is not retried
    assert [s.state for s in result.steps if s.name == "lost window"] == ["failed"]


MIGRATION = [steps.TOPIC_USERS, steps.PREPARE_MIGRATION, *PLANNED]


def test_a_topic_migration_moves_every_user_and_retires_the_source_once_approved(sagas: Sagas) -> None:
    async def scenario(s: Sagas) -> Any:
        handle = await s.start("TopicMigration", MigrationRequest("orders", "standby", actor="user:test"))
        waiting = await until(handle, lambda p: p.awaiting_approval is not None)
        assert waiting.awaiting_approval == "before retiring the source copy"
        assert sagas.script.calls == MIGRATION  # the clients moved; the source copy waits
        approval = Decision("user:owner", "nobody reads it there")
        await handle.execute_update("approve", approval, result_type=str)
        result = await handle.result()
        await capture(handle, "topic-migration-retired")
        return result

    result = sagas.run(scenario)
    assert sagas.script.calls == [*MIGRATION, steps.RETIRE_TOPIC]
    assert result.outcome == "migrated"
    assert result.moved == ["billing##billing", "billing#orders", "shop#orders"]
    assert sagas.script.requests[steps.PLAN][0].keys == result.moved
    assert sagas.script.requests[steps.PLAN][0].link == "migrate-orders-to-standby"
    assert sagas.script.requests[steps.REVERSE][0].new_link == "migrate-orders-to-standby-back"
    retire = sagas.script.requests[steps.RETIRE_TOPIC][0]
    assert (retire.topic, retire.cluster, retire.delete_topic) == ("orders", "primary", True)
    assert retire.links == ["migrate-orders-to-standby", "migrate-orders-to-standby-back"]
    assert result.detail == (
        "orders deleted on primary; links migrate-orders-to-standby, migrate-orders-to-standby-back removed"
    )


def test_a_topic_migration_keeps_the_source_copy_when_retiring_is_rejected(sagas: Sagas) -> None:
    async def scenario(s: Sagas) -> Any:
        handle = await s.start("TopicMigration", MigrationRequest("orders", "standby"))
        await until(handle, lambda p: p.awaiting_approval is not None)
        await handle.execute_update("reject", Decision("user:owner", "keep it a week"), result_type=str)
        return await handle.result()

    result = sagas.run(scenario)
    assert result.outcome == "migrated"  # the clients moved all the same
    assert steps.RETIRE_TOPIC not in sagas.script.calls
    assert "orders stays on primary, copied back by migrate-orders-to-standby-back" in result.detail
    assert "rejected before retiring the source copy by user:owner: keep it a week" in result.detail


def test_a_topic_migration_whose_copy_fails_moves_nobody(sagas: Sagas) -> None:
    sagas.script.fail[steps.PREPARE_MIGRATION] = refused("CopyFailed", "link stopped copying orders[1]")

    kind, result = fails(sagas, "TopicMigration", MigrationRequest("orders", "standby"))
    assert kind == "MigrationAbandoned"
    assert "CopyFailed: link stopped copying orders[1]; no client was moved" in result["detail"]
    assert sagas.script.calls == [steps.TOPIC_USERS, steps.PREPARE_MIGRATION]


def test_a_topic_migration_abandoned_before_the_flip_leaves_the_copy_running(sagas: Sagas) -> None:
    sagas.script.fail[steps.FLIP] = refused("FenceBroken", "after the block, orders[0] kept being written")

    kind, result = fails(sagas, "TopicMigration", MigrationRequest("orders", "standby"))
    assert kind == "SwitchAbandoned"
    assert "FenceBroken: after the block, orders[0] kept being written" in result["detail"]
    assert result["detail"].endswith(
        "keys unblocked where they were; link migrate-orders-to-standby keeps copying (run the migration "
        "again to finish)"
    )
    assert sagas.script.calls == [*MIGRATION[:10], *BEFORE_THE_FLIP_UNDONE]  # up to the flip, which fenced


PARTITION = [steps.PLAN_PARTITION, steps.HOLD_PARTITION, steps.MIGRATE_PARTITION, steps.CHECK_ORIGIN]


def test_a_partition_migration_holds_takes_effect_and_checks_the_origin(sagas: Sagas) -> None:
    sagas.script.overrun = 3

    async def scenario(s: Sagas) -> Any:
        request = PartitionMigrationRequest("orders", 1, "standby", actor="user:test", reason="rebalance")
        handle = await s.start("PartitionMigration", request)
        result = await handle.result()
        await capture(handle, "partition-migration-migrated")
        return result

    result = sagas.run(scenario)
    assert sagas.script.calls == PARTITION
    assert (result.outcome, result.source, result.target) == ("migrated", "primary", "standby")
    assert (result.block_epoch, result.flip_epoch, result.end_offset) == (20, 21, 1200)
    assert result.keys == ["orders[1]"]
    held = sagas.script.requests[steps.HOLD_PARTITION][0]
    assert (held.topic, held.partition, held.origin, held.target) == ("orders", 1, "primary", "standby")
    assert result.detail == (
        "orders[1] migrated to standby at end offset 1200; 3 records were written to primary past the end "
        "offset 1200, around the gateway: no client reads them"
    )


def test_a_partition_migration_that_fails_before_it_takes_effect_is_called_off(sagas: Sagas) -> None:
    sagas.script.fail[steps.MIGRATE_PARTITION] = refused("BindingConflict", "migration of orders[1] moved")

    async def scenario(s: Sagas) -> WorkflowFailureError:
        handle = await s.start("PartitionMigration", PartitionMigrationRequest("orders", 1, "standby"))
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        await capture(handle, "partition-migration-compensated")
        return failed.value

    kind, result = failure(sagas.run(scenario))
    assert kind == "MigrationAbandoned"
    assert result["outcome"] == "compensated"
    assert result["detail"] == (
        "orders[1] stays on primary: BindingConflict: migration of orders[1] moved at take effect"
    )
    assert sagas.script.calls == [steps.PLAN_PARTITION, steps.HOLD_PARTITION, steps.MIGRATE_PARTITION,
                                  steps.CALL_OFF_PARTITION]  # fmt: skip


def test_a_partition_migration_refused_or_rejected_changes_nothing(sagas: Sagas) -> None:
    sagas.script.refusal = "link p2s copies orders between primary and standby"
    kind, result = fails(sagas, "PartitionMigration", PartitionMigrationRequest("orders", 1, "standby"))
    assert (kind, result["outcome"]) == ("SwitchRefused", "refused")
    assert result["detail"] == "link p2s copies orders between primary and standby"
    assert sagas.script.calls == [steps.PLAN_PARTITION]

    sagas.script.refusal, sagas.script.calls = None, []
    request = PartitionMigrationRequest("orders", 1, "standby", policy=Policy(ApprovalPoint.BEFORE_BLOCK))

    async def scenario(s: Sagas) -> WorkflowFailureError:
        handle = await s.start("PartitionMigration", request)
        waiting = await until(handle, lambda p: p.awaiting_approval is not None)
        assert waiting.awaiting_approval == "before the partition moves"
        await handle.execute_update("reject", Decision("user:owner", "not today"), result_type=str)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        return failed.value

    kind, result = failure(sagas.run(scenario))
    assert (kind, result["outcome"]) == ("SwitchAbandoned", "compensated")
    assert "rejected before the partition moves by user:owner: not today" in result["detail"]
    assert sagas.script.calls == [steps.PLAN_PARTITION]  # nothing to call off: nothing was held


def test_a_partition_migration_whose_step_failed_after_it_took_effect_goes_forward(sagas: Sagas) -> None:
    sagas.script.fail[steps.MIGRATE_PARTITION] = refused("AcksTimeout", "gw-b had not applied epoch 21")
    sagas.script.call_off = PartitionMigrated(21, 0, 1200, 1200)

    async def scenario(s: Sagas) -> Any:
        handle = await s.start("PartitionMigration", PartitionMigrationRequest("orders", 1, "standby"))
        return await handle.result()

    result = sagas.run(scenario)
    assert (result.outcome, result.end_offset, result.flip_epoch) == ("migrated", 1200, 21)
    assert sagas.script.calls == [*PARTITION[:3], steps.CALL_OFF_PARTITION, steps.CHECK_ORIGIN]
