"""recommendations and outcomes indexed by (tenant_id, trace_id)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 07:30:00

The console's overview joins a window's runs to their recommendations and outcomes by trace; with
neither table indexed by trace, SQLite searched every recommendation (and every outcome) of the
tenant once per run: 20,000 runs × 8,708 recommendations, and the page timed out after 60 s
(docs/benchmarks.md). The runs page and the history export read them by trace too. Indexes only: no
row changes.
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("recommendations", schema=None) as batch_op:
        batch_op.create_index("ix_recs_tenant_trace", ["tenant_id", "trace_id"], unique=False)
    with op.batch_alter_table("outcomes", schema=None) as batch_op:
        batch_op.create_index("ix_outcomes_tenant_trace", ["tenant_id", "trace_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("outcomes", schema=None) as batch_op:
        batch_op.drop_index("ix_outcomes_tenant_trace")
    with op.batch_alter_table("recommendations", schema=None) as batch_op:
        batch_op.drop_index("ix_recs_tenant_trace")
