"""The cluster evacuation's decisions with stand-in activities on the session's real Temporal server: its
batches run as the real Switchover workflows (children), in the plan's order; it stops between them when
paused, when a batch's switch compensates, or to roll the last batch back; nothing is deleted on the
source without an approval; and a plan that names what cannot move moves nothing."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle

from switchyard.sagas import evacuations, steps
from switchyard.sagas.evacuations import BatchOutcome, EvacuationRequest, EvacuationResult
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import ApprovalPoint, Decision, Policy, SwitchRequest
from tests.workflows.conftest import Sagas, capture, refused
from tests.workflows.test_sagas import until

LINK = "evacuate-primary-to-standby"


async def _start(s: Sagas, **changes: Any) -> WorkflowHandle[Any, EvacuationResult]:
    assert s.client is not None
    request = EvacuationRequest("primary", "standby", "user:test", "test", watch_s=0.0, **changes)
    return await s.start(
        "ClusterEvacuation", request, workflow_id=f"test-evacuation-{uuid.uuid4().hex[:8]}",
        result_type=EvacuationResult,
    )  # fmt: skip


async def _decide(handle: WorkflowHandle[Any, Any], where: str, *, approve: bool = True) -> None:
    await until(handle, lambda p: (p.awaiting_approval or "").startswith(where), f"asked {where}")
    name = "approve" if approve else "reject"
    await handle.execute_update(name, Decision("user:test", where), result_type=str)


def _switched_keys(sagas: Sagas) -> list[tuple[str, list[str]]]:
    return [(p.kind, p.keys) for p in sagas.script.requests[steps.PLAN]]


def test_the_batches_switch_in_order_and_the_source_is_retired_after_an_approval(sagas: Sagas) -> None:
    async def scenario(s: Sagas) -> EvacuationResult:
        handle = await _start(s)
        await _decide(handle, "before deleting")
        ended = await handle.result()
        await capture(handle, "evacuation-stand-ins-evacuated")
        return ended

    result: EvacuationResult = sagas.run(scenario)
    assert result.outcome == "evacuated", result.detail
    assert [(b.number, b.outcome) for b in result.batches] == [
        (1, "switched"),
        (2, "switched"),
        (3, "switched"),
    ]
    assert _switched_keys(sagas) == [
        ("switchover", ["shop"]),
        ("switchover", ["billing"]),
        ("switchover", ["audit"]),
    ]
    assert {p.link for p in sagas.script.requests[steps.PLAN]} == {LINK}  # each batch split off the one link
    (copy,) = sagas.script.requests[evacuations.COPY_CLUSTER]
    assert copy.topics == ["audit-events", "billing-events", "idle", "shop-events"]
    (retire,) = sagas.script.requests[evacuations.RETIRE_EVACUATED]
    assert sorted(retire.topics) == copy.topics
    assert (retire.unused, retire.unused_link) == (["idle"], LINK)
    assert LINK in retire.links
    assert len(retire.links) == 7  # each batch's link and reverse, and the rest
    assert result.retired == retire.topics
    assert any("approved before deleting 4 topics on primary" in a for a in result.approvals)


def test_what_cannot_move_stops_the_evacuation_before_anything_moves(sagas: Sagas) -> None:
    sagas.script.refusal = "orders: written to by a client the gateways do not see"

    async def scenario(s: Sagas) -> None:
        handle = await _start(s)
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        assert getattr(failed.value.cause, "type", None) == "EvacuationRefused"
        assert "the gateways do not see" in str(failed.value.cause)

    sagas.run(scenario)
    assert evacuations.COPY_CLUSTER not in sagas.script.calls
    assert steps.PLAN not in sagas.script.calls


def test_a_batch_rolled_back_goes_back_and_the_evacuation_pauses_until_resumed(sagas: Sagas) -> None:
    """Each batch after an approval; at the second's, the first is rolled back (a Switchback of its keys
    along its reverse link), then the evacuation waits, paused; resumed, it asks again and goes on. A
    rejected retirement deletes nothing."""

    async def scenario(s: Sagas) -> EvacuationResult:
        handle = await _start(s, approve_batches=True)
        await _decide(handle, "before batch 1 of 3")
        await until(
            handle, lambda p: (p.awaiting_approval or "").startswith("before batch 2"), "asked before batch 2"
        )
        await handle.signal("roll_back")
        await until(handle, lambda p: p.phase == "paused", "paused")
        batches = await handle.query("batches", result_type=list[BatchOutcome])
        assert [b.outcome for b in batches] == ["rolled back", "not started", "not started"]
        await handle.signal("resume")
        await _decide(handle, "before batch 2 of 3")
        await _decide(handle, "before batch 3 of 3")
        await _decide(handle, "before deleting", approve=False)
        ended = await handle.result()
        await capture(handle, "evacuation-stand-ins-rolled-back")
        return ended

    result: EvacuationResult = sagas.run(scenario)
    assert result.outcome == "rolled back", result.detail
    assert [b.outcome for b in result.batches] == ["rolled back", "switched", "switched"]
    assert _switched_keys(sagas) == [
        ("switchover", ["shop"]), ("switchback", ["shop"]),
        ("switchover", ["billing"]), ("switchover", ["audit"]),
    ]  # fmt: skip
    reversed_to = sagas.script.requests[steps.REVERSE][0].new_link
    assert (
        sagas.script.requests[steps.PLAN][1].link == reversed_to
    )  # back along the first batch's reverse link
    assert evacuations.RETIRE_EVACUATED not in sagas.script.calls
    assert "rejected before deleting 2 topics on primary" in result.detail


def test_a_batch_whose_switch_compensates_pauses_the_evacuation_and_is_tried_again_when_resumed(
    sagas: Sagas,
) -> None:
    sagas.script.fail[steps.CHECK_COPY] = [refused("CopyDiverged", "the copy differs (stand-in)")]

    async def scenario(s: Sagas) -> EvacuationResult:
        handle = await _start(s)
        progress = await until(handle, lambda p: p.phase == "paused", "paused")
        assert any(step.name == "batch 1" and step.state == "failed" for step in progress.steps), progress
        await handle.signal("resume")
        await _decide(handle, "before deleting")
        return await handle.result()

    result: EvacuationResult = sagas.run(scenario)
    assert result.outcome == "evacuated", result.detail
    assert _switched_keys(sagas)[:2] == [("switchover", ["shop"]), ("switchover", ["shop"])]
    assert steps.UNBLOCK in sagas.script.calls  # the first attempt compensated


def test_a_roll_back_asked_at_the_retirement_goes_first_and_the_retirement_is_asked_again(
    sagas: Sagas,
) -> None:
    async def scenario(s: Sagas) -> EvacuationResult:
        handle = await _start(s)
        await until(
            handle, lambda p: (p.awaiting_approval or "").startswith("before deleting 4"), "asked to retire"
        )
        await handle.signal("roll_back")
        await until(handle, lambda p: p.phase == "paused", "paused")
        await handle.signal("resume")
        await _decide(handle, "before deleting 2 topics")  # the last batch's and the unused one kept
        return await handle.result()

    result: EvacuationResult = sagas.run(scenario)
    assert [b.outcome for b in result.batches] == ["switched", "switched", "rolled back"]
    assert result.outcome == "rolled back"
    (retire,) = sagas.script.requests[evacuations.RETIRE_EVACUATED]
    assert sorted(retire.topics) == ["billing-events", "shop-events"]
    assert retire.unused == []
    assert LINK not in retire.links  # it still copies the unused topic (and nothing of the rolled-back batch)


def test_a_batch_whose_switch_cannot_start_pauses_the_evacuation_until_resumed(sagas: Sagas) -> None:
    """A saga of the batch's keys runs already (here: a switchover waiting for its approval): the batch's
    switch is refused its start, the evacuation pauses; once that saga ended, resumed, the batch moves."""

    async def scenario(s: Sagas) -> EvacuationResult:
        assert s.client is not None
        policy = Policy(approval=ApprovalPoint.BEFORE_BLOCK)
        blocker = await s.start(
            "Switchover", SwitchRequest(["shop"], policy=policy), workflow_id=saga_id(["shop"])
        )
        await until(blocker, lambda p: p.awaiting_approval is not None, "waiting")
        handle = await _start(s)
        progress = await until(handle, lambda p: p.phase == "paused", "paused")
        assert any(step.name == "batch 1" and step.state == "failed" for step in progress.steps), progress
        await blocker.execute_update("reject", Decision("user:test", "not now"), result_type=str)
        with pytest.raises(WorkflowFailureError):
            await blocker.result()
        await handle.signal("resume")
        await _decide(handle, "before deleting")
        return await handle.result()

    result: EvacuationResult = sagas.run(scenario)
    assert result.outcome == "evacuated", result.detail
    assert [b.outcome for b in result.batches] == ["switched"] * 3
