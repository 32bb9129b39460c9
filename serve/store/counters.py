"""``/metrics``' counts, kept on write so that a scrape reads a few rows whatever the history's size.

Each write that changes a figure changes its count in the same transaction:

- :func:`count_run` (from :meth:`~serve.store.traces.TraceStore.put_trace`): the run's canary arm, whether
  some diagnosis found a failure, whether the latest is healthy again (and how long that took), its
  failures by kind, its agent, verdict and primary kind; :func:`count_labels` (every label write and
  undo): its effective label; :func:`count_recommendation`, :func:`count_outcome` (the run's repairs and
  outcomes too); :func:`uncount_runs` (deletions, retention);
  :func:`move_runs` (runs re-keyed to another agent: :meth:`serve.store.agents.AgentStore.rekey`).
- What a run adds is kept in its ``run_metrics`` row, so a write changes the counters by the
  difference between the run's old and new contribution: a re-diagnosis, a label, an undo or a
  deletion moves each count exactly as a full read of the tables would see it move.
- The differences gather in the transaction (``db.info``) and :func:`flush_counts` writes them as it
  commits (:meth:`serve.store.base.StoreBase.write`): one upsert per table, ``n = n + delta`` in SQL,
  rows in key order. Concurrent writers of several workers add up (none reads a count to write it)
  and take the counters' row locks in one order, for the commit only.

**The count feed** (revision 0024). Where the database defers (``Database.defer_counts``: a server's worker
with ``TRIAGE_STREAM_FEED_S`` > 0), :func:`count_run` and the same transaction's :func:`count_recommendation`
of that run change nothing: they gather the run's ops, and :func:`flush_counts` writes them as one row of
``count_feed`` with the run (one insert, where the run's row and the three upserts were). They are applied
later, in ``id`` order, by :func:`apply_count_feed` (the worker's feeder, ``serve/services/streams.py``),
and before anything else reads or changes a run's row: :func:`settle_counts` (from ``_lock_run``,
:func:`move_runs`, :func:`uncount_runs`) applies what waits, then the transaction's own deferred ops, so a
label, an outcome, a deletion or a move always finds the run as every change committed before it left it;
readers in the server apply it first (``StoreBase.counts_current``). Each op is a difference against the
run's row as found when applied, so the order between a run's diagnoses and the labels, outcomes and
moves that come between is kept as it was committed.

The canary's counts (``canary_counts``) are kept per hour in which the runs started, so its window
(``TRIAGE_CANARY_WINDOW``) reads the hours inside it; so are the console overview's (``overview_counts``,
revision 0020: runs per agent, verdict and primary kind, with their repairs, outcomes and successful
outcomes: :meth:`serve.store.console.ConsoleStore.window_counts`) and the runs of each verdict
(``metric_totals``' ``verdict_runs``, whole history: the runs page's total with ``verdict=…`` alone); ``/metrics``' other counts (``metric_totals``)
are the tenant's whole history, and so are the agents' list's (``agent_runs``, ``agent_labelled``: each
agent's runs, and those of them with a label not withdrawn; :meth:`serve.store.agents.AgentStore.agent_stats`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields, replace
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from serve.store.prepared import Prepared, Tx, dialect_name, per_dialect
from serve.store.tables import (
    RECOVERY_BOUNDS,
    CanaryCountRow,
    CountFeedRow,
    LabelRow,
    MetricTotalRow,
    OutcomeRow,
    OverviewCountRow,
    RecommendationRow,
    RunMetricRow,
)
from serve.store.verdict import deciding_label, label_failed, verdict_of

HOUR_S = 3600
#: The count columns of ``canary_counts`` (``recovery_s``: the sum of the recovered runs' seconds).
CANARY_FIELDS: tuple[str, ...] = ("runs", "failed", "recovered", "labelled", "succeeded", "recovery_s",
                                  *(f"rec_le_{b}" for b in RECOVERY_BOUNDS))
#: The count columns of ``overview_counts``.
OVERVIEW_FIELDS: tuple[str, ...] = ("runs", "repairs", "outcomes", "succeeded")
_PENDING = "triage.counts"
_SAVED = "triage.counted_runs"  # the runs' rows this transaction changed: (row existed, new row)
_DEFERRED = "triage.deferred_counts"  # (tenant, trace id) → the ops this transaction writes to the feed
_CAUGHT_UP = "triage.count_feed_applied"  # this transaction applied what waited in the feed
_APPLYING = "triage.count_feed_applying"  # this transaction is applying the feed's rows
#: Rows of the count feed applied a transaction by the worker's feeder (:func:`apply_count_feed`).
COUNT_FEED_BATCH = 500
_COUNT_FEED_LOCK = "triage.count_feed"  # PostgreSQL: the advisory lock every applier of the feed holds
_CHUNK = 500


def hour_of(t: datetime) -> int:
    """Whole hours from 1970-01-01 UTC to ``t`` (a naive ``t`` is UTC)."""
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t
    return int(t.timestamp() // HOUR_S)


@dataclass(frozen=True)
class _Run:
    """What one run adds to the counters (a ``run_metrics`` row)."""

    hour: int
    arm: str | None
    failed_at: datetime | None
    healthy: bool
    recovery_s: float | None
    labelled: bool = False
    succeeded: bool = False
    kinds: dict[str, int] = field(default_factory=dict)
    agent: str | None = None
    verdict: str = "unknown"
    kind: str | None = None  # its primary kind
    repairs: int = 0
    outcomes: int = 0
    outcomes_ok: int = 0

    def canary(self) -> dict[str, float]:
        recovered = self.failed_at is not None and self.healthy
        secs = (self.recovery_s or 0.0) if recovered else 0.0
        out = {"runs": 1.0, "failed": float(self.failed_at is not None), "recovered": float(recovered),
               "labelled": float(self.labelled), "succeeded": float(self.labelled and self.succeeded),
               "recovery_s": secs}
        for b in RECOVERY_BOUNDS:
            out[f"rec_le_{b}"] = float(recovered and secs <= b)
        return out


#: ``_Run``'s fields: the ``run_metrics`` columns it reads (in this order) and writes.
_RUN_FIELDS = tuple(f.name for f in fields(_Run))
_RUN_COLS = tuple(getattr(RunMetricRow, name) for name in _RUN_FIELDS)


def _run_of(row: Any) -> _Run:
    (hour, arm, failed_at, healthy, recovery_s, labelled, succeeded, kinds, agent, verdict, kind, repairs, outcomes,
     outcomes_ok) = row
    return _Run(int(hour), arm, failed_at, bool(healthy), recovery_s, bool(labelled), bool(succeeded),
                {str(k): int(v) for k, v in (kinds or {}).items()}, agent, str(verdict or "unknown"), kind,
                int(repairs or 0), int(outcomes or 0), int(outcomes_ok or 0))


# Built once and executed with parameters: SQLAlchemy reuses their compiled forms (the write path is hot).
_RUNS = cast(Table, RunMetricRow.__table__)
_SELECT = select(*_RUN_COLS).where(RunMetricRow.tenant_id == bindparam("t"), RunMetricRow.trace_id == bindparam("i"))
_SELECT_RUN = Prepared(_SELECT)
_LOCK_RUN = Prepared(_SELECT.with_for_update())
_INSERT_RUN = Prepared(insert(_RUNS))
_UPDATE_RUN = Prepared(update(_RUNS).where(_RUNS.c.tenant_id == bindparam("t"), _RUNS.c.trace_id == bindparam("i")))
_SELECT_LABELS = select(LabelRow.id, LabelRow.created_at, LabelRow.author_type, LabelRow.failed, LabelRow.kind).where(
    LabelRow.tenant_id == bindparam("t"), LabelRow.trace_id == bindparam("i"), LabelRow.withdrawn_at.is_(None))
_FIRST_REC = select(func.min(RecommendationRow.created_at)).where(
    RecommendationRow.tenant_id == bindparam("t"), RecommendationRow.trace_id == bindparam("i"),
    RecommendationRow.failure_key == bindparam("k"))


def _canary_upsert(insert_of: Any) -> Any:
    canary = cast(Table, CanaryCountRow.__table__)
    ins = insert_of(canary)
    return ins.on_conflict_do_update(index_elements=["tenant_id", "hour", "arm"],
                                     set_={f: canary.c[f] + ins.excluded[f] for f in CANARY_FIELDS})


def _overview_upsert(insert_of: Any) -> Any:
    overview = cast(Table, OverviewCountRow.__table__)
    ins = insert_of(overview)
    return ins.on_conflict_do_update(index_elements=["tenant_id", "hour", "agent", "verdict", "kind"],
                                     set_={f: overview.c[f] + ins.excluded[f] for f in OVERVIEW_FIELDS})


def _totals_upsert(insert_of: Any) -> Any:
    totals = cast(Table, MetricTotalRow.__table__)
    ins = insert_of(totals)
    return ins.on_conflict_do_update(index_elements=["tenant_id", "name", "key"],
                                     set_={"n": totals.c.n + ins.excluded.n, "total": totals.c.total + ins.excluded.total})


#: ``n = n + excluded.n`` upserts of ``canary_counts``, ``overview_counts`` and ``metric_totals``, by dialect.
_UPSERT_CANARY, _UPSERT_OVERVIEW = per_dialect(_canary_upsert), per_dialect(_overview_upsert)
_UPSERT_TOTALS = per_dialect(_totals_upsert)


def _lock_run(db: Tx, tenant: str, trace_id: str) -> _Run | None:
    settle_counts(db)
    saved = db.info.get(_SAVED, {}).get((tenant, trace_id))
    if saved is not None:  # written in this transaction (and locked): a diagnosis' recommendation reads none
        return saved[1]  # type: ignore[no-any-return]
    q = _LOCK_RUN if dialect_name(db) == "postgresql" else _SELECT_RUN
    rows = q.execute(db, {"t": tenant, "i": trace_id})
    if not rows and not db.info.get(_APPLYING) and _catch_up(db):  # its first diagnosis came since: applied now
        rows = q.execute(db, {"t": tenant, "i": trace_id})
    return _run_of(rows[0]) if rows else None


_Pending = tuple[dict[tuple[str, int, str], dict[str, float]], dict[tuple[str, str, str], list[float]],
                 dict[tuple[str, int, str, str, str], list[int]]]


def _pending(db: Tx) -> _Pending:
    p = db.info.setdefault(_PENDING, ({}, {}, {}))
    return p  # type: ignore[no-any-return]


def _add(db: Tx, tenant: str, run: _Run, sign: int) -> None:
    canary, totals, overview = _pending(db)
    if run.arm is not None:
        c = canary.setdefault((tenant, run.hour, run.arm), dict.fromkeys(CANARY_FIELDS, 0.0))
        for k, v in run.canary().items():
            c[k] += sign * v
    o = overview.setdefault((tenant, run.hour, run.agent or "", run.verdict, run.kind or ""), [0, 0, 0, 0])
    o[0] += sign
    o[1] += sign * run.repairs
    o[2] += sign * run.outcomes
    o[3] += sign * run.outcomes_ok
    _total(db, tenant, "traces", "", sign)
    _total(db, tenant, "verdict_runs", run.verdict, sign)
    for kind, n in run.kinds.items():
        _total(db, tenant, "failures", kind, sign * n)
    if run.agent is not None:
        _total(db, tenant, "agent_runs", run.agent, sign)
        if run.labelled:
            _total(db, tenant, "agent_labelled", run.agent, sign)


def _total(db: Tx, tenant: str, name: str, key: str, n: float, total: float = 0.0) -> None:
    t = _pending(db)[1].setdefault((tenant, name, key), [0.0, 0.0])
    t[0] += n
    t[1] += total


def _save(db: Tx, tenant: str, trace_id: str, old: _Run | None, new: _Run) -> None:
    """Move the counters from ``old`` to ``new`` and keep ``new`` as the run's row: written once, at
    the commit (:func:`_write_runs`), however many writes of the transaction change it (a diagnosis and
    its recommendation: one row written)."""
    if old == new:
        return
    if old is not None:
        _add(db, tenant, old, -1)
    _add(db, tenant, new, +1)
    saved = db.info.setdefault(_SAVED, {})
    had = saved.get((tenant, trace_id))
    saved[(tenant, trace_id)] = (had[0] if had is not None else old is not None, new)


def _write_runs(db: Tx) -> None:
    """Write the runs' rows this transaction changed (inserted or updated); before the commit, and
    before a statement that reads or changes ``run_metrics`` itself."""
    saved = db.info.pop(_SAVED, None)
    if not saved:
        return
    inserts, updates = [], []
    for (tenant, trace_id), (exists, new) in sorted(saved.items(), key=lambda kv: kv[0]):
        values = {name: getattr(new, name) for name in _RUN_FIELDS}
        if exists:
            updates.append({"t": tenant, "i": trace_id, **values})
        else:
            inserts.append({"tenant_id": tenant, "trace_id": trace_id, **values})
    for q, rows in ((_INSERT_RUN, inserts), (_UPDATE_RUN, updates)):
        if rows:
            q.execute(db, rows[0] if len(rows) == 1 else rows)


# -- the writes that change a count -----------------------------------------------------------------
def count_run(
    db: Tx, *, tenant: str, trace_id: str, created: datetime, now: datetime, arm: str | None,
    response: dict[str, Any], agent: str, fresh: bool = False, defer: bool = False,
) -> None:
    """A diagnosis of the run was stored (``put_trace``, after its upsert: the trace's row is locked,
    ``created`` is its kept ``created_at``, ``agent`` its agent now). Its failure is its first one's
    time, kept (as ``traces.failed_at``); it is recovered when the latest diagnosis is healthy again,
    after ``now − failed_at`` seconds (kept while it stays healthy). ``fresh``: the run has no row yet,
    known for sure (its trace had none when locked on SQLite, whose writers take turns): nothing to read.

    ``defer``: the change is not made here but written to the count feed with the run (one row at the
    commit, :func:`flush_counts`), with this transaction's recommendations of the run
    (:func:`count_recommendation`); :func:`apply_count_feed` makes it later, in the feed's order."""
    failures = response.get("failures") or []
    kinds = dict(Counter(str(f["kind"]) for f in failures))
    healthy = response.get("healthy")
    kind = (response.get("primary") or {}).get("kind")  # as put_trace's primary_kind
    if defer:
        ops = db.info.setdefault(_DEFERRED, {}).setdefault((tenant, trace_id), [])
        ops.append(["run", {"created": created.isoformat(), "now": now.isoformat(), "arm": arm, "agent": agent,
                            "kinds": kinds, "healthy": healthy, "kind": kind}])
        return
    _count_run(db, tenant, trace_id, created, now, arm, kinds, healthy, kind, agent, fresh)


def _count_run(db: Tx, tenant: str, trace_id: str, created: datetime, now: datetime, arm: str | None,
               kinds: dict[str, int], healthy_value: bool | None, kind: str | None, agent: str, fresh: bool) -> None:
    old = None if fresh else _lock_run(db, tenant, trace_id)
    failed_at = old.failed_at if old is not None and old.failed_at is not None else (now if kinds else None)
    healthy = healthy_value is not False  # as traces.healthy: null (unknown) = no failure found
    recovery_s = None
    if failed_at is not None and healthy:
        was = old is not None and old.failed_at is not None and old.healthy and old.recovery_s is not None
        recovery_s = old.recovery_s if was and old is not None else max(0.0, (now - failed_at).total_seconds())
    base = old or _Run(hour_of(created), arm, None, True, None)
    new = replace(base, hour=hour_of(created), arm=arm, failed_at=failed_at, healthy=healthy,
                  recovery_s=recovery_s, kinds=kinds, agent=agent, verdict=verdict_of(healthy_value),
                  kind=kind)  # as put_trace's verdict and primary_kind
    _save(db, tenant, trace_id, old, new)


def count_labels(db: Session, tenant: str, trace_id: str) -> None:
    """The run's labels changed (a label added or withdrawn, in ``db``): its effective label, again."""
    old = _lock_run(db, tenant, trace_id)
    if old is None:  # no such run (labels need one)
        return
    rows = db.execute(_SELECT_LABELS, {"t": tenant, "i": trace_id}).mappings().all()
    decider = deciding_label([dict(r) for r in rows])
    labelled = decider is not None
    succeeded = decider is not None and not label_failed(decider)
    _save(db, tenant, trace_id, old, replace(old, labelled=labelled, succeeded=succeeded))


def move_runs(db: Session, tenant: str, old: str, new: str, trace_ids: list[str] | None = None) -> None:
    """Runs of agent ``old`` (all, or those of ``trace_ids``) now belong to ``new`` (their traces are
    re-keyed in ``db``): their rows say so, and the agents' counts move with them."""
    settle_counts(db)
    _write_runs(db)  # the rows as this transaction left them, then changed here
    r = _RUNS.c
    q = update(_RUNS).where(r.tenant_id == tenant, r.agent == old)
    if trace_ids is not None:
        q = q.where(r.trace_id.in_(trace_ids))
    for row in db.execute(q.values(agent=new).returning(*(_RUNS.c[name] for name in _RUN_FIELDS))).all():
        run = _run_of(row)  # each run's contribution, from the old agent's to the new one's (the rest cancels)
        _add(db, tenant, replace(run, agent=old), -1)
        _add(db, tenant, run, +1)


def count_recommendation(db: Tx, tenant: str, trace_id: str, strategy: str, n: int) -> None:
    """``n`` recommendations of ``strategy`` for run ``trace_id`` were stored (0: the insert found it
    there); a repair (not ``continue``) of a stored run adds to the run's ``repairs``."""
    if not n:
        return
    ops = db.info.get(_DEFERRED, {}).get((tenant, trace_id))
    if ops is not None:  # the run's diagnosis waits in the feed: so does this, after it
        ops.append(["rec", strategy, n])
        return
    _count_recommendation(db, tenant, trace_id, strategy, n)


def _count_recommendation(db: Tx, tenant: str, trace_id: str, strategy: str, n: int) -> None:
    _total(db, tenant, "recommendations", strategy, n)
    if strategy != "continue":
        old = _lock_run(db, tenant, trace_id)
        if old is not None:
            _save(db, tenant, trace_id, old, replace(old, repairs=old.repairs + n))


def count_outcome(
    db: Session, *, tenant: str, trace_id: str, strategy: str, success: bool, failure_key: str | None,
    at: datetime,
) -> None:
    """An outcome was stored at ``at``. A successful one of a failure's recommendation is a recovery:
    from the first recommendation for that failure in that run to ``at``."""
    _total(db, tenant, "outcomes_ok" if success else "outcomes_failed", strategy, 1)
    old = _lock_run(db, tenant, trace_id)
    if old is not None:
        _save(db, tenant, trace_id, old, replace(old, outcomes=old.outcomes + 1, outcomes_ok=old.outcomes_ok + success))
    if success and failure_key is not None:
        first = db.execute(_FIRST_REC, {"t": tenant, "i": trace_id, "k": failure_key}).scalar()
        if first is not None:
            _total(db, tenant, "recoveries", "", 1, _seconds(first, at))


def uncount_runs(db: Session, tenant: str, ids: list[str], session_id: str | None = None) -> None:
    """These runs (and ``session_id``'s recommendations) are about to be deleted, in ``db``: take
    what they added out of the counters."""
    settle_counts(db)
    _write_runs(db)  # the rows as this transaction left them, then read and deleted here
    for i in range(0, len(ids), _CHUNK):
        chunk = ids[i : i + _CHUNK]
        runs = db.execute(select(RunMetricRow.trace_id, *_RUN_COLS)
                          .where(RunMetricRow.tenant_id == tenant, RunMetricRow.trace_id.in_(chunk))).all()
        for row in runs:
            _add(db, tenant, _run_of(row[1:]), -1)
        db.execute(delete(RunMetricRow).where(RunMetricRow.tenant_id == tenant, RunMetricRow.trace_id.in_(chunk)))
        mine: Any = RecommendationRow.trace_id.in_(chunk)
        if session_id is not None:  # the session's own: once, below
            mine = and_(mine, or_(RecommendationRow.session_id.is_(None), RecommendationRow.session_id != session_id))
        _uncount_recommendations(db, tenant, mine)
        for strategy, ok, n in db.execute(select(OutcomeRow.strategy, OutcomeRow.success, func.count())
                                          .where(OutcomeRow.tenant_id == tenant, OutcomeRow.trace_id.in_(chunk))
                                          .group_by(OutcomeRow.strategy, OutcomeRow.success)).all():
            _total(db, tenant, "outcomes_ok" if ok else "outcomes_failed", strategy, -int(n))
        for secs in recovery_seconds(db, tenant, chunk):
            _total(db, tenant, "recoveries", "", -1, -secs)
    if session_id is not None:
        _uncount_recommendations(db, tenant, RecommendationRow.session_id == session_id)


def _uncount_recommendations(db: Session, tenant: str, where: Any) -> None:
    for strategy, n in db.execute(select(RecommendationRow.strategy, func.count())
                                  .where(RecommendationRow.tenant_id == tenant, where)
                                  .group_by(RecommendationRow.strategy)).all():
        _total(db, tenant, "recommendations", strategy, -int(n))


def recovery_seconds(db: Session, tenant: str, trace_ids: list[str]) -> list[float]:
    """The recoveries of these runs (as :func:`count_outcome` counted them): seconds from the first
    recommendation for a failure in its run to each successful outcome of one of its recommendations."""
    firsts = {
        (tid, fk): ts
        for tid, fk, ts in db.execute(
            select(RecommendationRow.trace_id, RecommendationRow.failure_key, func.min(RecommendationRow.created_at))
            .where(RecommendationRow.tenant_id == tenant, RecommendationRow.trace_id.in_(trace_ids),
                   RecommendationRow.failure_key.is_not(None))
            .group_by(RecommendationRow.trace_id, RecommendationRow.failure_key))
    }
    done = db.execute(
        select(OutcomeRow.created_at, RecommendationRow.trace_id, RecommendationRow.failure_key)
        .join(RecommendationRow, and_(RecommendationRow.tenant_id == OutcomeRow.tenant_id,
                                      RecommendationRow.id == OutcomeRow.recommendation_id))
        .where(OutcomeRow.tenant_id == tenant, OutcomeRow.success.is_(True), RecommendationRow.trace_id.in_(trace_ids),
               RecommendationRow.failure_key.is_not(None))
    ).all()
    return [_seconds(firsts[(tid, fk)], at) for at, tid, fk in done if (tid, fk) in firsts]


def _seconds(start: datetime, end: datetime) -> float:
    start = start.replace(tzinfo=UTC) if start.tzinfo is None else start
    end = end.replace(tzinfo=UTC) if end.tzinfo is None else end
    return max(0.0, (end - start).total_seconds())


# -- the count feed ------------------------------------------------------------------------------------
_FEED = cast(Table, CountFeedRow.__table__)
_FEED_INSERT = Prepared(insert(_FEED))
_FEED_TAKE = Prepared(select(_FEED.c.id, _FEED.c.tenant_id, _FEED.c.trace_id, _FEED.c.ops)
                      .order_by(_FEED.c.id).limit(bindparam("n")))
_FEED_DONE = Prepared(delete(_FEED).where(_FEED.c.id == bindparam("i")))
_FEED_ANY = Prepared(select(_FEED.c.id).limit(1))
_LOCK_FEED = Prepared(select(func.pg_advisory_xact_lock(func.hashtext(bindparam("n")))))


def count_feed_waiting(db: Tx) -> bool:
    """Whether the count feed holds a row not applied yet (one read of its first row)."""
    return bool(_FEED_ANY.execute(db))


def apply_count_feed(db: Tx, limit: int = COUNT_FEED_BATCH, *, lock: bool = True) -> int:
    """In transaction ``db``: apply the oldest ``limit`` rows of the count feed, in ``id`` order, and delete
    them; how many. Under the feed's lock (``lock``: PostgreSQL's advisory lock, held to the transaction's
    end; SQLite's write transaction is that lock already), so every row is applied once, whoever applies it.
    The changes gather in the transaction as a direct write's do (one upsert a counter table at the commit)."""
    if lock and dialect_name(db) == "postgresql":
        _LOCK_FEED.execute(db, {"n": _COUNT_FEED_LOCK})
    rows = _FEED_TAKE.execute(db, {"n": limit})
    if not rows:
        return 0
    _apply_runs(db, [(tenant, trace_id, ops) for _, tenant, trace_id, ops in rows])
    done = [{"i": int(r[0])} for r in rows]
    _FEED_DONE.execute(db, done[0] if len(done) == 1 else done)
    return len(rows)


def _apply_runs(db: Tx, runs: list[tuple[str, str, list[Any]]]) -> None:
    """Apply each run's ops (``tenant, trace_id, ops``, in order); meanwhile the reads of runs' rows they make do
    not settle the feed again (:func:`settle_counts`)."""
    was = db.info.get(_APPLYING)
    db.info[_APPLYING] = True
    try:
        for tenant, trace_id, ops in runs:
            _apply_ops(db, tenant, trace_id, ops)
    finally:
        db.info[_APPLYING] = was


def _apply_ops(db: Tx, tenant: str, trace_id: str, ops: list[Any]) -> None:
    for op in ops:
        if op[0] == "run":
            p = op[1]
            _count_run(db, tenant, trace_id, datetime.fromisoformat(p["created"]), datetime.fromisoformat(p["now"]),
                       p["arm"], {str(k): int(v) for k, v in p["kinds"].items()}, p["healthy"], p["kind"], p["agent"],
                       fresh=False)
        elif op[0] == "rec":
            _count_recommendation(db, tenant, trace_id, str(op[1]), int(op[2]))
        else:  # pragma: no cover - written by this module only
            raise ValueError(f"count feed: unknown op {op[0]!r}")


def _catch_up(db: Tx) -> bool:
    """Apply every row waiting in the count feed in ``db``; whether there was one."""
    db.info[_CAUGHT_UP] = True
    if not count_feed_waiting(db):
        return False
    while apply_count_feed(db) == COUNT_FEED_BATCH:
        pass
    return True


def settle_counts(db: Tx) -> None:
    """Before a write that reads or changes runs' rows (a label, an outcome, a deletion, an agent's move):
    the count feed's waiting rows applied (once a transaction), then this transaction's own deferred
    changes, in that order, so that it reads each run as every change committed before it left it."""
    if db.info.get(_APPLYING):
        return
    if not db.info.get(_CAUGHT_UP):
        _catch_up(db)
    own = db.info.pop(_DEFERRED, None)
    if own:
        _apply_runs(db, [(tenant, trace_id, ops) for (tenant, trace_id), ops in sorted(own.items())])


def flush_counts(db: Tx) -> None:
    """Write the transaction's differences (``n = n + delta``, one upsert per table, in key order);
    :meth:`serve.store.base.StoreBase.write` calls it before committing. A run's deferred changes
    (:func:`count_run`'s ``defer``) are written to the count feed, one row a run, in key order."""
    deferred = db.info.pop(_DEFERRED, None)
    if deferred:
        rows = [{"tenant_id": t, "trace_id": i, "ops": ops} for (t, i), ops in sorted(deferred.items())]
        _FEED_INSERT.execute(db, rows[0] if len(rows) == 1 else rows)
    _write_runs(db)
    pending = db.info.pop(_PENDING, None)
    if not pending:
        return
    canary, totals, overview = pending
    dialect = dialect_name(db)
    upsert_canary, upsert_totals = _UPSERT_CANARY[dialect], _UPSERT_TOTALS[dialect]
    rows = [{"tenant_id": tenant, "hour": hour, "arm": arm,
             **{f: (c[f] if f == "recovery_s" else int(round(c[f]))) for f in CANARY_FIELDS}}
            for (tenant, hour, arm), c in sorted(canary.items()) if any(c.values())]
    if rows:
        upsert_canary.execute(db, rows)
    orows = [{"tenant_id": tenant, "hour": hour, "agent": agent, "verdict": verdict, "kind": kind,
              **dict(zip(OVERVIEW_FIELDS, o, strict=True))}
             for (tenant, hour, agent, verdict, kind), o in sorted(overview.items()) if any(o)]
    if orows:
        _UPSERT_OVERVIEW[dialect].execute(db, orows)
    trows = [{"tenant_id": t, "name": name, "key": key, "n": int(round(n)), "total": total}
             for (t, name, key), (n, total) in sorted(totals.items()) if n or total]
    if trows:
        upsert_totals.execute(db, trows)


__all__ = ["CANARY_FIELDS", "COUNT_FEED_BATCH", "HOUR_S", "OVERVIEW_FIELDS", "apply_count_feed", "count_feed_waiting",
           "count_labels", "count_outcome", "count_recommendation", "count_run",
           "flush_counts", "hour_of", "move_runs", "recovery_seconds", "settle_counts", "uncount_runs"]
