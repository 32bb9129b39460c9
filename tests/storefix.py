"""Store fixtures: the same tests run on SQLite and on the throwaway PostgreSQL cluster.

`make test` starts the cluster (.ci/pg-cluster) and sets TRIAGE_TEST_POSTGRES_URL; without it the
PostgreSQL cases skip, except under CI=true where a missing PostgreSQL fails the run.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import case, create_engine, func, select, text
from sqlalchemy.engine import make_url

from serve.store import Stores
from serve.store.console import WindowCounts
from serve.store.tables import LabelRow, OutcomeRow, OverviewCountRow, RecommendationRow, TraceRow, as_utc

PG_ENV = "TRIAGE_TEST_POSTGRES_URL"
BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


def _pg_admin_url() -> str | None:
    url = os.environ.get(PG_ENV, "").strip()
    if url:
        return url
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {PG_ENV} is not set: start PostgreSQL with `make test` (.ci/pg-cluster)")
    pytest.skip(f"{PG_ENV} not set (run `make test`, which starts a throwaway PostgreSQL)")
    return None


def _psycopg(url: str) -> str:
    u = make_url(url)
    return u.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


def make_db_url(backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of ``backend``; dropped afterwards (PostgreSQL)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'triage.db'}"
        return
    admin = _pg_admin_url()
    assert admin is not None
    name = f"t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(_psycopg(admin), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin).set(database=name).render_as_string(hide_password=False)
    finally:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        engine.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from make_db_url(request.param, tmp_path)


@pytest.fixture(name="store")
def store_fixture(db_url: str) -> Iterator[Stores]:
    """``store``: the stores on a fresh database of each backend, migrated to the head revision
    (imported under this name so that tests' ``store`` parameters shadow no import)."""
    s = Stores.at(db_url)
    s.db.upgrade()
    try:
        yield s
    finally:
        s.db.dispose()


def full_agents(store: Stores, tenant: str) -> dict[str, tuple[int, int, datetime, datetime]]:
    """Each agent's runs, labelled runs (a label not withdrawn), first and last seen, grouped over the
    whole history (as GET /v1/agents read them before revision 0017)."""
    with store.db.read() as db:
        runs = db.execute(select(TraceRow.agent, text("count(*)"), func.min(TraceRow.created_at),
                                 func.max(TraceRow.updated_at)).where(TraceRow.tenant_id == tenant)
                          .group_by(TraceRow.agent)).all()
        labelled = dict(db.execute(
            select(TraceRow.agent, func.count(func.distinct(LabelRow.trace_id)))
            .join(TraceRow, (TraceRow.tenant_id == LabelRow.tenant_id) & (TraceRow.id == LabelRow.trace_id))
            .where(LabelRow.tenant_id == tenant, LabelRow.withdrawn_at.is_(None)).group_by(TraceRow.agent)).all())
    return {str(a): (int(n), int(labelled.get(a, 0)), as_utc(lo), as_utc(hi)) for a, n, lo, hi in runs}


def _json_verdict() -> Any:
    healthy = TraceRow.response["healthy"].as_boolean()
    return case((healthy.is_(None), "unknown"), (healthy.is_(True), "healthy"), else_="failed")


def full_overview(store: Stores, tenant: str) -> dict[tuple[int, str, str, str], tuple[int, int, int, int]]:
    """The overview's counts per (hour the runs started, agent, verdict, primary kind or ""): runs, repairs
    (``continue`` left out), outcomes, successful outcomes, grouped over the tables themselves (what
    ``overview_counts`` must hold, zero rows left out)."""
    t = TraceRow
    by_run: dict[str, list[int]] = {}
    verdict = func.coalesce(t.verdict, _json_verdict())
    with store.db.read() as db:
        runs = db.execute(select(t.id, t.created_at, t.agent, verdict, t.primary_kind).where(t.tenant_id == tenant)).all()
        for tid, n in db.execute(select(RecommendationRow.trace_id, func.count()).where(
                RecommendationRow.tenant_id == tenant, RecommendationRow.strategy != "continue")
                .group_by(RecommendationRow.trace_id)):
            by_run.setdefault(tid, [0, 0, 0])[0] += int(n)
        for tid, ok in db.execute(select(OutcomeRow.trace_id, OutcomeRow.success).where(OutcomeRow.tenant_id == tenant)):
            r = by_run.setdefault(tid, [0, 0, 0])
            r[1] += 1
            r[2] += bool(ok)
    out: dict[tuple[int, str, str, str], list[int]] = {}
    for tid, created, agent, verdict, kind in runs:
        hour = int(as_utc(created).timestamp() // 3600)
        o = out.setdefault((hour, agent or "", str(verdict), kind or ""), [0, 0, 0, 0])
        rep, outs, ok = by_run.get(tid, [0, 0, 0])
        o[0] += 1
        o[1] += rep
        o[2] += outs
        o[3] += ok
    return {k: (v[0], v[1], v[2], v[3]) for k, v in out.items()}


def kept_overview(store: Stores, tenant: str) -> dict[tuple[int, str, str, str], tuple[int, int, int, int]]:
    """``overview_counts``' rows of the tenant (zero rows left out)."""
    o = OverviewCountRow
    with store.db.read() as db:
        rows = db.execute(select(o.hour, o.agent, o.verdict, o.kind, o.runs, o.repairs, o.outcomes, o.succeeded)
                          .where(o.tenant_id == tenant)).all()
    return {(int(h), a, v, k): (int(n), int(r), int(x), int(s)) for h, a, v, k, n, r, x, s in rows if (n, r, x, s) != (0, 0, 0, 0)}


def old_window_counts(store: Stores, tenant: str, *, since: datetime, until: datetime, agent: str | None) -> WindowCounts:
    """The overview's counts as the console read them before revision 0020: four grouped reads over the
    window's index entries (verdicts backfilled), rows in a canonical order."""
    t = TraceRow
    by_agent = func.coalesce(t.agent, "")

    def scoped(q: Any) -> Any:
        q = q.where(t.created_at >= since, t.created_at < until)
        return q if agent is None else q.where(t.agent == agent)

    day = func.date(t.created_at)
    verdict = func.coalesce(t.verdict, _json_verdict())  # a row not backfilled yet: its response's
    with store.db.read() as db:
        verdicts = sorted((str(a), str(v), int(n)) for a, v, n in db.execute(scoped(
            select(by_agent, verdict, func.count()).where(t.tenant_id == tenant).group_by(by_agent, verdict))).all())
        spectrum = sorted(((k, str(d), int(n)) for k, d, n in db.execute(scoped(
            select(t.primary_kind, day, func.count()).where(t.tenant_id == tenant, verdict == "failed")
            .group_by(t.primary_kind, day))).all()), key=lambda x: (x[0] or "", x[1]))
        repairs = {str(a): int(n) for a, n in db.execute(scoped(
            select(by_agent, func.count())
            .join(RecommendationRow, (RecommendationRow.tenant_id == t.tenant_id) & (RecommendationRow.trace_id == t.id))
            .where(t.tenant_id == tenant, RecommendationRow.strategy != "continue", RecommendationRow.created_at >= since)
            .group_by(by_agent))).all()}
        ok = func.sum(case((OutcomeRow.success.is_(True), 1), else_=0))
        outcomes = {str(a): (int(n), int(good or 0)) for a, n, good in db.execute(scoped(
            select(by_agent, func.count(), ok)
            .join(OutcomeRow, (OutcomeRow.tenant_id == t.tenant_id) & (OutcomeRow.trace_id == t.id))
            .where(t.tenant_id == tenant, OutcomeRow.created_at >= since).group_by(by_agent))).all()}
    return WindowCounts(verdicts, spectrum, dict(sorted(repairs.items())), dict(sorted(outcomes.items())))
