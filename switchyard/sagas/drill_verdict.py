"""A drill's verdict: each objective or check it missed, in words. Pure: the drill workflow calls it."""

from __future__ import annotations

from switchyard.sagas.drills import CanaryFindings, DrillResult, Objectives


def failures(result: DrillResult) -> list[str]:
    missed = _switches(result)
    canary = result.canary
    missed += ["the canary left no findings"] if canary is None else _canary(canary, result.objectives)
    verification = result.verification
    if verification is not None and verification.verdict != "clean":
        found = [
            *([f"{verification.duplicates} duplicates"] if verification.duplicates else []),
            *(
                [f"partitions {', '.join(verification.divergent_partitions[:5])}"]
                if verification.divergent_partitions
                else []
            ),
            *([f"groups {', '.join(verification.wrong_groups[:5])}"] if verification.wrong_groups else []),
        ]
        missed.append(f"verification {verification.verdict}: {'; '.join(found) or 'see its report'}")
    return missed


def _switches(result: DrillResult) -> list[str]:
    objectives, missed = result.objectives, []
    for saga in result.sagas:
        kind = saga.get("kind", "switch")
        if saga.get("outcome") != "switched":
            missed.append(f"{kind} {saga.get('outcome')}: {saga.get('detail', '')}".rstrip(": "))
        elif saga.get("rto_ms", 0) / 1000 > objectives.rto_s:
            missed.append(f"{kind} RTO {saga['rto_ms'] / 1000:.2f}s over the objective {objectives.rto_s:g}s")
    return missed


def _canary(canary: CanaryFindings, objectives: Objectives) -> list[str]:
    missed = []
    for (kind, _, _), wait in zip(canary.timeline.switches, canary.waits_s, strict=False):
        if wait > objectives.pause_s:
            missed.append(
                f"{kind}: the producer waited {wait:.2f}s, over the objective {objectives.pause_s:g}s"
            )
    lost = sum(p.lost for p in canary.partitions)
    if lost > objectives.rpo_records:
        where = ", ".join(f"partition {p.partition}: {p.lost}" for p in canary.partitions if p.lost)
        missed.append(f"{lost} acknowledged records lost ({where}), objective {objectives.rpo_records}")
    twice = sum(p.written_twice for p in canary.partitions)
    if twice:
        missed.append(f"{twice} records written twice")
    if canary.failed:
        missed.append(f"{canary.failed} sends failed")
    for group in canary.groups:
        if not group.resumed_at_commit:
            missed.append(
                f"group {group.group} did not resume at its committed offset: {group.again_after_commit} "
                f"records processed again after their commit, {group.skipped} never processed"
            )
    if canary.out_of_order:
        missed.append(f"records out of order: {canary.out_of_order}")
    if canary.stopped_by != "switches over":
        missed.append(f"the canary stopped at its {canary.stopped_by}, not after the switches")
    return missed
