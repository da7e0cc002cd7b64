"""The saga's own lines in the ledger: it started, an approval was given or refused, it ended."""

from __future__ import annotations

import json

from temporalio import activity

from activities.deps import Deps
from activities.errors import mapped
from switchyard.model import now
from switchyard.sagas import steps
from switchyard.sagas.steps import SagaRecord


class RecordActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

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
            else:
                ledger.saga_step(
                    record.run_id, record.event, attempt=activity.info().attempt, started_at=at, ended_at=at,
                    outcome=record.outcome, detail=f"{record.actor}: {record.reason}".strip(": "),
                )  # fmt: skip
