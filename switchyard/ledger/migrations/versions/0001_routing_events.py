"""Routing changes: transactions, binding events, cluster events.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _event_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("actor", sa.String(512), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "ledger_txns",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("request_id", sa.String(255)),
        sa.Column("actor", sa.String(512), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("committed_at", sa.DateTime(timezone=True)),
    )
    op.create_index("ix_ledger_txns_epoch", "ledger_txns", ["epoch"])
    op.create_index("ix_ledger_txns_status", "ledger_txns", ["status"])
    op.create_index("ix_ledger_txns_request_id", "ledger_txns", ["request_id"])

    op.create_table(
        "binding_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("txn_id", sa.String(36), sa.ForeignKey("ledger_txns.id"), nullable=False),
        sa.Column("binding_key", sa.String(2048), nullable=False),
        sa.Column("from_cluster", sa.String(255)),
        sa.Column("to_cluster", sa.String(255), nullable=False),
        *_event_columns(),
    )
    op.create_index("ix_binding_events_txn_id", "binding_events", ["txn_id"])
    op.create_index("ix_binding_events_key_epoch", "binding_events", ["binding_key", "epoch"])

    op.create_table(
        "cluster_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("txn_id", sa.String(36), sa.ForeignKey("ledger_txns.id"), nullable=False),
        sa.Column("cluster_id", sa.String(255), nullable=False),
        sa.Column("bootstrap", sa.String(2048), nullable=False),
        *_event_columns(),
    )
    op.create_index("ix_cluster_events_txn_id", "cluster_events", ["txn_id"])
    op.create_index("ix_cluster_events_cluster_epoch", "cluster_events", ["cluster_id", "epoch"])


def downgrade() -> None:
    op.drop_table("cluster_events")
    op.drop_table("binding_events")
    op.drop_table("ledger_txns")
