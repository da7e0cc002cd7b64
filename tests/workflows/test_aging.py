"""The aging check and an origin topic's retirement with stand-in activities, on the session's real
Temporal server: the check starts one retirement per unread origin topic and never a second while the
first waits; a retirement deletes only after an approval, keeps the topic on a rejection, and deletes
nothing when its check refuses."""

from __future__ import annotations

from typing import Any

from switchyard.sagas import steps
from switchyard.sagas.ids import origin_retirement_id
from switchyard.sagas.requests import AgingReport, AgingRequest, Decision, OriginRetirementRequest, SagaResult
from tests.workflows.conftest import Sagas, capture
from tests.workflows.test_sagas import fails, until


async def aging(s: Sagas, name: str) -> AgingReport:
    assert s.client is not None
    handle = await s.start(
        "MigrationAging", AgingRequest(60, actor="schedule:test"), workflow_id=f"{s.queue}-{name}",
        result_type=AgingReport,
    )  # fmt: skip
    report: AgingReport = await handle.result()
    await capture(handle, "migration-aging-" + name)
    return report


def test_the_check_starts_one_retirement_which_deletes_after_its_approval(sagas: Sagas) -> None:
    retirement = origin_retirement_id("primary", "orders")

    async def scenario(s: Sagas) -> tuple[AgingReport, AgingReport, SagaResult]:
        first = await aging(s, "started")
        assert s.client is not None
        handle = s.client.get_workflow_handle(retirement, result_type=SagaResult)
        waiting = await until(handle, lambda p: p.awaiting_approval is not None)
        assert waiting.awaiting_approval == "before orders (2 partitions, all aged) is deleted from primary"
        again = await aging(s, "waiting")
        await handle.execute_update("approve", Decision("user:owner", "nothing reads it"), result_type=str)
        result = await handle.result()
        await capture(handle, "origin-retirement-retired")
        return first, again, result

    first, again, result = sagas.run(scenario)
    assert first.origin_ends == ["orders[2]: its origin does not answer yet"]
    assert first.aged == [
        "orders[0]: aged, its origin's log starts at 1200, at or past the origin's end 1200"
    ]
    assert first.waiting == ["orders[2]: not aged, its origin's end is not recorded yet (the origin is away)"]
    assert first.retirements == [f"{retirement}: started, waits for an approval"]
    assert again.retirements == [f"{retirement}: under way already"]
    assert (result.outcome, result.detail) == ("retired", "orders deleted from primary")
    assert result.approvals == ["approved before orders (2 partitions, all aged) is deleted from primary by "
                                "user:owner: nothing reads it"]  # fmt: skip
    checks = [steps.RECORD_ORIGIN_ENDS, steps.AGE_MIGRATIONS]
    assert sagas.script.calls == [*checks, steps.CHECK_ORIGIN_TOPIC, *checks, steps.RETIRE_ORIGIN_TOPIC]


def test_a_rejected_retirement_keeps_the_topic_and_a_refused_one_deletes_nothing(sagas: Sagas) -> None:
    request = OriginRetirementRequest("primary", "orders", 60, actor="user:test")

    async def scenario(s: Sagas) -> Any:
        handle = await s.start("RetireOriginTopic", request)
        await until(handle, lambda p: p.awaiting_approval is not None)
        await handle.execute_update("reject", Decision("user:owner", "an audit reads it"), result_type=str)
        result = await handle.result()
        await capture(handle, "origin-retirement-kept")
        return result

    kept = sagas.run(scenario)
    assert kept.outcome == "kept"
    assert kept.detail == (
        "orders stays on primary: rejected before orders (2 partitions, all aged) is deleted from primary by "
        "user:owner: an audit reads it"
    )
    assert sagas.script.calls == [steps.CHECK_ORIGIN_TOPIC]

    sagas.script.calls, sagas.script.refusal = [], "orders[1] on primary is not aged (migrated from primary)"
    kind, result = fails(sagas, "RetireOriginTopic", request)
    assert (kind, result["outcome"]) == ("SwitchRefused", "refused")
    assert result["detail"] == "orders[1] on primary is not aged (migrated from primary)"
    assert sagas.script.calls == [steps.CHECK_ORIGIN_TOPIC]
