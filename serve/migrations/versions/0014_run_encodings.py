"""run_encodings: the float16 step vectors of each run, as the agent model's encoder block read them

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 17:00:00

An agent model that reads the encoder block (issue 34: the static sentence encoder's pooled step
vectors) encodes each step of a run once, when it diagnoses it; from this revision the service keeps
those vectors with the run (float16, 512 bytes a step at 256 dimensions; a chunk per whole diagnosis
or session append), so that ``triage retrain`` builds its prefix rows from them and never encodes a
run again. The table starts empty: runs stored before it are encoded once by ``triage encode-runs``
(a batched, resumable backfill), not here (a migration must not load the encoder).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_encodings",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("trace_id", sa.String(length=128), nullable=False),
        sa.Column("first", sa.Integer(), nullable=False),
        sa.Column("n", sa.Integer(), nullable=False),
        sa.Column("encoder", sa.String(length=32), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vectors", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "trace_id", "first"),
    )


def downgrade() -> None:
    op.drop_table("run_encodings")
