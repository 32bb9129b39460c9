"""``stream_feed``: the values of diagnosed runs still to be fed into their agents' streams

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 17:30:00

A diagnosis fed its run's values (``latency_ms``, ``tokens_out``, ``output_chars``,
``failure_probability`` by default) into its agent's streams inside its own write transaction: it read
and locked the agent's three or four stream rows, ran their detectors, inserted one observation per
stream and wrote each row back — about a third of the store's work in a diagnosis's write on SQLite
(docs/benchmarks.md, "Round 9: the streams' feed out of the diagnosis"). From this revision a diagnosis writes one
row here instead, and the worker's feeder (:meth:`serve.services.streams.Streams.drain`) applies the rows
in batches, in ``id`` order, each deleted in the transaction that applies it (once, whoever applies it).

Downgrade: the table dropped (values still in it are not fed).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "stream_feed",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("trace_id", sa.String(length=128), nullable=False),
        sa.Column("values", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("stream_feed")
