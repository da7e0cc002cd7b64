"""A run's report, assembled from the ledger alone: its row in ``saga_runs``, its result (a
``SagaResult``, a ``DrillResult`` for a drill, an ``EvacuationResult`` for a cluster evacuation) and every
step attempt in ``saga_steps`` — a drill's switchover and switchback steps too, and an evacuation's
batches' switches, found under their run ids. The ledger outlives Temporal's history,
and a run stopped halfway still has its steps there, so the report needs nothing else.

Error handling: a reference naming no run and an unreadable result are :class:`ReportError` (exit code 8,
as ``sagas show`` of an unknown saga); the ledger's own errors pass through as ``LedgerError``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from switchyard.errors import SagaError
from switchyard.ledger import Ledger
from switchyard.ledger.sagas import SagaRun
from switchyard.reports.model import INCOMPLETE, PartitionLine, Report, StepLine, Switch, Verdict
from switchyard.reports.verdict import verdict_of
from switchyard.sagas import steps as step_names
from switchyard.sagas.drills import DRILL_KIND, DrillResult, Objectives, VerifyFigures
from switchyard.sagas.evacuations import EVACUATION_KIND, EvacuationResult
from switchyard.sagas.requests import Kind, SagaResult

T = TypeVar("T")
_DRILL: TypeAdapter[DrillResult] = TypeAdapter(DrillResult)
_SAGA: TypeAdapter[SagaResult] = TypeAdapter(SagaResult)
_EVACUATION: TypeAdapter[EvacuationResult] = TypeAdapter(EvacuationResult)


class ReportError(SagaError):
    """No run answers to the reference given, or its recorded result cannot be read."""


def report_of(ledger: Ledger, ref: str, objectives: Objectives) -> Report:
    """The report of run ``ref``, or of the newest run of saga (workflow) id ``ref``."""
    run = ledger.saga_run(ref)
    if run is None:
        newest = ledger.saga_runs(ref, limit=1)
        if not newest:
            raise ReportError(
                f"no saga run and no saga with the id {ref!r} in the ledger "
                "(switchyard sagas list, or switchyard report --since 30d for the drills)"
            )
        run = newest[0]
    return report_of_run(ledger, run, objectives)


def report_of_run(ledger: Ledger, run: SagaRun, objectives: Objectives, *, with_steps: bool = True) -> Report:
    """The report of ``run``; without its steps (a table of many runs needs none) it reads no more rows."""
    report = Report(run, ", ".join(run.keys), "", objectives, Verdict(INCOMPLETE))
    drill: DrillResult | None = None
    children: list[tuple[str, str]] = []  # (kind, run id) of a drill's switches
    if run.result is not None:
        if run.kind == DRILL_KIND:
            drill = _parse(_DRILL, run.result, run)
            _fill_drill(report, drill, run)
            children = [(s.kind, s.run_id) for s in report.switches if s.run_id]
        elif run.kind == EVACUATION_KIND:
            _fill_evacuation(ledger, report, _parse(_EVACUATION, run.result, run))
            children = [(s.kind, s.run_id) for s in report.switches if s.run_id]
        else:
            _fill_saga(report, _parse(_SAGA, run.result, run), run.run_id)
    elif run.ended_at is None:
        report.detail = "no end recorded: still running, or stopped before it could record its end"
    if with_steps:
        report.steps = sorted(
            (
                line
                for kind, run_id in [(run.kind, run.run_id), *children]
                for line in _steps(ledger, kind, run_id)
            ),
            key=lambda line: (line.started_at, line.ended_at),
        )
        if drill is None:  # a drill's verification is in its result
            report.verification = _spark_verification(report.steps)
            report.duplicates = report.verification.duplicates if report.verification else None
    report.verdict = verdict_of(report, drill)
    return report


def _parse(adapter: TypeAdapter[T], result: dict[str, Any], run: SagaRun) -> T:
    """The recorded result as its dataclass; fields it does not know (a newer writer's) are ignored."""
    try:
        return adapter.validate_python(result)
    except ValidationError as exc:
        raise ReportError(
            f"run {run.run_id} ({run.kind} {run.saga_id}): its recorded result: {exc}"
        ) from None


def _steps(ledger: Ledger, kind: str, run_id: str) -> list[StepLine]:
    return [StepLine(**vars(s), saga=kind, run_id=run_id) for s in ledger.saga_steps(run_id)]


def _switch(result: SagaResult, run_id: str, producer_wait_s: float | None = None) -> Switch:
    """A saga's switch figures; its times count only when it switched (a compensated saga measured none)."""
    done = result.outcome in ("switched", "migrated")
    return Switch(
        result.kind, run_id, result.outcome, result.detail,
        rto_s=result.rto_ms / 1000 if done and result.rto_ms else None,
        pause_s=result.pause_ms / 1000 if done and result.pause_ms else None,
        producer_wait_s=producer_wait_s,
    )  # fmt: skip


def _fill_saga(report: Report, result: SagaResult, run_id: str) -> None:
    report.detail, report.approvals = result.detail, list(result.approvals)
    report.switches = [_switch(result, run_id)]
    if result.kind == Kind.FAILOVER:
        report.partitions = [PartitionLine(p.topic, p.partition, p.records) for p in result.rpo]
        report.lost_records = sum(p.records for p in result.rpo)
        report.measured_lost_records = result.lost_window_records


def _fill_evacuation(ledger: Ledger, report: Report, result: EvacuationResult) -> None:
    """Each batch's switch (and roll-back) as its own run records it."""
    report.name = f"{result.source} -> {result.target}"
    report.detail, report.approvals = result.detail, list(result.approvals)
    for run_id in result.switches:
        child = ledger.saga_run(run_id)
        if child is not None and child.result is not None:
            report.switches.append(_switch(_parse(_SAGA, child.result, child), run_id))


def _spark_verification(steps: list[StepLine]) -> VerifyFigures | None:
    """What a saga's Spark verification found, from the figures of its last successful attempt."""
    done = [s for s in steps if s.step == step_names.VERIFY and s.outcome == "ok"]
    if not done:
        return None
    found = done[-1].figures

    def listed(value: object) -> list[str]:  # long lists are recorded as "N items"
        return [str(v) for v in value] if isinstance(value, list) else [str(value)] if value else []

    return VerifyFigures(
        str(found.get("verdict", "")), int(found.get("records", 0)), int(found.get("extra_records", 0)),
        listed(found.get("divergent_partitions")), listed(found.get("wrong_groups")),
    )  # fmt: skip


def _fill_drill(report: Report, drill: DrillResult, run: SagaRun) -> None:
    report.name = drill.drill
    if drill.outcome == "abandoned":  # else the detail is the failures, which the verdict names
        report.detail = drill.detail
    report.recorded_outcome, report.recorded_failures = drill.outcome, list(drill.failures)
    canary = drill.canary
    waits = _waits_by_switch(drill)
    for index, raw in enumerate(drill.sagas):
        saga = _parse(_SAGA, raw, run)
        report.switches.append(_switch(saga, str(raw.get("run_id", "")), waits.get(index)))
        report.approvals += saga.approvals
    if canary is not None:
        topic = drill.setup.topic if drill.setup else ""
        report.canary, report.groups = canary, list(canary.groups)
        report.partitions = [
            PartitionLine(topic, p.partition, p.lost, p.lost_window_ms, p.acked, p.written_twice)
            for p in canary.partitions
        ]
        report.lost_records = sum(p.lost for p in canary.partitions)
    if drill.verification is not None:
        report.verification, report.duplicates = drill.verification, drill.verification.duplicates


def _waits_by_switch(drill: DrillResult) -> dict[int, float]:
    """The canary's longest wait during each of the drill's sagas: the timeline's switches and the sagas
    are in the same order; a saga whose kind does not match its place gets none."""
    if drill.canary is None:
        return {}
    spans = drill.canary.timeline.switches
    return {
        index: wait
        for index, (wait, span, saga) in enumerate(
            zip(drill.canary.waits_s, spans, drill.sagas, strict=False)
        )
        if span[0] == saga.get("kind")
    }
