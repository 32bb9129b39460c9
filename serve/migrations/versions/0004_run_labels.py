"""labels.failed (the run-level verdict), labels.author_type (human or checker)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01 10:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("failed", sa.Boolean(), nullable=True))
        batch_op.add_column(
            sa.Column("author_type", sa.String(length=16), nullable=False, server_default="human")
        )
    # the labels written before: a failure kind said the run failed, "healthy" (kind NULL) that it did not
    op.execute(sa.text("UPDATE labels SET failed = (kind IS NOT NULL)"))


def downgrade() -> None:
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_column("author_type")
        batch_op.drop_column("failed")
