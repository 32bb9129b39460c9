"""Two indexes no query reads, dropped: every diagnosis wrote their pages at its commit

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07 00:40:00

- ``ix_traces_tenant_arm`` (traces: tenant_id, arm): the canary's figures per arm are kept in
  ``canary_counts`` since revision 0012; nothing selects traces by arm.
- ``ix_obs_stream`` (observations: tenant_id, stream, agent, seq): the same columns in the same order as
  the unique constraint ``uq_obs_seq``, whose index serves every read it served.

Each cost a diagnosis one more index page written to the WAL (of ~34) and its insert's upkeep.
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("traces") as batch_op:
        batch_op.drop_index("ix_traces_tenant_arm")
    with op.batch_alter_table("observations") as batch_op:
        batch_op.drop_index("ix_obs_stream")


def downgrade() -> None:
    with op.batch_alter_table("observations") as batch_op:
        batch_op.create_index("ix_obs_stream", ["tenant_id", "stream", "agent", "seq"], unique=False)
    with op.batch_alter_table("traces") as batch_op:
        batch_op.create_index("ix_traces_tenant_arm", ["tenant_id", "arm"], unique=False)
