"""model_activations: which registry version of the run scorer each tenant serves

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 11:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_activations",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("activated_at", sa.DateTime(), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("model_activations", schema=None) as batch_op:
        batch_op.create_index("ix_model_activations_tenant", ["tenant_id", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("model_activations", schema=None) as batch_op:
        batch_op.drop_index("ix_model_activations_tenant")
    op.drop_table("model_activations")
