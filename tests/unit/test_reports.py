"""Reports built from a real ledger (SQLite) holding runs as the workers write them: the figures, the
verdict against the objectives with each miss named, a drill's switches' steps, runs stopped halfway,
references that name nothing, and the JSON document's shape."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path

import pytest

from switchyard.errors import SagaError
from switchyard.ledger import Ledger
from switchyard.reports import ReportError, report_of
from switchyard.reports.document import document
from switchyard.reports.model import FAIL, INCOMPLETE, PASS
from switchyard.reports.tables import facts
from switchyard.reports.text import DETAIL_WIDTH, text_report
from switchyard.sagas.drills import DrillResult, Objectives
from tests.helpers.reports import HOSTILE, RUNS, T0, filled_ledger, switch_result, write_run

DEFAULT = Objectives()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    opened = filled_ledger(tmp_path_factory.mktemp("reports") / "ledger.db")
    yield opened
    opened.close()


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Ledger]:
    """An empty ledger, for a test's own odd runs."""
    opened = Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}")
    yield opened
    opened.close()


def test_a_switched_switchover_passes_with_its_figures(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.switched, DEFAULT)
    assert (report.run.kind, report.name, report.run.outcome) == ("switchover", "orders", "switched")
    assert (report.run.actor, report.run.reason, report.took_s) == ("user:alice", HOSTILE, 4.0)
    assert report.verdict.status == PASS
    assert report.verdict.missed == []
    (switch,) = report.switches
    assert (switch.rto_s, switch.pause_s, switch.producer_wait_s) == (4.21, 1.27, None)
    assert report.lost_records is None  # a planned switch copies everything before its flip
    assert [s.step for s in report.steps][:3] == ["lock_keys", "plan_switch", "block_keys"]
    assert {s.saga for s in report.steps} == {"switchover"}
    assert report.steps[0].took_s == pytest.approx(0.05)


def test_a_compensated_switchover_fails_naming_the_step_that_gave_up(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.compensated, DEFAULT)
    assert report.verdict.status == FAIL
    assert report.verdict.missed == [
        "switchover ended compensated: DrainTimeout: partition orders-1 copied to 880 of 912 after 60s "
        "at drain"
    ]
    assert report.switches[0].rto_s is None  # nothing switched: no RTO to judge
    drains = [(s.attempt, s.outcome, s.took_s) for s in report.steps if s.step == "drain_link"]
    assert drains == [(1, "failed", 60.0), (2, "failed", 60.0)]
    assert report.steps[-1].step == "unlock_keys"


def test_a_failover_fails_on_what_it_lost_naming_the_partitions(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.failover, DEFAULT)
    assert report.lost_records == 15
    assert [(p.topic, p.partition, p.lost_records) for p in report.partitions] == [
        ("billing", 0, 0),
        ("billing", 1, 12),
        ("billing", 2, 3),
    ]
    assert report.verdict.missed == [
        "15 acknowledged records lost (billing-1: 12, billing-2: 3), over the objective of 0"
    ]
    assert report_of(ledger, RUNS.failover, Objectives(rpo_records=15)).verdict.status == PASS


def test_a_failover_is_judged_on_its_measured_lost_window(scratch: Ledger) -> None:
    from switchyard.sagas.requests import PartitionLoss

    result = switch_result(
        "failover", ["billing"], "switched", rto_ms=2000, pause_ms=2000,
        rpo=[PartitionLoss("billing", 0, 10, 0)], lost_window_records=4,
    )  # fmt: skip
    write_run(
        scratch, "r", "switchyard:billing", "failover", ["billing"], at=T0, steps=[], result=result, took_s=3
    )
    report = report_of(scratch, "r", Objectives(rpo_records=5))
    assert (report.lost_records, report.measured_lost_records) == (10, 4)
    assert report.verdict.status == PASS  # the source, recovered, shows 4 lost, not the mirror's guess of 10


def test_a_saga_verified_by_spark_reports_its_duplicates(scratch: Ledger) -> None:
    result = switch_result(
        "switchover", ["a"], "switched", rto_ms=9000, pause_ms=8000, verdict="clean (Spark)"
    )
    write_run(scratch, "v", "switchyard:a", "switchover", ["a"], at=T0, steps=[], result=result, took_s=10)
    found = {"verdict": "clean", "records": 5000, "divergent_partitions": "31 items", "extra_records": 2}
    for attempt, outcome in ((1, "failed"), (2, "ok")):
        scratch.saga_step(
            "v", "verify_link", attempt=attempt, started_at=T0, ended_at=T0, outcome=outcome,
            figures=found if outcome == "ok" else {},
        )  # fmt: skip
    report = report_of(scratch, "v", DEFAULT)
    assert report.duplicates == 2
    assert report.verification is not None
    assert (report.verification.records, report.verification.divergent_partitions) == (5000, ["31 items"])


def test_a_switch_slower_than_the_objectives_fails_naming_both(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.switched, Objectives(rto_s=4.0, pause_s=1.0))
    assert report.verdict.missed == [
        "switchover: RTO 4.21s, over the objective of 4s",
        "switchover: clients held 1.27s, over the objective of 1s",
    ]


def test_a_drill_that_passed_holds_its_canary_and_its_switches_steps(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.drill_passed, DEFAULT)
    assert (report.run.kind, report.name, report.verdict.status) == ("drill", "nightly", PASS)
    assert report.recorded_outcome == "passed"
    assert [(s.kind, s.run_id, s.rto_s, s.producer_wait_s) for s in report.switches] == [
        ("switchover", f"{RUNS.drill_passed}-switchover", 4.2, 1.31),
        ("switchback", f"{RUNS.drill_passed}-switchback", 3.9, 1.12),
    ]
    assert [(p.topic, p.partition, p.lost_records) for p in report.partitions] == [
        ("drill-nightly-01a2b3c4", n, 0) for n in range(3)
    ]
    assert (report.lost_records, report.duplicates) == (0, 0)
    assert [(g.group, g.resumed_at_commit) for g in report.groups] == [
        ("drill-nightly-01a2b3c4-canary", True)
    ]
    sagas = [s.saga for s in report.steps]
    assert (sagas.count("drill"), sagas.count("switchover"), sagas.count("switchback")) == (4, 11, 11)
    starts = [s.started_at for s in report.steps]
    assert starts == sorted(starts)  # one timeline: the switches' steps between the canary's start and tidy
    assert report.steps[0].step == "drill_prepare"
    assert report.steps[-1].step == "drill_tidy"


def test_a_drill_that_failed_names_each_missed_objective(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.drill_failed, DEFAULT)
    assert report.verdict.status == FAIL
    missed = "\n".join(report.verdict.missed)
    assert "switchback RTO 41.20s" in missed
    assert "waited 12.50s" in missed
    assert "2 acknowledged records lost (partition 1: 2)" in missed
    assert "group drill-nightly-01a2b3c4-canary did not resume at its committed offset" in missed
    assert "verification duplicates" in missed
    assert (report.lost_records, report.duplicates) == (2, 3)
    assert report.partitions[1].lost_window_ms == 340
    assert report.recorded_failures == ["recorded by the drill itself"]


def test_a_drill_is_judged_by_the_objectives_asked_about(ledger: Ledger) -> None:
    lenient = Objectives(rto_s=60, pause_s=20, rpo_records=5)
    missed = "\n".join(report_of(ledger, RUNS.drill_failed, lenient).verdict.missed)
    assert "RTO" not in missed
    assert "waited" not in missed
    assert "records lost" not in missed
    assert "did not resume" in missed  # what no objective excuses still fails it


def test_a_drill_that_passed_its_own_objectives_but_not_these_says_so(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.drill_passed, Objectives(rto_s=4.0))
    assert report.verdict.missed == ["switchover RTO 4.20s over the objective 4s"]
    assert ("outcome", "passed (against the objectives the drill ran with)") in facts(report)


def test_an_abandoned_drill_fails_with_its_reason(scratch: Ledger) -> None:
    result = asdict(DrillResult("nightly", RUNS.drill_saga, "drill", "abandoned", "prepare: no link p2s"))
    write_run(
        scratch, "gone", RUNS.drill_saga, "drill", ["drill-nightly"], at=T0, steps=[], result=result, took_s=1
    )
    report = report_of(scratch, "gone", DEFAULT)
    assert report.verdict.missed[:2] == [
        "the drill was abandoned: prepare: no link p2s",
        "the canary left no findings",
    ]
    assert (report.switches, report.lost_records, report.duplicates) == ([], None, None)


def test_a_run_stopped_halfway_is_incomplete_with_the_steps_it_did(ledger: Ledger) -> None:
    report = report_of(ledger, RUNS.interrupted, DEFAULT)
    assert report.verdict.status == INCOMPLETE
    assert (report.run.ended_at, report.run.outcome, report.took_s) == (None, None, None)
    assert "no end recorded" in report.detail
    assert [s.step for s in report.steps] == [
        "lock_keys", "plan_switch", "block_keys", "verify_fence", "drain_link",
    ]  # fmt: skip
    assert text_report(report).splitlines()[0] == "switchover ledger-app: INCOMPLETE"


def test_a_saga_id_names_its_newest_run(ledger: Ledger) -> None:
    assert report_of(ledger, RUNS.drill_saga, DEFAULT).run.run_id == RUNS.drill_failed
    assert report_of(ledger, RUNS.switched_saga, DEFAULT).run.run_id == RUNS.switched


def test_a_reference_that_names_nothing_is_an_error_naming_it(ledger: Ledger) -> None:
    with pytest.raises(ReportError, match="no saga run and no saga with the id 'switchyard:nope'") as raised:
        report_of(ledger, "switchyard:nope", DEFAULT)
    assert isinstance(raised.value, SagaError)
    assert raised.value.exit_code == 8


def test_an_unreadable_result_is_an_error_naming_the_run(scratch: Ledger) -> None:
    odd = {"outcome": "passed"}
    write_run(scratch, "odd", "switchyard:drill:x", "drill", ["x"], at=T0, steps=[], result=odd, took_s=1)
    with pytest.raises(
        ReportError, match=r"run odd \(drill switchyard:drill:x\): its recorded result: .*DrillResult"
    ):
        report_of(scratch, "odd", DEFAULT)


def test_a_result_with_fields_this_version_does_not_know_still_reads(scratch: Ledger) -> None:
    result = {**switch_result("switchover", ["a"], "switched", rto_ms=900, pause_ms=300), "a_new_figure": 1}
    write_run(scratch, "new", "switchyard:a", "switchover", ["a"], at=T0, steps=[], result=result, took_s=1)
    assert report_of(scratch, "new", DEFAULT).switches[0].rto_s == 0.9


TOP_KEYS = [
    "schema", "run_id", "saga_id", "kind", "name", "keys", "actor", "reason", "started_at", "ended_at",
    "took_s", "outcome", "detail", "objectives", "verdict", "switches", "rpo", "duplicates", "verification",
    "groups", "canary", "approvals", "recorded", "steps",
]  # fmt: skip


def test_the_json_document_keeps_its_keys(ledger: Ledger) -> None:
    doc = json.loads(json.dumps(document(report_of(ledger, RUNS.drill_failed, DEFAULT))))
    assert list(doc) == TOP_KEYS
    assert doc["schema"] == 1
    assert doc["objectives"] == {"rto_s": 30.0, "pause_s": 10.0, "rpo_records": 0}
    assert doc["verdict"]["status"] == "fail"
    assert list(doc["switches"][1]) == [
        "kind", "run_id", "outcome", "detail", "rto_s", "pause_s", "producer_wait_s",
    ]  # fmt: skip
    assert doc["switches"][1]["rto_s"] == 41.2
    assert list(doc["rpo"]) == ["lost_records", "measured_lost_records", "partitions"]
    assert doc["rpo"]["partitions"][1] == {
        "topic": "drill-nightly-01a2b3c4", "partition": 1, "lost_records": 2, "lost_window_ms": 340,
        "acked": 3400, "written_twice": 0,
    }  # fmt: skip
    assert doc["verification"] == {
        "verdict": "duplicates", "records": 10200, "duplicates": 3, "divergent_partitions": [],
        "wrong_groups": [],
    }  # fmt: skip
    assert list(doc["groups"][0]) == [
        "group", "resumed_at_commit", "again_after_commit", "skipped", "again_uncommitted",
    ]  # fmt: skip
    assert list(doc["canary"]) == [
        "sent", "acked", "failed", "longest_wait_s", "waits_s", "stopped_by", "out_of_order", "timeline",
    ]  # fmt: skip
    assert doc["canary"]["timeline"]["switches"][0] == {"kind": "switchover", "from_s": 4.0, "to_s": 8.2}
    assert doc["recorded"] == {"outcome": "failed", "failures": ["recorded by the drill itself"]}
    assert list(doc["steps"][0]) == [
        "saga", "run_id", "step", "attempt", "started_at", "ended_at", "took_s", "outcome", "detail",
        "figures",
    ]  # fmt: skip
    assert doc["started_at"] == (T0 - timedelta(days=1)).isoformat()


def test_the_json_of_a_run_stopped_halfway_has_the_same_keys(ledger: Ledger) -> None:
    doc = document(report_of(ledger, RUNS.interrupted, DEFAULT))
    assert list(doc) == TOP_KEYS
    assert (doc["verdict"], doc["ended_at"], doc["canary"], doc["recorded"]) == (
        {"status": "incomplete", "missed": []}, None, None, None,
    )  # fmt: skip
    assert len(doc["steps"]) == 5


def test_the_text_report_puts_the_verdict_first_and_cuts_long_details(scratch: Ledger) -> None:
    long = "x" * 300
    write_run(
        scratch, "r", "switchyard:a", "switchover", ["a"], at=T0,
        steps=[("drain_link", 0, 1, "failed", long)],
        result=switch_result("switchover", ["a"], "compensated", detail="gave up"), took_s=2,
    )  # fmt: skip
    lines = text_report(report_of(scratch, "r", DEFAULT)).splitlines()
    assert lines[:2] == ["switchover a: FAIL", "  switchover ended compensated: gave up"]
    (step,) = [line for line in lines if "drain_link" in line]
    assert step.endswith("x" * DETAIL_WIDTH)
    assert "x" * (DETAIL_WIDTH + 1) not in step
