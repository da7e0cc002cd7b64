"""Verification and reconciliation runs in the ledger: the Spark jobs' findings, and the lost windows
found after a failover (republished once at most)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from switchyard.ledger.base import LedgerBase
from switchyard.ledger.schema import reconciliation_runs, verification_partitions, verification_runs

_COUNTS = ("records", "missing", "extra", "mismatched", "misaligned")


class JobRecords(LedgerBase):
    def record_verification(
        self, run_id: str, link_id: str, result: dict[str, Any], *, verdict: str, started_at: datetime,
        finished_at: datetime, master: str,
    ) -> None:  # fmt: skip
        """A verification job's findings: totals per run, counts and first examples per partition."""
        partitions = result["partitions"]
        groups = result.get("groups", [])
        totals = {name: sum(p[name] for p in partitions) for name in _COUNTS}
        with self._connection() as conn:
            conn.execute(
                insert(verification_runs).values(
                    id=run_id,
                    link_id=link_id,
                    started_at=started_at,
                    finished_at=finished_at,
                    verdict=verdict,
                    groups_checked=len(groups),
                    groups_wrong=sum(1 for g in groups if not g["ok"]),
                    master=master,
                    report=json.dumps(result),
                    **totals,
                )
            )
            if partitions:
                conn.execute(
                    insert(verification_partitions),
                    [
                        {
                            "run_id": run_id,
                            "topic": p["topic"],
                            "partition": p["partition"],
                            "source_from": p["source_from"],
                            "source_to": p["source_to"],
                            "examples": json.dumps(p["examples"]),
                            **{n: p[n] for n in _COUNTS},
                        }
                        for p in partitions
                    ],
                )

    def verification(self, run_id: str) -> dict[str, Any] | None:
        """A recorded verification: its row, with the findings document decoded."""
        return self._run(verification_runs, run_id)

    def record_reconciliation(
        self, run_id: str, link_id: str, result: dict[str, Any], *, parquet: str, started_at: datetime,
        finished_at: datetime,
    ) -> None:  # fmt: skip
        records = sum(e["records"] for e in result.get("exported", []))
        with self._connection() as conn:
            conn.execute(
                insert(reconciliation_runs).values(
                    id=run_id,
                    link_id=link_id,
                    started_at=started_at,
                    finished_at=finished_at,
                    parquet=parquet,
                    records=records,
                    report=json.dumps(result),
                )
            )

    def reconciliation(self, run_id: str) -> dict[str, Any] | None:
        return self._run(reconciliation_runs, run_id)

    def _run(self, table: Any, run_id: str) -> dict[str, Any] | None:
        with self._connection() as conn:
            row = conn.execute(select(table).where(table.c.id == run_id)).first()
        return {**row._mapping, "report": json.loads(row.report)} if row else None

    def claim_republish(self, run_id: str, *, at: datetime) -> bool:
        """Mark a reconciliation as being republished; False when it already was (never twice)."""
        with self._connection() as conn:
            claimed = conn.execute(
                update(reconciliation_runs)
                .where(reconciliation_runs.c.id == run_id, reconciliation_runs.c.republished_at.is_(None))
                .values(republished_at=at)
            )
        return claimed.rowcount == 1

    def finish_republish(self, run_id: str, records: int) -> None:
        with self._connection() as conn:
            conn.execute(
                update(reconciliation_runs)
                .where(reconciliation_runs.c.id == run_id)
                .values(republished_records=records)
            )
