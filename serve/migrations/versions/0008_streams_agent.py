"""streams and observations keyed by agent: (tenant, agent, stream) instead of (tenant, stream, task type)

Issue 20, item 8: each agent warms up its own baseline. A stream stored before this revision was
fed by the runs of one task type, which is the agent those runs resolve to when they name none
(model/core/agents.py): the task type becomes the agent; ``"default"`` (runs with no task type) becomes
the pool agent ``"_pool"``; ``""`` (values posted for every task type) stays ``""`` (every agent).
Nothing stored is dropped: detector state, counts, open alarms and observations carry over.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

#: The old key for runs without a task type, and the agent such runs resolve to now.
OLD_DEFAULT_TASK_TYPE = "default"
POOL_AGENT = "_pool"


def _rekey(column: str, old: str, new: str) -> None:
    for table in ("streams", "observations"):
        op.execute(sa.text(f"UPDATE {table} SET {column} = :new WHERE {column} = :old").bindparams(old=old, new=new))


def upgrade() -> None:
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.drop_index("ix_obs_stream")
        batch_op.drop_constraint("uq_obs_seq", type_="unique")
        batch_op.alter_column("task_type", new_column_name="agent", existing_type=sa.String(length=200),
                              existing_nullable=False)
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.create_index("ix_obs_stream", ["tenant_id", "stream", "agent", "seq"], unique=False)
        batch_op.create_unique_constraint("uq_obs_seq", ["tenant_id", "stream", "agent", "seq"])
    with op.batch_alter_table("streams", schema=None) as batch_op:
        batch_op.alter_column("task_type", new_column_name="agent", existing_type=sa.String(length=200),
                              existing_nullable=False)
    _rekey("agent", OLD_DEFAULT_TASK_TYPE, POOL_AGENT)


def downgrade() -> None:
    # Each agent's stream comes back under the agent's name as its task type and "_pool" as
    # "default". A tenant with both an agent named "default" and the pool cannot go back (the two
    # keys clash: the downgrade fails in its transaction and nothing is lost).
    _rekey("agent", POOL_AGENT, OLD_DEFAULT_TASK_TYPE)
    with op.batch_alter_table("streams", schema=None) as batch_op:
        batch_op.alter_column("agent", new_column_name="task_type", existing_type=sa.String(length=200),
                              existing_nullable=False)
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.drop_index("ix_obs_stream")
        batch_op.drop_constraint("uq_obs_seq", type_="unique")
        batch_op.alter_column("agent", new_column_name="task_type", existing_type=sa.String(length=200),
                              existing_nullable=False)
    with op.batch_alter_table("observations", schema=None) as batch_op:
        batch_op.create_index("ix_obs_stream", ["tenant_id", "stream", "task_type", "seq"], unique=False)
        batch_op.create_unique_constraint("uq_obs_seq", ["tenant_id", "stream", "task_type", "seq"])
