"""run_metrics, canary_counts, metric_totals: /metrics' counts kept on write, filled from the history

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-06 09:00:00

``GET /metrics`` read the tenant's whole history at every scrape (the canary's figures: every run,
label and recommendation, 137 ms at 20,000 runs; docs/benchmarks.md). From this revision the store
keeps the counts on write (serve/store/counters.py): ``run_metrics`` holds what each run adds,
``canary_counts`` the canary's figures per (tenant, hour the runs started, arm), ``metric_totals`` the
whole-history counts per tenant. This revision fills all three from the history there is, as a full
read would count it: a run's effective label by the rules of serve/store/verdict.py (copied here, as
a migration must not change when the code does), a recovery from the first recommendation for a
failure in its run to each successful outcome. A run recovered before this revision counts the time
to its last update as its time to recovery (when the diagnosis found it healthy is not stored).
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BOUNDS = (10, 30, 60, 300, 900, 3600, 14400, 86400)
FIELDS = ("runs", "failed", "recovered", "labelled", "succeeded", "recovery_s", *(f"rec_le_{b}" for b in BOUNDS))

traces = sa.table("traces", sa.column("tenant_id", sa.String), sa.column("id", sa.String),
                  sa.column("created_at", sa.DateTime), sa.column("updated_at", sa.DateTime),
                  sa.column("arm", sa.String), sa.column("failed_at", sa.DateTime), sa.column("healthy", sa.Boolean))
failures = sa.table("failures", sa.column("tenant_id", sa.String), sa.column("trace_id", sa.String),
                    sa.column("kind", sa.String), sa.column("is_signal", sa.Boolean))
labels = sa.table("labels", sa.column("id", sa.Integer), sa.column("tenant_id", sa.String),
                  sa.column("trace_id", sa.String), sa.column("kind", sa.String), sa.column("failed", sa.Boolean),
                  sa.column("author_type", sa.String), sa.column("created_at", sa.DateTime),
                  sa.column("withdrawn_at", sa.DateTime))
recs = sa.table("recommendations", sa.column("tenant_id", sa.String), sa.column("id", sa.String),
                sa.column("trace_id", sa.String), sa.column("failure_key", sa.String),
                sa.column("strategy", sa.String), sa.column("created_at", sa.DateTime))
outcomes = sa.table("outcomes", sa.column("tenant_id", sa.String), sa.column("recommendation_id", sa.String),
                    sa.column("strategy", sa.String), sa.column("success", sa.Boolean),
                    sa.column("created_at", sa.DateTime))


def upgrade() -> None:
    op.create_table(
        "run_metrics",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("trace_id", sa.String(length=128), nullable=False),
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("arm", sa.String(length=8), nullable=True),
        sa.Column("failed_at", sa.DateTime(), nullable=True),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("recovery_s", sa.Float(), nullable=True),
        sa.Column("labelled", sa.Boolean(), nullable=False),
        sa.Column("succeeded", sa.Boolean(), nullable=False),
        sa.Column("kinds", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "trace_id"),
    )
    op.create_table(
        "canary_counts",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("hour", sa.Integer(), nullable=False),
        sa.Column("arm", sa.String(length=8), nullable=False),
        *(sa.Column(f, sa.Float() if f == "recovery_s" else sa.BigInteger(), nullable=False) for f in FIELDS),
        sa.PrimaryKeyConstraint("tenant_id", "hour", "arm"),
    )
    op.create_index("ix_canary_counts_hour", "canary_counts", ["hour"], unique=False)
    op.create_table(
        "metric_totals",
        sa.Column("tenant_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("total", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "name", "key"),
    )
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_table("metric_totals")
    op.drop_index("ix_canary_counts_hour", table_name="canary_counts")
    op.drop_table("canary_counts")
    op.drop_table("run_metrics")


# -- filling the counters from the history (a full read, once) -------------------------------------
def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def _deciding(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """serve/store/verdict.py's rule as of this revision: a human outranks a checker, the newest decides."""
    if not rows:
        return None
    tier = "human" if any((r["author_type"] or "human") == "human" for r in rows) else "checker"
    return max((r for r in rows if (r["author_type"] or "human") == tier), key=lambda r: (r["created_at"], r["id"] or 0))


def _backfill(conn: sa.Connection) -> None:
    kinds: dict[tuple[str, str], dict[str, int]] = {}
    for t, tid, kind, n in conn.execute(
        sa.select(failures.c.tenant_id, failures.c.trace_id, failures.c.kind, sa.func.count())
        .where(failures.c.is_signal.is_(False))
        .group_by(failures.c.tenant_id, failures.c.trace_id, failures.c.kind)
    ):
        kinds.setdefault((t, tid), {})[str(kind)] = int(n)
    by_trace: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in conn.execute(sa.select(labels).where(labels.c.withdrawn_at.is_(None))).mappings():
        by_trace.setdefault((r["tenant_id"], r["trace_id"]), []).append(dict(r))
    canary: dict[tuple[str, int, str], Counter[str]] = {}  # counts, and recovery_s: seconds
    totals: dict[tuple[str, str, str], list[float]] = {}

    def total(t: str, name: str, key: str, n: float, secs: float = 0.0) -> None:
        v = totals.setdefault((t, name, key), [0, 0.0])
        v[0] += n
        v[1] += secs

    batch: list[dict[str, Any]] = []
    run_metrics = sa.table("run_metrics", *(sa.column(c) for c in (
        "tenant_id", "trace_id", "hour", "arm", "failed_at", "healthy", "recovery_s", "labelled", "succeeded")),
        sa.column("kinds", sa.JSON))
    for t, tid, created, updated, arm, failed_at, healthy in conn.execute(
        sa.select(traces.c.tenant_id, traces.c.id, traces.c.created_at, traces.c.updated_at, traces.c.arm,
                  traces.c.failed_at, traces.c.healthy)
    ):
        hour = int(_utc(created).timestamp() // 3600)
        recovered = failed_at is not None and bool(healthy)
        secs = max(0.0, (_utc(updated) - _utc(failed_at)).total_seconds()) if recovered else None
        decider = _deciding(by_trace.get((t, tid), []))
        f = decider is not None and (bool(decider["failed"]) if decider["failed"] is not None
                                     else decider["kind"] is not None)
        labelled, succeeded = decider is not None, decider is not None and not f
        k = kinds.get((t, tid), {})
        batch.append({"tenant_id": t, "trace_id": tid, "hour": hour, "arm": arm, "failed_at": failed_at,
                      "healthy": bool(healthy), "recovery_s": secs, "labelled": labelled, "succeeded": succeeded,
                      "kinds": k})
        total(t, "traces", "", 1)
        for kind, n in k.items():
            total(t, "failures", kind, n)
        if arm is not None:
            c = canary.setdefault((t, hour, arm), Counter())
            c["runs"] += 1
            c["failed"] += failed_at is not None
            c["labelled"] += labelled
            c["succeeded"] += succeeded
            if recovered and secs is not None:
                c["recovered"] += 1
                c["recovery_s"] += secs  # type: ignore[assignment]
                for b in BOUNDS:
                    c[f"rec_le_{b}"] += secs <= b
        if len(batch) >= 1000:
            conn.execute(run_metrics.insert(), batch)
            batch = []
    if batch:
        conn.execute(run_metrics.insert(), batch)
    for t, strategy, n in conn.execute(sa.select(recs.c.tenant_id, recs.c.strategy, sa.func.count())
                                       .group_by(recs.c.tenant_id, recs.c.strategy)):
        total(t, "recommendations", strategy, int(n))
    for t, strategy, ok, n in conn.execute(
        sa.select(outcomes.c.tenant_id, outcomes.c.strategy, outcomes.c.success, sa.func.count())
        .group_by(outcomes.c.tenant_id, outcomes.c.strategy, outcomes.c.success)
    ):
        total(t, "outcomes_ok" if ok else "outcomes_failed", strategy, int(n))
    firsts = {
        (t, tid, fk): ts
        for t, tid, fk, ts in conn.execute(
            sa.select(recs.c.tenant_id, recs.c.trace_id, recs.c.failure_key, sa.func.min(recs.c.created_at))
            .where(recs.c.failure_key.is_not(None))
            .group_by(recs.c.tenant_id, recs.c.trace_id, recs.c.failure_key)
        )
    }
    for t, at, tid, fk in conn.execute(
        sa.select(outcomes.c.tenant_id, outcomes.c.created_at, recs.c.trace_id, recs.c.failure_key)
        .join(recs, sa.and_(recs.c.tenant_id == outcomes.c.tenant_id, recs.c.id == outcomes.c.recommendation_id))
        .where(outcomes.c.success.is_(True), recs.c.failure_key.is_not(None))
    ):
        first = firsts.get((t, tid, fk))
        if first is not None:
            total(t, "recoveries", "", 1, max(0.0, (_utc(at) - _utc(first)).total_seconds()))
    canary_counts = sa.table("canary_counts", *(sa.column(c) for c in ("tenant_id", "hour", "arm", *FIELDS)))
    rows = [{"tenant_id": t, "hour": h, "arm": a, **{f: c[f] for f in FIELDS}} for (t, h, a), c in sorted(canary.items())]
    for i in range(0, len(rows), 1000):
        conn.execute(canary_counts.insert(), rows[i : i + 1000])
    metric_totals = sa.table("metric_totals", *(sa.column(c) for c in ("tenant_id", "name", "key", "n", "total")))
    trows = [{"tenant_id": t, "name": name, "key": key, "n": int(n), "total": float(s)}
             for (t, name, key), (n, s) in sorted(totals.items())]
    for i in range(0, len(trows), 1000):
        conn.execute(metric_totals.insert(), trows[i : i + 1000])
