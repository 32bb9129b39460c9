"""api_keys.operator (operator keys), labels.withdrawn_at (label undo), failures.tool / created_at / agent (patterns)

Revision ID: 0010
Revises: 0006
Create Date: 2026-12-04 17:20:00

Three columns, all for issue 21's console: an operator key may switch tenants and promote / roll
back models (existing keys: not operators); a label its author withdrew keeps its row and gets
``withdrawn_at`` (nothing stored is lost); a failure row names the tool it concerns, so that
patterns are grouped without reading every trace (rows written before stay NULL: the pattern query
reads their tool from the stored trace) and carries its trace's ``created_at`` and task type (its
agent; filled here for rows written before), indexed by (tenant, created_at), so that a window's
patterns read this one table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("operator", sa.Boolean(), nullable=False, server_default=sa.false()))
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.add_column(sa.Column("withdrawn_at", sa.DateTime(), nullable=True))
    with op.batch_alter_table("failures", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tool", sa.String(length=200), nullable=True))
        batch_op.add_column(sa.Column("created_at", sa.DateTime(), nullable=True))
        batch_op.add_column(sa.Column("agent", sa.String(length=200), nullable=True))
        batch_op.create_index("ix_failures_tenant_created", ["tenant_id", "created_at"], unique=False)
    with op.batch_alter_table("recommendations", schema=None) as batch_op:
        batch_op.create_index("ix_recs_tenant_created", ["tenant_id", "created_at"], unique=False)
    op.execute(sa.text(
        "UPDATE failures SET "
        "created_at = (SELECT t.created_at FROM traces t WHERE t.tenant_id = failures.tenant_id "
        "AND t.id = failures.trace_id), "
        "agent = (SELECT t.task_type FROM traces t WHERE t.tenant_id = failures.tenant_id "
        "AND t.id = failures.trace_id)"))


def downgrade() -> None:
    with op.batch_alter_table("recommendations", schema=None) as batch_op:
        batch_op.drop_index("ix_recs_tenant_created")
    with op.batch_alter_table("failures", schema=None) as batch_op:
        batch_op.drop_index("ix_failures_tenant_created")
        batch_op.drop_column("agent")
        batch_op.drop_column("created_at")
        batch_op.drop_column("tool")
    with op.batch_alter_table("labels", schema=None) as batch_op:
        batch_op.drop_column("withdrawn_at")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("operator")
