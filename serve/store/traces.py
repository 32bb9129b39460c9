"""Stored traces: the diagnosed runs, their steps, their repair state without a session, the daily
usage, the history's pages and its retention."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Select, bindparam, delete, exists, func, insert, select, tuple_, update
from sqlalchemy.orm import Session

from model.core.errors import InputError
from serve.store.base import StoreBase, core, rowcount
from serve.store.counters import count_run, uncount_runs
from serve.store.encodings import drop_vectors
from serve.store.engine import JsonText
from serve.store.prepared import Prepared, Tx, orm, per_dialect
from serve.store.tables import (
    FailureRow,
    LabelRow,
    OutcomeRow,
    RecommendationRow,
    RunEncodingRow,
    SessionRow,
    TraceRow,
    TraceStepRow,
    UsageRow,
    utcnow,
)
from serve.store.verdict import queue_key, run_columns


def _trace_upsert(insert_of: Any) -> Any:
    traces = core(TraceRow)
    ins = insert_of(traces)
    keep = ("tenant_id", "id", "created_at", "failed_at")
    return ins.on_conflict_do_update(
        index_elements=["tenant_id", "id"],
        set_={
            **{c.key: getattr(ins.excluded, c.key) for c in traces.columns if c.key not in keep},
            # the run's first failure stays the first one (serve/services/canary.py: failure and recovery rates)
            "failed_at": func.coalesce(traces.c.failed_at, ins.excluded.failed_at),
        },
    ).returning(traces.c.created_at)  # the kept one: the failure rows carry it


def _usage_upsert(insert_of: Any) -> Any:
    usage = core(UsageRow)
    ins = insert_of(usage)
    return ins.on_conflict_do_update(
        index_elements=["tenant_id", "day"], set_={"steps": usage.c.steps + ins.excluded.steps}
    ).returning(usage.c.steps)


# The request path's statements, compiled once (serve.store.prepared.Prepared).
_T = core(TraceRow).c
_KEY = (_T.tenant_id == bindparam("t")) & (_T.id == bindparam("i"))
_TRACE_UPSERT, _USAGE_UPSERT = per_dialect(_trace_upsert), per_dialect(_usage_upsert)
_TRACE_INSERT_NEW = per_dialect(lambda ins: ins(core(TraceRow)).on_conflict_do_nothing(
    index_elements=["tenant_id", "id"]).returning(core(TraceRow).c.id))  # a row back: it was inserted
_STEPS_IN_ROWS = Prepared(select(_T.steps_in_rows).where(_KEY))
_LOCK_TRACE = Prepared(select(_T.policy_state, _T.steps_in_rows).where(_KEY))
_LOCK_TRACE_PG = Prepared(select(_T.policy_state, _T.steps_in_rows).where(_KEY).with_for_update())
_STORED_RUN = Prepared(select(_T.agent, _T.response["agent_source"].as_string(), _T.policy_state).where(_KEY))
_DELETE_STEPS = Prepared(delete(core(TraceStepRow)).where(
    core(TraceStepRow).c.tenant_id == bindparam("t"), core(TraceStepRow).c.trace_id == bindparam("i")))
_DELETE_FAILURES = Prepared(delete(core(FailureRow)).where(
    core(FailureRow).c.tenant_id == bindparam("t"), core(FailureRow).c.trace_id == bindparam("i")))
_INSERT_FAILURES = Prepared(insert(core(FailureRow)))
_DELETE_STEP = Prepared(delete(core(TraceStepRow)).where(
    core(TraceStepRow).c.tenant_id == bindparam("t"), core(TraceStepRow).c.trace_id == bindparam("i"),
    core(TraceStepRow).c.idx == bindparam("x")))
_INSERT_STEPS = Prepared(insert(core(TraceStepRow)))


class StoredRun(NamedTuple):
    """What :meth:`TraceStore.stored_run` read of a stored trace."""

    agent: str
    agent_source: str | None
    policy_state: dict[str, Any] | None


class TraceRows(NamedTuple):
    """A diagnosis's rows as :meth:`TraceStore.trace_rows` made them: the trace's (``values``) and its failures'
    (JSON columns encoded, :class:`~serve.store.engine.JsonText`), the response they come from, and the
    diagnosis's time."""

    values: dict[str, Any]
    failures: list[dict[str, Any]]
    response: dict[str, Any]
    now: datetime


class TracePrior(NamedTuple):
    """What :meth:`TraceStore.lock_trace` read of a stored trace: its repair ``policy_state`` (None before the
    first recommendation) and whether its steps are stored one row each (``steps_in_rows``). Pass it back
    to :meth:`TraceStore.put_trace` as ``prior`` so that the write does not read the row again."""

    policy_state: dict[str, Any] | None
    steps_in_rows: bool


#: The columns of a trace's summary (``GET /v1/traces``' items).
SUMMARY_COLUMNS = ("id", "session_id", "task_type", "created_at", "updated_at", "n_steps", "healthy", "primary_kind",
                   "shadow", "agent")


@dataclass(frozen=True)
class TracePage:
    items: list[Any]  # rows of SUMMARY_COLUMNS, newest first
    next_cursor: str | None


class TraceStore(StoreBase):
    """The ``traces``, ``trace_steps``, ``failures`` and ``usage`` tables (and a run's ``run_encodings`` when it goes)."""

    def put_trace(
        self,
        db: Tx,
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
        agent: str,
        step_tools: Sequence[str | None] | None = None,
        prior: TracePrior | None | bool = True,
        now: datetime | None = None,
        only_new: bool = False,
    ) -> bool:
        """Insert or replace a trace and the failures of its latest diagnosis (inside ``db``); ``True``.

        Prepared statements (:mod:`serve.store.prepared`: an upsert, a delete, one executemany): the hot path of
        ``/v1/diagnose``. ``steps_in_rows``: the trace's steps are kept in ``trace_steps``
        (:meth:`put_steps`) and ``trace`` holds the rest; ``n_steps`` then counts them. A whole
        trace stored over one kept in rows replaces it. ``arm``: the run's canary arm
        (:mod:`serve.services.canary`); when a diagnosis of the run first found a failure is kept.
        ``agent``: the run's agent (:meth:`serve.services.agents.Agents.resolve`).
        ``step_tools``: the tool name of each step, when ``trace`` does not hold the steps; a
        failure row keeps the tool it concerns (``details.tool``, else its step's).
        ``prior``: what :meth:`lock_trace` read of the row in this transaction (``None``: no row),
        which saves reading it again; ``True``: not read yet.
        ``now``: the time of this diagnosis (default: the clock's; a bench or a test places runs in time).
        ``only_new``: insert the trace only when it has no row (``prior`` is then not used); ``False``, and
        nothing written, when it has one (the caller then locks it, :meth:`lock_trace`, and writes it again).
        A run read as new before the transaction (:meth:`stored_run`) is written so, without reading its row
        first, and with nothing of an earlier diagnosis to replace on either engine (the insert that wrote
        the row is its only writer until the commit).

        The rows are made first (:meth:`trace_rows`, which a caller may call before its transaction and pass
        to :meth:`write_trace`), then written.
        """
        rows = self.trace_rows(
            tenant=tenant, trace_id=trace_id, trace=trace, response=response, session_id=session_id,
            task_type=task_type, shadow=shadow, policy_state=policy_state, n_steps=n_steps,
            steps_in_rows=steps_in_rows, arm=arm, agent=agent, step_tools=step_tools, now=now)
        return self.write_trace(db, rows, prior=prior, only_new=only_new)

    @staticmethod
    def trace_rows(
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
        agent: str,
        step_tools: Sequence[str | None] | None = None,
        now: datetime | None = None,
    ) -> TraceRows:
        """The rows :meth:`put_trace` writes (its arguments less the transaction's), JSON columns encoded: no
        store work, so a request makes them before its write transaction, which then only binds and runs
        statements (on SQLite every writer of the database waits for it)."""
        now = now or utcnow()
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
            "trace": JsonText.of(trace),
            "response": JsonText.of(response),
            "policy_state": JsonText.of(policy_state),
            "steps_in_rows": steps_in_rows,
            "agent": agent,
            **run_columns(response),  # the verdict and the label queue's margin parts (serve/store/verdict.py)
            "review_key": queue_key(trace_id),  # the run's place in the label queue's random order
        }
        failures = [
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
                "details": JsonText.of(f.get("details") or {}),
                "tool": failure_tool(f, step_tools),
                "created_at": now,  # the row's kept created_at, where it has one (write_trace)
                "agent": agent,
            }
            for key, is_signal in (("failures", False), ("signals", True))
            for f in response.get(key) or []
        ]
        return TraceRows(values, failures, response, now)

    def write_trace(self, db: Tx, rows: TraceRows, *, prior: TracePrior | None | bool = True,
                    only_new: bool = False) -> bool:
        """:meth:`put_trace`'s write of ``rows`` (:meth:`trace_rows`) in ``db``, with its ``prior`` and ``only_new``."""
        values, now = rows.values, rows.now
        tenant, trace_id = values["tenant_id"], values["id"]
        key = {"t": tenant, "i": trace_id}
        if only_new:
            if not _TRACE_INSERT_NEW[self.dialect].execute(db, values):
                return False
            created, known_new = now, True  # the row's created_at is the one just written
        else:
            created, known_new = self._replace(db, key, values, prior, values["steps_in_rows"])
        defer = self.db.defer_counts
        count_run(db, tenant=tenant, trace_id=trace_id, created=created, now=now, arm=values["arm"],
                  response=rows.response, agent=values["agent"], fresh=known_new, defer=defer)
        if defer and self.db.on_counts_deferred is not None:
            self.db.on_counts_deferred()
        if not known_new:
            _DELETE_FAILURES.execute(db, key)
            if not values["steps_in_rows"]:  # new steps: the old ones' vectors go
                drop_vectors(db, tenant, trace_id)
        if rows.failures:
            failures = rows.failures
            if created != now:  # a row kept from an earlier diagnosis: its failures carry its created_at
                failures = [{**f, "created_at": created} for f in failures]
            _INSERT_FAILURES.execute(db, failures)
        return True

    def _replace(self, db: Tx, key: dict[str, str], values: dict[str, Any], prior: TracePrior | None | bool,
                 steps_in_rows: bool) -> tuple[datetime, bool]:
        """:meth:`put_trace`'s upsert: the row's kept ``created_at``, and whether the row is known to be new
        (no failures nor counted run to replace)."""
        if prior is True:
            got = _STEPS_IN_ROWS.execute(db, key) if not steps_in_rows else []
            prev = got[0][0] if got else None
        else:
            prev = prior.steps_in_rows if isinstance(prior, TracePrior) else None
        if prev and not steps_in_rows:  # a whole trace replaces one whose steps were kept in rows
            _DELETE_STEPS.execute(db, key)
        created = _TRACE_UPSERT[self.dialect].execute(db, values)[0][0]
        # a new row has no failures nor counted run to replace (known for sure on SQLite, whose writers take
        # turns; PostgreSQL's concurrent first writers of one id both see no row: it always reads and deletes)
        return created, prior is None and self.dialect == "sqlite"

    def put_steps(self, db: Tx, tenant: str, trace_id: str, steps: dict[int, dict[str, Any]]) -> None:
        """Insert or replace steps of a trace kept in rows (index → step JSON), inside ``db``."""
        if not steps:
            return
        _DELETE_STEP.execute(db, [{"t": tenant, "i": trace_id, "x": i} for i in sorted(steps)])
        _INSERT_STEPS.execute(
            db, [{"tenant_id": tenant, "trace_id": trace_id, "idx": i, "step": st} for i, st in sorted(steps.items())])

    def read_trace(self, db: Tx, tenant: str, trace_id: str) -> tuple[dict[str, Any], bool] | None:
        """In transaction ``db``: the whole stored trace and whether its steps are kept as rows, or None."""
        session = orm(db)
        row = session.get(TraceRow, (tenant, trace_id))
        if row is None:
            return None
        return trace_json(session, row), row.steps_in_rows

    def get_trace_json(self, tenant: str, trace_id: str) -> tuple[TraceRow, dict[str, Any]] | None:
        """The trace row and its whole stored trace, or None."""
        with self.read() as db:
            row = db.get(TraceRow, (tenant, trace_id))
            return None if row is None else (row, trace_json(db, row))

    def add_usage(self, db: Tx, tenant: str, day: str, steps: int) -> int:
        """Add ``steps`` to the tenant's usage of ``day`` (inside ``db``); the new total."""
        return int(_USAGE_UPSERT[self.dialect].execute(db, {"tenant_id": tenant, "day": day, "steps": steps})[0][0])

    def usage(self, tenant: str, day: str) -> int:
        with self.read() as db:
            return int(db.scalar(select(UsageRow.steps).where(UsageRow.tenant_id == tenant, UsageRow.day == day)) or 0)

    def lock_trace(self, db: Tx, tenant: str, trace_id: str) -> TracePrior | None:
        """The trace's policy state and where its steps are, locked for this transaction (None if new)."""
        q = _LOCK_TRACE_PG if self.dialect == "postgresql" else _LOCK_TRACE
        rows = q.execute(db, {"t": tenant, "i": trace_id})
        return TracePrior(rows[0][0], bool(rows[0][1])) if rows else None

    def stored_run(self, tenant: str, trace_id: str) -> StoredRun | None:
        """What a new diagnosis of a stored trace id reads of it, unlocked, in one query: its agent, how
        it was found, and its repair-policy state (None when the id is new)."""
        with self.db.peek() as db:  # two columns and one JSON field, not the whole answer; no ORM session
            rows = _STORED_RUN.execute(db, {"t": tenant, "i": trace_id})
        if not rows:
            return None
        row = rows[0]
        return StoredRun(str(row[0]), row[1] if isinstance(row[1], str) else None, row[2])

    def lock_trace_state(self, db: Session, tenant: str, trace_id: str) -> dict[str, Any] | None:
        """The policy state of a session-less trace, locked for this transaction (None if new)."""
        prior = self.lock_trace(db, tenant, trace_id)
        return None if prior is None else prior.policy_state

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
        # the summary's columns only: a whole row would parse each run's trace and response JSON
        q: Select[Any] = select(*(getattr(TraceRow, c) for c in SUMMARY_COLUMNS)).where(TraceRow.tenant_id == tenant)
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
            q = q.where(tuple_(TraceRow.created_at, TraceRow.id) < tuple_(ts, tid))  # keyset: an index range
        q = q.order_by(TraceRow.created_at.desc(), TraceRow.id.desc()).limit(limit + 1)
        with self.read() as db:
            rows = list(db.execute(q).all())
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
            n = _delete_traces(db, tenant, ids, session_id=session_id)
            db.execute(
                delete(RecommendationRow).where(
                    RecommendationRow.tenant_id == tenant, RecommendationRow.session_id == session_id
                )
            )
            gone = db.execute(
                delete(SessionRow).where(SessionRow.tenant_id == tenant, SessionRow.id == session_id)
            )
            return n > 0 or rowcount(gone) > 0


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


def failure_tool(failure: dict[str, Any], step_tools: Sequence[str | None]) -> str:
    """The tool a failure concerns: ``details.tool``, else the tool of its step; "" when none."""
    tool = (failure.get("details") or {}).get("tool")
    if not isinstance(tool, str) or not tool:
        step = failure.get("step")
        tool = step_tools[step] if isinstance(step, int) and 0 <= step < len(step_tools) else None
    return str(tool or "")[:200]



def _delete_traces(db: Session, tenant: str, ids: Sequence[str], session_id: str | None = None) -> int:
    """Delete these traces and everything recorded on them (and take them out of the counters;
    ``session_id``: the session whose recommendations the caller deletes too)."""
    if not ids:
        return 0
    ids = list(ids)
    uncount_runs(db, tenant, ids, session_id)
    for table in (FailureRow, OutcomeRow, LabelRow, TraceStepRow, RunEncodingRow):
        db.execute(delete(table).where(table.tenant_id == tenant, table.trace_id.in_(ids)))
    db.execute(
        delete(RecommendationRow).where(
            RecommendationRow.tenant_id == tenant, RecommendationRow.trace_id.in_(ids)
        )
    )
    res = db.execute(delete(TraceRow).where(TraceRow.tenant_id == tenant, TraceRow.id.in_(ids)))
    return rowcount(res)



def _encode_cursor(ts: datetime, trace_id: str) -> str:
    return f"{ts.isoformat()}|{trace_id}"


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        ts, tid = cursor.split("|", 1)
        return datetime.fromisoformat(ts), tid
    except ValueError:
        raise InputError(f"not a cursor this API returned: {cursor[:60]!r}", path="query.cursor") from None


__all__ = ["StoredRun", "TracePage", "TracePrior", "TraceRows", "TraceStore", "failure_tool", "trace_json"]
