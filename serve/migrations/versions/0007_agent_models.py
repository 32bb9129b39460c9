"""agent models: the agent of every trace, and model activations per (tenant, agent)

``traces.agent`` (model/core/agents.py): rows stored before this revision get what the resolution gives
them, their task type, else the pool ``_pool`` (no stored run named an agent, and the span importers
did not yet record the root agent span). ``model_activations.agent``: the agent whose model a row
activates; earlier rows (tenant-wide run scorers, replaced by agent models) keep NULL as history.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent", sa.String(length=200), server_default="_pool", nullable=False))
    op.execute("UPDATE traces SET agent = task_type WHERE task_type IS NOT NULL AND task_type <> ''")
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.create_index("ix_traces_tenant_agent", ["tenant_id", "agent"], unique=False)
    with op.batch_alter_table("model_activations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent", sa.String(length=200), nullable=True))
        batch_op.create_index("ix_model_activations_agent", ["tenant_id", "agent", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("model_activations", schema=None) as batch_op:
        batch_op.drop_index("ix_model_activations_agent")
        batch_op.drop_column("agent")
    with op.batch_alter_table("traces", schema=None) as batch_op:
        batch_op.drop_index("ix_traces_tenant_agent")
        batch_op.drop_column("agent")
