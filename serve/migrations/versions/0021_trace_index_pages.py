"""Two index pages fewer in a diagnosis's commit: ``ix_traces_tenant_created`` dropped,
``ix_traces_tenant_session`` partial

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 07:40:00

A diagnosis inserts its run into every index of ``traces``, and each index is a page (a leaf, at
least) written to the WAL at its commit (issue 35: the store's write of one diagnosis).

- ``ix_traces_tenant_created`` (tenant_id, created_at): the leading columns of ``ix_traces_console``
  (tenant_id, created_at, verdict, agent, primary_kind, id, …), which serves every read by a tenant's
  time range or in time order (the runs' pages and ``GET /v1/traces``, ``since``, retention's oldest
  runs first) as it did.
- ``ix_traces_tenant_session`` (tenant_id, session_id): now of the runs with a session only
  (``WHERE session_id IS NOT NULL``): every read by it names a session (``session_id = …``, which
  both engines take as implying ``IS NOT NULL``); a run without one (``POST /v1/diagnose`` of a whole
  trace) writes no entry.

On PostgreSQL the traces' writers go on while it runs: the partial index is built concurrently under a
name of its own (``serve/store/migrate.py``), the two old indexes are dropped concurrently, and the new
one takes the old name in the revision's transaction (a rename: a brief lock of the index, not of the
table). An upgrade stopped part-way and run again finds what it had built and goes on. On SQLite, one
transaction as before.

Downgrade: both as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from serve.store.migrate import create_index_concurrently

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_WITH_SESSION = "session_id IS NOT NULL"
_BUILT = "ix_traces_tenant_session_partial"  # the partial index until it takes the old one's name


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        create_index_concurrently(_BUILT, "traces", ["tenant_id", "session_id"], where=_WITH_SESSION)
        with op.get_context().autocommit_block():
            for name in ("ix_traces_tenant_created", "ix_traces_tenant_session"):
                op.drop_index(name, table_name="traces", postgresql_concurrently=True, if_exists=True)
        op.execute(f"ALTER INDEX {_BUILT} RENAME TO ix_traces_tenant_session")
        return
    with op.batch_alter_table("traces") as batch_op:
        batch_op.drop_index("ix_traces_tenant_created")
        batch_op.drop_index("ix_traces_tenant_session")
        batch_op.create_index("ix_traces_tenant_session", ["tenant_id", "session_id"], unique=False,
                              sqlite_where=sa.text(_WITH_SESSION), postgresql_where=sa.text(_WITH_SESSION))


def downgrade() -> None:
    with op.batch_alter_table("traces") as batch_op:
        batch_op.drop_index("ix_traces_tenant_session")
        batch_op.create_index("ix_traces_tenant_session", ["tenant_id", "session_id"], unique=False)
        batch_op.create_index("ix_traces_tenant_created", ["tenant_id", "created_at"], unique=False)
