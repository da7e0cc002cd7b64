"""The saga's own lines in the ledger: it started, an approval was given or refused, it ended.

A saga's end is counted here too (``switchyard_sagas_ended_total``, ``switchyard_saga_duration_seconds``):
this activity is the one place every saga's end passes through, and the workflow itself must stay free
of side effects to replay.
"""

from __future__ import annotations

import json

from opentelemetry import metrics
from temporalio import activity

from activities.deps import Deps
from activities.errors import mapped
from switchyard.model import now
from switchyard.sagas import steps
from switchyard.sagas.requests import Kind
from switchyard.sagas.steps import SagaRecord

DURATION_BUCKETS_S = (1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200)
"""From a switchover of seconds to a saga that waited an hour for its approval."""
_meter = metrics.get_meter("switchyard.worker")
_ENDED = _meter.create_counter("switchyard.sagas.ended", description="sagas ended, by kind and outcome")
_DURATION = _meter.create_histogram(
    "switchyard.saga.duration",
    unit="s",
    description="from a saga's start to its end, by kind (approval waits included)",
    explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S,
)


OUTCOMES = {kind: ("switched", "compensated", "refused") for kind in Kind} | {
    Kind.MIGRATION: ("migrated", "compensated", "refused"),
    Kind.PARTITION_MIGRATION: ("migrated", "compensated", "refused"),
    Kind.ORIGIN_RETIREMENT: ("retired", "kept", "refused"),
}
"""How each kind of saga can end (``SagaResult.outcome``)."""


class RecordActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps
        for kind, outcomes in OUTCOMES.items():  # at 0 from the start: increase() sees the first end too
            for outcome in outcomes:
                _ENDED.add(0, {"kind": kind.value, "outcome": outcome})

    @activity.defn(name=steps.RECORD)
    def record_saga(self, record: SagaRecord) -> None:
        ledger, at = self.deps.ledger, now()
        with mapped():
            if record.event == "started":
                ledger.saga_started(
                    record.run_id, record.saga_id, record.kind, record.keys, actor=record.actor,
                    reason=record.reason, at=at,
                )  # fmt: skip
            elif record.event == "ended":
                result = json.loads(record.result) if record.result else {}
                ledger.saga_ended(record.run_id, record.outcome, result, at=at)
                run = ledger.saga_run(record.run_id)
                _ENDED.add(1, {"kind": record.kind, "outcome": record.outcome})
                if run is not None:
                    _DURATION.record((at - run.started_at).total_seconds(), {"kind": record.kind})
            else:
                ledger.saga_step(
                    record.run_id, record.event, attempt=activity.info().attempt, started_at=at, ended_at=at,
                    outcome=record.outcome, detail=f"{record.actor}: {record.reason}".strip(": "),
                )  # fmt: skip
