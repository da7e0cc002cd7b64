"""The drills of a period (``switchyard report --since 30d``): one line each, newest first, and how many
passed. A drill whose recorded result cannot be read still gets its line, saying so, so one odd run does
not hide the others."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from switchyard.ledger import Ledger
from switchyard.ledger.sagas import SagaRun
from switchyard.reports.build import ReportError, report_of_run
from switchyard.reports.document import SCHEMA, stamp
from switchyard.reports.model import FAIL, INCOMPLETE, PASS, Report, Verdict
from switchyard.reports.tables import VERDICT_WORDS, number, seconds, when
from switchyard.sagas.drills import DRILL_KIND, Objectives

PROGRESS_EVERY = 200
"""With more drills than this, a line on progress for each this many."""
HEADERS = ("DRILL", "STARTED", "OUTCOME", "RTO", "LONGEST WAIT", "LOST", "DUPLICATES", "VERDICT")


@dataclass
class Period:
    since: datetime
    objectives: Objectives
    reports: list[Report]

    @property
    def passed(self) -> int:
        return sum(r.verdict.status == PASS for r in self.reports)

    def summary(self) -> str:
        if not self.reports:
            return f"no drill since {when(self.since)}"
        counted = {s: sum(r.verdict.status == s for r in self.reports) for s in (FAIL, INCOMPLETE)}
        others = ", ".join(f"{n} {'failed' if s == FAIL else s}" for s, n in counted.items() if n)
        return (
            f"{self.passed} of {len(self.reports)} drills passed the objectives since {when(self.since)}"
            + (f" ({others})" if others else "")
        )


def drills_since(
    ledger: Ledger, since: datetime, objectives: Objectives, progress: Callable[[str], None] | None = None
) -> Period:
    """Every drill started since ``since``, judged; ``progress`` hears of every PROGRESS_EVERY judged."""
    runs = ledger.saga_runs_since(since, kind=DRILL_KIND)
    reports = []
    for done, run in enumerate(runs, 1):
        try:
            reports.append(report_of_run(ledger, run, objectives, with_steps=False))
        except ReportError as exc:
            reports.append(_unreadable(run, objectives, str(exc)))
        if progress is not None and len(runs) > PROGRESS_EVERY and done % PROGRESS_EVERY == 0:
            progress(f"judged {done} of {len(runs)} drills")
    return Period(since, objectives, reports)


def _unreadable(run: SagaRun, objectives: Objectives, why: str) -> Report:
    return Report(run, run.saga_id, why, objectives, Verdict(FAIL, [why]))


def rows(period: Period) -> list[tuple[str, ...]]:
    return [
        (
            r.name, when(r.run.started_at), r.run.outcome or "not ended",
            " / ".join(f"{s.kind} {seconds(s.rto_s)}" for s in r.switches) or "-",
            seconds(r.canary.longest_wait_s if r.canary else None), number(r.lost_records),
            number(r.duplicates),
            VERDICT_WORDS.get(r.verdict.status, r.verdict.status),
        )
        for r in period.reports
    ]  # fmt: skip


def period_document(period: Period) -> dict[str, Any]:
    """The period as JSON: one compact entry per drill (``switchyard report RUN --json`` has the rest)."""
    return {
        "schema": SCHEMA,
        "since": stamp(period.since),
        "passed": period.passed,
        "total": len(period.reports),
        "drills": [
            {
                "run_id": r.run.run_id,
                "saga_id": r.run.saga_id,
                "name": r.name,
                "started_at": stamp(r.run.started_at),
                "outcome": r.run.outcome,
                "rto_s": {s.kind: s.rto_s for s in r.switches},
                "longest_wait_s": r.canary.longest_wait_s if r.canary else None,
                "lost_records": r.lost_records,
                "duplicates": r.duplicates,
                "verdict": {"status": r.verdict.status, "missed": r.verdict.missed},
            }
            for r in period.reports
        ],
    }
