"""A report's contents as facts and titled tables of text cells: written once, so the text and the HTML
renderings cannot drift apart (each only lays them out)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from switchyard.reports.model import FAIL, INCOMPLETE, PASS, Report

LISTED_PARTITIONS = 12
"""Up to this many partitions are all listed; beyond, only those that lost records."""
VERDICT_WORDS = {PASS: "PASS", FAIL: "FAIL", INCOMPLETE: "INCOMPLETE"}


@dataclass(frozen=True)
class Section:
    title: str
    headers: tuple[str, ...] = ()
    rows: Sequence[Sequence[str]] = ()
    notes: list[str] = field(default_factory=list)
    """Lines shown before the table."""


def when(at: datetime | None) -> str:
    return at.isoformat(timespec="seconds") if at else "-"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


def number(value: int | None) -> str:
    return "-" if value is None else str(value)


def headline(report: Report) -> str:
    return (
        f"{report.run.kind} {report.name}: {VERDICT_WORDS.get(report.verdict.status, report.verdict.status)}"
    )


def why(report: Report) -> list[str]:
    """The verdict's reasons: each missed objective, or why there is no verdict yet."""
    if report.verdict.status == INCOMPLETE:
        return [report.detail or "no end recorded yet"]
    return report.verdict.missed or ["every objective met"]


def facts(report: Report) -> list[tuple[str, str]]:
    objectives = report.objectives
    outcome = report.run.outcome or "not ended"
    if report.recorded_outcome in ("passed", "failed") and (report.recorded_outcome == "passed") != (
        report.verdict.status == PASS
    ):
        outcome += " (against the objectives the drill ran with)"
    return [
        ("run", report.run.run_id),
        ("saga", report.run.saga_id),
        ("keys", ", ".join(report.run.keys)),
        ("by", report.run.actor),
        ("why", report.run.reason or "-"),
        ("started", when(report.run.started_at)),
        ("ended", when(report.run.ended_at)),
        ("took", seconds(report.took_s)),
        ("outcome", outcome + (f": {report.detail}" if report.detail and report.run.outcome else "")),
        (
            "objectives",
            f"RTO <= {objectives.rto_s:g}s, clients held <= {objectives.pause_s:g}s, "
            f"records lost <= {objectives.rpo_records}",
        ),
    ]


def sections(report: Report, *, detail_width: int | None = None) -> list[Section]:
    """Every table of the report, in reading order; ``detail_width`` cuts long step details (a terminal)."""
    found = [_switches(report), _losses(report), _canary(report), _groups(report), _verification(report)]
    if report.approvals:
        found.append(Section("approvals", ("DECISION",), [(a,) for a in report.approvals]))
    found.append(_steps(report, detail_width))
    return [s for s in found if s.rows or s.notes]


def _switches(report: Report) -> Section:
    rows = [
        (s.kind, s.run_id or "-", s.outcome, seconds(s.rto_s), seconds(s.pause_s), seconds(s.producer_wait_s))
        for s in report.switches
    ]
    return Section("switches", ("SWITCH", "RUN", "OUTCOME", "RTO", "CLIENTS HELD", "PRODUCER WAIT"), rows)


def _losses(report: Report) -> Section:
    if report.lost_records is None:
        return Section("records lost (RPO)")
    notes = [f"{report.lost_records} acknowledged records lost over {len(report.partitions)} partitions"]
    if report.measured_lost_records is not None:
        notes.append(
            f"{report.measured_lost_records} records in the lost window, counted on the recovered source"
        )
    shown = report.partitions
    if len(shown) > LISTED_PARTITIONS:
        shown = [p for p in shown if p.lost_records]
        notes.append(f"partitions that lost records ({len(shown)} of {len(report.partitions)}):")
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    if any(p.acked is not None for p in shown):  # a drill's canary counted more
        headers = ("TOPIC", "PARTITION", "ACKED", "LOST", "LOST WINDOW", "WRITTEN TWICE")
        rows = [
            (p.topic, str(p.partition), number(p.acked), str(p.lost_records),
             "-" if p.lost_window_ms is None else f"{p.lost_window_ms}ms", number(p.written_twice))
            for p in shown
        ]  # fmt: skip
    else:
        headers, rows = (
            ("TOPIC", "PARTITION", "LOST"),
            [(p.topic, str(p.partition), str(p.lost_records)) for p in shown],
        )
    return Section("records lost (RPO)", headers, rows, notes)


def _canary(report: Report) -> Section:
    canary = report.canary
    if canary is None:
        return Section("canary")
    notes = [
        f"{canary.sent} sent, {canary.acked} acknowledged, {canary.failed} failed; longest wait for an "
        f"acknowledgement {canary.longest_wait_s:.2f}s; stopped by {canary.stopped_by}",
    ]
    if canary.out_of_order:
        notes.append(f"out of order: {canary.out_of_order}")
    return Section("canary", notes=notes)


def _groups(report: Report) -> Section:
    rows = [
        (g.group, "yes" if g.resumed_at_commit else "NO", str(g.again_after_commit), str(g.skipped),
         str(g.again_uncommitted))
        for g in report.groups
    ]  # fmt: skip
    headers = ("GROUP", "RESUMED AT COMMIT", "AGAIN AFTER COMMIT", "SKIPPED", "AGAIN UNCOMMITTED")
    return Section("consumer groups", headers, rows)


def _verification(report: Report) -> Section:
    found = report.verification
    if found is None:
        return Section("verification")
    notes = [f"{found.verdict}: {found.records} records, {found.duplicates} duplicates"]
    if found.divergent_partitions:
        notes.append(f"divergent partitions: {', '.join(found.divergent_partitions)}")
    if found.wrong_groups:
        notes.append(f"groups at a wrong offset: {', '.join(found.wrong_groups)}")
    return Section("verification", notes=notes)


def _steps(report: Report, detail_width: int | None) -> Section:
    rows = [
        (f"+{(s.started_at - report.run.started_at).total_seconds():.2f}s", s.saga, s.step, str(s.attempt),
         f"{s.took_s:.2f}s", s.outcome or "-", s.detail[:detail_width] if detail_width else s.detail)
        for s in report.steps
    ]  # fmt: skip
    notes = [] if rows else ["none recorded"]
    return Section("steps", ("STARTED", "SAGA", "STEP", "ATTEMPT", "TOOK", "OUTCOME", "DETAIL"), rows, notes)
