"""What a report holds: one saga or drill run as the ledger has it, its figures and its verdict against the
objectives. The renderings (text, JSON, HTML) read only this, so they always tell the same story."""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.ledger.sagas import SagaRun, SagaStep
from switchyard.sagas.drills import CanaryFindings, GroupResume, Objectives, VerifyFigures

PASS, FAIL, INCOMPLETE = "pass", "fail", "incomplete"


@dataclass(frozen=True)
class StepLine(SagaStep):
    """One attempt of one step as the ledger has it, and whose it is: a drill's report also holds its
    switches' steps. ``outcome`` is ok or failed for a step, empty for a decision (approved, rejected)."""

    saga: str = ""
    """The kind of the run the step belongs to: the reported run's own, or a drill's switchover/switchback."""
    run_id: str = ""

    @property
    def took_s(self) -> float:
        return (self.ended_at - self.started_at).total_seconds()


@dataclass(frozen=True)
class Switch:
    """One switch of the keys: the saga reported, or one of a drill's two."""

    kind: str
    run_id: str
    outcome: str
    detail: str
    rto_s: float | None
    """From the saga's start to every gateway routing the keys anew; None where nothing switched."""
    pause_s: float | None
    """How long the gateways held the clients (block to flip)."""
    producer_wait_s: float | None = None
    """A drill: the canary producer's longest wait for an acknowledgement during this switch."""


@dataclass(frozen=True)
class PartitionLine:
    """What one partition lost: the RPO, per partition."""

    topic: str
    partition: int
    lost_records: int
    lost_window_ms: int | None = None
    """A drill: from the first lost record's acknowledgement to the last's."""
    acked: int | None = None
    written_twice: int | None = None


@dataclass(frozen=True)
class Verdict:
    status: str
    """``pass``, ``fail``, or ``incomplete`` (the run is still going, or was stopped before its end)."""
    missed: list[str] = field(default_factory=list)
    """Each objective or check missed, in words."""


@dataclass
class Report:
    run: SagaRun
    """The run's row in the ledger: ids, kind, keys, who and why, start, end and outcome."""
    name: str
    """A drill's name; a saga's keys."""
    detail: str
    objectives: Objectives
    verdict: Verdict
    switches: list[Switch] = field(default_factory=list)
    partitions: list[PartitionLine] = field(default_factory=list)
    lost_records: int | None = None
    """Acknowledged records lost over all partitions (None: not measured — a planned switch loses none)."""
    measured_lost_records: int | None = None
    """A failover: the lost window as counted on the recovered source (None: not measured)."""
    duplicates: int | None = None
    """Records held twice, as the Spark verification counted them (None: not verified)."""
    verification: VerifyFigures | None = None
    groups: list[GroupResume] = field(default_factory=list)
    canary: CanaryFindings | None = None
    approvals: list[str] = field(default_factory=list)
    recorded_outcome: str | None = None
    """A drill: the outcome it gave itself, against the objectives it ran with."""
    recorded_failures: list[str] = field(default_factory=list)
    steps: list[StepLine] = field(default_factory=list)

    @property
    def took_s(self) -> float | None:
        run = self.run
        return (run.ended_at - run.started_at).total_seconds() if run.ended_at else None
