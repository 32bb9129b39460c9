"""Statements compiled once and run on the transaction's own DBAPI connection: the request path's
(:class:`Prepared`), and the write transaction held on that connection without an ORM session (:class:`Unit`)."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from sqlalchemy import Connection, Engine
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from serve.store.engine import BEGUN, SQLITE_BEGIN

#: ``Session.info`` key of the transaction's DBAPI connection (``Session.connection()`` costs ~10 µs a call).
_CONN = "triage.prepared.connection"


class Unit:
    """A write transaction held on a pooled driver connection of ``engine`` (checked out here; the caller
    begins the transaction on it): what :meth:`serve.store.base.Database.unit` yields to the request path.

    A diagnosis's write is a dozen :class:`Prepared` statements; an ORM ``Session`` around them (its
    transaction objects, its SQLAlchemy connection's begin, commit and close events) cost ~0.1-0.3 ms a
    write, more than most statements, and a SQLAlchemy ``Connection`` alone ~25 µs. A unit has what those
    statements need (:attr:`info`, the dialect, the driver's connection); :attr:`session` opens an ORM
    session on a SQLAlchemy connection around the same driver connection and transaction for the rare
    statement that needs one (an agent consolidation, a session's stored trace), flushed before the commit."""

    __slots__ = ("engine", "fairy", "dbapi", "dialect", "info", "_conn", "_kept", "_session")

    def __init__(self, engine: Engine, kept: Connection | None = None) -> None:
        self.engine = engine
        self.dialect: Dialect = engine.dialect
        self._kept = kept  # a connection the caller keeps (SQLite's writer, Database.unit): not closed here
        if kept is not None:
            self.fairy: Any = kept.connection
        else:
            try:
                self.fairy = engine.raw_connection()  # the pool's (SQLite: the connection used last, its cache valid)
            except self.dialect.loaded_dbapi.Error as exc:
                raise DBAPIError.instance("connect", None, exc, self.dialect.loaded_dbapi.Error, dialect=self.dialect,
                                          connection_invalidated=True) from exc
        self.dbapi: Any = self.fairy.dbapi_connection
        self.info: dict[Any, Any] = {}
        self._conn: Connection | None = None
        self._session: Session | None = None

    @property
    def session(self) -> Session:
        """An ORM session in this transaction (opened at the first use, closed with the unit)."""
        if self._session is None:
            if self._kept is not None:  # the kept connection itself (a session closed leaves it open)
                conn = self._kept
            else:  # returns the driver connection as it closes
                conn = self._conn = Connection(self.engine, self.fairy)
                conn.execution_options(**{SQLITE_BEGIN: BEGUN})  # its begin emits nothing: the unit's has run
            s = self._session = Session(bind=conn, expire_on_commit=False)
            s.info.update(self.info)
            self.info = s.info  # one dict: before_commit hooks and pending counts set through either
        return self._session

    def run(self, sql: str, fn: Callable[[Any], Any]) -> None:
        """``fn(driver connection)`` (a ``BEGIN``, ``COMMIT`` or ``ROLLBACK`` named ``sql``), the driver's errors
        raised as SQLAlchemy's."""
        try:
            fn(self.dbapi)
        except self.dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(sql, None, exc, self.dialect.loaded_dbapi.Error, dialect=self.dialect) from exc

    def commit(self) -> None:
        """Flush the ORM session's pending rows (when one was opened), then commit on the driver's connection."""
        if self._session is not None:
            self._session.flush()
        self.run("COMMIT", self.dialect.do_commit)

    def close(self) -> None:
        """Give the driver connection back to the pool (whose reset rolls back whatever is left)."""
        if self._session is not None:  # its transaction ends with a rollback of nothing (the unit has ended it)
            self._session.close()
        if self._kept is not None:
            return
        if self._conn is not None:
            self._conn.close()
        else:
            self.fairy.close()


#: A write transaction as the store's writes take it: an ORM session or a :class:`Unit`.
Tx = Session | Unit


def orm(db: Tx) -> Session:
    """``db``'s ORM session (a unit's own, opened on first use)."""
    return db.session if isinstance(db, Unit) else db


def dialect_name(db: Tx) -> str:
    return db.dialect.name if isinstance(db, Unit) else db.get_bind().dialect.name


class _Plan(NamedTuple):
    """A statement compiled for one dialect and one set of parameter keys."""

    sql: str
    names: tuple[str, ...]  # the bound parameters, in the statement's order
    positional: bool  # qmark (SQLite) or named (psycopg's pyformat)
    fixed: dict[str, Any]  # values the statement carries itself (literals, column defaults)
    defaults: dict[str, Callable[[], Any]]  # callable column defaults (utcnow), called per row
    gather: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # a row's values of ``names``, in order
    processors: tuple[tuple[int, Callable[[Any], Any]], ...]  # SQLAlchemy's bind processors (JSON, datetimes,
    # booleans) by position in ``names``
    columns: tuple[Any, ...] | None  # the types of a SELECT's or RETURNING's columns
    results: list[tuple[tuple[int, Callable[[Any], Any]], ...]]  # their result processors by position, set at
    # the first fetch


class Prepared:
    """A Core statement compiled once per dialect and parameter keys, run on the transaction's DBAPI
    connection: the request path's statements.

    ``Session.execute`` spends 60–100 µs of Python a statement (the cache key walked over the whole
    statement, the compiled-cache lookup, parameter and result set-up) where SQLite runs a small insert in
    a few; a diagnosis writes a dozen. The SQL, the parameter order and SQLAlchemy's own bind and result
    processors (JSON, datetimes, booleans) are taken from the compiled statement once, so rows are stored
    and read back exactly as through SQLAlchemy, in the same transaction. Bound parameters are named
    (``bindparam("t")``, or an insert's column keys); values the statement carries (a literal, a column's
    default) are used when the parameters leave them out. The driver's errors become SQLAlchemy's
    (:meth:`Database.write` translates those).

    >>> from sqlalchemy import bindparam, select
    >>> from serve.store import open_stores
    >>> from serve.settings import Settings
    >>> from serve.store.tables import UsageRow
    >>> stores = open_stores(Settings(database_url="sqlite://"))
    >>> add = Prepared(stores.db.insert(UsageRow))
    >>> steps = Prepared(select(UsageRow.steps).where(UsageRow.tenant_id == bindparam("t")))
    >>> with stores.db.write() as db:
    ...     add.execute(db, [{"tenant_id": "acme", "day": "2026-12-06", "steps": 3}])
    ...     steps.execute(db, {"t": "acme"})
    []
    [(3,)]
    """

    def __init__(self, stmt: Any) -> None:
        self.stmt = stmt
        self._plans: dict[tuple[str, tuple[str, ...]], _Plan] = {}
        # by the keys in the order a caller gives them (each call site builds its dicts alike): no sort a call
        self._given: dict[tuple[str, tuple[str, ...]], _Plan] = {}

    def _plan(self, dialect: Dialect, given: tuple[str, ...]) -> _Plan:
        plan = self._given.get((dialect.name, given))
        if plan is None:
            plan = self._given[(dialect.name, given)] = self._compile(dialect, tuple(sorted(given)))
        return plan

    def _compile(self, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
        plan = self._plans.get((dialect.name, keys))
        if plan is None:
            # an insert compiled as for an executemany: no implicit RETURNING of its autoincrement key
            compiled: Any = self.stmt.compile(dialect=dialect, column_keys=list(keys),
                                              for_executemany=self.stmt.is_dml and not self.stmt._returning)
            names = tuple(compiled.positiontup) if compiled.positional else tuple(compiled.bind_names.values())
            fixed = {name: bp.effective_value for bp, name in compiled.bind_names.items()
                     if name not in keys and not bp.required}
            defaults: dict[str, Callable[[], Any]] = {}
            for col in [*compiled.insert_prefetch, *compiled.update_prefetch]:
                default = col.default if col in compiled.insert_prefetch else col.onupdate
                if col.key in keys or default is None:
                    continue
                if default.is_scalar:
                    fixed[col.key] = default.arg
                elif default.is_callable:
                    defaults[col.key] = functools.partial(default.arg, None)
                else:
                    raise ValueError(f"Prepared: pass {col.key} (its default is not a Python value)")
            missing = [n for n in names if n not in keys and n not in fixed and n not in defaults]
            if missing:
                raise ValueError(f"Prepared: no value for {', '.join(missing)}")
            columns = tuple(c.type for c in compiled._result_columns) if compiled._result_columns else None
            procs = compiled._bind_processors
            plan = self._plans[(dialect.name, keys)] = _Plan(
                compiled.string, names, bool(compiled.positional), fixed, defaults, _gatherer(names),
                tuple((i, procs[n]) for i, n in enumerate(names) if n in procs), columns, [])
        return plan

    def execute(self, db: Tx, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
                ) -> list[tuple[Any, ...]]:
        """Run with ``params`` (one dict, or a list of dicts with the same keys: an executemany) in
        ``db``'s transaction; the rows it returns (a ``SELECT`` or ``RETURNING``), processed."""
        if isinstance(db, Unit):
            dialect, dbapi_conn = db.dialect, db.dbapi
        else:
            got = db.info.get(_CONN)
            if got is None or got[0] is not db.get_transaction():
                conn = db.connection()  # begins the session's transaction when it has not yet
                got = db.info[_CONN] = (db.get_transaction(), conn.dialect, conn.connection.dbapi_connection)
            _, dialect, dbapi_conn = got
        assert dbapi_conn is not None
        many = isinstance(params, list) or (not isinstance(params, dict) and isinstance(params, Sequence))
        rows: Sequence[Mapping[str, Any]] = (
            cast(Sequence[Mapping[str, Any]], params) if many else [cast(Mapping[str, Any], params or {})])
        if not rows:
            return []
        plan = self._plan(dialect, tuple(rows[0]))
        procs, gather, fixed, defaults = plan.processors, plan.gather, plan.fixed, plan.defaults
        args: list[Any] = []
        for row in rows:
            if defaults:
                row = {**fixed, **{k: f() for k, f in defaults.items()}, **row}
            elif fixed:
                row = {**fixed, **row}
            if procs:
                values = list(gather(row))
                for i, proc in procs:
                    values[i] = proc(values[i])
                args.append(values if plan.positional else dict(zip(plan.names, values, strict=True)))
            else:
                got = gather(row)
                args.append(got if plan.positional else dict(zip(plan.names, got, strict=True)))
        cur = dbapi_conn.cursor()
        try:
            if many and len(args) > 1:
                cur.executemany(plan.sql, args)
            else:
                cur.execute(plan.sql, args[0])
            if plan.columns is None:
                return []
            got = cur.fetchall()
            if not plan.results:  # the driver's column types (PostgreSQL's numeric kinds) pick the processors
                found = [t._cached_result_processor(dialect, d[1]) for t, d in zip(plan.columns, cur.description,
                                                                                   strict=True)]
                plan.results.append(tuple((i, p) for i, p in enumerate(found) if p is not None))
        except dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(plan.sql, args, exc, dialect.loaded_dbapi.Error, dialect=dialect) from exc
        finally:
            cur.close()
        res = plan.results[0]
        if not res:
            return [tuple(r) for r in got]
        out = []
        for r in got:
            values = list(r)
            for i, p in res:
                values[i] = p(values[i])
            out.append(tuple(values))
        return out


def _gatherer(names: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A function of a row: its values of ``names`` as a tuple (in C: ``operator.itemgetter``)."""
    if len(names) == 1:
        one = names[0]
        return lambda row: (row[one],)
    if not names:
        return lambda row: ()
    return cast(Callable[[Mapping[str, Any]], tuple[Any, ...]], operator.itemgetter(*names))


def per_dialect(build: Callable[[Callable[[Any], Any]], Any]) -> dict[str, Prepared]:
    """``build(insert)`` prepared for each engine, by dialect name, with that dialect's ``insert`` (its
    ``ON CONFLICT`` clauses are its own): the request path's upserts."""
    return {name: Prepared(build(ins)) for name, ins in (("sqlite", sqlite.insert), ("postgresql", postgresql.insert))}


__all__ = ["Prepared", "Tx", "Unit", "dialect_name", "orm", "per_dialect"]
