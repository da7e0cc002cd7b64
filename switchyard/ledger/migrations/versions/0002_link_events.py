"""Mirror link events.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "link_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("txn_id", sa.String(36), sa.ForeignKey("ledger_txns.id"), nullable=False, index=True),
        sa.Column("link_id", sa.String(255), nullable=False),
        sa.Column("source", sa.String(255), nullable=False),
        sa.Column("target", sa.String(255), nullable=False),
        sa.Column("include", sa.Text, nullable=False),
        sa.Column("exclude", sa.Text, nullable=False),
        sa.Column("reverse_of", sa.String(255)),
        sa.Column("from_state", sa.String(16)),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("actor", sa.String(512), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Index("ix_link_events_link_epoch", "link_id", "epoch"),
    )


def downgrade() -> None:
    op.drop_table("link_events")
