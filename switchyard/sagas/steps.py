"""Each saga step's activity: its name, and the one dataclass it takes and the one it gives back.

Workflows call activities by these names, so they never import the activity code (which talks to
Kafka, ZooKeeper and SQL). ``request_id`` fields make a step idempotent: they are derived from the
workflow id and the step, so a step retried after a crash changes nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.sagas.requests import PartitionLoss

PLAN = "plan_switch"
PROBE = "probe_cluster"
LOCK = "lock_keys"
UNLOCK = "unlock_keys"
BLOCK = "block_keys"
UNBLOCK = "unblock_keys"
SETTLE = "settle_transactions"
FENCE = "verify_fence"
DRAIN = "drain_link"
SYNC_GROUPS = "sync_groups"
CHECK_COPY = "check_copy"
VERIFY = "verify_link"
FLIP = "flip_keys"
AWAIT_ACKS = "await_acks"
REVERSE = "reverse_link"
SPLIT = "split_link"
UNSPLIT = "undo_split"
MEASURE_LOSS = "measure_loss"
FIND_LOST_WINDOW = "find_lost_window"
RECORD = "record_saga"
TOPIC_USERS = "topic_users"
PREPARE_MIGRATION = "prepare_migration"
RETIRE_TOPIC = "retire_topic"
DRILL_PREPARE = "drill_prepare"
DRILL_CANARY = "drill_canary"
DRILL_TIDY = "drill_tidy"
PLAN_PARTITION = "plan_partition_migration"
HOLD_PARTITION = "hold_partition_writes"
MIGRATE_PARTITION = "migrate_partition"
CALL_OFF_PARTITION = "call_off_partition_migration"
CHECK_ORIGIN = "check_partition_origin"
RECORD_ORIGIN_ENDS = "record_origin_ends"
AGE_MIGRATIONS = "age_partition_migrations"
CHECK_ORIGIN_TOPIC = "check_origin_topic"
RETIRE_ORIGIN_TOPIC = "retire_origin_topic"


@dataclass
class Partition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]"


@dataclass
class PartitionEnd:
    topic: str
    partition: int
    end: int


# ---- plan


@dataclass
class PlanRequest:
    saga_id: str
    kind: str
    keys: list[str]
    target: str | None = None
    link: str | None = None
    source: str | None = None
    unplanned: bool = False
    """Failover: the source may be unreachable, and its link need not be running."""
    unknown_keys: bool = False
    """Go ahead with keys that no binding names and no gateway saw (else the plan refuses them)."""


@dataclass
class LinkSplit:
    """The link a switch would promote carries topics of others too: those of its keys move to a link
    of their own first (see :mod:`switchyard.sharing`)."""

    link: str
    new_link: str
    topics: list[str]


@dataclass
class Plan:
    keys: list[str]
    epochs: dict[str, int] = field(default_factory=dict)
    """Each key's epoch as read (0: not bound yet): every later write is fenced on these."""
    source: str = ""
    target: str = ""
    link: str = ""
    partitions: list[Partition] = field(default_factory=list)
    """What the link copies: drained, checked and promoted with the keys."""
    groups: list[str] = field(default_factory=list)
    """The consumer groups the gateways saw the keys' clients work in: their offsets must come over."""
    checks: list[str] = field(default_factory=list)
    """What was checked, one line each, for the operator."""
    refusal: str | None = None
    """Why the saga must not go on (nothing has changed); None when it may."""
    split: LinkSplit | None = None
    """The split to make before the block (``link`` is then the new one); None: the link is the keys'."""


@dataclass
class ProbeRequest:
    cluster: str
    timeout_s: float = 3.0


@dataclass
class Probe:
    cluster: str
    reachable: bool
    detail: str


# ---- routing


@dataclass
class LockRequest:
    saga_id: str
    keys: list[str]
    link: str = ""
    groups: list[str] = field(default_factory=list)
    """The link's consumer groups the saga moves: the mirror's periodic carry leaves them alone while
    the locks are held (one writer of their offsets at a time)."""


@dataclass
class BlockRequest:
    saga_id: str
    keys: list[str]
    epochs: dict[str, int]
    source: str
    acks_timeout_s: float


@dataclass
class Blocked:
    epoch: int
    gateways: int
    """How many gateways acknowledged the block."""
    flipped: int = 0
    """The flip's epoch when it had landed already: the worker that ran the steps while clients are held
    died after it, before the saga heard of them (the saga goes forward)."""


@dataclass
class UnblockRequest:
    saga_id: str
    keys: list[str]
    source: str
    block_epoch: int
    """0 when the block may never have been written."""
    acks_timeout_s: float
    unbind: list[str] = field(default_factory=list)
    """Keys that were not bound before the block: undone, they are unbound again, not left pinned to
    where they happened to resolve."""


@dataclass
class Unblocked:
    epoch: int
    """The epoch that unblocked the keys (0: nothing needed undoing)."""
    flipped: bool = False
    """The flip had been committed after all: the saga goes on forward instead."""


@dataclass
class FlipRequest:
    saga_id: str
    keys: list[str]
    epochs: dict[str, int]
    """The epoch of each key as the saga last wrote it (the block's, or the plan's for a failover)."""
    source: str
    target: str
    link: str
    ends: list[PartitionEnd] = field(default_factory=list)
    """The source ends the copy was drained to (empty for a failover: the source is gone)."""
    shield_source: bool = False
    """Failover: no binding may move back onto the source by itself."""
    fence: bool = False
    """Read the source's ends again before the write: they must still be ``ends`` (the fence's window
    closes here)."""


@dataclass
class Flipped:
    epoch: int
    final: list[PartitionEnd] = field(default_factory=list)
    """Where the copy stands on each partition: how far the source was copied."""
    records: int = 0
    """The records the target held at the flip on the copied partitions (what the drain found there)."""


@dataclass
class AcksRequest:
    epoch: int
    timeout_s: float


@dataclass
class Acked:
    epoch: int
    gateways: int


# ---- the mirror


@dataclass
class SettleRequest:
    link: str
    partitions: list[Partition]
    timeout_s: float


@dataclass
class Settled:
    waited_s: float
    ended: list[str] = field(default_factory=list)
    """The partitions that had a transaction open after the block, which ended meanwhile."""
    committed: list[str] = field(default_factory=list)
    """The partitions whose leader held records above the high watermark after the block (appended, not
    yet copied by its in-sync followers), which were committed meanwhile."""


@dataclass
class FenceRequest:
    link: str
    partitions: list[Partition]
    window_s: float


@dataclass
class Fence:
    ends: list[PartitionEnd]
    """The source's ends after the block, standing still through the window."""


@dataclass
class DrainRequest:
    link: str
    ends: list[PartitionEnd]
    """The source ends to copy up to; empty: the ends of ``partitions`` as read when the drain starts
    (beside the fence, which then checks they stand still)."""
    timeout_s: float
    partitions: list[Partition] = field(default_factory=list)


@dataclass
class Drained:
    target_ends: list[PartitionEnd]
    records: int
    """Source records the target holds up to the drained ends."""
    source_ends: list[PartitionEnd] = field(default_factory=list)
    """The source ends it drained to."""


@dataclass
class GroupSyncRequest:
    link: str
    groups: list[str] = field(default_factory=list)
    """The keys' groups: the only ones read and written (each must be idle on the target); empty: none —
    the mirror's periodic carry has the others."""
    idle_timeout_s: float = 60.0
    """How long a group of ``groups`` may stay active on the target (members left from an earlier
    switch expire after their session timeout) before the switch is abandoned."""
    keys: list[str] = field(default_factory=list)
    """The saga's keys: a group the gateways report them using by now (they report before acknowledging
    the block), which the plan did not know, is carried too — one whose consumers started just before."""
    rewind: bool = True
    """A group further along on the target is moved back to the source's offsets: before a flip the
    source is the truth (after a planned switch's drain, before a forced failover's flip). Not after a
    failover's flip: what the group's members committed through the gateways since (carried to the
    target) is newer than the source's."""


@dataclass
class GroupsSynced:
    written: int
    unchanged: int
    skipped: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    """The groups now in step on the target (the others are active there, and left alone)."""


@dataclass
class CopyCheckRequest:
    link: str
    ends: list[PartitionEnd]
    groups: list[str] = field(default_factory=list)
    """Groups that must read the same records on both sides."""
    since: str = ""
    """When clients were blocked (ISO time): where the target holds fewer records than the fenced end, the
    mirror must have reported reading past the rest (transaction markers) since then."""
    fenced_at_flip: bool = False
    """The flip reads the source's ends once more before it writes (the fence's window closes there):
    here they are read only to name why the copy differs, when it does."""


@dataclass
class CopyChecked:
    verdict: str
    """clean or diverged."""
    problems: list[str] = field(default_factory=list)


@dataclass
class SplitRequest:
    saga_id: str
    split: LinkSplit
    wait_s: float = 60.0
    """How long the old link's mirror processes may take to let the moving topics go, and a mirror
    process to take the new link up."""


@dataclass
class Split:
    link: str
    epoch: int
    """The epoch the new link was made at (0: a retry found it made)."""


@dataclass
class ReverseRequest:
    saga_id: str
    link: str
    new_link: str
    force: bool = False
    follow_timeout_s: float = 60.0
    """How long to wait for a mirror process to take the new link up."""


@dataclass
class Reversed:
    link: str
    uncopied: int = 0
    followed: bool = True
    """Whether a mirror process copies it yet (a switch back needs that)."""


@dataclass
class LossRequest:
    link: str
    final: list[PartitionEnd]


@dataclass
class Loss:
    partitions: list[PartitionLoss]


@dataclass
class LostWindowRequest:
    run_id: str
    link_id: str
    parquet: str = ""
    """Where the lost records are written (default: under the stack's state directory)."""


@dataclass
class LostWindowOutcome:
    run_id: str
    records: int
    partitions: dict[str, int]


@dataclass
class VerifyRequest:
    run_id: str
    link_id: str
    topics: list[str] = field(default_factory=list)
    groups: list[str] | None = None


@dataclass
class VerifyOutcome:
    run_id: str
    verdict: str
    records: int
    divergent_partitions: list[str]
    wrong_groups: list[str]
    extra_records: int = 0
    """Target records no source record accounts for: copied twice."""


# ---- evidence


@dataclass
class SagaRecord:
    """One line of a saga's trail in the ledger: it started, a decision was taken, it ended."""

    saga_id: str
    run_id: str
    kind: str
    event: str
    """started, approved, rejected, ended."""
    keys: list[str] = field(default_factory=list)
    actor: str = ""
    reason: str = ""
    outcome: str = ""
    detail: str = ""
    result: str = ""
    """The result as JSON, when the saga ended."""


# ---- topic migration


@dataclass
class UsersRequest:
    topic: str
    target: str
    link: str
    """The migration's link (once made, a retry accepts the copy it started on the target)."""
    within_s: float | None = None
    """Users seen within this long count (None: ``gateway.usage_window_s``)."""


@dataclass
class TopicUser:
    app: str
    role: str
    """produce or consume."""
    group: str | None = None


@dataclass
class TopicUsers:
    topic: str
    users: list[TopicUser] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    """The users' topic keys (``AppID#Topic``) and their groups' keys (``AppID##Group``): what moves."""
    source: str = ""
    """The cluster the topic's users are routed to now."""
    partitions: int = 0
    checks: list[str] = field(default_factory=list)
    refusal: str | None = None


@dataclass
class MigrationLinkRequest:
    saga_id: str
    topic: str
    source: str
    target: str
    link: str
    caught_up_s: float
    """Caught up when every partition was last fully copied at most this many seconds ago."""
    timeout_s: float


@dataclass
class MigrationLink:
    link: str
    partitions: int
    records: int
    """Source records copied when it caught up."""


@dataclass
class RetireRequest:
    saga_id: str
    topic: str
    cluster: str
    """The cluster the topic leaves."""
    links: list[str]
    """The migration's links, removed first (the promoted one, and its reverse)."""
    delete_topic: bool
    keys: list[str] = field(default_factory=list)
    """The keys the migration moved: the links stay until each group among them has a member on the
    target (or ``settle_s`` passed), for the gateways carry a member's commits from the source through
    them."""
    settle_s: float = 20.0


@dataclass
class Retired:
    links: list[str]
    topic_deleted: bool


# ---- partition migration (seed 004)


@dataclass
class PartitionPlanRequest:
    saga_id: str
    topic: str
    partition: int
    target: str
    fault: bool = False


@dataclass
class PartitionPlan:
    origin: str = ""
    """The cluster the partition's clients are routed to now, which it leaves."""
    checks: list[str] = field(default_factory=list)
    refusal: str | None = None


@dataclass
class PartitionStep:
    """A partition migration's routing step: fenced, idempotent per run, acknowledged by every gateway."""

    saga_id: str
    topic: str
    partition: int
    origin: str
    target: str
    acks_timeout_s: float
    ignore_origin: bool = False
    fault: bool = False
    fault_margin: int = 1_000_000


@dataclass
class PartitionHeld:
    epoch: int
    gateways: int
    target_base: int
    """The target's end when the migration began: what client offset ``end_offset`` stands for there."""


@dataclass
class PartitionMigrated:
    epoch: int
    gateways: int
    end_offset: int
    origin_end: int | None
    """The origin's end, when it could be read (a smooth migration: ``end_offset`` itself)."""


@dataclass
class OriginChecked:
    end: int
    """The origin's end read after the migration took effect."""
    overrun: int
    """Records written to the origin past the end offset (around the gateway): no client reads them."""


@dataclass
class AgingCheck:
    """One run of the aging check; ``actor`` is what its routing changes are recorded as."""

    actor: str


@dataclass
class OriginEnds:
    recorded: list[str]
    """Each fault migration's origin read now, in words (its end recorded, or that it does not answer)."""


@dataclass
class RetirableTopic:
    origin: str
    topic: str
    partitions: int


@dataclass
class Aged:
    aged: list[str]
    """The partitions aged now, each with why."""
    waiting: list[str]
    """The migrations in effect that did not age, and the origin topics all aged that stay, each with why."""
    retirable: list[RetirableTopic]
    """The origin topics every partition of which aged away from them: nothing reads them."""


@dataclass
class OriginTopicStep:
    saga_id: str
    origin: str
    topic: str


@dataclass
class OriginTopicChecked:
    partitions: int
    """The topic's partitions on the origin, all aged away from it; 0: the topic is gone already."""
    refusal: str | None = None
    """Why it may not be deleted (a partition not aged, a link that copies it, the origin away)."""
    deleted: bool = False
