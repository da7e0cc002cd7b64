"""A ledger filled with saga and drill runs as the workers write them — ``saga_runs`` rows, one
``saga_steps`` row per attempt as it ended, results as ``asdict`` of the real result dataclasses — for the
report tests: a switched and a compensated switchover, a failover that lost records, a drill that passed
and one that failed its objectives, and a run interrupted halfway."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from switchyard.ledger import Ledger
from switchyard.sagas.drills import (
    CanaryFindings,
    DrillResult,
    DrillSetup,
    GroupResume,
    Objectives,
    PartitionFigures,
    Timeline,
    VerifyFigures,
)
from switchyard.sagas.requests import PartitionLoss, SagaResult

T0 = datetime(2026, 5, 4, 2, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script> & <b>bold</b>'
"""A reason and a step detail that must come out of the HTML as text."""
TOPIC = "drill-nightly-01a2b3c4"
"""The topic of the drill run the fixtures hold, and the name of its link."""

Step = tuple[str, float, float, str, str]
"""(step, seconds from the run's start it began, seconds it took, outcome, detail); attempts are counted."""

PLANNED_STEPS: list[Step] = [
    ("lock_keys", 0.0, 0.05, "ok", ""),
    ("plan_switch", 0.05, 0.2, "ok", ""),
    ("block_keys", 0.3, 0.4, "ok", ""),
    ("verify_fence", 0.7, 0.6, "ok", ""),
    ("drain_link", 0.75, 0.9, "ok", ""),
    ("sync_groups", 1.7, 0.5, "ok", ""),
    ("check_copy", 2.2, 0.1, "ok", ""),
    ("flip_keys", 2.35, 0.3, "ok", ""),
    ("await_acks", 2.7, 0.4, "ok", ""),
    ("reverse_link", 3.2, 0.5, "ok", ""),
    ("unlock_keys", 3.8, 0.05, "ok", ""),
]


@dataclass(frozen=True)
class Runs:
    """The run ids of what :func:`fill` wrote."""

    switched: str = "run-switched"
    compensated: str = "run-compensated"
    failover: str = "run-failover"
    drill_passed: str = "run-drill-passed"
    drill_failed: str = "run-drill-failed"
    interrupted: str = "run-interrupted"
    switched_saga: str = "switchyard:orders"
    drill_saga: str = "switchyard-drill-nightly-2026-05-03T02:00:00Z"


RUNS = Runs()


def write_run(
    ledger: Ledger, run_id: str, saga_id: str, kind: str, keys: list[str], *, at: datetime,
    steps: list[Step], result: dict[str, Any] | None, took_s: float | None, actor: str = "user:alice",
    reason: str = "change 4711",
) -> None:  # fmt: skip
    """One run as the worker leaves it: started, each step attempt as it ended, and its end unless
    ``took_s`` is None (a run stopped halfway)."""
    ledger.saga_started(run_id, saga_id, kind, keys, actor=actor, reason=reason, at=at)
    attempts: dict[str, int] = {}
    for name, begin, took, outcome, detail in steps:
        attempts[name] = attempts.get(name, 0) + 1
        started = at + timedelta(seconds=begin)
        ledger.saga_step(
            run_id, name, attempt=attempts[name], started_at=started,
            ended_at=started + timedelta(seconds=took), outcome=outcome, detail=detail,
            figures={"step": name},
        )  # fmt: skip
    if took_s is not None and result is not None:
        ledger.saga_ended(run_id, result["outcome"], result, at=at + timedelta(seconds=took_s))


def switch_result(kind: str, keys: list[str], outcome: str, **figures: Any) -> dict[str, Any]:
    result = SagaResult(f"switchyard:{','.join(keys)}", kind, keys, outcome, "primary", "standby", "p2s")
    for name, value in figures.items():
        setattr(result, name, value)
    return asdict(result)


def filled_ledger(path: Path) -> Ledger:
    """A SQLite ledger at ``path`` holding every run of :func:`fill`."""
    ledger = Ledger.open(f"sqlite:///{path}")
    fill(ledger)
    return ledger


def fill(ledger: Ledger) -> Runs:
    """Every kind of run the reports meet, a day apart (the drills last: the newest)."""
    write_run(
        ledger, RUNS.switched, RUNS.switched_saga, "switchover", ["orders"], at=T0 - timedelta(days=5),
        steps=PLANNED_STEPS, took_s=4.0, reason=HOSTILE,
        result=switch_result(
            "switchover", ["orders"], "switched", rto_ms=4210, pause_ms=1270, verdict="clean (fast check)",
            records_copied=1200, partitions=3,
        ),
    )  # fmt: skip
    timeout = "DrainTimeout: partition orders-1 copied to 880 of 912 after 60s"
    write_run(
        ledger, RUNS.compensated, "switchyard:payments", "switchover", ["payments"],
        at=T0 - timedelta(days=4),
        steps=[
            *PLANNED_STEPS[:4],
            ("drain_link", 0.75, 60.0, "failed", timeout),
            ("drain_link", 61.0, 60.0, "failed", timeout),
            ("unblock_keys", 121.5, 0.4, "ok", HOSTILE),
            ("unlock_keys", 122.0, 0.05, "ok", ""),
        ],
        took_s=122.5,
        result=switch_result("switchover", ["payments"], "compensated", detail=f"{timeout} at drain"),
    )  # fmt: skip
    write_run(
        ledger, RUNS.failover, "switchyard:billing", "failover", ["billing"], at=T0 - timedelta(days=3),
        steps=[
            ("plan_switch", 0.0, 0.2, "ok", ""),
            ("probe_cluster", 0.2, 2.0, "ok", ""),
            ("lock_keys", 2.3, 0.05, "ok", ""),
            ("flip_keys", 2.4, 0.3, "ok", ""),
            ("await_acks", 2.8, 0.5, "ok", ""),
            ("measure_loss", 3.4, 0.6, "ok", ""),
            ("unlock_keys", 4.1, 0.05, "ok", ""),
        ],
        took_s=4.2,
        result=switch_result(
            "failover", ["billing"], "switched", rto_ms=3300, pause_ms=3300,
            rpo=[PartitionLoss("billing", 0, 500, 500), PartitionLoss("billing", 1, 640, 628),
                 PartitionLoss("billing", 2, 410, 407)],
        ),
    )  # fmt: skip
    _drill(ledger, RUNS.drill_passed, T0 - timedelta(days=2), slow_switchback=False)
    _drill(ledger, RUNS.drill_failed, T0 - timedelta(days=1), slow_switchback=True)
    write_run(
        ledger, RUNS.interrupted, "switchyard:ledger-app", "switchover", ["ledger-app"], at=T0,
        steps=PLANNED_STEPS[:5], result=None, took_s=None,
    )  # fmt: skip
    return RUNS


def _drill(ledger: Ledger, run_id: str, at: datetime, *, slow_switchback: bool) -> None:
    """A drill run with its two child sagas: their runs and steps under their own run ids."""
    switchback_s = 41.2 if slow_switchback else 3.9
    children = []
    for kind, begin, took, outcome in (
        ("switchover", 6.0, 4.2, "switched"),
        ("switchback", 16.0, switchback_s, "switched"),
    ):
        child = f"{run_id}-{kind}"
        result = switch_result(kind, ["drill-nightly"], outcome, rto_ms=int(took * 1000), pause_ms=1100)
        write_run(
            ledger, child, "switchyard:drill-nightly", kind, ["drill-nightly"],
            at=at + timedelta(seconds=begin),
            steps=PLANNED_STEPS, took_s=took, actor="drill:nightly", reason=f"drill {RUNS.drill_saga}",
            result=result,
        )  # fmt: skip
        children.append({**result, "run_id": child})
    end = 16.0 + switchback_s
    bucket_ms, buckets = 500, int((end + 8) * 2)
    acked = [100] * buckets
    processed = [100] * buckets
    lost = 2 if slow_switchback else 0
    waits = [1.31, 12.5 if slow_switchback else 1.12]
    for begin, wait in zip((6.4, 15.0), waits, strict=True):  # each switch's pause: nothing acknowledged
        for index in range(int(begin * 2), int((begin + wait) * 2)):
            acked[index], processed[index] = 0, 20
    drill = DrillResult(
        "nightly", RUNS.drill_saga, "drill", "failed" if slow_switchback else "passed",
        setup=DrillSetup(
            "drill-nightly", TOPIC, TOPIC, f"{TOPIC}-canary", "primary", "standby", "127.0.0.1:19092"
        ),
        sagas=children,
        canary=CanaryFindings(
            sent=sum(acked) + lost, acked=sum(acked), failed=0, longest_wait_s=max(waits),
            waits_s=waits,
            partitions=[PartitionFigures(p, sum(acked) // 3, lost if p == 1 else 0,
                                         340 if slow_switchback and p == 1 else 0, 0) for p in range(3)],
            groups=[
                GroupResume(f"{TOPIC}-canary", not slow_switchback, 7 if slow_switchback else 0, 0, 12)
            ],
            out_of_order=None,
            timeline=Timeline(
                (at + timedelta(seconds=2)).isoformat(), bucket_ms, acked, processed,
                [("switchover", 4.0, 8.2), ("switchback", 14.0, 14.0 + switchback_s)],
            ),
            stopped_by="switches over",
        ),
        verification=VerifyFigures("duplicates" if slow_switchback else "clean", sum(acked),
                                   3 if slow_switchback else 0),
        objectives=Objectives(),
    )  # fmt: skip
    drill.failures = ["recorded by the drill itself"] if slow_switchback else []
    write_run(
        ledger, run_id, RUNS.drill_saga, "drill", ["drill-nightly"], at=at,
        steps=[("drill_prepare", 0.0, 2.5, "ok", ""), ("drill_canary", 2.6, end + 3, "ok", ""),
               ("verify_link", end + 6, 14.0, "ok", ""), ("drill_tidy", end + 20.5, 1.0, "ok", "")],
        took_s=end + 22, actor="schedule", reason="nightly drill", result=asdict(drill),
    )  # fmt: skip
