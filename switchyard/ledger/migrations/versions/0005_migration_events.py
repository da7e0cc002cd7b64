"""Partition migration events.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "migration_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("txn_id", sa.String(36), sa.ForeignKey("ledger_txns.id"), nullable=False, index=True),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("origin", sa.String(255), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("end_offset", sa.BigInteger),
        sa.Column("target_base", sa.BigInteger, nullable=False),
        sa.Column("origin_end", sa.BigInteger),
        sa.Column("ignore_origin", sa.Boolean, nullable=False),
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("actor", sa.String(512), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_migration_events_partition_epoch", "topic", "partition", "epoch"),
    )


def downgrade() -> None:
    op.drop_table("migration_events")
