"""the console overview's counts kept on write per hour of the runs' creation

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 03:00:00

The overview (``/ui/overview``) counted its window's runs by agent and verdict, the failed ones by
primary kind and day, and their repairs and outcomes by agent, with four grouped reads over the
window's entries of ``ix_traces_console`` (0.43–0.48 s p95 at 1,000,000 runs, 210,000 in the window, on
PostgreSQL). From this revision:

- each run's ``run_metrics`` row keeps its verdict and primary kind (= ``traces.verdict``,
  ``traces.primary_kind``), its repairs (recommendations, ``continue`` left out), outcomes and successful
  outcomes, so that the counters (serve/store/counters.py) move its contribution as it is written,
  re-diagnosed, given a repair or an outcome, deleted and re-keyed;
- ``overview_counts`` holds them per (tenant, hour the runs started, agent, verdict, primary kind): the
  overview reads its window's whole hours from it and its two partial edge hours from the index
  (:meth:`serve.store.console.ConsoleStore.window_counts`);
- ``metric_totals`` ``verdict_runs`` (``key``: the verdict): the tenant's runs of each verdict, the runs
  page's total with ``verdict=…`` alone.

This migration fills them from the history: one ``UPDATE`` of every ``run_metrics`` row (a rewrite of
the table: writes wait for it) and two ``INSERT … SELECT … GROUP BY``. A run whose ``traces.verdict`` the
backfill of revision 0015 has not filled yet is counted by its response's ``healthy``, as the pages
read it.

Downgrade: the table dropped, the columns dropped, the ``verdict_runs`` rows deleted.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_COLS = ("verdict", "kind", "repairs", "outcomes", "outcomes_ok")


def upgrade() -> None:
    conn = op.get_bind()
    op.add_column("run_metrics", sa.Column("verdict", sa.String(length=8), nullable=False, server_default="unknown"))
    op.add_column("run_metrics", sa.Column("kind", sa.String(length=64), nullable=True))
    for col in ("repairs", "outcomes", "outcomes_ok"):
        op.add_column("run_metrics", sa.Column(col, sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "overview_counts",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("agent", sa.String(length=200), nullable=False),
        sa.Column("verdict", sa.String(length=8), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=False) for c in ("runs", "repairs", "outcomes", "succeeded")),
        sa.PrimaryKeyConstraint("tenant_id", "hour", "agent", "verdict", "kind"),
    )
    recs = ("SELECT tenant_id, trace_id, count(*) AS n FROM recommendations WHERE strategy <> 'continue' "
            "GROUP BY tenant_id, trace_id")
    outs = ("SELECT tenant_id, trace_id, count(*) AS n, sum(CASE WHEN success THEN 1 ELSE 0 END) AS ok "
            "FROM outcomes GROUP BY tenant_id, trace_id")
    if conn.dialect.name == "postgresql":
        healthy = "(t.response->>'healthy')"
        json_verdict = f"CASE WHEN {healthy} IS NULL THEN 'unknown' WHEN {healthy} = 'true' THEN 'healthy' ELSE 'failed' END"
        conn.execute(sa.text(
            f"UPDATE run_metrics m SET verdict = COALESCE(t.verdict, {json_verdict}), kind = t.primary_kind, "
            f"repairs = COALESCE(r.n, 0), outcomes = COALESCE(o.n, 0), outcomes_ok = COALESCE(o.ok, 0) "
            f"FROM traces t LEFT JOIN ({recs}) r ON r.tenant_id = t.tenant_id AND r.trace_id = t.id "
            f"LEFT JOIN ({outs}) o ON o.tenant_id = t.tenant_id AND o.trace_id = t.id "
            f"WHERE t.tenant_id = m.tenant_id AND t.id = m.trace_id"))
    else:
        healthy = "json_extract(t.response, '$.healthy')"
        json_verdict = f"CASE WHEN {healthy} IS NULL THEN 'unknown' WHEN {healthy} = 1 THEN 'healthy' ELSE 'failed' END"
        run = "WHERE t.tenant_id = run_metrics.tenant_id AND t.id = run_metrics.trace_id"
        mine = "tenant_id = run_metrics.tenant_id AND trace_id = run_metrics.trace_id"
        conn.execute(sa.text(
            f"UPDATE run_metrics SET verdict = COALESCE((SELECT COALESCE(t.verdict, {json_verdict}) FROM traces t {run}), "
            f"'unknown'), kind = (SELECT t.primary_kind FROM traces t {run}), "
            f"repairs = (SELECT count(*) FROM recommendations WHERE {mine} AND strategy <> 'continue'), "
            f"outcomes = (SELECT count(*) FROM outcomes WHERE {mine}), "
            f"outcomes_ok = (SELECT count(*) FROM outcomes WHERE {mine} AND success)"))
    conn.execute(sa.text(
        "INSERT INTO overview_counts (tenant_id, hour, agent, verdict, kind, runs, repairs, outcomes, succeeded) "
        "SELECT tenant_id, hour, COALESCE(agent, ''), verdict, COALESCE(kind, ''), count(*), sum(repairs), "
        "sum(outcomes), sum(outcomes_ok) FROM run_metrics "
        "GROUP BY tenant_id, hour, COALESCE(agent, ''), verdict, COALESCE(kind, '')"))
    conn.execute(sa.text("DELETE FROM metric_totals WHERE name = 'verdict_runs'"))
    conn.execute(sa.text(
        "INSERT INTO metric_totals (tenant_id, name, key, n, total) "
        "SELECT tenant_id, 'verdict_runs', verdict, count(*), 0.0 FROM run_metrics GROUP BY tenant_id, verdict"))


def downgrade() -> None:
    op.execute("DELETE FROM metric_totals WHERE name = 'verdict_runs'")
    op.drop_table("overview_counts")
    for col in reversed(_COLS):
        op.drop_column("run_metrics", col)
