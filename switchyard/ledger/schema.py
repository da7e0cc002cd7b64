"""The ledger's tables. Changes to them go through a new Alembic revision in ``migrations/versions``.

``ledger_txns`` holds one row per routing change (several keys may change in one); its ``status`` is
``pending`` from just before the ZooKeeper write until the write is known to have happened; its
``request_id`` is the caller's idempotency key, shared by the attempts of one requested change. The event
tables are append-only: rows are added with their transaction and only ever removed together with a
transaction that never reached ZooKeeper.
"""

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

metadata = MetaData()


def _event_columns() -> list[Column[object]]:
    """What every event records besides its subject: the state change, epoch, who, why and when."""
    return [
        Column("from_state", String(16)),
        Column("to_state", String(16), nullable=False),
        Column("epoch", BigInteger, nullable=False),
        Column("actor", String(512), nullable=False),
        Column("reason", Text, nullable=False),
        Column("at", DateTime(timezone=True), nullable=False),
    ]


ledger_txns = Table(
    "ledger_txns",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("epoch", BigInteger, nullable=False, index=True),
    Column("status", String(16), nullable=False, index=True),
    Column("request_id", String(255), index=True),
    Column("actor", String(512), nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("committed_at", DateTime(timezone=True)),
)

binding_events = Table(
    "binding_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("txn_id", String(36), ForeignKey("ledger_txns.id"), nullable=False, index=True),
    Column("binding_key", String(2048), nullable=False),
    Column("from_cluster", String(255)),
    Column("to_cluster", String(255), nullable=False),
    *_event_columns(),
    Index("ix_binding_events_key_epoch", "binding_key", "epoch"),
)

cluster_events = Table(
    "cluster_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("txn_id", String(36), ForeignKey("ledger_txns.id"), nullable=False, index=True),
    Column("cluster_id", String(255), nullable=False),
    Column("bootstrap", String(2048), nullable=False),
    *_event_columns(),
    Index("ix_cluster_events_cluster_epoch", "cluster_id", "epoch"),
)

link_events = Table(
    "link_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("txn_id", String(36), ForeignKey("ledger_txns.id"), nullable=False, index=True),
    Column("link_id", String(255), nullable=False),
    Column("source", String(255), nullable=False),
    Column("target", String(255), nullable=False),
    Column("include", Text, nullable=False),
    Column("exclude", Text, nullable=False),
    Column("reverse_of", String(255)),
    *_event_columns(),
    Index("ix_link_events_link_epoch", "link_id", "epoch"),
)
"""Mirror links: created, paused, resumed, promoted. ``include``/``exclude`` are JSON lists of regexes."""

migration_events = Table(
    "migration_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("txn_id", String(36), ForeignKey("ledger_txns.id"), nullable=False, index=True),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("origin", String(255), nullable=False),
    Column("target", String(255), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("end_offset", BigInteger),
    Column("target_base", BigInteger, nullable=False),
    Column("origin_end", BigInteger),
    Column("ignore_origin", Boolean, nullable=False),
    *_event_columns(),
    Index("ix_migration_events_partition_epoch", "topic", "partition", "epoch"),
)
"""Partition migrations (seed 004): begun, in effect, aged, their origin's true end recorded."""

verification_runs = Table(
    "verification_runs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("link_id", String(255), nullable=False, index=True),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    Column("verdict", String(16), nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("missing", BigInteger, nullable=False),
    Column("extra", BigInteger, nullable=False),
    Column("mismatched", BigInteger, nullable=False),
    Column("misaligned", BigInteger, nullable=False),
    Column("groups_checked", Integer, nullable=False),
    Column("groups_wrong", Integer, nullable=False),
    Column("master", String(512), nullable=False),
    Column("report", Text, nullable=False),
)
"""One verification job: its verdict and totals; ``report`` is the whole findings document (JSON)."""

verification_partitions = Table(
    "verification_partitions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(36), ForeignKey("verification_runs.id"), nullable=False, index=True),
    Column("topic", String(255), nullable=False),
    Column("partition", Integer, nullable=False),
    Column("source_from", BigInteger, nullable=False),
    Column("source_to", BigInteger, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("missing", BigInteger, nullable=False),
    Column("extra", BigInteger, nullable=False),
    Column("mismatched", BigInteger, nullable=False),
    Column("misaligned", BigInteger, nullable=False),
    Column("examples", Text, nullable=False),
)

reconciliation_runs = Table(
    "reconciliation_runs",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("link_id", String(255), nullable=False, index=True),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    Column("parquet", Text, nullable=False),
    Column("records", BigInteger, nullable=False),
    Column("report", Text, nullable=False),
    Column("republished_at", DateTime(timezone=True)),
    Column("republished_records", BigInteger),
)
"""The lost window found after a failover, exported to ``parquet``; republished once at most."""

saga_runs = Table(
    "saga_runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("saga_id", String(255), nullable=False, index=True),
    Column("kind", String(32), nullable=False),
    Column("keys", Text, nullable=False),
    Column("actor", String(512), nullable=False),
    Column("reason", Text, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True)),
    Column("outcome", String(32)),
    Column("result", Text),
)
"""One run of a saga (``run_id`` is Temporal's, ``saga_id`` the workflow id): ``keys`` a JSON list,
``result`` the saga's result as JSON once it ended."""

saga_steps = Table(
    "saga_steps",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("step", String(64), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("ended_at", DateTime(timezone=True), nullable=False),
    Column("outcome", String(32), nullable=False),
    Column("detail", Text, nullable=False),
    Column("figures", Text, nullable=False),
)
"""Each step of a saga as it ended (every attempt of it), and its decisions (approved, rejected):
appended as they happen, so a saga killed halfway leaves its trail. ``figures`` is JSON."""
