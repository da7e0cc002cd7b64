"""Activities that run the Spark jobs for a saga: verify a link's copy, find the lost window.

A job takes minutes, so the activity heartbeats (with the job's progress) every few seconds; a saga that
is cancelled, or a worker that lost its activity, stops the job — the heartbeat is where the cancellation
arrives, and the job's whole process group is killed. A failed job fails the activity with Spark's own
error lines (not retryable: the same spec would fail the same way); a failure to reach ZooKeeper, the
ledger or a broker before the job runs is left retryable.

Each activity is idempotent by its ``run_id`` (the saga picks it, so a retry records the same run).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deps import Deps
from activities.errors import to_temporal
from activities.pulse import beat
from switchyard.config import Config
from switchyard.errors import SwitchyardError
from switchyard.model import Link
from switchyard.sagas import steps
from switchyard.sagas.steps import LostWindowOutcome, LostWindowRequest, VerifyOutcome, VerifyRequest
from switchyard.verify.submit import (
    JobResult,
    Progress,
    VerificationError,
    lost_window_spec,
    run_job,
    verdict,
    verify_spec,
)

HEARTBEAT_S = 5.0
Result = TypeVar("Result")


class VerificationActivities:
    def __init__(self, deps: Deps) -> None:
        self.deps = deps

    @activity.defn(name=steps.VERIFY)
    async def verify_link(self, request: VerifyRequest) -> VerifyOutcome:
        return await _heartbeating(lambda job: self._verify(request, job))

    @activity.defn(name=steps.FIND_LOST_WINDOW)
    async def find_lost_window(self, request: LostWindowRequest) -> LostWindowOutcome:
        return await _heartbeating(lambda job: self._find(request, job))

    def _verify(self, request: VerifyRequest, job: _Job) -> VerifyOutcome:
        config, ledger = self.deps.config, self.deps.ledger
        done = ledger.verification(request.run_id)
        if done is not None:  # a retry after the answer was lost: the run happened
            return _verify_outcome(request.run_id, done["verdict"], done["report"])
        link = self._link(request.link_id)
        result = job.run(config, verify_spec(config, link, topics=request.topics, groups=request.groups))
        outcome = verdict(result.result)
        ledger.record_verification(
            request.run_id, request.link_id, result.result, verdict=outcome, started_at=result.started_at,
            finished_at=result.finished_at, master=result.master,
        )  # fmt: skip
        return _verify_outcome(request.run_id, outcome, result.result)

    def _find(self, request: LostWindowRequest, job: _Job) -> LostWindowOutcome:
        config, ledger = self.deps.config, self.deps.ledger
        done = ledger.reconciliation(request.run_id)
        if done is None:
            link = self._link(request.link_id)
            parquet = request.parquet or str(config.stack.state_dir / "lost-window" / request.run_id)
            result = job.run(config, lost_window_spec(config, link, parquet))
            ledger.record_reconciliation(
                request.run_id, request.link_id, result.result, parquet=parquet,
                started_at=result.started_at, finished_at=result.finished_at,
            )  # fmt: skip
            report = result.result
        else:
            report = done["report"]
        partitions = {f"{e['topic']}[{e['partition']}]": e["records"] for e in report.get("exported", [])}
        return LostWindowOutcome(request.run_id, sum(partitions.values()), partitions)

    def _link(self, link_id: str) -> Link:
        link = self.deps.store.link(link_id)
        if link is None:
            raise ApplicationError(f"link {link_id!r} does not exist", type="NoSuchLink", non_retryable=True)
        return link


@dataclass
class _Job:
    """What the activity's thread and its heartbeat loop share."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    progress: str | dict[str, Any] = "preparing"
    """What the heartbeat carries: a word before the job runs, then its progress (stages, tasks,
    records), which the Temporal UI shows as the activity's heartbeat details."""

    def run(self, config: Config, spec: dict[str, Any]) -> JobResult:
        self.progress = "submitted"
        return run_job(config, spec, on_progress=self._note, cancelled=self.cancelled)

    def _note(self, progress: Progress) -> None:
        self.progress = progress.details()


async def _heartbeating(work: Callable[[_Job], Result]) -> Result:
    """Do ``work`` on a thread (it blocks: Kafka, ZooKeeper, SQL, Spark), heartbeating its progress;
    when the activity is cancelled, stop the Spark job and wait for the thread to finish."""
    job = _Job()
    running = asyncio.get_running_loop().run_in_executor(None, work, job)
    try:
        while True:
            beat(job.progress)
            try:
                return await asyncio.wait_for(asyncio.shield(running), HEARTBEAT_S)
            except TimeoutError:
                continue
    except VerificationError as exc:
        raise ApplicationError(str(exc), type="SparkJobFailed", non_retryable=True) from exc
    except SwitchyardError as exc:  # before the job: a refusal is final, a broker out of reach is retried
        raise to_temporal(exc) from None
    except asyncio.CancelledError:
        job.cancelled.set()  # run_job kills the job's process group and returns
        await asyncio.gather(running, return_exceptions=True)
        raise


def _verify_outcome(run_id: str, outcome: str, report: dict[str, Any]) -> VerifyOutcome:
    return VerifyOutcome(
        run_id=run_id,
        verdict=outcome,
        records=sum(p["records"] for p in report["partitions"]),
        divergent_partitions=[
            f"{p['topic']}[{p['partition']}]"
            for p in report["partitions"]
            if p["missing"] or p["extra"] or p["mismatched"] or p["misaligned"]
        ],
        wrong_groups=[
            f"{g['group']} {g['topic']}[{g['partition']}]" for g in report.get("groups", []) if not g["ok"]
        ],
        extra_records=sum(p["extra"] for p in report["partitions"]),
    )
