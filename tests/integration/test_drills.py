"""A DR drill on a Temporal Schedule, end to end on the session stack: the schedule fires, the drill's
canary produces and consumes through the real gateway while its switchover and switchback run as real
sagas, the Spark job verifies both copies, and the drill's report — RTO, RPO per partition, duplicates,
the consumer group's resume check — is in the ledger. A firing while the drill runs is skipped."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from switchyard import temporal
from switchyard.drills import schedules
from switchyard.ledger import Ledger
from switchyard.routing.store import RoutingStore
from switchyard.sagas.drills import DRILL_KIND
from tests.helpers.live import Live, capture, unique

pytestmark = pytest.mark.integration
ACTOR = "user:test"


def _schedule_of(live: Live, name: str) -> schedules.ScheduledDrill:
    async def ask() -> schedules.ScheduledDrill:
        return await schedules.describe(live.effective, name)

    return asyncio.run(ask())


def _wait(what: str, check: object, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"{what} within {timeout_s:g}s"
        time.sleep(0.5)


def _result_of(live: Live, workflow_id: str) -> dict[str, object]:
    async def wait() -> dict[str, object]:
        client = await temporal.connect(live.effective)
        found = await client.get_workflow_handle(workflow_id).result()
        assert isinstance(found, dict)
        return found

    return asyncio.run(asyncio.wait_for(wait(), 600))


def test_a_scheduled_drill_fires_skips_an_overlapping_firing_and_leaves_its_report(
    live: Live, routing: RoutingStore
) -> None:
    assert live.gateway is not None
    exercised, name = unique("link"), unique("nightly")
    routing.create_link(
        exercised, "primary", "standby", include=[unique("orders")], actor=ACTOR, reason="test"
    )

    scheduled = live.cli(
        "drill", "schedule", name, "--link", exercised, "--every", "5s", "--rate", "200",
        "--bootstrap", live.gateway.bootstrap, "--pause", "20s",
    )  # fmt: skip
    assert scheduled.returncode == 0, scheduled.stdout + scheduled.stderr
    try:
        _wait("the schedule started a drill", lambda: _schedule_of(live, name).running, 30)
        workflow_id = _schedule_of(live, name).running[0]
        again = live.cli("drill", "run", name)
        assert again.returncode != 0
        assert "running already" in again.stderr, again.stdout + again.stderr
        _wait("a firing during the drill was skipped", lambda: _schedule_of(live, name).skipped >= 1, 30)
        paused = live.cli("drill", "pause", name, "--reason", "the test has its run")
        assert paused.returncode == 0, paused.stderr
        result = _result_of(live, workflow_id)
        listed = live.cli("drill", "list")
        assert name in listed.stdout, listed.stdout + listed.stderr
        assert "paused" in listed.stdout
    finally:
        live.cli("drill", "delete", name)
    _passed(result)
    _in_the_ledger(live, workflow_id, result)
    _reported(live, workflow_id, result)
    for process in (live.gateway, live.mirror, *live.workers):  # none died of the drill's tidy-up
        assert process is not None
        assert process.process is not None
        assert process.process.poll() is None, f"{process.argv} exited {process.process.returncode}"
    setup = result["setup"]
    assert isinstance(setup, dict)
    assert routing.link(setup["link"]) is None, "the drill tidied its link away"


def _passed(result: dict[str, object]) -> None:
    """Both switches done, and what the canary saw: nothing lost, doubled or skipped."""
    assert result["objectives"] == {"rto_s": 30.0, "pause_s": 20.0, "rpo_records": 0}  # as scheduled
    assert result["outcome"] == "passed", (result["detail"], result["failures"], result["verification"])
    sagas = result["sagas"]
    assert isinstance(sagas, list)
    assert [(s["kind"], s["outcome"]) for s in sagas] == [
        ("switchover", "switched"),
        ("switchback", "switched"),
    ]
    canary = result["canary"]
    assert isinstance(canary, dict)
    assert canary["stopped_by"] == "switches over"
    assert canary["acked"] > 0
    assert canary["failed"] == 0
    assert len(canary["partitions"]) == 3  # RPO per partition: every acknowledged record on the primary
    assert sum(p["acked"] for p in canary["partitions"]) == canary["acked"]
    assert all(p["lost"] == 0 and p["written_twice"] == 0 for p in canary["partitions"])
    assert [g["resumed_at_commit"] for g in canary["groups"]] == [True]
    assert [kind for kind, _, _ in canary["timeline"]["switches"]] == ["switchover", "switchback"]
    assert sum(canary["timeline"]["acked"]) == canary["acked"]
    verification = result["verification"]
    assert isinstance(verification, dict)
    assert verification["verdict"] == "clean"
    assert verification["duplicates"] == 0
    assert verification["records"] >= canary["acked"]


def _in_the_ledger(live: Live, workflow_id: str, result: dict[str, object]) -> None:
    ledger = Ledger.open(f"sqlite:///{live.ledger}")
    try:
        runs = [r for r in ledger.saga_runs(workflow_id) if r.kind == DRILL_KIND]
        assert len(runs) == 1
        assert runs[0].outcome == "passed"
        capture(live, workflow_id, runs[0].run_id, "drill-passed")
        steps = {s.step for s in ledger.saga_steps(runs[0].run_id)}
        assert {"drill_prepare", "drill_canary", "drill_tidy"} <= steps, steps
        verified = ledger.verification(f"{runs[0].run_id}-verify")  # the Spark job's own record
        assert verified is not None
        assert verified["verdict"] == "clean"
        for saga in result["sagas"]:  # type: ignore[attr-defined]  # each switch's own trail, under the run the drill names
            assert ledger.saga_steps(saga["run_id"]), saga["kind"]
    finally:
        ledger.close()


def _reported(live: Live, workflow_id: str, result: dict[str, object]) -> None:
    """``switchyard report`` reads the drill from the ledger: passed, RPO per partition, the group's
    resumption, the Spark job's duplicates, each switch's steps."""
    shown = live.cli("report", workflow_id)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f"drill {result['drill']}: PASS" in shown.stdout, shown.stdout
    found = live.cli("report", workflow_id, "--json")
    assert found.returncode == 0, found.stderr
    doc = json.loads(found.stdout)
    assert doc["verdict"] == {"status": "pass", "missed": []}
    assert [(p["partition"], p["lost_records"]) for p in doc["rpo"]["partitions"]] == [(0, 0), (1, 0), (2, 0)]
    assert [g["resumed_at_commit"] for g in doc["groups"]] == [True]
    assert doc["verification"]["duplicates"] == 0
    assert {"switchover", "switchback"} <= {s["saga"] for s in doc["steps"]}, doc["steps"]
