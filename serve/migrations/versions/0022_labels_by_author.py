"""An author's labels from an index: ``ix_labels_author`` (tenant_id, author, trace_id), of the labels
not withdrawn

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 13:00:00

The label queue counts the runs its reviewer has labelled (``COUNT(DISTINCT trace_id)`` of the author's
labels not withdrawn: ``serve/store/labels.py``) and an undo finds the author's newest label; both
read, until now, every label of the tenant through ``ix_labels_trace`` (tenant_id, trace_id) and kept the
author's. The partial index holds the labels a reader counts (``withdrawn_at IS NULL``, as every such
read asks), by author, with their runs: the count is a range of it, whatever the other reviewers did.
A label is written once (an undo sets ``withdrawn_at``, which takes its entry out): no diagnosis writes it.
On PostgreSQL the index is built concurrently (``serve/store/migrate.py``): the labels' writers are not
held while it builds.

Downgrade: dropped.
"""

from __future__ import annotations

from alembic import op

from serve.store.migrate import create_index_concurrently

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_COUNTED = "withdrawn_at IS NULL"


def upgrade() -> None:
    # on PostgreSQL built concurrently: label writes go on meanwhile
    create_index_concurrently("ix_labels_author", "labels", ["tenant_id", "author", "trace_id"], where=_COUNTED)


def downgrade() -> None:
    with op.batch_alter_table("labels") as batch_op:
        batch_op.drop_index("ix_labels_author")
