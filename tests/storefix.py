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

import pytest
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url

from serve.store import Stores
from serve.store.tables import LabelRow, TraceRow, as_utc

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
