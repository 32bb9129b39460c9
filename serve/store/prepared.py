"""Statements compiled once and run on the transaction's own DBAPI connection: the request path's
(:class:`Prepared`)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

#: ``Session.info`` key of the transaction's DBAPI connection (``Session.connection()`` costs ~10 µs a call).
_CONN = "triage.prepared.connection"


class _Plan(NamedTuple):
    """A statement compiled for one dialect and one set of parameter keys."""

    sql: str
    names: tuple[str, ...]  # the bound parameters, in the statement's order
    positional: bool  # qmark (SQLite) or named (psycopg's pyformat)
    fixed: dict[str, Any]  # values the statement carries itself (literals, column defaults)
    defaults: dict[str, Callable[[], Any]]  # callable column defaults (utcnow), called per row
    processors: dict[str, Callable[[Any], Any]]  # SQLAlchemy's bind processors (JSON, datetimes, booleans)
    columns: tuple[Any, ...] | None  # the types of a SELECT's or RETURNING's columns
    results: list[tuple[Callable[[Any], Any] | None, ...]]  # their result processors, set at the first fetch


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

    def _plan(self, dialect: Dialect, keys: tuple[str, ...]) -> _Plan:
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
            plan = self._plans[(dialect.name, keys)] = _Plan(
                compiled.string, names, bool(compiled.positional), fixed, defaults,
                dict(compiled._bind_processors), columns, [])
        return plan

    def execute(self, db: Session, params: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None
                ) -> list[tuple[Any, ...]]:
        """Run with ``params`` (one dict, or a list of dicts with the same keys: an executemany) in
        ``db``'s transaction; the rows it returns (a ``SELECT`` or ``RETURNING``), processed."""
        got = db.info.get(_CONN)
        if got is None or got[0] is not db.get_transaction():
            conn = db.connection()  # begins the session's transaction when it has not yet
            got = db.info[_CONN] = (db.get_transaction(), conn.dialect, conn.connection.dbapi_connection)
        _, dialect, dbapi_conn = got
        assert dbapi_conn is not None
        many = isinstance(params, Sequence)
        rows: Sequence[Mapping[str, Any]] = (
            cast(Sequence[Mapping[str, Any]], params) if many else [cast(Mapping[str, Any], params or {})])
        if not rows:
            return []
        plan = self._plan(dialect, tuple(sorted(rows[0])))
        procs = plan.processors
        args: list[Any] = []
        for row in rows:
            values = {**plan.fixed, **{k: f() for k, f in plan.defaults.items()}, **row} \
                if plan.fixed or plan.defaults else row
            if plan.positional:
                args.append(tuple(procs[n](values[n]) if n in procs else values[n] for n in plan.names))
            else:
                args.append({n: procs[n](values[n]) if n in procs else values[n] for n in plan.names})
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
                plan.results.append(tuple(t._cached_result_processor(dialect, d[1])
                                          for t, d in zip(plan.columns, cur.description, strict=True)))
        except dialect.loaded_dbapi.Error as exc:
            raise DBAPIError.instance(plan.sql, args, exc, dialect.loaded_dbapi.Error, dialect=dialect) from exc
        finally:
            cur.close()
        res = plan.results[0]
        if not any(res):
            return [tuple(r) for r in got]
        return [tuple(p(v) if p else v for p, v in zip(res, r, strict=True)) for r in got]


def per_dialect(build: Callable[[Callable[[Any], Any]], Any]) -> dict[str, Prepared]:
    """``build(insert)`` prepared for each engine, by dialect name, with that dialect's ``insert`` (its
    ``ON CONFLICT`` clauses are its own): the request path's upserts."""
    return {name: Prepared(build(ins)) for name, ins in (("sqlite", sqlite.insert), ("postgresql", postgresql.insert))}


__all__ = ["Prepared", "per_dialect"]
