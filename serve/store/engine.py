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

import json
import pickle
import random
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
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
    kwargs: dict[str, Any] = {"echo": echo, "future": True, "json_serializer": json_dumps,
                              "json_deserializer": json_loads}
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


#: orjson refuses what json writes (an int past 64 bits, a lone surrogate, a key that is not a string, a
#: float's or an int's subclass) and writes what json refuses (a datetime, a dataclass): those go to json,
#: whose answer or error stands.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
#: A pickled float (``G`` and 8 bytes big-endian) whose exponent bits are all set: NaN or ±Infinity.
_NONFINITE_PICKLED = re.compile(rb"G[\x7f\xff][\xf0-\xff]")
#: Digits to "0", all else to " ": a run of 19 digits (an integer orjson may read as a float) is then found
#: by a substring search (a regular expression over the text costs ~15x more).
_DIGITS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_RUN = b"0" * 19


class JsonText(str):
    """A JSON column's value already encoded by :func:`json_dumps` (:meth:`of`), which then gives it back as it
    is: a row made before its write transaction (:meth:`serve.store.traces.TraceStore.trace_rows`) carries
    its JSON's text, and the statement only binds it.

    >>> JsonText.of({"a": None})
    '{"a":null}'
    >>> json_dumps(JsonText.of({"a": None}))
    '{"a":null}'
    """

    __slots__ = ()

    @classmethod
    def of(cls, value: Any) -> JsonText:
        return cls(json_dumps(value))


def json_dumps(value: Any) -> str:
    """A JSON column's text: orjson's (compact, UTF-8; ~8x faster than :func:`json.dumps`, in which the
    store's write of a trace and its answer spent ~70 µs), read back by :func:`json_loads` (or
    ``json.loads``) as the same value as ``json.dumps``'s text. Where the two would differ, ``json.dumps``'s:
    a value orjson refuses, and one holding NaN or ±Infinity, which orjson writes as ``null`` (looked for
    only when its text has a ``null``: in the value's pickle, ~6 µs for a trace, where a walk in Python
    costs ~30).

    >>> json_dumps({"a": [1, 0.5, None, "é"]})
    '{"a":[1,0.5,null,"é"]}'
    >>> json_dumps({"a": float("nan"), "b": None})
    '{"a": NaN, "b": null}'
    """
    if type(value) is JsonText:  # encoded already (the text stands for the value it encodes)
        return value
    try:
        out = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value)
    # only plain containers, strings, numbers and enums got here (each pickles plainly; every float as BINFLOAT):
    # a match is a NaN or an infinity, or (rarely) string bytes that look like one, which json writes the same
    if b"null" in out and _NONFINITE_PICKLED.search(pickle.dumps(value, protocol=5)):
        return json.dumps(value)
    return out.decode()


def json_loads(text: str | bytes) -> Any:
    """A JSON column's value: orjson's reading (~2x faster than :func:`json.loads`), else ``json.loads``'s
    where they differ: text orjson refuses (NaN, a lone surrogate's escape, a number past a float's range)
    and a run of 19 digits or more (orjson reads an integer past 64 bits as a float).

    >>> json_loads('{"a": [1, 0.5, null]}')
    {'a': [1, 0.5, None]}
    >>> json_loads('[123456789012345678901234567890, NaN]')
    [123456789012345678901234567890, nan]
    """
    raw = text.encode() if isinstance(text, str) else text
    if _LONG_RUN in raw.translate(_DIGITS):
        return json.loads(text)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(text)


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


def begin_immediate(dbapi_conn: Any, busy_timeout_s: float, *, waits: bool = True) -> None:
    """``BEGIN IMMEDIATE``, polling every ~1 ms while another process holds the write lock.

    SQLite's own busy handler sleeps in growing steps (up to 100 ms each), which turns a few
    milliseconds of contention between workers into a 0.5-1 s tail; a writer only ever waits
    here (in WAL mode reads never block), so a tight poll at this one point is enough.
    ``waits=False``: the connection's busy timeout is 0 already, and stays so (the store's writer,
    :meth:`serve.store.base.Database.unit`): no ``PRAGMA`` before and after (SQLite parses each again).
    """
    busy_ms = int(busy_timeout_s * 1000)
    cur = dbapi_conn.cursor()
    try:
        if waits:
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
        if waits:
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
        cur.close()


__all__ = ["BEGUN", "SQLITE_BEGIN", "JsonText", "begin_immediate", "is_sqlite", "json_dumps", "json_loads", "make_engine"]
