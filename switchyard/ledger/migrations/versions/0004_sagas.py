"""Saga runs and their steps.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "saga_runs",
        sa.Column("run_id", sa.String(64), primary_key=True),
        sa.Column("saga_id", sa.String(255), nullable=False, index=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("keys", sa.Text, nullable=False),
        sa.Column("actor", sa.String(512), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("outcome", sa.String(32)),
        sa.Column("result", sa.Text),
    )
    op.create_table(
        "saga_steps",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(64), nullable=False, index=True),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("figures", sa.Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("saga_steps")
    op.drop_table("saga_runs")
