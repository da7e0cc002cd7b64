"""The reports' plots as PNG bytes, drawn by matplotlib's Agg renderer on figures of their own: no
display, no pyplot and its global state, so a worker or a test can draw them in any thread."""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from numpy.typing import NDArray

from switchyard.reports.model import FAIL, PASS, Report
from switchyard.sagas.drills import Timeline

OUTCOME_COLORS = {"ok": "#2e7d32", "failed": "#c62828"}
OTHER_COLOR = "#78909c"
"""Decisions (approved, rejected) and any outcome a newer step may record."""
SWITCH_COLORS = ("#fbc02d", "#7e57c2", "#26a69a")
VERDICT_MARKS = {PASS: ("o", "#2e7d32"), FAIL: ("X", "#c62828")}
WIDTH_IN = 10.0
MOST_STEPS_DRAWN = 120
"""A run retried into hundreds of attempts is drawn in its first this many; the table lists them all."""


def png(figure: Figure) -> bytes:
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    return buffer.getvalue()


def step_chart(report: Report) -> bytes | None:
    """Each step attempt as a bar from its start to its end, colored by outcome, one row each (a Gantt
    chart); a drill's switchover and switchback steps are among them, labelled by their saga."""
    lines = report.steps[:MOST_STEPS_DRAWN]
    if not lines:
        return None
    origin = report.run.started_at
    starts = [(s.started_at - origin).total_seconds() for s in lines]
    span = max(start + s.took_s for start, s in zip(starts, lines, strict=True)) or 1.0
    figure = Figure(figsize=(WIDTH_IN, 1.2 + 0.26 * len(lines)), layout="constrained")
    axes = figure.add_subplot()
    for row, (start, line) in enumerate(zip(starts, lines, strict=True)):
        color = OUTCOME_COLORS.get(line.outcome, OTHER_COLOR)
        axes.barh(row, max(line.took_s, span / 400), left=start, color=color, height=0.6)
    labels = [f"{s.saga} · {s.step}" + (f" #{s.attempt}" if s.attempt > 1 else "") for s in lines]
    axes.set_yticks(range(len(lines)), labels, fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel(f"seconds from the run's start ({origin.isoformat(timespec='seconds')})")
    axes.grid(axis="x", alpha=0.3)
    shown = sorted({s.outcome for s in lines}, key=lambda o: (o not in OUTCOME_COLORS, o))
    figure.legend(
        handles=[Patch(color=OUTCOME_COLORS.get(o, OTHER_COLOR), label=o or "decision") for o in shown],
        loc="outside lower center", ncols=len(shown), fontsize=8,
    )  # fmt: skip
    axes.set_title("steps", loc="left")
    return png(figure)


def canary_chart(timeline: Timeline) -> bytes | None:
    """The canary producer's acknowledgements and its consumer group's progress per second, bucket by
    bucket, with each switch's span shaded: a pause shows as a dip inside the shade."""
    if not timeline.acked and not timeline.processed:
        return None
    bucket_s = timeline.bucket_ms / 1000
    figure = Figure(figsize=(WIDTH_IN, 3.8), layout="constrained")
    axes = figure.add_subplot()
    for counts, label, color in (
        (timeline.acked, "acknowledged to the producer", "#1565c0"),
        (timeline.processed, "processed by the consumer group", "#ef6c00"),
    ):
        times = [index * bucket_s for index in range(len(counts))]
        axes.step(times, [count / bucket_s for count in counts], where="post", label=label, color=color)
    _shade(axes, timeline.switches)
    axes.set_xlabel(f"seconds from {timeline.start} (buckets of {timeline.bucket_ms} ms)")
    axes.set_ylabel("records per second")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    figure.legend(loc="outside lower center", ncols=2 + len(timeline.switches), fontsize=8)
    axes.set_title("canary traffic around the switches", loc="left")
    return png(figure)


def _shade(axes: Axes, switches: Sequence[tuple[str, float, float]]) -> None:
    for index, (kind, begin, end) in enumerate(switches):
        color = SWITCH_COLORS[index % len(SWITCH_COLORS)]
        axes.axvspan(begin, end, color=color, alpha=0.25, label=f"{kind} ({end - begin:.1f}s)")


def _utc(times: Sequence[datetime]) -> NDArray[np.datetime64]:
    """Times as numpy's (naive, UTC), which matplotlib draws as dates."""
    return np.array([t.astimezone(UTC).replace(tzinfo=None) for t in times], dtype="datetime64[ms]")


def trend_chart(reports: Sequence[Report]) -> bytes | None:
    """Each drill's switches' RTO over time, marked by the drill's verdict: a slow drift shows before a
    drill fails."""
    points = [(r, s) for r in reports for s in r.switches if s.rto_s is not None]
    if not points:
        return None
    figure = Figure(figsize=(WIDTH_IN, 3.6), layout="constrained")
    axes = figure.add_subplot()
    for kind in sorted({s.kind for _, s in points}):
        mine = sorted((r.run.started_at, s.rto_s or 0.0) for r, s in points if s.kind == kind)
        axes.plot(_utc([p[0] for p in mine]), [p[1] for p in mine], label=f"{kind} RTO", alpha=0.6)
    for status, (marker, color) in VERDICT_MARKS.items():
        judged = [(r.run.started_at, s.rto_s or 0.0) for r, s in points if r.verdict.status == status]
        if judged:
            times = _utc([p[0] for p in judged])
            axes.scatter(times, [p[1] for p in judged], marker=marker, color=color, label=f"drill {status}")
    axes.axhline(reports[0].objectives.rto_s, color="#c62828", linestyle="--", linewidth=1, label="objective")
    axes.set_ylabel("seconds")
    axes.set_xlabel("drill start (UTC)")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    figure.legend(loc="outside right upper", fontsize=8)
    axes.set_title("RTO of each drill's switches", loc="left")
    figure.autofmt_xdate()
    return png(figure)
