"""A DR drill's input and what it found: the shapes the drill workflow, its activities, the ledger and
the reports share (plain dataclasses, so Temporal's converter carries them and JSON stores them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from switchyard.sagas.requests import Policy

DRILL_KIND = "drill"


def drill_app(name: str) -> str:
    """The AppID a drill's canary runs as: one per drill, never an application's."""
    return f"drill-{name}"


def drill_topic(name: str, tag: str) -> str:
    """A run's topic, and the name of the link copying it: new for every run (``tag``), so a run never
    meets an earlier one's records or offsets."""
    return f"{drill_app(name)}-{tag}"


@dataclass
class Objectives:
    """What a drill must show to pass; a switch over them fails it, whatever else went right."""

    rto_s: float = 30.0
    """Each switch: from its start to every gateway routing the keys to the new cluster."""
    pause_s: float = 10.0
    """Each switch: how long the canary's producer waited for an acknowledgement at most."""
    rpo_records: int = 0
    """Acknowledged records the canary's topic may lose, over all partitions (a planned switch: none)."""


@dataclass
class DrillRequest:
    """One run of a drill: canary traffic on a binding of the drill's own through the gateway, over a
    switchover and a switchback between the two clusters of ``link``."""

    name: str
    link: str
    """The link whose clusters (source → target) the drill exercises; the drill copies its own topic on a
    link of its own between them, so promoting it moves no application."""
    rate_per_s: float = 200.0
    partitions: int = 3
    bootstrap: str = ""
    """Where the canary connects, as the applications do: the gateways' bootstrap address (default: the
    gateway in the worker's configuration)."""
    warmup_s: float = 2.0
    """Canary traffic before the switchover and between the switches, so each switch meets live clients."""
    spark_verify: bool = True
    """Compare both clusters' copies of the canary topic with the Spark job after the switchback."""
    objectives: Objectives = field(default_factory=Objectives)
    policy: Policy = field(default_factory=Policy)
    """How the drill's switches run (resolved from the configuration when the drill was scheduled). The
    canary's never wait for an approval: they move nobody else."""
    keys: list[str] = field(default_factory=list)
    """Application binding keys the drill also switches over and back along ``link`` after its canary's
    switches — only when scheduled with ``--on-application-keys``, and each of those two switches waits
    for an approval before its block. Empty: the drill moves nobody but its canary."""
    actor: str = "schedule"
    reason: str = ""


@dataclass
class PrepareRequest:
    name: str
    link: str
    partitions: int
    tag: str
    """Names this run's topic, group and link (the drill run's id, shortened)."""
    bootstrap: str = ""


@dataclass
class DrillState:
    """What the drill's canary asks its workflow (a query) while it runs: whether the switches are over,
    when each ran, and the cluster the canary's records should end on."""

    done: bool = False
    switches: list[tuple[str, str, str]] = field(default_factory=list)
    """(saga kind, ISO start, ISO end) of each switch that ran."""
    cluster: str = ""


@dataclass
class TidyRequest:
    topic: str
    """Deleted on every configured cluster that has it (unless ``drills.delete_topics`` is off)."""
    links: list[str]


@dataclass
class DrillSetup:
    """What the drill's prepare step made: AppID, topic, the link copying it, the consumer group."""

    app: str
    topic: str
    link: str
    group: str
    source: str
    target: str
    bootstrap: str
    """Where the canary connects: the gateway."""


@dataclass
class CanaryRequest:
    setup: DrillSetup
    rate_per_s: float
    longest_s: float = 1800.0
    """The canary stops after this long whatever happens, so a drill never leaves traffic running."""


@dataclass
class PartitionFigures:
    """One canary partition, judged on the cluster the drill ends on."""

    partition: int
    acked: int
    """Records the producer got acknowledged."""
    lost: int
    """Acknowledged, not on the cluster: the RPO in records."""
    lost_window_ms: int
    """From the first lost record's acknowledgement to the last's: the RPO in time (0: none lost)."""
    written_twice: int
    """Records on the cluster more than once (a retried send the switch let through twice)."""


@dataclass
class Timeline:
    """The canary around the switches, counted per bucket from ``start`` (ISO time): what the plots draw."""

    start: str
    bucket_ms: int
    acked: list[int] = field(default_factory=list)
    """Acknowledgements the producer received per bucket."""
    processed: list[int] = field(default_factory=list)
    """Records the consumer group processed per bucket."""
    switches: list[tuple[str, float, float]] = field(default_factory=list)
    """(saga kind, seconds from ``start`` the switch began, seconds it ended)."""


@dataclass
class GroupResume:
    """Whether a consumer group resumed where it had committed after each switch: nothing it had committed
    processed again (a step back) and nothing skipped (a step over)."""

    group: str
    resumed_at_commit: bool
    again_after_commit: int
    """Records processed again although their commit had gone through."""
    skipped: int
    """Records acknowledged to the producer the group never processed."""
    again_uncommitted: int
    """Records processed again whose commit had been refused during a switch: at-least-once allows it."""


@dataclass
class CanaryFindings:
    sent: int
    acked: int
    failed: int
    """Sends the application saw fail."""
    longest_wait_s: float
    """The producer's longest wait for an acknowledgement over the whole run."""
    waits_s: list[float]
    """The producer's longest wait during each switch, in ``timeline.switches`` order (from this canary's
    start at the earliest: a canary started again after its worker died waited for none before)."""
    partitions: list[PartitionFigures]
    groups: list[GroupResume]
    out_of_order: str | None
    timeline: Timeline
    stopped_by: str
    """``switches over`` (the drill said so) or ``time limit``."""


@dataclass
class VerifyFigures:
    """The Spark verification of the canary topic after the switchback."""

    verdict: str
    records: int
    duplicates: int
    """Target records no source record accounts for (the job's ``extra``): copied twice."""
    divergent_partitions: list[str] = field(default_factory=list)
    wrong_groups: list[str] = field(default_factory=list)


@dataclass
class DrillResult:
    drill: str
    saga_id: str
    kind: str
    outcome: str
    """passed, failed (against the objectives), or abandoned (a step of the drill itself failed)."""
    detail: str = ""
    setup: DrillSetup | None = None
    sagas: list[dict[str, Any]] = field(default_factory=list)
    """The switchover's and the switchback's results (``SagaResult`` as a dict, with ``run_id``)."""
    canary: CanaryFindings | None = None
    verification: VerifyFigures | None = None
    objectives: Objectives = field(default_factory=Objectives)
    failures: list[str] = field(default_factory=list)
    """Each objective or check the run missed, in words."""
