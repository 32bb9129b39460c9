"""agents' counts kept on write, their first and last seen by index, the runs of a kind by index

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 00:30:00

``GET /v1/agents`` and the console's models page counted every agent's runs and labelled runs, and
read their first and last times, with a GROUP BY over the tenant's whole history (0.7–0.8 s at
1,000,000 runs on PostgreSQL). From this revision:

- each run's ``run_metrics`` row keeps its agent (``run_metrics.agent`` = ``traces.agent``), so that the
  counters (serve/store/counters.py) move an agent's counts as its runs are written, labelled, deleted
  and re-keyed; ``metric_totals`` holds them (``name`` ``agent_runs``: its runs; ``agent_labelled``: those
  with a label not withdrawn; ``key``: the agent). This migration fills both from the history.
- ``traces (tenant_id, agent, created_at)`` and ``traces (tenant_id, agent, updated_at)`` replace
  ``traces (tenant_id, agent)``: an agent's first and last seen are one index probe each.
- ``failures (tenant_id, kind, is_signal, trace_id)`` replaces ``failures (tenant_id, kind)``: the runs
  page's total with ``kind=…`` counts the runs of a kind from the index alone.

Downgrade: the indexes as they were, the agents' rows of ``metric_totals`` deleted, the column dropped.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    conn = op.get_bind()
    op.add_column("run_metrics", sa.Column("agent", sa.String(length=200), nullable=True))
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("UPDATE run_metrics m SET agent = t.agent FROM traces t "
                             "WHERE t.tenant_id = m.tenant_id AND t.id = m.trace_id"))
    else:
        conn.execute(sa.text("UPDATE run_metrics SET agent = (SELECT t.agent FROM traces t "
                             "WHERE t.tenant_id = run_metrics.tenant_id AND t.id = run_metrics.trace_id)"))
    conn.execute(sa.text("DELETE FROM metric_totals WHERE name IN ('agent_runs', 'agent_labelled')"))
    for name, where in (("agent_runs", ""), ("agent_labelled", " AND labelled")):
        conn.execute(sa.text(
            f"INSERT INTO metric_totals (tenant_id, name, key, n, total) "
            f"SELECT tenant_id, '{name}', agent, count(*), 0.0 FROM run_metrics "
            f"WHERE agent IS NOT NULL{where} GROUP BY tenant_id, agent"))
    op.drop_index("ix_traces_tenant_agent", table_name="traces")
    op.create_index("ix_traces_agent_created", "traces", ["tenant_id", "agent", "created_at"])
    op.create_index("ix_traces_agent_updated", "traces", ["tenant_id", "agent", "updated_at"])
    op.drop_index("ix_failures_tenant_kind", table_name="failures")
    op.create_index("ix_failures_tenant_kind", "failures", ["tenant_id", "kind", "is_signal", "trace_id"])


def downgrade() -> None:
    op.drop_index("ix_failures_tenant_kind", table_name="failures")
    op.create_index("ix_failures_tenant_kind", "failures", ["tenant_id", "kind"])
    op.drop_index("ix_traces_agent_updated", table_name="traces")
    op.drop_index("ix_traces_agent_created", table_name="traces")
    op.create_index("ix_traces_tenant_agent", "traces", ["tenant_id", "agent"])
    op.execute("DELETE FROM metric_totals WHERE name IN ('agent_runs', 'agent_labelled')")
    op.drop_column("run_metrics", "agent")
