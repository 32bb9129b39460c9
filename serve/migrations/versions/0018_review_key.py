"""traces.review_key: the label queue's random order read from an index

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07 00:10:00

The label queue's ``random`` order sorted every run of the tenant by ``sha256(author, run id)``, a
key no index holds: 1.5 s a page at 1,000,000 runs on PostgreSQL. From this revision each run keeps
its place in one random order (``review_key``: the first 63 bits of the sha256 of its id,
:func:`serve.store.verdict.queue_key`), written with its first diagnosis, and each reviewer walks that
order from their own start (the same hash of the author) round to it again: a page is a LIMIT read
from ``ix_traces_review``.

As revision 0015, this only adds the column (NULL) and its indexes, no rewrite of the table; rows
stored before are filled by the online backfill (:meth:`serve.store.upkeep.UpkeepStore.backfill_keys`:
``triage store backfill``, and the server at start-up), found through ``ix_traces_unkeyed`` (partial:
the rows still NULL; empty once it is done). Until a tenant's rows are all filled the queue orders
them in Python, by the same keys computed from the ids.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_UNKEYED = sa.text("review_key IS NULL")


def upgrade() -> None:
    op.add_column("traces", sa.Column("review_key", sa.BigInteger(), nullable=True))
    op.create_index("ix_traces_review", "traces", ["tenant_id", "review_key", "id"])
    op.create_index("ix_traces_unkeyed", "traces", ["tenant_id", "id"], sqlite_where=_UNKEYED,
                    postgresql_where=_UNKEYED)


def downgrade() -> None:
    op.drop_index("ix_traces_unkeyed", table_name="traces")
    op.drop_index("ix_traces_review", table_name="traces")
    op.drop_column("traces", "review_key")
