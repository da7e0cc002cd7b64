"""Sagas in the ledger: each run, and each of its steps as it ended, so a saga killed halfway still
leaves its trail; and the whole result once it is over."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select, update

from switchyard.ledger.base import LedgerBase, utc
from switchyard.ledger.schema import saga_runs, saga_steps


@dataclass(frozen=True)
class SagaRun:
    run_id: str
    saga_id: str
    kind: str
    keys: list[str]
    actor: str
    reason: str
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    result: dict[str, Any] | None


@dataclass(frozen=True)
class SagaStep:
    step: str
    attempt: int
    started_at: datetime
    ended_at: datetime
    outcome: str
    detail: str
    figures: dict[str, Any]


class SagaRecords(LedgerBase):
    def saga_started(
        self, run_id: str, saga_id: str, kind: str, keys: list[str], *, actor: str, reason: str, at: datetime
    ) -> None:
        """Record a saga's start; recording the same run again changes nothing (a retried step)."""
        with self._connection() as conn:
            if conn.execute(select(saga_runs.c.run_id).where(saga_runs.c.run_id == run_id)).first():
                return
            conn.execute(
                insert(saga_runs).values(
                    run_id=run_id, saga_id=saga_id, kind=kind, keys=json.dumps(keys), actor=actor,
                    reason=reason, started_at=at,
                )
            )  # fmt: skip

    def saga_ended(self, run_id: str, outcome: str, result: dict[str, Any], *, at: datetime) -> None:
        with self._connection() as conn:
            conn.execute(
                update(saga_runs)
                .where(saga_runs.c.run_id == run_id)
                .values(ended_at=at, outcome=outcome, result=json.dumps(result))
            )

    def saga_step(
        self,
        run_id: str,
        step: str,
        *,
        attempt: int,
        started_at: datetime,
        ended_at: datetime,
        outcome: str,
        detail: str = "",
        figures: dict[str, Any] | None = None,
    ) -> None:
        with self._connection() as conn:
            conn.execute(
                insert(saga_steps).values(
                    run_id=run_id, step=step, attempt=attempt, started_at=started_at, ended_at=ended_at,
                    outcome=outcome, detail=detail, figures=json.dumps(figures or {}),
                )
            )  # fmt: skip

    def saga_runs(self, saga_id: str | None = None, *, limit: int = 50) -> list[SagaRun]:
        """Saga runs, newest first (of one saga id, or all)."""
        query = select(saga_runs).order_by(saga_runs.c.started_at.desc()).limit(limit)
        if saga_id is not None:
            query = query.where(saga_runs.c.saga_id == saga_id)
        with self._connection() as conn:
            return [_run(row._mapping) for row in conn.execute(query)]

    def saga_runs_since(self, since: datetime, *, kind: str | None = None) -> list[SagaRun]:
        """Every run started at or after ``since`` (of one kind, or all), newest first: what a report over
        a period covers, however many there are."""
        query = select(saga_runs).where(saga_runs.c.started_at >= since.astimezone(UTC))
        if kind is not None:
            query = query.where(saga_runs.c.kind == kind)
        with self._connection() as conn:
            return [_run(row._mapping) for row in conn.execute(query.order_by(saga_runs.c.started_at.desc()))]

    def saga_run(self, run_id: str) -> SagaRun | None:
        with self._connection() as conn:
            row = conn.execute(select(saga_runs).where(saga_runs.c.run_id == run_id)).first()
        return _run(row._mapping) if row else None

    def saga_steps(self, run_id: str) -> list[SagaStep]:
        """A run's steps in the order they ended."""
        query = select(saga_steps).where(saga_steps.c.run_id == run_id).order_by(saga_steps.c.id)
        with self._connection() as conn:
            return [
                SagaStep(
                    r.step, r.attempt, utc(r.started_at), utc(r.ended_at), r.outcome, r.detail,
                    json.loads(r.figures),
                )
                for r in conn.execute(query)
            ]  # fmt: skip


def _run(row: Any) -> SagaRun:
    return SagaRun(
        run_id=row["run_id"],
        saga_id=row["saga_id"],
        kind=row["kind"],
        keys=json.loads(row["keys"]),
        actor=row["actor"],
        reason=row["reason"],
        started_at=utc(row["started_at"]),
        ended_at=utc(row["ended_at"]) if row["ended_at"] else None,
        outcome=row["outcome"],
        result=json.loads(row["result"]) if row["result"] else None,
    )
