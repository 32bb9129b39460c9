"""Engines for the store: SQLite (WAL, busy timeout, ``BEGIN IMMEDIATE`` for writes) or PostgreSQL.

SQLite is the embedded default: the file lives in the working folder and every worker opens it.
pysqlite's own transaction handling is switched off so that we emit ``BEGIN`` ourselves: a write
transaction starts with ``BEGIN IMMEDIATE``, which takes the write lock up front (waiting up to the
busy timeout) instead of failing with "database is locked" when a reader upgrades mid-transaction.
That is what serialises concurrent appends to one session on SQLite; PostgreSQL uses a row lock
(``SELECT … FOR UPDATE``) instead. ``synchronous=NORMAL`` in WAL mode loses nothing a committed
transaction wrote when the *process* dies (SIGKILL); only an OS crash may lose the last commits.
"""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from model.core.errors import StoreError, StoreUnavailableError

#: execution option naming how a SQLite transaction begins ("DEFERRED" or "IMMEDIATE"; ``BEGUN``: it has begun
#: on the driver's connection already, :class:`serve.store.prepared.Unit`).
SQLITE_BEGIN = "sqlite_begin"
BEGUN = "BEGUN"


def is_sqlite(url: str) -> bool:
    return make_url(url).get_backend_name() == "sqlite"


def _normalise_url(url: str) -> str:
    """``postgresql://`` means psycopg 3 here (psycopg2 is not installed)."""
    u = make_url(url)
    if u.drivername in ("postgresql", "postgres"):
        u = u.set(drivername="postgresql+psycopg")
    return u.render_as_string(hide_password=False)


def make_engine(url: str, *, busy_timeout_s: float = 10.0, echo: bool = False) -> Engine:
    """An engine for ``url``; for a SQLite file, its folder is created and WAL switched on.

    >>> e = make_engine("sqlite://")
    >>> e.dialect.name
    'sqlite'
    """
    try:
        url = _normalise_url(url)
        u = make_url(url)
    except Exception as exc:  # sqlalchemy.exc.ArgumentError and friends
        raise StoreError(f"cannot parse the database URL: {exc}") from exc
    kwargs: dict[str, Any] = {"echo": echo, "future": True}
    if u.get_backend_name() == "sqlite":
        db = u.database
        if db and db != ":memory:" and not db.startswith("file:"):
            Path(db).expanduser().parent.mkdir(parents=True, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": busy_timeout_s}
        if db and db != ":memory:" and not db.startswith("file:"):  # a file's pool (memory: one connection a thread)
            # The connection used last is taken first: its page cache is still valid (a connection whose
            # cache another one's commit made stale re-reads its pages)
            kwargs["pool_use_lifo"] = True
    else:
        kwargs["pool_pre_ping"] = True
        kwargs["pool_size"] = 5
        kwargs["max_overflow"] = 10
    try:
        engine = create_engine(url, **kwargs)
    except Exception as exc:  # a missing driver, a bad option
        raise StoreError(f"cannot create a database engine for {u.get_backend_name()}: {exc}") from exc
    if u.get_backend_name() == "sqlite":
        _sqlite_setup(engine, busy_timeout_s)
    return engine


def _sqlite_setup(engine: Engine, busy_timeout_s: float) -> None:
    memory = engine.url.database in (None, "", ":memory:")

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see the module docstring)
        cur = dbapi_conn.cursor()
        if not memory:
            cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
        if mode == BEGUN:
            return
        if mode != "IMMEDIATE":  # on the driver's connection: SQLAlchemy's statement path costs ~30 µs more
            conn.connection.dbapi_connection.execute(f"BEGIN {mode}")
            return
        begin_immediate(conn.connection.dbapi_connection, busy_timeout_s)


def begin_immediate(dbapi_conn: Any, busy_timeout_s: float) -> None:
    """``BEGIN IMMEDIATE``, polling every ~1 ms while another process holds the write lock.

    SQLite's own busy handler sleeps in growing steps (up to 100 ms each), which turns a few
    milliseconds of contention between workers into a 0.5-1 s tail; a writer only ever waits
    here (in WAL mode reads never block), so a tight poll at this one point is enough.
    """
    busy_ms = int(busy_timeout_s * 1000)
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA busy_timeout=0")
        deadline = time.monotonic() + busy_timeout_s
        while True:
            try:
                cur.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                if time.monotonic() >= deadline:
                    raise StoreUnavailableError(
                        f"the store stayed locked by another writer for {busy_timeout_s:g} s "
                        "(setting TRIAGE_DB_BUSY_TIMEOUT_S)"
                    ) from exc
                time.sleep(random.uniform(0.0002, 0.0015))
    finally:
        cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.close()


__all__ = ["BEGUN", "SQLITE_BEGIN", "begin_immediate", "is_sqlite", "make_engine"]
