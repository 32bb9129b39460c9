"""Run the Alembic migrations shipped in ``serve/migrations`` (the service does this at start-up).

Several workers may start at once: on SQLite the upgrade runs inside ``BEGIN IMMEDIATE`` and on
PostgreSQL under a transaction-scoped advisory lock, so one upgrades and the others then find the
schema at head.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

from model.core.errors import StoreError
from serve.store.engine import SQLITE_BEGIN

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_ADVISORY_LOCK_ID = 0x7472_6961_6765  # "triage"


def alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "serve/migrations has no revision"
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema of ``engine``'s database to ``revision`` (default: the newest)."""
    cfg = alembic_config()
    try:
        conn_engine = engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
        with conn_engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _ADVISORY_LOCK_ID})
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"migrating the store to {revision} failed: {exc}") from exc


def downgrade(engine: Engine, revision: str = "base") -> None:
    cfg = alembic_config()
    try:
        with engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}).begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"downgrading the store to {revision} failed: {exc}") from exc


__all__ = ["MIGRATIONS_DIR", "alembic_config", "current_revision", "downgrade", "head_revision", "upgrade"]
