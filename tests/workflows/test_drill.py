"""The drill workflow's decisions with stand-in activities on the session's real Temporal server: its
switches run as the real Switchover and Switchback workflows (children), its verdict follows what they
and the canary found, and it tidies up whatever happened — a drill that finds a problem completes, naming
it; only a drill that could not run is abandoned."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
from temporalio.client import WorkflowFailureError, WorkflowHandle, WorkflowQueryFailedError
from temporalio.exceptions import CancelledError
from temporalio.service import RPCError

from switchyard.sagas import steps
from switchyard.sagas.drills import DrillRequest, DrillResult, Objectives
from switchyard.sagas.ids import saga_id
from switchyard.sagas.requests import Decision, Progress
from tests.workflows.conftest import Sagas, capture, refused


async def start_drill(s: Sagas, request: DrillRequest) -> WorkflowHandle[Any, DrillResult]:
    assert s.client is not None
    return await s.start(
        "Drill", request, workflow_id=f"test-drill-{uuid.uuid4().hex[:8]}", result_type=DrillResult
    )


def drill(sagas: Sagas, name: str = "", **changes: Any) -> DrillResult:
    request = DrillRequest(name or f"t{uuid.uuid4().hex[:8]}", "primary-to-standby", warmup_s=0.2, **changes)

    async def scenario(s: Sagas) -> DrillResult:
        assert s.client is not None
        handle = await start_drill(s, request)
        ended: DrillResult = await handle.result()
        await capture(handle, f"drill-stand-ins-{ended.outcome}")
        return ended

    result: DrillResult = sagas.run(scenario)
    return result


def test_a_drill_switches_over_and_back_then_verifies_and_tidies(sagas: Sagas) -> None:
    result = drill(sagas)
    assert (result.outcome, result.detail) == ("passed", "every objective met")
    assert [(s["kind"], s["outcome"]) for s in result.sagas] == [
        ("switchover", "switched"),
        ("switchback", "switched"),
    ]
    assert all(s["run_id"] for s in result.sagas)
    assert result.canary is not None
    assert [kind for kind, _, _ in result.canary.timeline.switches] == ["switchover", "switchback"]
    assert result.verification is not None
    assert result.verification.verdict == "clean"
    # the switchback went along the reverse link the switchover made, the verification along its reverse
    reverse = result.sagas[0]["reverse_link"]
    assert sagas.script.requests[steps.PLAN][1].link == reverse
    assert sagas.script.requests[steps.VERIFY][0].link_id == result.sagas[1]["reverse_link"]
    assert sagas.script.requests[steps.VERIFY][0].groups == []
    tidied = sagas.script.requests[steps.DRILL_TIDY][0]
    assert (
        tidied.links == [result.setup.link, reverse, result.sagas[1]["reverse_link"]]
        if result.setup
        else False
    )


def test_a_switch_that_compensates_fails_the_drill_naming_it_and_still_tidies(sagas: Sagas) -> None:
    sagas.script.fail[steps.FLIP] = refused("FlipFailed", "the flip could not be written")
    result = drill(sagas)
    assert result.outcome == "failed"
    assert [(s["kind"], s["outcome"]) for s in result.sagas] == [("switchover", "compensated")]
    assert result.failures[0].startswith("switchover compensated: switch abandoned before the flip at flip")
    assert steps.VERIFY not in sagas.script.calls  # nothing switched back to verify
    assert steps.DRILL_TIDY in sagas.script.calls


def test_a_canary_that_never_flows_abandons_the_drill_before_any_switch(sagas: Sagas) -> None:
    sagas.script.fail[steps.DRILL_CANARY] = refused("CanaryStalled", "traffic stalled: 0 acked")
    result = drill(sagas)
    assert result.outcome == "abandoned"
    assert result.detail == "the drill could not run at canary: CanaryStalled: traffic stalled: 0 acked"
    assert steps.PLAN not in sagas.script.calls
    assert steps.DRILL_TIDY in sagas.script.calls


def test_a_drill_over_its_objectives_fails_and_a_failed_tidy_is_named(sagas: Sagas) -> None:
    sagas.script.fail[steps.DRILL_TIDY] = refused("LinkGone", "ZooKeeper away")
    result = drill(sagas, objectives=Objectives(pause_s=0.1))
    assert result.outcome == "failed"
    assert result.failures == [
        "switchover: the producer waited 0.50s, over the objective 0.1s",
        "switchback: the producer waited 0.50s, over the objective 0.1s",
    ]
    assert "; not tidied (LinkGone: ZooKeeper away): links " in result.detail


def test_a_drill_cancelled_between_its_switches_stops_its_canary_tidies_and_records_its_end(
    sagas: Sagas,
) -> None:
    request = DrillRequest(f"t{uuid.uuid4().hex[:8]}", "primary-to-standby", warmup_s=60)

    async def scenario(s: Sagas) -> BaseException:
        assert s.client is not None
        handle = await s.start("Drill", request, workflow_id=f"test-drill-{uuid.uuid4().hex[:8]}")
        while steps.DRILL_CANARY not in s.script.calls:  # the canary runs: the drill sleeps its warm-up
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)
        await handle.cancel()
        with pytest.raises(WorkflowFailureError) as ended:
            await handle.result()
        return ended.value.cause

    cause = sagas.run(scenario)
    assert isinstance(cause, CancelledError), cause
    assert steps.PLAN not in sagas.script.calls  # no switch started
    assert steps.DRILL_TIDY in sagas.script.calls
    ends = [r for r in sagas.script.requests[steps.RECORD] if r.event == "ended"]
    assert [(r.outcome, r.detail) for r in ends] == [("cancelled", "cancelled")]


def test_a_drill_on_application_keys_switches_them_too_each_switch_after_an_approval(sagas: Sagas) -> None:
    keys = [f"shop-{uuid.uuid4().hex[:6]}"]
    request = DrillRequest(f"t{uuid.uuid4().hex[:8]}", "primary-to-standby", warmup_s=0.2, keys=keys)

    async def scenario(s: Sagas) -> tuple[DrillResult, list[str]]:
        assert s.client is not None
        handle = await start_drill(s, request)
        approved: list[str] = []
        application = s.client.get_workflow_handle(saga_id(keys))
        while len(approved) < 2:  # the application's switchover, then its switchback, each waits for one
            with contextlib.suppress(RPCError, WorkflowQueryFailedError):
                waiting = (await application.query("progress", result_type=Progress)).awaiting_approval
                if waiting and len(approved) < len(sagas.script.requests.get(steps.PLAN, [])) - 2:
                    approved.append(await application.execute_update("approve", Decision(by="user:alice")))
            await asyncio.sleep(0.1)
        ended: DrillResult = await handle.result()
        await capture(handle, "drill-stand-ins-application-keys")
        return ended, approved

    result, approved = sagas.run(scenario)
    assert approved == ["approved by user:alice"] * 2
    assert (result.outcome, result.detail) == ("passed", "every objective met")
    assert [(s["kind"], s["keys"], s["outcome"]) for s in result.sagas] == [
        ("switchover", [f"drill-{request.name}"], "switched"),
        ("switchback", [f"drill-{request.name}"], "switched"),
        ("switchover", keys, "switched"),
        ("switchback", keys, "switched"),
    ]
    assert all(s["approvals"] for s in result.sagas[2:])
    assert not any(s["approvals"] for s in result.sagas[:2])
    assert sagas.script.requests[steps.PLAN][2].link == "primary-to-standby"  # the application's own link
    assert result.setup is not None
    tidied = sagas.script.requests[steps.DRILL_TIDY][0].links  # the canary's; the application's stay its own
    assert tidied == [result.setup.link, result.sagas[0]["reverse_link"], result.sagas[1]["reverse_link"]]
