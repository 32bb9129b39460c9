"""The store's engine, transactions and error translation: :class:`Database` (the engine and its
units of work) and :class:`StoreBase`, which each per-resource store of :class:`serve.store.Stores`
(keys, traces, sessions, labels, activations, agents, streams, reports, console) extends.

SQLAlchemy errors are wrapped in :class:`model.core.errors.StoreError` at this boundary."""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, cast

try:
    import fcntl
except ImportError:  # not POSIX: every process is "alone" (no shared lock to take)
    fcntl = None  # type: ignore[assignment]

from sqlalchemy import Connection, Engine, Table, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import (
    DataError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as SATimeoutError
from sqlalchemy.orm import Session, sessionmaker

from model.core.errors import InputError, StoreError, StoreUnavailableError, StoreValueError
from serve.store.counters import count_feed_waiting, flush_counts, settle_counts
from serve.store.engine import BEGUN, SQLITE_BEGIN, begin_immediate, make_engine
from serve.store.migrate import upgrade as _upgrade
from serve.store.prepared import Tx, Unit
from serve.store.tables import LabelRow

log = logging.getLogger("triage.store")


_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")


def check_tenant_name(name: str) -> str:
    """A tenant name is 1–64 characters of letters, digits, ``_ . -`` (not starting with a symbol)."""
    if not _TENANT_RE.match(name):
        raise InputError(
            f"a tenant name is 1-64 letters, digits, '_', '.', '-' and starts with a letter or digit; "
            f"got {name!r}",
            path="tenant",
        )
    return name


def store_error(exc: BaseException, action: str) -> StoreError:
    """Our error for a foreign one, without the SQL and its parameters (they are logged).

    Unreachable or locked → :class:`StoreUnavailableError` (503, retry); a value the database
    refused → :class:`StoreValueError` (422); anything else → :class:`StoreError` (500).
    """
    log.warning("store error while %s: %s", action, exc)
    if isinstance(exc, OperationalError | InterfaceError | DisconnectionError | SATimeoutError):
        return StoreUnavailableError(f"{action} the store failed: the store is unavailable ({type(exc).__name__})")
    if isinstance(exc, DataError | OverflowError | UnicodeEncodeError | IntegrityError):
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [""])[0][:200]
        return StoreValueError(f"the store refused a value of this request: {first}")
    return StoreError(f"{action} the store failed ({type(exc).__name__})")


class Database:
    """The engine at ``url`` and its units of work, shared by every per-resource store of
    :class:`serve.store.Stores` (so that one :meth:`write` spans several of them).

    Parameters
    ----------
    url:
        SQLAlchemy URL; ``postgresql://`` uses psycopg 3.
    busy_timeout_s:
        How long a SQLite writer waits for the lock before failing.
    """

    def __init__(self, url: str, *, busy_timeout_s: float = 10.0) -> None:
        self.url = url
        self.engine = make_engine(url, busy_timeout_s=busy_timeout_s)
        self.dialect = self.engine.dialect.name
        self.busy_timeout_s = busy_timeout_s
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        # SQLite has one writer at a time. Threads of one process queue here, on a lock that
        # wakes the next one at once, instead of in SQLite's busy handler, which sleeps in steps of
        # up to 100 ms (that made p99 at 8 connections ≈ 0.7 s). Other processes still meet the
        # busy timeout.
        self._write_mutex = threading.RLock() if self.dialect == "sqlite" else None
        # A SQLite file's write transactions run on one connection of the pool kept checked out (under the
        # mutex, one at a time), its busy timeout 0 (begin_immediate polls): no pool checkout and return (with
        # its reset's rollback) nor two busy-timeout pragmas a transaction, ~0.05 ms of a diagnosis's write.
        # An in-memory database (one connection a thread) takes the pool's, as does a unit inside a unit.
        database = self.engine.url.database
        self._keeps_writer = self.dialect == "sqlite" and bool(database) and database != ":memory:" \
            and not str(database).startswith("file:")
        self._writer: Connection | None = None
        self._writing = False
        #: A diagnosis's changes of its run's counts go to the count feed, applied after it
        #: (:mod:`serve.store.counters`, "the count feed"): a server's worker with ``TRIAGE_STREAM_FEED_S`` > 0
        #: (:func:`serve.wiring.build_service`); ``on_counts_deferred`` is then called at each such write (the
        #: worker's feeder wakes).
        self.defer_counts = False
        self.on_counts_deferred: Callable[[], None] | None = None
        self._in_unit = threading.local()  # this thread's open write transactions (in_write)

    # -- lifecycle -----------------------------------------------------------------------------
    def upgrade(self) -> None:
        """Run the Alembic migrations up to head (idempotent; safe with several workers)."""
        _upgrade(self.engine)

    def ping(self) -> bool:
        """True when a trivial query succeeds (``/readyz``)."""
        try:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return True
        except SQLAlchemyError:
            return False

    def dispose(self) -> None:
        with self._write_mutex or contextlib.nullcontext():
            self._release_writer()
        self.engine.dispose()

    def _kept_writer(self) -> Connection:
        """The SQLite file's writer connection (checked out of the pool at its first use, busy timeout 0)."""
        if self._writer is None:
            conn = self.engine.connect().execution_options(**{SQLITE_BEGIN: BEGUN})
            try:
                conn.connection.dbapi_connection.execute("PRAGMA busy_timeout=0")  # type: ignore[union-attr]
            except BaseException:
                conn.close()
                raise
            self._writer = conn
        return self._writer

    def _release_writer(self) -> None:
        """The writer back to the pool (after a failed transaction, and at :meth:`dispose`), its busy
        timeout the pool's again; the next unit checks one out anew."""
        conn, self._writer = self._writer, None
        if conn is None:
            return
        with contextlib.suppress(Exception):  # a dead connection: the pool drops it on return
            conn.connection.dbapi_connection.execute(  # type: ignore[union-attr]
                f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
        with contextlib.suppress(Exception):
            conn.close()

    @contextmanager
    def alone(self, name: str) -> Iterator[bool]:
        """Whether this process is, for the ``with`` block, the only one holding ``name`` among those
        sharing the store (the workers of ``triage serve --workers N``, replicas on one PostgreSQL):
        ``True`` once taken, ``False`` when another holds it (never waits). The upkeep's backfills and
        retention run under it, so that N workers do the work once, not N times.

        PostgreSQL: a session advisory lock on a connection held for the block (its transaction
        committed at once: no snapshot kept open); it goes with the connection if the process dies.
        A SQLite file: an ``flock`` on ``<file>-alone-<name>`` beside it. An in-memory SQLite: ``True``."""
        if self.dialect == "postgresql":
            try:
                conn = self.engine.connect()
            except SQLAlchemyError as exc:
                raise store_error(exc, "locking") from exc
            try:
                got = bool(conn.execute(text("SELECT pg_try_advisory_lock(hashtext(:n))"), {"n": name}).scalar())
                conn.commit()
                try:
                    yield got
                finally:
                    if got:
                        with contextlib.suppress(SQLAlchemyError):
                            conn.execute(text("SELECT pg_advisory_unlock(hashtext(:n))"), {"n": name})
                            conn.commit()
            finally:
                conn.close()
            return
        database = self.engine.url.database
        if not database or database == ":memory:" or fcntl is None:
            yield True
            return
        with open(f"{database}-alone-{name}", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only unit of work."""
        try:
            with self._read() as db:  # closing ends the (read) transaction; rows stay loaded
                yield db
        except (SQLAlchemyError, OverflowError, UnicodeEncodeError) as exc:
            raise store_error(exc, "reading") from exc

    @contextmanager
    def peek(self) -> Iterator[Unit]:
        """A pooled driver connection for one or two :class:`~serve.store.prepared.Prepared` reads, without a
        transaction of ours (SQLite reads each statement in its own; psycopg's implicit one is rolled back
        as the connection goes back to the pool): what :meth:`read`'s ORM session, its ``BEGIN`` and its
        ``ROLLBACK`` cost ~0.1 ms a request for (the request path's read of a run before it is decided).
        A SQLite file's writer (:meth:`unit`) when no write holds it: its page cache is valid (the last commit
        was its own), where a pool connection's is dropped after each of the writer's commits and its pages
        read again (~0.04 ms a diagnosis's read). Its busy timeout 0 is no wait for a reader in WAL mode,
        which waits only for a recovery or a WAL's deletion (at a first open, a last close: not while the
        writer is open)."""
        try:
            mutex = self._write_mutex
            if self._keeps_writer and mutex is not None and mutex.acquire(blocking=False):
                try:
                    if not self._writing:
                        unit = Unit(self.engine, self._kept_writer())
                        try:
                            yield unit
                        finally:
                            unit.close()
                        return
                finally:
                    mutex.release()
            unit = Unit(self.engine)
            try:
                yield unit
            finally:
                unit.close()
        except (SQLAlchemyError, OverflowError, UnicodeEncodeError) as exc:
            raise store_error(exc, "reading") from exc

    @contextmanager
    def unit(self) -> Iterator[Unit]:
        """A write transaction on the driver's connection (:class:`~serve.store.prepared.Unit`: no ORM
        session unless a statement asks for one), committed at the end (``BEGIN IMMEDIATE`` on SQLite,
        polled: :func:`~serve.store.engine.begin_immediate`), with the ``before_commit`` hooks and then the
        counts its writes changed (:func:`serve.store.counters.flush_counts`) written first. The request
        path's writes, whose statements are :class:`~serve.store.prepared.Prepared`."""
        mutex = self._write_mutex or contextlib.nullcontext()
        try:
            with mutex:
                kept = self._keeps_writer and not self._writing  # (a unit inside a unit: the pool's connection)
                unit = Unit(self.engine, self._kept_writer() if kept else None)
                if kept:
                    self._writing = True
                failed = False
                local = self._in_unit
                local.depth = getattr(local, "depth", 0) + 1
                try:
                    if self.dialect == "sqlite":  # psycopg begins at the first statement
                        unit.run("BEGIN IMMEDIATE", lambda c: begin_immediate(c, self.busy_timeout_s, waits=not kept))
                    yield unit
                    for hook in unit.info.pop(_BEFORE_COMMIT, ()):
                        hook()
                    flush_counts(unit)
                    unit.commit()
                except BaseException:
                    failed = True
                    with contextlib.suppress(Exception):  # a dead connection: the pool drops it on return
                        unit.run("ROLLBACK", unit.dialect.do_rollback)
                    raise
                finally:
                    local.depth -= 1
                    try:
                        unit.close()
                    finally:
                        if kept:
                            self._writing = False
                            if failed:  # whatever failed, the next transaction starts on one from the pool
                                self._release_writer()
        except (SQLAlchemyError, OverflowError, UnicodeEncodeError) as exc:
            raise store_error(exc, "writing") from exc

    def in_write(self) -> bool:
        """Whether this thread has a write transaction of this database open (:meth:`unit`)."""
        return bool(getattr(self._in_unit, "depth", 0))

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write unit of work through the ORM: :meth:`unit`'s transaction, with its session."""
        with self.unit() as unit:
            yield unit.session

    def insert(self, table: type[Any] | Table) -> Any:
        """An ``INSERT`` of this dialect (``ON CONFLICT`` clauses need it)."""
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)


_BEFORE_COMMIT = "triage.before_commit"


def before_commit(db: Tx, hook: Callable[[], None]) -> None:
    """Run ``hook`` as the write transaction ``db`` commits (:meth:`Database.unit`), before the counters."""
    db.info.setdefault(_BEFORE_COMMIT, []).append(hook)


class StoreBase:
    """One resource's reads and writes over the shared :class:`Database` ``db``.

    :meth:`read` and :meth:`write` are the database's: a :meth:`write` opened through any store is
    one transaction for every store's methods that take its session (a composed write).
    """

    def __init__(self, db: Database) -> None:
        self.db = db

    @property
    def dialect(self) -> str:
        return self.db.dialect

    @property
    def engine(self) -> Engine:
        return self.db.engine

    def read(self) -> AbstractContextManager[Session]:
        """:meth:`Database.read`."""
        return self.db.read()

    def write(self) -> AbstractContextManager[Session]:
        """:meth:`Database.write`."""
        return self.db.write()

    def unit(self) -> AbstractContextManager[Unit]:
        """:meth:`Database.unit`."""
        return self.db.unit()

    def peek(self) -> AbstractContextManager[Unit]:
        """:meth:`Database.peek`."""
        return self.db.peek()

    def counts_current(self) -> None:
        """Before a read of the counts kept on write (:mod:`serve.store.counters`): what waits in the count
        feed applied, so that the read sees every run committed before it (one read when nothing waits). Only
        where this process defers (``defer_counts``: a server's worker); elsewhere (a command, a worker with
        ``TRIAGE_STREAM_FEED_S=0``) the counts read are those applied, a server's runs within its ``feed_s``; so
        are they in a read made while this thread holds a write transaction open (which applying would wait for)."""
        if self.db.defer_counts and not self.db.in_write():  # (inside a write: SQLite's lock is this thread's)
            self.apply_counts()

    def apply_counts(self) -> None:
        """Apply what waits in the count feed (a transaction; one read when nothing waits), whoever wrote it."""
        if self.counts_waiting():
            with self.unit() as db:
                settle_counts(db)

    def counts_waiting(self) -> bool:
        """Whether the count feed holds a row not applied yet (one read of its first row)."""
        with self.peek() as db:
            return count_feed_waiting(db)

    def _insert(self, table: type[Any] | Table) -> Any:
        return self.db.insert(table)


def core(entity: type[Any]) -> Table:
    """The Core table of a mapped class: statements on it skip the ORM's per-statement work (the
    request path's inserts and reads)."""
    return cast(Table, entity.__table__)


#: Ids in one ``IN (…)`` list when a read goes by many ids (well under SQLite's bound of bound parameters).
IN_BATCH = 500


def id_batches(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    """``ids`` in slices of :data:`IN_BATCH`, one ``IN (…)`` read each."""
    for i in range(0, len(ids), IN_BATCH):
        yield ids[i : i + IN_BATCH]


def rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


def group_rows(
    db: Session, table: type[Any], keys: list[tuple[str, str]]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    tenants = {k[0] for k in keys}
    ids = [k[1] for k in keys]
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    q = select(table).where(table.tenant_id.in_(tenants), table.trace_id.in_(ids))
    if table is LabelRow:
        q = q.where(LabelRow.withdrawn_at.is_(None))  # a withdrawn label counts nowhere
    rows = db.scalars(q.order_by(table.created_at, *([table.id] if "id" in table.__table__.columns else [])))
    for r in rows:
        d = {c.key: getattr(r, c.key) for c in table.__table__.columns}
        out.setdefault((r.tenant_id, r.trace_id), []).append(d)
    return out


__all__ = [
    "IN_BATCH", "Database", "StoreBase", "before_commit", "core", "check_tenant_name", "group_rows", "id_batches",
    "rowcount", "store_error",
]
