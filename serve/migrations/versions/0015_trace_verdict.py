"""traces.verdict and the label queue's margin parts as columns, the console's index, tenants.retention_days

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 21:20:00

The console's overview read each run's verdict out of its stored response (``JSON_EXTRACT`` over every
row of the window: 0.67 s at 20,000 runs on SQLite) and the label queue walked every stored trace
(6.5 s). From this revision each diagnosis writes its verdict (``failed`` / ``healthy`` /
``unknown``) and what the queue's margin is made of (``failure_probability``, ``judged_threshold``,
``finding_margin``: :func:`serve.store.verdict.run_columns`) as columns, and one index holds what both
read (``ix_traces_console``), so that they scan an index and never the rows.

The new columns start NULL: this migration only adds them (no rewrite of the table, so it takes
moments at any size). Rows stored before are filled by the **online backfill**
(:func:`serve.store.upkeep.backfill_verdicts`: ``triage store backfill``, and the server at start-up
in the background), a few thousand rows a transaction; until a row is filled the pages read its
verdict from its JSON, so they stay right while it runs. ``ix_traces_unfilled`` (partial: the rows
still NULL) finds those rows; it is empty once the backfill is done.

``tenants.retention_days``: a tenant's retention (NULL: keep everything), :mod:`serve.store.upkeep`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_UNFILLED = sa.text("verdict IS NULL")


def upgrade() -> None:
    op.add_column("traces", sa.Column("verdict", sa.String(length=8), nullable=True))
    op.add_column("traces", sa.Column("failure_probability", sa.Float(), nullable=True))
    op.add_column("traces", sa.Column("judged_threshold", sa.Float(), nullable=True))
    op.add_column("traces", sa.Column("finding_margin", sa.Float(), nullable=True))
    op.create_index("ix_traces_console", "traces",
                    ["tenant_id", "created_at", "verdict", "agent", "primary_kind", "id", "failure_probability",
                     "judged_threshold", "finding_margin"])
    op.create_index("ix_traces_unfilled", "traces", ["tenant_id", "id"], sqlite_where=_UNFILLED,
                    postgresql_where=_UNFILLED)
    op.add_column("tenants", sa.Column("retention_days", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("tenants", "retention_days")
    op.drop_index("ix_traces_unfilled", table_name="traces")
    op.drop_index("ix_traces_console", table_name="traces")
    for col in ("finding_margin", "judged_threshold", "failure_probability", "verdict"):
        op.drop_column("traces", col)
