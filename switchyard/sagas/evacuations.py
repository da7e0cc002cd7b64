"""A cluster evacuation's input, plan and result: the shapes its workflow, activities, CLI and report
share (plain dataclasses, so Temporal's converter carries them and JSON stores them).

An evacuation moves every topic of one cluster, and every application using them, to another cluster in
batches (:mod:`switchyard.moves.cluster` plans them, :mod:`workflows.evacuation` runs them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.sagas.requests import Kind, Policy

EVACUATION_KIND = Kind.EVACUATION.value
PLAN_EVACUATION = "plan_evacuation"
COPY_CLUSTER = "copy_cluster"
RETIRE_EVACUATED = "retire_evacuated"
QUIET_FIRST, BUSY_FIRST, BY_NAME = "quiet-first", "busy-first", "name"
ORDERS = (QUIET_FIRST, BUSY_FIRST, BY_NAME)


def evacuation_link(source: str, target: str) -> str:
    """The link copying what is left of the source: the same for every run on the two clusters, so a rerun
    takes up the copy an earlier one made (each batch's switch splits its topics off it)."""
    return f"evacuate-{source}-to-{target}"


@dataclass
class EvacuationRequest:
    """Move every topic of ``source``, and every application the gateways saw use them, to ``target``."""

    source: str
    target: str
    actor: str = "user:unknown"
    reason: str = ""
    batch_topics: int = 0
    """At most this many topics a batch, where an application's topics allow (0: one batch for each set of
    applications sharing topics)."""
    order: str = QUIET_FIRST
    """Which batches go first: ``quiet-first`` (fewest records written while the plan watched),
    ``busy-first``, or ``name``."""
    batches: list[list[str]] = field(default_factory=list)
    """The operator's own batches of topics, in order (``--plan FILE``); every topic of the source in one."""
    approve_batches: bool = False
    """Wait for an approval before each batch's switch (nothing is held meanwhile)."""
    active_within_s: float | None = None
    """Applications seen this recently count as users (None: ``gateway.usage_window_s``)."""
    watch_s: float = 5.0
    """How long the plan watches the source's ends: a topic whose end moves with no producer seen
    through a gateway has a writer around it, and cannot move."""
    copy_timeout_s: float = 6 * 3600.0
    """How long the first copy of the whole cluster may take to catch up."""
    policy: Policy = field(default_factory=Policy)
    """Each batch's switch runs with it; ``retire_source`` deletes the source's topics after an approval."""


@dataclass
class EvacuationPlanRequest:
    saga_id: str
    source: str
    target: str
    link: str
    batch_topics: int = 0
    order: str = QUIET_FIRST
    batches: list[list[str]] = field(default_factory=list)
    within_s: float | None = None
    watch_s: float = 5.0


@dataclass
class EvacuationBatch:
    number: int
    topics: list[str]
    apps: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    """What its switch moves: the applications' keys, and any of their own keys routed to the source."""
    partitions: int = 0
    written: int = 0
    """Records written to its topics while the plan watched the source (its traffic)."""


@dataclass
class EvacuationPlan:
    source: str
    target: str
    link: str
    batches: list[EvacuationBatch] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    """Topics no application was seen use: copied, checked exact and retired with the last batch."""
    checks: list[str] = field(default_factory=list)
    cannot_move: list[str] = field(default_factory=list)
    """What stops the whole evacuation, each named with why; nothing moves while any is left."""

    @property
    def topics(self) -> list[str]:
        return sorted({t for b in self.batches for t in b.topics} | set(self.unused))


@dataclass
class CopyClusterRequest:
    saga_id: str
    source: str
    target: str
    link: str
    topics: list[str]
    caught_up_s: float
    """Caught up when every partition was last fully copied at most this many seconds ago."""
    timeout_s: float


@dataclass
class BatchOutcome:
    """One batch as the report shows it."""

    number: int
    topics: list[str]
    apps: list[str]
    outcome: str
    """switched, compensated, rolled back, or not started."""
    saga_id: str = ""
    pause_ms: int = 0
    """Clients held at its switch."""
    duration_ms: int = 0
    records_copied: int = 0
    verdict: str = ""
    detail: str = ""


@dataclass
class RetireEvacuatedRequest:
    saga_id: str
    source: str
    topics: list[str]
    links: list[str]
    """Every link the evacuation made or promoted, and their reverses: removed first."""
    unused_link: str | None = None
    """The link still copying the unused topics: each must be copied exactly before it is deleted."""
    unused: list[str] = field(default_factory=list)


@dataclass
class RetiredEvacuated:
    links: list[str]
    deleted: list[str]


@dataclass
class EvacuationResult:
    saga_id: str
    source: str
    target: str
    outcome: str
    """evacuated, rolled back (some batch went back), stopped (an approval refused), refused, failed."""
    kind: str = EVACUATION_KIND
    batches: list[BatchOutcome] = field(default_factory=list)
    unused: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)
    """The topics deleted on the source."""
    switches: list[str] = field(default_factory=list)
    """The run id of each batch's switch, in order, roll-backs too (their reports: ``switchyard report``)."""
    detail: str = ""
    duration_ms: int = 0
    approvals: list[str] = field(default_factory=list)
