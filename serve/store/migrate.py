"""Run the Alembic migrations shipped in ``serve/migrations`` (the service does this at start-up).

Several workers (and replicas) may start at once: one upgrades and the others then find the schema at
head. On SQLite the upgrade runs inside one ``BEGIN IMMEDIATE``. On PostgreSQL it holds a session-level
advisory lock on its connection for the whole upgrade and runs each revision in its own transaction, so
that a revision may build an index outside any transaction (:func:`create_index_concurrently`:
``CREATE INDEX CONCURRENTLY``, which lets the table's writers go on while it builds; revisions 0021's and
0022's). A revision that fails leaves the schema at the revision before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
        if engine.dialect.name == "postgresql":
            with engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _ADVISORY_LOCK_ID})
                conn.commit()  # the lock is the session's: it outlives this transaction and each revision's
                try:
                    cfg.attributes["connection"] = conn
                    cfg.attributes["transaction_per_migration"] = True
                    command.upgrade(cfg, revision)
                finally:
                    conn.rollback()  # whatever a failed revision left open
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _ADVISORY_LOCK_ID})
                    conn.commit()
            return
        with engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}).begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"migrating the store to {revision} failed: {exc}") from exc


def create_index_concurrently(name: str, table: str, columns: list[str], *, where: str | None = None) -> None:
    """In a revision's ``upgrade()``: ``op.create_index`` — on PostgreSQL ``CREATE INDEX CONCURRENTLY``, outside
    the revision's transaction (:func:`upgrade` runs each revision in its own), after dropping an invalid
    index of that name that a build interrupted before left (``IF NOT EXISTS`` would keep it); elsewhere in
    the revision's transaction, as ``op.create_index`` does. ``where``: a partial index's condition."""
    from alembic import op

    bind = op.get_bind()
    partial: dict[str, Any] = {} if where is None else {"sqlite_where": text(where), "postgresql_where": text(where)}
    if bind.dialect.name != "postgresql":
        op.create_index(name, table, columns, unique=False, **partial)
        return
    with op.get_context().autocommit_block():
        invalid = bind.execute(text(
            "SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = :n AND c.relnamespace = to_regnamespace(current_schema())::oid AND NOT i.indisvalid"),
            {"n": name}).first()
        if invalid is not None:
            op.drop_index(name, table_name=table, postgresql_concurrently=True, if_exists=True)
        op.create_index(name, table, columns, unique=False, postgresql_concurrently=True, if_not_exists=True,
                        **partial)


def downgrade(engine: Engine, revision: str = "base") -> None:
    cfg = alembic_config()
    try:
        with engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}).begin() as conn:
            cfg.attributes["connection"] = conn
            command.downgrade(cfg, revision)
    except SQLAlchemyError as exc:
        raise StoreError(f"downgrading the store to {revision} failed: {exc}") from exc


__all__ = ["MIGRATIONS_DIR", "alembic_config", "create_index_concurrently", "current_revision", "downgrade",
           "head_revision", "upgrade"]
