"""A run's verdict against the objectives, each miss in words.

A drill is judged by the drill's own judge (:func:`switchyard.sagas.drill_verdict.failures`), given the
objectives the report is asked about, so a report and the drill never disagree on the same objectives. A
saga is judged here on what its result measured: that it switched, its RTO, how long clients were held
and, for a failover, what it lost. A pure module: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import replace

from switchyard.reports.model import FAIL, INCOMPLETE, PASS, Report, Switch, Verdict
from switchyard.sagas.drill_verdict import failures
from switchyard.sagas.drills import DrillResult, Objectives
from switchyard.sagas.requests import Kind

DONE = frozenset({"switched", "migrated"})
"""The outcomes of a saga that did what it was asked."""


def verdict_of(report: Report, drill: DrillResult | None) -> Verdict:
    if report.run.ended_at is None or report.run.outcome is None:
        return Verdict(INCOMPLETE)
    if drill is not None:
        missed = [f"the drill was abandoned: {drill.detail}"] if drill.outcome == "abandoned" else []
        missed += failures(replace(drill, objectives=report.objectives))
    else:
        missed = [miss for switch in report.switches for miss in switch_misses(switch, report.objectives)]
        if report.lost_records is not None:
            lost = (
                report.lost_records if report.measured_lost_records is None else report.measured_lost_records
            )
            if lost > report.objectives.rpo_records:
                missed.append(
                    f"{lost} acknowledged records lost{_where(report)}, over the objective of "
                    f"{report.objectives.rpo_records}"
                )
    return Verdict(FAIL if missed else PASS, missed)


def switch_misses(switch: Switch, objectives: Objectives) -> list[str]:
    """What one switch missed: it did not happen, or it took too long, or held its clients too long."""
    if switch.outcome not in DONE:
        return [f"{switch.kind} ended {switch.outcome}" + (f": {switch.detail}" if switch.detail else "")]
    missed = []
    if switch.rto_s is not None and switch.rto_s > objectives.rto_s:
        missed.append(f"{switch.kind}: RTO {switch.rto_s:.2f}s, over the objective of {objectives.rto_s:g}s")
    # a failover holds nobody: its clients wait for the flip, which its RTO already judges
    if switch.kind != Kind.FAILOVER and switch.pause_s is not None and switch.pause_s > objectives.pause_s:
        held, most = switch.pause_s, objectives.pause_s
        missed.append(f"{switch.kind}: clients held {held:.2f}s, over the objective of {most:g}s")
    return missed


def _where(report: Report) -> str:
    losing = [p for p in report.partitions if p.lost_records]
    shown = ", ".join(f"{p.topic}-{p.partition}: {p.lost_records}" for p in losing[:5])
    more = f" and {len(losing) - 5} more" if len(losing) > 5 else ""
    return f" ({shown}{more})" if shown else ""
