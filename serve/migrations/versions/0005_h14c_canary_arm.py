"""traces.arm (the canary arm of the run) and traces.failed_at (its first failure)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("arm", sa.String(length=8), nullable=True))
        batch_op.add_column(sa.Column("failed_at", sa.DateTime(), nullable=True))
        batch_op.create_index("ix_traces_tenant_arm", ["tenant_id", "arm"], unique=False)
    # Runs stored before the canary have no arm (they were not assigned): they count in neither.


def downgrade() -> None:
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.drop_index("ix_traces_tenant_arm")
        batch_op.drop_column("failed_at")
        batch_op.drop_column("arm")
