"""Verification runs and their partitions; reconciliation runs.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _counts() -> list[sa.Column[object]]:
    return [
        sa.Column(name, sa.BigInteger, nullable=False)
        for name in ("records", "missing", "extra", "mismatched", "misaligned")
    ]


def upgrade() -> None:
    op.create_table(
        "verification_runs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("link_id", sa.String(255), nullable=False, index=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("verdict", sa.String(16), nullable=False),
        *_counts(),
        sa.Column("groups_checked", sa.Integer, nullable=False),
        sa.Column("groups_wrong", sa.Integer, nullable=False),
        sa.Column("master", sa.String(512), nullable=False),
        sa.Column("report", sa.Text, nullable=False),
    )
    op.create_table(
        "verification_partitions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(36), sa.ForeignKey("verification_runs.id"), nullable=False, index=True),
        sa.Column("topic", sa.String(255), nullable=False),
        sa.Column("partition", sa.Integer, nullable=False),
        sa.Column("source_from", sa.BigInteger, nullable=False),
        sa.Column("source_to", sa.BigInteger, nullable=False),
        *_counts(),
        sa.Column("examples", sa.Text, nullable=False),
    )
    op.create_table(
        "reconciliation_runs",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("link_id", sa.String(255), nullable=False, index=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("parquet", sa.Text, nullable=False),
        sa.Column("records", sa.BigInteger, nullable=False),
        sa.Column("report", sa.Text, nullable=False),
        sa.Column("republished_at", sa.DateTime(timezone=True)),
        sa.Column("republished_records", sa.BigInteger),
    )


def downgrade() -> None:
    op.drop_table("reconciliation_runs")
    op.drop_table("verification_partitions")
    op.drop_table("verification_runs")
