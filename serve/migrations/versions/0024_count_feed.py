"""``count_feed``: what diagnosed runs change of the counts, still to be applied

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 23:00:00

A diagnosis changed its run's counts inside its own write transaction: its ``run_metrics`` row (read, then
inserted or updated) and three upserts (``canary_counts``, ``overview_counts``, ``metric_totals``), a
quarter to a third of the store's work in a diagnosis's write on SQLite (docs/benchmarks.md, "Round 11").
From this revision a server's diagnosis writes one row here instead (:func:`serve.store.counters.count_run`
with the database's ``defer_counts``), and the worker's feeder applies the rows in batches, in ``id``
order, each deleted in the transaction that applies it; every other writer of a run's counts (labels,
outcomes, deletions, retention, agents' moves) and every reader of the counts applies what waits first.

Downgrade: the rows still waiting are applied (their counts kept), then the table dropped.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "count_feed",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("trace_id", sa.String(length=128), nullable=False),
        sa.Column("ops", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    from sqlalchemy.orm import Session

    from serve.store.counters import apply_count_feed, flush_counts

    db = Session(bind=op.get_bind())
    while apply_count_feed(db, 500, lock=False) == 500:
        pass
    flush_counts(db)
    db.flush()
    op.drop_table("count_feed")
