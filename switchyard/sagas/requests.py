"""The sagas' inputs and results, and the policy that tunes them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Kind(StrEnum):
    SWITCHOVER = "switchover"
    SWITCHBACK = "switchback"
    FAILOVER = "failover"
    MIGRATION = "topic-migration"
    PARTITION_MIGRATION = "partition-migration"
    ORIGIN_RETIREMENT = "origin-retirement"
    EVACUATION = "evacuation"


class ApprovalPoint(StrEnum):
    NONE = "none"
    BEFORE_BLOCK = "before-block"
    """After the plan, before anything changes: nothing is held while the saga waits."""
    BEFORE_FLIP = "before-flip"
    """Everything checked, clients blocked: they wait as long as the approver does."""


@dataclass
class Policy:
    """How a saga runs; resolved from the configuration when it is started, then fixed in its history."""

    approval: ApprovalPoint = ApprovalPoint.NONE
    approval_timeout_s: float = 3600.0
    """An approval not given in time compensates, as a rejection does."""
    fence_window_s: float = 0.0
    """How much longer than the held steps the fence watches the source's ends (a writer around the
    gateway moves them) before the flip. Sagas started before the flip closed the window watched this
    long beside the copy instead (their histories hold the 0.5 s they were given)."""
    transaction_wait_s: float = 10.0
    """After the block, how long a transaction open on a partition being switched may take to end."""
    drain_timeout_s: float = 60.0
    group_sync_timeout_s: float = 30.0
    """The keys' groups must come over within this (idle on the target, their offsets read and written),
    or the switch is abandoned naming the group."""
    acks_timeout_s: float = 15.0
    spark_verify: bool = False
    """Run the Spark verification job before the flip (slower; clients stay blocked meanwhile)."""
    recovery_wait_s: float = 0.0
    """Failover: how long to wait for the old primary to come back, to measure the lost window."""
    fault_margin: int = 1_000_000
    """Fault partition migration: offsets past the highest acknowledged end seen (``sagas.fault_margin``)."""
    retire_source: bool = True
    """Topic migration: delete the topic on the source after the retirement approval."""


@dataclass
class SwitchRequest:
    """A planned switchover or switchback, or an unplanned failover, of binding keys."""

    keys: list[str]
    """Binding keys in text form (``orders``, ``orders@host-7``, ``orders#payments``, ``orders##billing``)."""
    target: str | None = None
    """The cluster to move to; default: the target of the link out of the keys' cluster."""
    link: str | None = None
    """The mirror link to drain and promote; default: the one from the keys' cluster to the target."""
    source: str | None = None
    """Failover: the cluster that failed (default: where the keys are bound)."""
    force: bool = False
    """Failover: go ahead although the source still answers."""
    unknown_keys: bool = False
    """Go ahead with keys that no binding names and no gateway saw (a typo, most likely, else refused)."""
    actor: str = "user:unknown"
    reason: str = ""
    policy: Policy = field(default_factory=Policy)


@dataclass
class MigrationRequest:
    """Move one topic, and every application using it, to another cluster."""

    topic: str
    target: str
    actor: str = "user:unknown"
    reason: str = ""
    active_within_s: float | None = None
    """Applications count as using the topic if a gateway saw them within this many seconds (None:
    ``gateway.usage_window_s``)."""
    copy_timeout_s: float = 6 * 3600.0
    """How long the topic's first copy may take to catch up with the source."""
    policy: Policy = field(default_factory=Policy)


@dataclass
class PartitionMigrationRequest:
    """Move one partition's writes, and its reads from its end offset on, to another cluster (seed
    004): its records stay where they are."""

    topic: str
    partition: int
    target: str
    fault: bool = False
    """The origin is unreachable: the end offset is chosen beyond anything it acknowledged."""
    ignore_origin: bool = False
    """Readers never go to the origin: below the end offset they are sent to the target's start."""
    actor: str = "user:unknown"
    reason: str = ""
    policy: Policy = field(default_factory=Policy)


@dataclass
class OriginRetirementRequest:
    """Delete a topic from a cluster every partition of it was migrated away from and aged, after an
    approval (always asked: a deletion is not undone)."""

    origin: str
    topic: str
    approval_timeout_s: float = 3600.0
    actor: str = "user:unknown"
    reason: str = ""


@dataclass
class AgingRequest:
    """One run of the partition migrations' aging check (``MigrationAging``), as its schedule fires it."""

    approval_timeout_s: float = 3600.0
    """How long a retirement it starts waits for its approval."""
    actor: str = "schedule:partition-aging"


@dataclass
class AgingReport:
    origin_ends: list[str] = field(default_factory=list)
    aged: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    retirements: list[str] = field(default_factory=list)
    """The retirement sagas started now, or left waiting for their approval."""


@dataclass
class Decision:
    """An approval or a rejection, and who gave it."""

    by: str
    reason: str = ""


@dataclass
class StepState:
    name: str
    state: str = "pending"
    """pending, running, done, failed, skipped, compensated."""
    detail: str = ""


@dataclass
class PartitionState:
    topic: str
    partition: int
    source_end: int = -1
    """The source's end read after the block (what must be copied)."""
    target_end: int = -1
    copied: bool = False


@dataclass
class Progress:
    """What a saga is doing; its ``progress`` query returns this."""

    kind: str
    keys: list[str]
    phase: str = "starting"
    source: str = ""
    target: str = ""
    link: str = ""
    steps: list[StepState] = field(default_factory=list)
    partitions: list[PartitionState] = field(default_factory=list)
    awaiting_approval: str | None = None
    """Where the saga waits for an approval, if it does."""


@dataclass
class PartitionLoss:
    topic: str
    partition: int
    last_seen_end: int
    """The source's end as the mirror last saw it."""
    copied_to: int
    """Every source offset below this is on the target."""

    @property
    def records(self) -> int:
        return max(0, self.last_seen_end - self.copied_to)


@dataclass
class SagaResult:
    """How a saga ended. Durations in milliseconds, measured by the saga's own clock."""

    saga_id: str
    kind: str
    keys: list[str]
    outcome: str
    """switched, compensated, refused, migrated."""
    source: str = ""
    target: str = ""
    link: str = ""
    reverse_link: str | None = None
    detail: str = ""
    block_epoch: int = 0
    flip_epoch: int = 0
    rto_ms: int = 0
    """From the saga's start to every gateway routing the keys to the target."""
    pause_ms: int = 0
    """From the block taking effect to the flip taking effect: how long clients were held."""
    partitions: int = 0
    records_copied: int = 0
    """Source records the copy held at the flip, over the drained partitions."""
    groups_synced: int = 0
    verdict: str = ""
    rpo: list[PartitionLoss] = field(default_factory=list)
    """Failover: records the source acknowledged that the copy never got, per partition."""
    lost_window_records: int | None = None
    """Failover: the lost window as measured on the recovered source (None: not measured)."""
    approvals: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)
    """Topic migration: the keys moved with the topic."""
    end_offset: int | None = None
    """Partition migration: client offsets below it are the origin's, at or above it the target's."""
    steps: list[StepState] = field(default_factory=list)
