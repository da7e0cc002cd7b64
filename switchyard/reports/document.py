"""A report as one JSON document for machines. Its keys are spelt out here, or are the fields of the
report's own small dataclasses (``Switch``, ``PartitionLine``), never those of the drill's model, so they
stay put when the drill's findings grow; ``schema`` changes when a key is removed or changes meaning
(docs/operations.md#reports lists them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from switchyard.reports.model import Report

SCHEMA = 1
RUN = ("run_id", "saga_id", "kind")
WHO = ("keys", "actor", "reason")
OBJECTIVES = ("rto_s", "pause_s", "rpo_records")
VERIFICATION = ("verdict", "records", "duplicates", "divergent_partitions", "wrong_groups")
GROUP = ("group", "resumed_at_commit", "again_after_commit", "skipped", "again_uncommitted")
CANARY = ("sent", "acked", "failed", "longest_wait_s", "waits_s", "stopped_by", "out_of_order")
TIMELINE = ("start", "bucket_ms", "acked", "processed")
STEP = ("saga", "run_id", "step", "attempt")


def stamp(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def pick(source: object, names: Sequence[str]) -> dict[str, Any]:
    """The named attributes of ``source``, in this order: the document's keys, whatever else it has."""
    return {name: getattr(source, name) for name in names}


def document(report: Report) -> dict[str, Any]:
    canary, verification = report.canary, report.verification
    return {
        "schema": SCHEMA,
        **pick(report.run, RUN),
        "name": report.name,
        **pick(report.run, WHO),
        "started_at": stamp(report.run.started_at),
        "ended_at": stamp(report.run.ended_at),
        "took_s": report.took_s,
        "outcome": report.run.outcome,
        "detail": report.detail,
        "objectives": pick(report.objectives, OBJECTIVES),
        "verdict": {"status": report.verdict.status, "missed": report.verdict.missed},
        "switches": [asdict(s) for s in report.switches],
        "rpo": {
            "lost_records": report.lost_records,
            "measured_lost_records": report.measured_lost_records,
            "partitions": [asdict(p) for p in report.partitions],
        },
        "duplicates": report.duplicates,
        "verification": pick(verification, VERIFICATION) if verification else None,
        "groups": [pick(g, GROUP) for g in report.groups],
        "canary": None
        if canary is None
        else {
            **pick(canary, CANARY),
            "timeline": {
                **pick(canary.timeline, TIMELINE),
                "switches": [
                    {"kind": kind, "from_s": begin, "to_s": end}
                    for kind, begin, end in canary.timeline.switches
                ],
            },
        },
        "approvals": report.approvals,
        "recorded": None
        if report.recorded_outcome is None
        else {"outcome": report.recorded_outcome, "failures": report.recorded_failures},
        "steps": [
            {
                **pick(s, STEP),
                "started_at": stamp(s.started_at),
                "ended_at": stamp(s.ended_at),
                "took_s": s.took_s,
                "outcome": s.outcome,
                "detail": s.detail,
                "figures": s.figures,
            }
            for s in report.steps
        ],
    }
