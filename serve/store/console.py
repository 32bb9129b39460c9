"""What the console's pages read (serve/ui/data.py shapes it): runs in a window with their repairs,
outcomes and failure kinds; a filtered page of runs; the tenant's agents and streams.

A run's verdict is the ``traces.verdict`` column (:mod:`serve.store.verdict`), read through the
console's covering index (``ix_traces_console``) without touching the rows. A row stored before
revision 0015 and not backfilled yet (:mod:`serve.store.upkeep`) has it NULL: its verdict is then read
from its stored response, so that the pages are right while the backfill runs (the partial index
``ix_traces_unfilled`` says in one probe whether a tenant has such rows).

The overview's counts of a window are kept on write per hour of the runs' creation (``overview_counts``,
revision 0020, :mod:`serve.store.counters`): the window's whole hours are read from them, its partial
first and last hours from the index, so that the reads cover ~2 hours of index entries whatever the
window holds."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import and_, case, exists, func, or_, select

from serve.store.base import StoreBase
from serve.store.counters import HOUR_S
from serve.store.tables import (
    FailureRow,
    LabelRow,
    MetricTotalRow,
    ObservationRow,
    OutcomeRow,
    OverviewCountRow,
    RecommendationRow,
    StreamRow,
    TraceRow,
)
from serve.store.upkeep import has_unfilled

_HEALTHY = TraceRow.response["healthy"].as_boolean()
#: The verdict read from the stored response (rows not backfilled yet).
_JSON_VERDICT = case((_HEALTHY.is_(None), "unknown"), (_HEALTHY.is_(True), "healthy"), else_="failed")
_PROBABILITY = TraceRow.response["failure_probability"].as_float()
_BASIS = TraceRow.response["failure_probability_basis"]


def _in_window(q: Any, since: datetime, until: datetime) -> Any:
    return q.where(TraceRow.created_at >= since, TraceRow.created_at < until)


@dataclass(frozen=True)
class WindowCounts:
    """The overview's counts of a window's runs: ``verdicts`` (agent, verdict, runs), ``spectrum``
    (primary kind or ``None``, UTC day ``YYYY-MM-DD``, failed runs), ``repairs`` (agent → repairs
    given, ``continue`` left out) and ``outcomes`` (agent → outcomes reported, of which succeeded)."""

    verdicts: list[tuple[str, str, int]]
    spectrum: list[tuple[str | None, str, int]]
    repairs: dict[str, int]
    outcomes: dict[str, tuple[int, int]]


_EPOCH = date(1970, 1, 1)


def _hours(t: datetime, *, ceil: bool = False) -> int:
    """Whole hours from 1970-01-01 UTC to ``t`` (a naive ``t`` is UTC), rounded down (``ceil``: up)."""
    s = (t if t.tzinfo is not None else t.replace(tzinfo=UTC)).timestamp()
    return int(-(-s // HOUR_S) if ceil else s // HOUR_S)


def _at(hour: int, like: datetime) -> datetime:
    """The start of ``hour`` (whole hours since 1970, UTC), aware or naive as ``like`` is."""
    t = datetime.fromtimestamp(hour * HOUR_S, UTC)
    return t if like.tzinfo is not None else t.replace(tzinfo=None)


@dataclass
class _Parts:
    """A window's counts gathered from its parts (the kept hours and the edge hours read from the index)."""

    verdicts: Counter[tuple[str, str]] = field(default_factory=Counter)
    spectrum: Counter[tuple[str | None, str]] = field(default_factory=Counter)
    repairs: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    succeeded: Counter[str] = field(default_factory=Counter)

    def add(self, agent: str, verdict: str, kind: str | None, day: str, runs: int, repairs: int, outcomes: int,
            succeeded: int) -> None:
        self.verdicts[(agent, verdict)] += runs
        if verdict == "failed":
            self.spectrum[(kind, day)] += runs
        self.repairs[agent] += repairs
        self.outcomes[agent] += outcomes
        self.succeeded[agent] += succeeded

    def counts(self) -> WindowCounts:
        """As :class:`WindowCounts` (only what is there: no zero counts)."""
        return WindowCounts(
            [(a, v, n) for (a, v), n in sorted(self.verdicts.items()) if n],
            [(k, d, n) for (k, d), n in sorted(self.spectrum.items(), key=lambda x: (x[0][0] or "", x[0][1])) if n],
            {a: n for a, n in sorted(self.repairs.items()) if n},
            {a: (n, self.succeeded[a]) for a, n in sorted(self.outcomes.items()) if n})


class ConsoleStore(StoreBase):
    """Reads of the console (tenant-scoped); rows come back as named tuples."""

    def window_counts(self, tenant: str, *, since: datetime, until: datetime, agent: str | None) -> WindowCounts:
        """What the overview counts of the runs created in ``[since, until)`` (of ``agent``; ``None``:
        every agent's): :class:`WindowCounts`. The window's whole hours are read from the counts kept on
        write per hour of the runs' creation (``overview_counts``, :mod:`serve.store.counters`: a few
        thousand rows for a week, whatever the window holds); its partial first and last hours from the
        console's index (:meth:`_index_counts`)."""
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        first, last = _hours(since, ceil=True), _hours(until)  # the window's whole hours: [first, last)
        parts = _Parts()
        with self.read() as db:
            if first >= last:  # inside one hour (or two partial ones): the index alone
                self._index_counts(db, parts, tenant, since, until, agent)
            else:
                lo, hi = _at(first, since), _at(last, until)
                for start, end in ((since, lo), (hi, until)):
                    if start < end:
                        self._index_counts(db, parts, tenant, start, end, agent)
                o = OverviewCountRow
                day = o.hour // 24  # whole days since 1970 (integer division in SQL)
                q = (select(o.agent, o.verdict, o.kind, day, func.sum(o.runs), func.sum(o.repairs),
                            func.sum(o.outcomes), func.sum(o.succeeded))
                     .where(o.tenant_id == tenant, o.hour >= first, o.hour < last))
                if agent is not None:
                    q = q.where(o.agent == agent)
                days: dict[int, str] = {}
                for a, v, k, d, n, rep, outs, ok in db.execute(q.group_by(o.agent, o.verdict, o.kind, day)).all():
                    iso = days.get(d) or days.setdefault(d, (_EPOCH + timedelta(days=int(d))).isoformat())
                    parts.add(a, v, k or None, iso, int(n), int(rep), int(outs), int(ok))
        return parts.counts()

    @staticmethod
    def _index_counts(db: Any, parts: _Parts, tenant: str, since: datetime, until: datetime, agent: str | None
                      ) -> None:
        """Add what the runs created in ``[since, until)`` count to ``parts``, counted by the database
        over the console's index (four grouped reads). Rows whose verdict is not backfilled yet are
        counted by their JSON."""
        t = TraceRow
        # grouped by an expression, not the bare column: SQLite would otherwise walk ix_traces_tenant_agent
        # for the grouping's order and read every row for the rest
        by_agent = func.coalesce(t.agent, "")

        def scoped(q: Any) -> Any:
            q = _in_window(q, since, until)
            return q if agent is None else q.where(t.agent == agent)

        day = func.date(t.created_at)
        verdicts = [(str(a), v, int(n)) for a, v, n in db.execute(scoped(
            select(by_agent, t.verdict, func.count()).where(t.tenant_id == tenant)
            .group_by(by_agent, t.verdict))).all()]
        spectrum = [(k, str(d), int(n)) for k, d, n in db.execute(scoped(
            select(t.primary_kind, day, func.count()).where(t.tenant_id == tenant, t.verdict == "failed")
            .group_by(t.primary_kind, day))).all()]
        if any(v is None for _, v, _ in verdicts):  # the backfill has rows to fill in this window
            late = scoped(select(by_agent, _JSON_VERDICT, func.count())
                          .where(t.tenant_id == tenant, t.verdict.is_(None)).group_by(by_agent, _JSON_VERDICT))
            verdicts = [r for r in verdicts if r[1] is not None] + [
                (str(a), str(v), int(n)) for a, v, n in db.execute(late).all()]
            spectrum += [(k, str(d), int(n)) for k, d, n in db.execute(scoped(
                select(t.primary_kind, day, func.count()).where(t.tenant_id == tenant, t.verdict.is_(None),
                                                               _JSON_VERDICT.in_(["failed"]))
                .group_by(t.primary_kind, day))).all()]
        for a, v, n in verdicts:
            parts.verdicts[(a, str(v))] += n
        for k, d, n in spectrum:
            parts.spectrum[(k, d)] += n
        # A run's repairs and outcomes are written after the run was first stored (its created_at is
        # kept): those of a run in the window are no older than ``since``. Saying so lets the database
        # skip the tenant's older history.
        for a, n in db.execute(scoped(
                select(by_agent, func.count())
                .join(RecommendationRow, and_(RecommendationRow.tenant_id == t.tenant_id,
                                              RecommendationRow.trace_id == t.id))
                .where(t.tenant_id == tenant, RecommendationRow.strategy != "continue",
                       RecommendationRow.created_at >= since)
                .group_by(by_agent))).all():
            parts.repairs[str(a)] += int(n)
        ok = func.sum(case((OutcomeRow.success.is_(True), 1), else_=0))
        for a, n, good in db.execute(scoped(
                select(by_agent, func.count(), ok)
                .join(OutcomeRow, and_(OutcomeRow.tenant_id == t.tenant_id, OutcomeRow.trace_id == t.id))
                .where(t.tenant_id == tenant, OutcomeRow.created_at >= since).group_by(by_agent))).all():
            parts.outcomes[str(a)] += int(n)
            parts.succeeded[str(a)] += int(good or 0)

    def run_page(
        self, tenant: str, *, agent: str | None = None, verdict: str | None = None, kind: str | None = None,
        since: datetime | None = None, until: datetime | None = None, labelled: bool | None = None,
        page: int, per_page: int,
    ) -> tuple[int, list[Any]]:
        """How many runs pass the filters (each ``None``: any; ``verdict``: ``failed``, ``healthy`` or
        ``unknown``), and page ``page`` of them, newest first, as ``id, created_at, n_steps,
        primary_kind, task_type, agent, verdict, p, basis``."""
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        q = select(TraceRow.id, TraceRow.created_at, TraceRow.n_steps, TraceRow.primary_kind, TraceRow.task_type,
                   TraceRow.agent.label("agent"), func.coalesce(TraceRow.verdict, _JSON_VERDICT).label("verdict"),
                   _PROBABILITY.label("p"), _BASIS.label("basis")).where(TraceRow.tenant_id == tenant)
        if agent is not None:
            q = q.where(TraceRow.agent == agent)
        if kind is not None:
            q = q.where(exists().where(FailureRow.tenant_id == tenant, FailureRow.trace_id == TraceRow.id,
                                       FailureRow.kind == kind, FailureRow.is_signal.is_(False)))
        if since is not None:
            q = q.where(TraceRow.created_at >= since)
        if until is not None:
            q = q.where(TraceRow.created_at < until)
        if labelled is not None:
            has = exists().where(LabelRow.tenant_id == tenant, LabelRow.trace_id == TraceRow.id,
                                 LabelRow.withdrawn_at.is_(None))
            q = q.where(has if labelled else ~has)
        with self.read() as db:
            if verdict is not None:
                # the JSON only while the backfill has rows to fill: the column alone lets the count
                # read the index
                q = q.where(or_(TraceRow.verdict == verdict, and_(TraceRow.verdict.is_(None), _JSON_VERDICT.in_([verdict])))
                            if has_unfilled(db, tenant) else TraceRow.verdict == verdict)
            alone = agent is None and since is None and until is None and labelled is None
            if kind is not None and verdict is None and alone:  # a failure row exists only with its run: the
                f = FailureRow  # runs of a kind, counted from ix_failures_tenant_kind alone (revision 0017)
                total_q = select(func.count(func.distinct(f.trace_id))).where(
                    f.tenant_id == tenant, f.kind == kind, f.is_signal.is_(False))
            elif verdict is not None and kind is None and alone:  # the runs of a verdict: kept on write
                mt = MetricTotalRow  # (metric_totals' verdict_runs, revision 0020), not counted over the index
                total_q = select(func.coalesce(func.sum(mt.n), 0)).where(
                    mt.tenant_id == tenant, mt.name == "verdict_runs", mt.key == verdict)
            else:
                total_q = select(func.count()).select_from(q.with_only_columns(TraceRow.id).subquery())
            total = int(db.scalar(total_q) or 0)
            # the page's ids first, from an index alone (ix_traces_console holds every column the
            # filters and the order read): a deep page skips index entries, not rows and their JSON;
            # a page past the middle is counted from the oldest end (it skips fewer)
            newest = (TraceRow.created_at.desc(), TraceRow.id.desc())
            skip = (page - 1) * per_page
            ids_q = q.with_only_columns(TraceRow.id)
            if skip <= total // 2:
                ids = list(db.scalars(ids_q.order_by(*newest).offset(skip).limit(per_page)))
            else:
                n = min(per_page, total - skip)
                ids = [] if n <= 0 else list(db.scalars(
                    ids_q.order_by(TraceRow.created_at, TraceRow.id).offset(total - skip - n).limit(n)))
            rows = list(db.execute(q.where(TraceRow.id.in_(ids)).order_by(*newest)).all()) if ids else []
        return total, rows

    def labelled_count(self, tenant: str, agent: str | None) -> int:
        """Runs of this agent (``None``: every run) that carry a label (not withdrawn): the counts kept on
        write (``metric_totals``' ``agent_labelled``, :mod:`serve.store.counters`), not a join of the
        tenant's labels to its runs (181 ms at 1,000,000 runs on PostgreSQL)."""
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        mt = MetricTotalRow
        q = select(func.sum(mt.n)).where(mt.tenant_id == tenant, mt.name == "agent_labelled")
        if agent is not None:
            q = q.where(mt.key == agent)
        with self.read() as db:
            return int(db.scalar(q) or 0)

    def stream_list(self, tenant: str) -> list[Any]:
        """The tenant's streams as ``name, agent, detector, n, alarm_open``, by name and agent."""
        with self.read() as db:
            return list(db.execute(select(StreamRow.name, StreamRow.agent, StreamRow.detector, StreamRow.n,
                                          StreamRow.alarm_open).where(StreamRow.tenant_id == tenant)
                                   .order_by(StreamRow.name, StreamRow.agent)).all())

    def stream_observations(self, tenant: str, stream: str, agent: str, *, last: int) -> list[Any]:
        """The stream's last ``last`` observations as ``seq, value, alarm``, oldest first."""
        with self.read() as db:
            rows = db.execute(select(ObservationRow.seq, ObservationRow.value, ObservationRow.alarm)
                              .where(ObservationRow.tenant_id == tenant, ObservationRow.stream == stream,
                                     ObservationRow.agent == agent)
                              .order_by(ObservationRow.seq.desc()).limit(last)).all()
        return list(reversed(rows))


__all__ = ["ConsoleStore", "WindowCounts"]
