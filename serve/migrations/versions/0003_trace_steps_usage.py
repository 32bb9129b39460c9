"""trace_steps (a session's steps, one row each), traces.steps_in_rows, usage (daily quota)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01 09:20:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("steps_in_rows", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_table(
        "trace_steps",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("trace_id", sa.String(length=128), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("step", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "trace_id", "idx"),
    )
    op.create_table(
        "usage",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("steps", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "day"),
    )


def downgrade() -> None:
    op.drop_table("usage")
    op.drop_table("trace_steps")
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.drop_column("steps_in_rows")
