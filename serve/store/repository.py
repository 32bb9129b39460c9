"""The store's repository: every read and write the service makes, tenant-scoped.

:class:`Store` owns the engine. Simple operations open their own transaction; composed ones (a
session step: lock the session, read its trace, write the diagnosis, the recommendation and the
new policy state) run inside :meth:`Store.write`, which on SQLite begins with ``BEGIN IMMEDIATE``
and on PostgreSQL relies on :func:`lock_session`'s ``SELECT … FOR UPDATE``. Either way two appends
to one session run one after the other: no step is lost and no failure escalates twice.

SQLAlchemy errors are wrapped in :class:`model.core.errors.StoreError` at this boundary.

>>> store = Store("sqlite://")
>>> store.upgrade()
>>> store.ensure_tenant("acme").id
'acme'
"""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    case,
    delete,
    exists,
    false,
    func,
    insert,
    or_,
    select,
    text,
    true,
    update,
)
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

from model.core.agents import MAX_AGENT_LENGTH, POOL_AGENT
from model.core.errors import InputError, StoreError, StoreUnavailableError, StoreValueError
from model.diagnosis.patterns import Occurrence, RepairEvent
from serve.store.engine import SQLITE_BEGIN, make_engine
from serve.store.migrate import upgrade as _upgrade
from serve.store.tables import (
    ApiKey,
    FailureRow,
    LabelRow,
    ModelActivationRow,
    ObservationRow,
    OutcomeRow,
    RecommendationRow,
    SessionRow,
    StreamRow,
    Tenant,
    TraceRow,
    TraceStepRow,
    UISessionRow,
    UsageRow,
    utcnow,
)

log = logging.getLogger("triage.store")

#: What a row of ``model_activations`` records.
MODEL_ACTIONS = ("promote", "rollback")

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


@dataclass(frozen=True)
class TracePage:
    items: list[TraceRow]
    next_cursor: str | None


class Store:
    """The failure-history store at ``url`` (``sqlite:///path`` or ``postgresql://…``).

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
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._write = sessionmaker(
            self.engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"}), expire_on_commit=False
        )
        # SQLite has one writer at a time. Threads of one process queue here, on a lock that
        # wakes the next one at once, instead of in SQLite's busy handler, which sleeps in steps of
        # up to 100 ms (that made p99 at 8 connections ≈ 0.7 s). Other processes still meet the
        # busy timeout.
        self._write_mutex = threading.RLock() if self.dialect == "sqlite" else None

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
        self.engine.dispose()

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A read-only unit of work."""
        try:
            with self._read() as db:  # closing ends the (read) transaction; rows stay loaded
                yield db
        except (SQLAlchemyError, OverflowError, UnicodeEncodeError) as exc:
            raise store_error(exc, "reading") from exc

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A write unit of work, committed at the end (``BEGIN IMMEDIATE`` on SQLite)."""
        mutex = self._write_mutex or contextlib.nullcontext()
        try:
            with mutex, self._write() as db, db.begin():
                yield db
        except (SQLAlchemyError, OverflowError, UnicodeEncodeError) as exc:
            raise store_error(exc, "writing") from exc

    # -- tenants and keys ----------------------------------------------------------------------
    def ensure_tenant(self, name: str) -> Tenant:
        check_tenant_name(name)
        with self.write() as db:
            row = db.get(Tenant, name)
            if row is None:
                row = Tenant(id=name, name=name)
                db.add(row)
            return row

    def tenant_exists(self, name: str) -> bool:
        with self.read() as db:
            return db.get(Tenant, name) is not None

    def add_api_key(self, tenant: str, key_id: str, key_hash: str, label: str = "", *,
                    operator: bool = False) -> ApiKey:
        check_tenant_name(tenant)
        with self.write() as db:
            if db.get(Tenant, tenant) is None:
                db.add(Tenant(id=tenant, name=tenant))
                db.flush()
            row = ApiKey(id=key_id, tenant_id=tenant, key_hash=key_hash, label=label, operator=operator)
            db.add(row)
            return row

    def find_api_key(self, key_hash: str) -> ApiKey | None:
        """The active (not revoked) key with this hash."""
        with self.read() as db:
            return db.scalar(select(ApiKey).where(ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None)))

    def list_api_keys(self, tenant: str | None = None) -> list[ApiKey]:
        with self.read() as db:
            q = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
            if tenant is not None:
                q = q.where(ApiKey.tenant_id == tenant)
            return list(db.scalars(q))

    def revoke_api_key(self, key_id: str) -> bool:
        """Revoke by key id (its public prefix); False when there is no such active key."""
        with self.write() as db:
            row = db.get(ApiKey, key_id)
            if row is None or row.revoked_at is not None:
                return False
            row.revoked_at = utcnow()
            return True

    # -- console sessions (serve/auth.py) -------------------------------------------------------
    def add_ui_session(
        self, token_hash: str, *, tenant: str, key_id: str, csrf: str, expires_at: datetime
    ) -> None:
        """Record a console sign-in: the sha256 of the cookie's token, never the token."""
        with self.write() as db:
            db.add(UISessionRow(id=token_hash, tenant_id=tenant, key_id=key_id, csrf=csrf, expires_at=expires_at))

    def find_ui_session(
        self, token_hash: str, *, require_key: bool = True, now: datetime | None = None
    ) -> tuple[UISessionRow, bool] | None:
        """The live session with this token hash and whether its key is an operator's: not signed
        out, not expired, and (``require_key``) its API key not revoked — revoking the key ends
        every session opened with it."""
        now = now or utcnow()
        if require_key:
            q: Any = select(UISessionRow, ApiKey.operator).join(ApiKey, ApiKey.id == UISessionRow.key_id).where(
                ApiKey.revoked_at.is_(None), ApiKey.tenant_id == UISessionRow.tenant_id)
        else:
            q = select(UISessionRow, false())
        q = q.where(UISessionRow.id == token_hash, UISessionRow.revoked_at.is_(None), UISessionRow.expires_at > now)
        with self.read() as db:
            got = db.execute(q).first()
        return None if got is None else (got[0], bool(got[1]))

    def set_ui_session_tenant(self, token_hash: str, tenant: str | None) -> None:
        """An operator's session acts on ``tenant`` from now on (``None``: its key's own)."""
        with self.write() as db:
            db.execute(update(UISessionRow).where(UISessionRow.id == token_hash).values(acting_tenant=tenant))

    def revoke_ui_session(self, token_hash: str) -> bool:
        """Sign out: the session ends now; False when there was no live one."""
        with self.write() as db:
            got = db.execute(
                update(UISessionRow)
                .where(UISessionRow.id == token_hash, UISessionRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return _rowcount(got) > 0

    # -- traces --------------------------------------------------------------------------------
    def _insert(self, table: type[Any]) -> Any:
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)

    @functools.cached_property
    def _trace_upsert_stmt(self) -> Any:
        # Built once, executed with a parameter dict: SQLAlchemy then reuses its compiled form.
        ins = self._insert(TraceRow)
        keep = ("tenant_id", "id", "created_at", "failed_at")
        return ins.on_conflict_do_update(
            index_elements=["tenant_id", "id"],
            set_={
                **{c.key: getattr(ins.excluded, c.key) for c in TraceRow.__table__.columns if c.key not in keep},
                # the run's first failure stays the first one (serve/services/canary.py: failure and recovery rates)
                "failed_at": func.coalesce(TraceRow.__table__.c.failed_at, ins.excluded.failed_at),
            },
        ).returning(TraceRow.__table__.c.created_at)  # the kept one: the failure rows carry it

    def _trace_upsert(self) -> Any:
        return self._trace_upsert_stmt

    def put_trace(
        self,
        db: Session,
        *,
        tenant: str,
        trace_id: str,
        trace: dict[str, Any],
        response: dict[str, Any],
        session_id: str | None,
        task_type: str | None,
        shadow: bool = False,
        policy_state: dict[str, Any] | None = None,
        n_steps: int | None = None,
        steps_in_rows: bool = False,
        arm: str | None = None,
        agent: str = POOL_AGENT,
        step_tools: Sequence[str | None] | None = None,
    ) -> None:
        """Insert or replace a trace and the failures of its latest diagnosis (inside ``db``).

        Core statements (an upsert, a delete, one executemany): this is the hot path of
        ``/v1/diagnose``. ``steps_in_rows``: the trace's steps are kept in ``trace_steps``
        (:meth:`put_steps`) and ``trace`` holds the rest; ``n_steps`` then counts them. A whole
        trace stored over one kept in rows replaces it. ``arm``: the run's canary arm
        (:mod:`serve.services.canary`); when a diagnosis of the run first found a failure is kept.
        ``agent``: the run's agent (:func:`model.core.agents.resolve_agent`).
        ``step_tools``: the tool name of each step, when ``trace`` does not hold the steps; a
        failure row keeps the tool it concerns (``details.tool``, else its step's).
        """
        now = utcnow()
        if step_tools is None:
            step_tools = [s.get("tool_name") if isinstance(s, dict) else None for s in trace.get("steps") or []]
        primary = response.get("primary") or {}
        values = {
            "tenant_id": tenant,
            "id": trace_id,
            "session_id": session_id,
            "task_type": task_type,
            "created_at": now,
            "updated_at": now,
            "n_steps": n_steps if n_steps is not None else len(trace.get("steps") or []),
            "healthy": response.get("healthy") is not False,  # null (unknown) = no failure found
            "arm": arm,
            "failed_at": now if response.get("failures") else None,
            "primary_kind": primary.get("kind"),
            "model_version": str(response.get("model_version", "")),
            "shadow": shadow,
            "trace": trace,
            "response": response,
            "policy_state": policy_state,
            "steps_in_rows": steps_in_rows,
            "agent": agent,
        }
        prev = db.execute(
            select(TraceRow.steps_in_rows).where(TraceRow.tenant_id == tenant, TraceRow.id == trace_id)
        ).scalar_one_or_none() if not steps_in_rows else None
        if prev:  # a whole trace replaces one whose steps were kept in rows
            db.execute(delete(TraceStepRow).where(TraceStepRow.tenant_id == tenant, TraceStepRow.trace_id == trace_id))
        created = db.execute(self._trace_upsert(), values).scalar_one()
        db.execute(delete(FailureRow).where(FailureRow.tenant_id == tenant, FailureRow.trace_id == trace_id))
        rows = [
            {
                "tenant_id": tenant,
                "trace_id": trace_id,
                "kind": f["kind"],
                "is_signal": is_signal,
                "severity": f["severity"],
                "confidence": float(f["confidence"]),
                "detector": f.get("detector", ""),
                "step": f.get("step"),
                "source_index": f.get("source_index"),
                "evidence": f.get("evidence", ""),
                "details": f.get("details") or {},
                "tool": _failure_tool(f, step_tools),
                "created_at": created,
                "agent": agent,
            }
            for key, is_signal in (("failures", False), ("signals", True))
            for f in response.get(key) or []
        ]
        if rows:
            db.execute(insert(FailureRow), rows)

    def put_steps(self, db: Session, tenant: str, trace_id: str, steps: dict[int, dict[str, Any]]) -> None:
        """Insert or replace steps of a trace kept in rows (index → step JSON), inside ``db``."""
        if not steps:
            return
        db.execute(
            delete(TraceStepRow).where(
                TraceStepRow.tenant_id == tenant,
                TraceStepRow.trace_id == trace_id,
                TraceStepRow.idx.in_(sorted(steps)),
            )
        )
        db.execute(
            insert(TraceStepRow),
            [{"tenant_id": tenant, "trace_id": trace_id, "idx": i, "step": st} for i, st in sorted(steps.items())],
        )

    @staticmethod
    def trace_json(db: Session, row: TraceRow) -> dict[str, Any]:
        """The stored trace of ``row`` as one JSON dict (steps read from ``trace_steps`` when kept there)."""
        if not row.steps_in_rows:
            return row.trace
        steps = db.scalars(
            select(TraceStepRow.step)
            .where(TraceStepRow.tenant_id == row.tenant_id, TraceStepRow.trace_id == row.id)
            .order_by(TraceStepRow.idx)
        ).all()
        return {**row.trace, "steps": list(steps)}

    def read_trace(self, db: Session, tenant: str, trace_id: str) -> tuple[dict[str, Any], bool] | None:
        """In transaction ``db``: the whole stored trace and whether its steps are kept as rows, or None."""
        row = db.get(TraceRow, (tenant, trace_id))
        if row is None:
            return None
        return self.trace_json(db, row), row.steps_in_rows

    def get_trace_json(self, tenant: str, trace_id: str) -> tuple[TraceRow, dict[str, Any]] | None:
        """The trace row and its whole stored trace, or None."""
        with self.read() as db:
            row = db.get(TraceRow, (tenant, trace_id))
            return None if row is None else (row, self.trace_json(db, row))

    def add_usage(self, db: Session, tenant: str, day: str, steps: int) -> int:
        """Add ``steps`` to the tenant's usage of ``day`` (inside ``db``); the new total."""
        ins = self._insert(UsageRow).values(tenant_id=tenant, day=day, steps=steps)
        stmt = ins.on_conflict_do_update(
            index_elements=["tenant_id", "day"], set_={"steps": UsageRow.steps + ins.excluded.steps}
        ).returning(UsageRow.steps)
        return int(db.execute(stmt).scalar_one())

    def usage(self, tenant: str, day: str) -> int:
        with self.read() as db:
            return int(db.scalar(select(UsageRow.steps).where(UsageRow.tenant_id == tenant, UsageRow.day == day)) or 0)

    def lock_trace_state(self, db: Session, tenant: str, trace_id: str) -> dict[str, Any] | None:
        """The policy state of a session-less trace, locked for this transaction (None if new)."""
        q = select(TraceRow.policy_state).where(TraceRow.tenant_id == tenant, TraceRow.id == trace_id)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        state: dict[str, Any] | None = db.execute(q).scalar_one_or_none()
        return state

    def set_trace_state(self, db: Session, tenant: str, trace_id: str, state: dict[str, Any]) -> None:
        db.execute(
            update(TraceRow)
            .where(TraceRow.tenant_id == tenant, TraceRow.id == trace_id)
            .values(policy_state=state, updated_at=utcnow())
        )

    def get_trace(self, tenant: str, trace_id: str) -> TraceRow | None:
        with self.read() as db:
            return db.get(TraceRow, (tenant, trace_id))

    def list_traces(
        self,
        tenant: str,
        *,
        kind: str | None = None,
        since: datetime | None = None,
        session: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> TracePage:
        """Newest first; ``cursor`` is the opaque ``next_cursor`` of the previous page."""
        q: Select[TraceRow] = select(TraceRow).where(TraceRow.tenant_id == tenant)
        if kind is not None:
            q = q.where(
                exists().where(
                    FailureRow.tenant_id == tenant,
                    FailureRow.trace_id == TraceRow.id,
                    FailureRow.kind == kind,
                    FailureRow.is_signal.is_(False),
                )
            )
        if since is not None:
            q = q.where(TraceRow.created_at >= since)
        if session is not None:
            q = q.where(TraceRow.session_id == session)
        if cursor:
            ts, tid = _decode_cursor(cursor)
            q = q.where(or_(TraceRow.created_at < ts, and_(TraceRow.created_at == ts, TraceRow.id < tid)))
        q = q.order_by(TraceRow.created_at.desc(), TraceRow.id.desc()).limit(limit + 1)
        with self.read() as db:
            rows = list(db.scalars(q))
        nxt = None
        if len(rows) > limit:
            rows = rows[:limit]
            nxt = _encode_cursor(rows[-1].created_at, rows[-1].id)
        return TracePage(rows, nxt)

    def trace_history(self, tenant: str, trace_id: str) -> tuple[list[RecommendationRow], list[OutcomeRow]]:
        with self.read() as db:
            recs = list(
                db.scalars(
                    select(RecommendationRow)
                    .where(RecommendationRow.tenant_id == tenant, RecommendationRow.trace_id == trace_id)
                    .order_by(RecommendationRow.created_at)
                )
            )
            outs = list(
                db.scalars(
                    select(OutcomeRow)
                    .where(OutcomeRow.tenant_id == tenant, OutcomeRow.trace_id == trace_id)
                    .order_by(OutcomeRow.created_at, OutcomeRow.id)
                )
            )
        return recs, outs

    def delete_trace(self, tenant: str, trace_id: str) -> bool:
        with self.write() as db:
            n = _delete_traces(db, tenant, [trace_id])
        return n > 0

    def delete_session(self, tenant: str, session_id: str) -> bool:
        """Delete a session, its policy state and every trace recorded under it.

        Returns False when neither the session nor any trace of it existed.
        """
        with self.write() as db:
            ids = list(
                db.scalars(
                    select(TraceRow.id).where(TraceRow.tenant_id == tenant, TraceRow.session_id == session_id)
                )
            )
            n = _delete_traces(db, tenant, ids)
            db.execute(
                delete(RecommendationRow).where(
                    RecommendationRow.tenant_id == tenant, RecommendationRow.session_id == session_id
                )
            )
            gone = db.execute(
                delete(SessionRow).where(SessionRow.tenant_id == tenant, SessionRow.id == session_id)
            )
            return n > 0 or _rowcount(gone) > 0

    def purge_older_than(self, ttl: timedelta, *, now: datetime | None = None) -> int:
        """Retention: delete traces (and their history) not updated within ``ttl``; returns count."""
        cutoff = (now or utcnow()) - ttl
        with self.write() as db:
            old = db.execute(
                select(TraceRow.tenant_id, TraceRow.id).where(TraceRow.updated_at < cutoff)
            ).all()
            by_tenant: dict[str, list[str]] = {}
            for t, i in old:
                by_tenant.setdefault(t, []).append(i)
            n = sum(_delete_traces(db, t, ids) for t, ids in by_tenant.items())
            db.execute(delete(SessionRow).where(SessionRow.updated_at < cutoff))
            db.execute(delete(ObservationRow).where(ObservationRow.created_at < cutoff))
        return n

    # -- sessions ------------------------------------------------------------------------------
    def lock_session(
        self, db: Session, tenant: str, session_id: str, *, create_trace_id: str | None
    ) -> SessionRow | None:
        """The session row, locked for this transaction; created when ``create_trace_id`` is given.

        The insert is ``ON CONFLICT DO NOTHING`` so that two first appends racing on PostgreSQL
        both end up locking the one row instead of one failing on the primary key.
        """
        if create_trace_id is not None:
            now = utcnow()
            values = {
                "tenant_id": tenant,
                "id": session_id,
                "trace_id": create_trace_id,
                "created_at": now,
                "updated_at": now,
                "n_steps": 0,
                "next_source_index": 0,
                "version": 0,
                "state": {},
            }
            ins = (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(SessionRow)
            db.execute(ins.values(**values).on_conflict_do_nothing())
        q = select(SessionRow).where(SessionRow.tenant_id == tenant, SessionRow.id == session_id)
        if self.dialect == "postgresql":
            q = q.with_for_update()
        return db.scalar(q.execution_options(populate_existing=True))

    @staticmethod
    def save_session_state(
        row: SessionRow, state: dict[str, Any], *, n_steps: int | None = None, next_source_index: int | None = None
    ) -> int:
        """Write a locked session's new repair state (and counters) in its transaction; its new version."""
        row.state = state
        if n_steps is not None:
            row.n_steps = n_steps
        if next_source_index is not None:
            row.next_source_index = next_source_index
        row.updated_at = utcnow()
        row.version += 1
        return row.version

    def get_session(self, tenant: str, session_id: str) -> SessionRow | None:
        with self.read() as db:
            return db.get(SessionRow, (tenant, session_id))

    # -- recommendations and outcomes ------------------------------------------------------------
    @staticmethod
    def put_recommendation(
        db: Session,
        *,
        tenant: str,
        rec: dict[str, Any],
        trace_id: str,
        session_id: str | None,
        failure_key: str | None,
        kind: str | None,
        rung: int,
        attempt: int,
        status: str = "open",
    ) -> None:
        # Ids are deterministic (model.diagnosis.repair_engine): a second insert of one id is the same recommendation.
        ins = (postgresql.insert if db.get_bind().dialect.name == "postgresql" else sqlite.insert)(
            RecommendationRow
        )
        db.execute(
            ins.values(
                tenant_id=tenant,
                id=rec["id"],
                trace_id=trace_id,
                session_id=session_id,
                failure_key=failure_key,
                kind=kind,
                strategy=rec["strategy"],
                rung=rung,
                attempt=attempt,
                status=status,
                created_at=utcnow(),
                body=rec,
            ).on_conflict_do_nothing()
        )

    @staticmethod
    def get_recommendation(db: Session, tenant: str, rec_id: str) -> RecommendationRow | None:
        return db.get(RecommendationRow, (tenant, rec_id))

    @staticmethod
    def refresh(db: Session, row: Any) -> None:
        """Re-read ``row`` in transaction ``db`` (its values as of the locks taken since it was read)."""
        db.refresh(row)

    @staticmethod
    def add_outcome(
        db: Session,
        *,
        tenant: str,
        rec: RecommendationRow,
        success: bool,
        duration_s: float | None,
        cost: float | None,
        note: str,
    ) -> OutcomeRow:
        row = OutcomeRow(
            tenant_id=tenant,
            recommendation_id=rec.id,
            trace_id=rec.trace_id,
            strategy=rec.strategy,
            success=success,
            duration_s=duration_s,
            cost=cost,
            note=note,
        )
        db.add(row)
        return row

    @staticmethod
    def add_outcome_label(
        db: Session, *, tenant: str, trace_id: str, failed: bool, kind: str | None, step: int | None,
        source_index: int | None,
    ) -> None:
        """In transaction ``db``: the label an outcome posted with ``label`` gives its run (author
        ``outcome``, a human's)."""
        db.add(LabelRow(tenant_id=tenant, trace_id=trace_id, failed=failed, kind=kind, step=step,
                        source_index=source_index, author="outcome", author_type="human"))

    def add_label(
        self,
        tenant: str,
        trace_id: str,
        *,
        failed: bool,
        kind: str | None = None,
        step: int | None = None,
        source_index: int | None = None,
        author: str = "",
        author_type: str = "human",
    ) -> list[dict[str, Any]] | None:
        """Add a label (one author's verdict on the run); returns the trace's labels, oldest first,
        or None when there is no such trace. ``source_index`` locates the label at the first step
        of that input element; ``step`` at that step."""
        with self.write() as db:
            trace = db.get(TraceRow, (tenant, trace_id))
            if trace is None:
                return None
            if step is not None and step >= trace.n_steps:
                raise InputError(
                    f"step {step} is past the trace's last step ({trace.n_steps - 1})", path="step"
                )
            if step is not None or source_index is not None:
                steps = self.trace_json(db, trace).get("steps") or []
                if step is not None:
                    source_index = int(steps[step].get("source_index", 0))
                else:
                    step = next((i for i, s in enumerate(steps) if s.get("source_index", 0) == source_index), None)
                    if step is None:
                        last = max((int(s.get("source_index", 0)) for s in steps), default=0)
                        raise InputError(
                            f"no step of the trace has source_index {source_index} (the last is {last})",
                            path="source_index",
                        )
            db.add(
                LabelRow(
                    tenant_id=tenant,
                    trace_id=trace_id,
                    failed=failed,
                    kind=kind,
                    step=step,
                    source_index=source_index,
                    author=author,
                    author_type=author_type,
                )
            )
            db.flush()
            return _group(db, LabelRow, [(tenant, trace_id)]).get((tenant, trace_id), [])

    def withdraw_label(
        self, tenant: str, author: str, *, trace_id: str | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """Withdraw ``author``'s newest label (on ``trace_id`` only, when given): the row stays,
        marked ``withdrawn_at``, and no reader counts it any more. Returns the withdrawn row and the
        trace's labels still counted, or None when the author has no label left to withdraw."""
        with self.write() as db:
            q = select(LabelRow).where(LabelRow.tenant_id == tenant, LabelRow.author == author,
                                       LabelRow.withdrawn_at.is_(None))
            if trace_id is not None:
                q = q.where(LabelRow.trace_id == trace_id)
            row = db.scalars(q.order_by(LabelRow.created_at.desc(), LabelRow.id.desc()).limit(1)).first()
            if row is None:
                return None
            row.withdrawn_at = utcnow()
            db.flush()
            withdrawn = {c.key: getattr(row, c.key) for c in LabelRow.__table__.columns}
            return withdrawn, _group(db, LabelRow, [(tenant, row.trace_id)]).get((tenant, row.trace_id), [])

    def trace_labels(self, tenant: str, trace_id: str) -> list[dict[str, Any]]:
        """The trace's labels (those not withdrawn), oldest first."""
        with self.read() as db:
            return _group(db, LabelRow, [(tenant, trace_id)]).get((tenant, trace_id), [])

    def records_of(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
        """The recommendations, outcomes and labels of these traces (one query each), by trace id."""
        keys = [(tenant, t) for t in trace_ids]
        out: dict[str, dict[str, list[dict[str, Any]]]] = {
            t: {"recommendations": [], "outcomes": [], "labels": []} for t in trace_ids}
        if not keys:
            return out
        with self.read() as db:
            for name, table in (("recommendations", RecommendationRow), ("outcomes", OutcomeRow),
                                ("labels", LabelRow)):
                for (_, tid), rows in _group(db, table, keys).items():
                    out[tid][name] = rows
        return out

    def iter_history(self, tenant: str | None = None, batch: int = 500) -> Iterator[dict[str, Any]]:
        """Every stored trace with its recommendations, outcomes and labels (not withdrawn; for export)."""
        last: tuple[str, str] = ("", "")
        while True:
            with self.read() as db:
                q = select(TraceRow).where(
                    or_(
                        TraceRow.tenant_id > last[0],
                        and_(TraceRow.tenant_id == last[0], TraceRow.id > last[1]),
                    )
                )
                if tenant is not None:
                    q = q.where(TraceRow.tenant_id == tenant)
                rows = list(db.scalars(q.order_by(TraceRow.tenant_id, TraceRow.id).limit(batch)))
                if not rows:
                    return
                keys = [(r.tenant_id, r.id) for r in rows]
                traces = {(r.tenant_id, r.id): self.trace_json(db, r) for r in rows}
                recs = _group(db, RecommendationRow, keys)
                outs = _group(db, OutcomeRow, keys)
                labels = _group(db, LabelRow, keys)
            for r in rows:
                k = (r.tenant_id, r.id)
                yield {
                    "tenant": r.tenant_id,
                    "agent": r.agent,
                    "trace": traces[k],
                    "response": r.response,
                    "created_at": r.created_at,
                    "recommendations": recs.get(k, []),
                    "outcomes": outs.get(k, []),
                    "labels": labels.get(k, []),
                }
            last = keys[-1]

    def agent_labels(self, tenant: str, agent: str, *, limit: int = 2000) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The agent's newest labelled traces (at most ``limit``): each trace's stored response and its
        label rows, oldest first (the zero-shot re-centring reads them; serve/services/agent_models.py)."""
        with self.read() as db:
            ids = list(db.scalars(
                select(LabelRow.trace_id)
                .join(TraceRow, and_(TraceRow.tenant_id == LabelRow.tenant_id, TraceRow.id == LabelRow.trace_id))
                .where(LabelRow.tenant_id == tenant, TraceRow.agent == agent)
                .group_by(LabelRow.trace_id)
                .order_by(func.max(LabelRow.id).desc())
                .limit(limit)
            ))
            if not ids:
                return []
            responses: dict[str, Any] = dict(db.execute(
                select(TraceRow.id, TraceRow.response).where(TraceRow.tenant_id == tenant, TraceRow.id.in_(ids))
            ).all())
            labels = _group(db, LabelRow, [(tenant, i) for i in ids])
        return [(responses.get(i) or {}, labels.get((tenant, i), [])) for i in ids]

    # -- failure patterns (model/diagnosis/patterns.py groups what this reads) ------------------------------
    def pattern_version(self, tenant: str) -> tuple[int, int, int]:
        """What the tenant's patterns depend on, cheaply: (failure rows, newest failure row id,
        newest outcome id). A diagnosis rewrites failure rows (new ids), a deletion lowers the count,
        an outcome adds a row: each changes it."""
        try:
            with self.engine.connect() as conn:
                n, top = conn.execute(select(func.count(), func.max(FailureRow.id))
                                      .where(FailureRow.tenant_id == tenant)).one()
                out = conn.execute(select(func.max(OutcomeRow.id)).where(OutcomeRow.tenant_id == tenant)).scalar()
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc
        return int(n or 0), int(top or 0), int(out or 0)

    def pattern_inputs(
        self, tenant: str, *, since: datetime, until: datetime
    ) -> tuple[list[Occurrence], list[RepairEvent]]:
        """The failures and signals of the tenant's runs created in ``[since, until)``, and the
        recommendations given since ``since`` with their outcomes (:func:`model.diagnosis.patterns.group_patterns`
        matches them to the runs). An occurrence's agent is its run's resolved agent (``traces.agent``:
        :func:`model.core.agents.resolve_agent`), ``None`` for the tenant's pool.

        One table each: failure rows carry their run's ``created_at`` and agent (migration 0010)."""
        occ_q = (
            select(FailureRow.trace_id, FailureRow.created_at, FailureRow.agent, FailureRow.kind,
                   FailureRow.severity, FailureRow.is_signal, FailureRow.detector, FailureRow.step,
                   FailureRow.tool, FailureRow.evidence)
            .where(FailureRow.tenant_id == tenant, FailureRow.created_at >= since, FailureRow.created_at < until)
        )
        ok = func.max(case((OutcomeRow.success.is_(True), 1), else_=0))
        rec_q = (
            select(RecommendationRow.trace_id, RecommendationRow.kind, RecommendationRow.strategy,
                   func.count(OutcomeRow.id), ok)
            .outerjoin(OutcomeRow, and_(OutcomeRow.tenant_id == RecommendationRow.tenant_id,
                                        OutcomeRow.recommendation_id == RecommendationRow.id))
            .where(RecommendationRow.tenant_id == tenant, RecommendationRow.created_at >= since)
            .group_by(RecommendationRow.id, RecommendationRow.trace_id, RecommendationRow.kind,
                      RecommendationRow.strategy)
        )
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(occ_q).all()
                repairs = [
                    RepairEvent(str(tid), kind, str(strategy), int(n), bool(good) if n else None)
                    for tid, kind, strategy, n, good in conn.execute(rec_q).all()
                ]
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc
        # rows written before failures.tool: the tool of their step, read from the trace
        old = sorted({r[0] for r in rows if r[8] is None and r[7] is not None})
        tools: dict[str, list[str | None]] = {}
        if old:
            with self.read() as db:
                for i in range(0, len(old), 500):
                    for tr in db.scalars(select(TraceRow).where(TraceRow.tenant_id == tenant,
                                                                TraceRow.id.in_(old[i : i + 500]))):
                        tools[tr.id] = [s.get("tool_name") for s in self.trace_json(db, tr).get("steps") or []]
        occurrences = []
        for tid, created, agent, kind, severity, is_signal, detector, step, tool, evidence in rows:
            if created is None:  # not in a window (the query's range excludes NULL)
                continue
            if tool is None:
                steps = tools.get(tid, [])
                tool = steps[step] if step is not None and 0 <= step < len(steps) else None
            occurrences.append(Occurrence(tid, created, None if agent == POOL_AGENT else agent, kind, severity, bool(is_signal), detector, step,
                                          tool or None, evidence or ""))
        return occurrences, repairs

    # -- model registry activations (model/scoring/agent_registry.py holds the artefacts) --------------------
    def active_model(self, tenant: str, agent: str) -> str | None:
        """The registry version of ``agent``'s model the tenant serves (its newest activation), or
        None: no agent model (zero-shot)."""
        with self.read() as db:
            row = db.scalars(
                select(ModelActivationRow)
                .where(ModelActivationRow.tenant_id == tenant, ModelActivationRow.agent == agent)
                .order_by(ModelActivationRow.id.desc())
                .limit(1)
            ).first()
            return row.version if row is not None else None

    def active_models(self, tenant: str) -> dict[str, str]:
        """Every agent of the tenant with an activation → its active version (zero-shot ones included)."""
        with self.read() as db:
            rows = db.execute(
                select(ModelActivationRow.agent, ModelActivationRow.version)
                .where(ModelActivationRow.tenant_id == tenant, ModelActivationRow.agent.is_not(None))
                .order_by(ModelActivationRow.id)
            ).all()
        return {str(a): str(v) for a, v in rows}

    def activate_model(self, tenant: str, version: str, *, actor: str, agent: str, action: str = "promote") -> None:
        """Record that ``tenant`` serves ``version`` for ``agent`` from now on (``action``: promote or rollback)."""
        if action not in MODEL_ACTIONS:
            raise InputError(f"action must be one of {', '.join(MODEL_ACTIONS)}; got {action!r}", path="action")
        if not version or len(version) > 128:
            raise InputError(f"a model version is 1-128 characters; got {version!r}", path="version")
        if not agent or len(agent) > MAX_AGENT_LENGTH:
            raise InputError(f"an agent name is 1-{MAX_AGENT_LENGTH} characters; got {agent!r}", path="agent")
        check_tenant_name(tenant)
        with self.write() as db:
            db.add(ModelActivationRow(tenant_id=tenant, agent=agent, version=version, actor=actor[:200],
                                      action=action))

    def model_history(self, tenant: str, agent: str | None = None) -> list[dict[str, Any]]:
        """The tenant's activations (of ``agent``'s model; ``None``: every agent's, and the tenant-wide
        run scorers' of before revision 0007), newest first: agent, version, activated_at, actor, action."""
        with self.read() as db:
            q = select(ModelActivationRow).where(ModelActivationRow.tenant_id == tenant)
            if agent is not None:
                q = q.where(ModelActivationRow.agent == agent)
            rows = db.scalars(q.order_by(ModelActivationRow.id.desc()))
            return [{"agent": r.agent, "version": r.version, "activated_at": r.activated_at, "actor": r.actor,
                     "action": r.action} for r in rows]

    # -- streams -------------------------------------------------------------------------------
    def lock_stream(
        self, db: Session, tenant: str, stream: str, agent: str, *, detector: str, params: dict[str, Any]
    ) -> StreamRow:
        """The stream's detector row, created on first use, locked for this transaction."""
        ins = (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(StreamRow)
        db.execute(
            ins.values(
                tenant_id=tenant,
                name=stream,
                agent=agent,
                detector=detector,
                params=params,
                state={},
                n=0,
                alarm_open=False,
                updated_at=utcnow(),
            ).on_conflict_do_nothing()
        )
        q = select(StreamRow).where(
            StreamRow.tenant_id == tenant, StreamRow.name == stream, StreamRow.agent == agent
        )
        if self.dialect == "postgresql":
            q = q.with_for_update()
        row = db.scalar(q.execution_options(populate_existing=True))
        assert row is not None
        return row

    def lock_streams(
        self, db: Session, tenant: str, agent: str, names: Sequence[str], *, detector: str
    ) -> dict[str, dict[str, Any]]:
        """Several streams of one (tenant, agent) at once, created when new, locked; as dicts
        (``name, detector, params, state, n``).

        Callers pass names in one (sorted) order, so that concurrent transactions lock alike.
        """
        cols = (
            StreamRow.name,
            StreamRow.detector,
            StreamRow.params,
            StreamRow.state,
            StreamRow.n,
            StreamRow.alarm_open,
            StreamRow.alarm,
        )
        q = select(*cols).where(
            StreamRow.tenant_id == tenant, StreamRow.agent == agent, StreamRow.name.in_(names)
        )
        if self.dialect == "postgresql":
            q = q.order_by(StreamRow.name).with_for_update()
        rows = {r.name: dict(r._mapping) for r in db.execute(q)}
        missing = [n for n in names if n not in rows]
        if missing:
            now = utcnow()
            db.execute(
                self._insert(StreamRow).on_conflict_do_nothing(),
                [
                    {
                        "tenant_id": tenant,
                        "name": n,
                        "agent": agent,
                        "detector": detector,
                        "params": {},
                        "state": {},
                        "n": 0,
                        "alarm_open": False,
                        "updated_at": now,
                    }
                    for n in missing
                ],
            )
            rows = {r.name: dict(r._mapping) for r in db.execute(q)}
        return rows

    @staticmethod
    def add_observations(db: Session, rows: list[dict[str, Any]]) -> None:
        """In transaction ``db``: observations of locked streams (one executemany)."""
        if rows:
            db.execute(insert(ObservationRow), rows)

    @functools.cached_property
    def _stream_update_stmt(self) -> Any:
        return (
            update(StreamRow)
            .where(
                StreamRow.tenant_id == bindparam("k_tenant"),
                StreamRow.agent == bindparam("k_agent"),
                StreamRow.name == bindparam("k_name"),
            )
            .values(
                n=bindparam("n"),
                state=bindparam("state"),
                alarm_open=bindparam("alarm_open"),
                alarm=bindparam("alarm"),
                updated_at=bindparam("updated_at"),
            )
        )

    def update_streams(self, db: Session, tenant: str, agent: str, changes: list[dict[str, Any]]) -> None:
        """Write back ``name, n, state, alarm_open, alarm`` of locked streams (one executemany)."""
        now = utcnow()
        db.connection().execute(
            self._stream_update_stmt,
            [
                {
                    "k_tenant": tenant,
                    "k_agent": agent,
                    "k_name": c["name"],
                    "n": c["n"],
                    "state": c["state"],
                    "alarm_open": c["alarm_open"],
                    "alarm": c["alarm"],
                    "updated_at": now,
                }
                for c in changes
            ],
        )

    def get_stream(self, tenant: str, stream: str, agent: str) -> StreamRow | None:
        with self.read() as db:
            return db.get(StreamRow, (tenant, stream, agent))

    def open_alarms(self, tenant: str, agent: str) -> list[dict[str, Any]]:
        """Streams of this tenant with an open alarm, of ``agent`` or of every agent (``""``)."""
        q = select(StreamRow.name, StreamRow.agent, StreamRow.detector, StreamRow.alarm).where(
            StreamRow.tenant_id == tenant,
            StreamRow.alarm_open.is_(True),
            StreamRow.agent.in_([agent, ""]),
        )
        try:
            with self.engine.connect() as conn:
                return [dict(r._mapping) for r in conn.execute(q)]
        except SQLAlchemyError as exc:
            raise store_error(exc, "reading") from exc

    def all_open_alarms(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Streams with an open alarm episode, of ``tenant`` or (``None``) every tenant (``/metrics``)."""
        q = (
            select(StreamRow.tenant_id, StreamRow.name, StreamRow.agent, StreamRow.alarm)
            .where(StreamRow.alarm_open.is_(True))
            .order_by(StreamRow.tenant_id, StreamRow.name, StreamRow.agent)
        )
        if tenant is not None:
            q = q.where(StreamRow.tenant_id == tenant)
        with self.read() as db:
            return [dict(r._mapping) for r in db.execute(q)]

    def stream_values(
        self, tenant: str, stream: str, agent: str, *, last: int
    ) -> list[tuple[int, float]]:
        """The last ``last`` observations as (seq, value), oldest first."""
        with self.read() as db:
            rows = db.execute(
                select(ObservationRow.seq, ObservationRow.value)
                .where(
                    ObservationRow.tenant_id == tenant,
                    ObservationRow.stream == stream,
                    ObservationRow.agent == agent,
                )
                .order_by(ObservationRow.seq.desc())
                .limit(last)
            ).all()
        return [(int(s), float(v)) for s, v in reversed(rows)]

    def metrics_snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """Aggregates for ``/metrics``, read from the store so that every worker reports the same;
        ``tenant``: that tenant's only (``None``: every tenant's)."""

        def mine(q: Any, table: Any) -> Any:
            return q if tenant is None else q.where(table.tenant_id == tenant)

        with self.read() as db:
            traces = int(db.scalar(mine(select(func.count()).select_from(TraceRow), TraceRow)) or 0)
            failures = dict(
                db.execute(
                    mine(select(FailureRow.kind, func.count()), FailureRow)
                    .where(FailureRow.is_signal.is_(False))
                    .group_by(FailureRow.kind)
                ).all()
            )
            recs = dict(
                db.execute(
                    mine(select(RecommendationRow.strategy, func.count()), RecommendationRow).group_by(
                        RecommendationRow.strategy
                    )
                ).all()
            )
            outcomes: dict[tuple[str, bool], int] = {
                (s, bool(ok)): int(n)
                for s, ok, n in db.execute(
                    mine(select(OutcomeRow.strategy, OutcomeRow.success, func.count()), OutcomeRow).group_by(
                        OutcomeRow.strategy, OutcomeRow.success
                    )
                ).all()
            }
            first = {
                (t, sid, fk): ts
                for t, sid, fk, ts in db.execute(
                    select(
                        RecommendationRow.tenant_id,
                        RecommendationRow.session_id,
                        RecommendationRow.failure_key,
                        func.min(RecommendationRow.created_at),
                    )
                    .where(RecommendationRow.failure_key.is_not(None))
                    .where(true() if tenant is None else RecommendationRow.tenant_id == tenant)
                    .group_by(
                        RecommendationRow.tenant_id,
                        RecommendationRow.session_id,
                        RecommendationRow.failure_key,
                    )
                ).all()
            }
            recovered = db.execute(
                select(
                    OutcomeRow.created_at,
                    RecommendationRow.tenant_id,
                    RecommendationRow.session_id,
                    RecommendationRow.failure_key,
                )
                .join(
                    RecommendationRow,
                    and_(
                        RecommendationRow.tenant_id == OutcomeRow.tenant_id,
                        RecommendationRow.id == OutcomeRow.recommendation_id,
                    ),
                )
                .where(OutcomeRow.success.is_(True), RecommendationRow.failure_key.is_not(None))
                .where(true() if tenant is None else OutcomeRow.tenant_id == tenant)
                .order_by(OutcomeRow.id.desc())
                .limit(10_000)
            ).all()
        durations = []
        for done, t, sid, fk in recovered:
            start = first.get((t, sid, fk))
            if start is not None:
                start = start if start.tzinfo else start.replace(tzinfo=done.tzinfo)
                durations.append(max(0.0, (done - start).total_seconds()))
        return {
            "traces": traces,
            "open_alarms": self.all_open_alarms(tenant),
            "failures": {str(k): int(v) for k, v in failures.items()},
            "recommendations": {str(k): int(v) for k, v in recs.items()},
            "outcomes": outcomes,
            "recoveries": len(durations),
            "mttr_s": (sum(durations) / len(durations)) if durations else None,
        }

    def count_rows(self, table: type[Any], tenant: str | None = None) -> int:
        with self.read() as db:
            q = select(func.count()).select_from(table)
            if tenant is not None:
                q = q.where(table.tenant_id == tenant)
            return int(db.scalar(q) or 0)


def _failure_tool(failure: dict[str, Any], step_tools: Sequence[str | None]) -> str:
    """The tool a failure concerns: ``details.tool``, else the tool of its step; "" when none."""
    tool = (failure.get("details") or {}).get("tool")
    if not isinstance(tool, str) or not tool:
        step = failure.get("step")
        tool = step_tools[step] if isinstance(step, int) and 0 <= step < len(step_tools) else None
    return str(tool or "")[:200]


def _rowcount(result: Any) -> int:
    return int(getattr(result, "rowcount", 0) or 0)


def _delete_traces(db: Session, tenant: str, ids: Sequence[str]) -> int:
    if not ids:
        return 0
    ids = list(ids)
    for table in (FailureRow, OutcomeRow, LabelRow, TraceStepRow):
        db.execute(delete(table).where(table.tenant_id == tenant, table.trace_id.in_(ids)))
    db.execute(
        delete(RecommendationRow).where(
            RecommendationRow.tenant_id == tenant, RecommendationRow.trace_id.in_(ids)
        )
    )
    res = db.execute(delete(TraceRow).where(TraceRow.tenant_id == tenant, TraceRow.id.in_(ids)))
    return _rowcount(res)


def _group(
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


def _encode_cursor(ts: datetime, trace_id: str) -> str:
    return f"{ts.isoformat()}|{trace_id}"


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        ts, tid = cursor.split("|", 1)
        return datetime.fromisoformat(ts), tid
    except ValueError:
        raise InputError(f"not a cursor this API returned: {cursor[:60]!r}", path="query.cursor") from None


__all__ = ["MODEL_ACTIONS", "Store", "TracePage", "check_tenant_name"]
