"""The ``agents`` table: each agent of a tenant, the profiles inferred agents are matched against,
aliases, and the re-keying that renames, merges and splits move a tenant's history with
(:mod:`serve.services.agents` decides; docs/agents.md states the rule)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Integer, and_, bindparam, case, delete, func, null, or_, select, text, update
from sqlalchemy.orm import Session

from serve.store.base import StoreBase, core, rowcount
from serve.store.counters import move_runs
from serve.store.prepared import Prepared, Tx
from serve.store.tables import (
    AgentRow,
    FailureRow,
    MetricTotalRow,
    ModelActivationRow,
    ObservationRow,
    StreamRow,
    TraceRow,
    as_utc,
    utcnow,
)
from serve.store.traces import trace_json


class AgentStats(NamedTuple):
    """What the history holds of one agent."""

    runs: int
    labelled_runs: int
    first_seen: datetime | None
    last_seen: datetime | None


_A = core(AgentRow).c
_COUNT = (update(core(AgentRow)).where(_A.tenant_id == bindparam("t"), _A.key == bindparam("k"), _A.alias_of.is_(None))
          .values(n_runs=_A.n_runs + 1, updated_at=bindparam("now")))
_COUNT_RUN = Prepared(_COUNT.returning(_A.n_runs))
# with the row's profile when the new count is at most ``every`` or a multiple of ``sample`` (RETURNING reads
# the row as updated, locked by the update on PostgreSQL): the profile's read, in the same statement
_COUNT_RUN_PROFILE = Prepared(_COUNT.returning(_A.n_runs, case(
    (or_(_A.n_runs <= bindparam("every", type_=Integer), _A.n_runs % bindparam("sample", type_=Integer) == 0),
     _A.profile), else_=null())))
_SAVE = Prepared(update(core(AgentRow)).where(_A.tenant_id == bindparam("t"), _A.key == bindparam("k")))
_T = core(TraceRow).c
_STORED_AGENT = Prepared(select(_T.agent, _T.response["agent_source"].as_string())
                         .where(_T.tenant_id == bindparam("t"), _T.id == bindparam("i")))


@functools.cache
def _profile(lock: bool, alias: bool) -> Prepared:
    q = select(_A.profile).where(_A.tenant_id == bindparam("t"), _A.key == bindparam("k"),
                                 _A.alias_of.is_not(None) if alias else _A.alias_of.is_(None))
    return Prepared(q.with_for_update() if lock else q)


class AgentStore(StoreBase):
    """The ``agents`` table, and moving the rows keyed by agent from one key to another."""

    # -- reads -----------------------------------------------------------------------------------
    def agent_rows(self, tenant: str, db: Session | None = None) -> list[dict[str, Any]]:
        """Every agent row of the tenant (aliases too) as dicts: key, name, source, profile, n_runs,
        alias_of, created_at, updated_at."""
        t = core(AgentRow).c
        q = select(t.key, t.name, t.source, t.profile, t.n_runs, t.alias_of, t.created_at, t.updated_at) \
            .where(t.tenant_id == tenant).order_by(t.key)
        if db is not None:
            return [dict(r._mapping) for r in db.execute(q)]
        with self.read() as rdb:
            return [dict(r._mapping) for r in rdb.execute(q)]

    def agent_stats(self, tenant: str) -> dict[str, AgentStats]:
        """Per agent key with runs: its runs, its labelled runs (a label not withdrawn), first and last
        seen. The counts are kept on write (:mod:`serve.store.counters`: ``metric_totals``'
        ``agent_runs`` and ``agent_labelled``); first and last seen are one probe each of
        ``ix_traces_agent_created`` and ``ix_traces_agent_updated``: a few rows per agent, whatever
        the history's size."""
        return {key: AgentStats(n, labelled, lo, hi) for key, n, labelled, lo, hi in self._agent_counts(tenant, seen=True)}

    def agents_with_runs(self, tenant: str) -> list[str]:
        """The keys of the tenant's agents that have runs, sorted (read as :meth:`agent_stats` reads)."""
        return sorted(key for key, *_ in self._agent_counts(tenant, seen=False))

    def _agent_counts(self, tenant: str, *, seen: bool) -> list[tuple[str, int, int, datetime | None, datetime | None]]:
        self.counts_current()  # the count feed's waiting rows first (serve/store/counters.py)
        mt = core(MetricTotalRow).c
        tr = core(TraceRow).c
        lab = core(MetricTotalRow).alias("lab")
        labelled = select(lab.c.n).where(lab.c.tenant_id == tenant, lab.c.name == "agent_labelled",
                                         lab.c.key == mt.key).scalar_subquery()
        mine = and_(tr.tenant_id == tenant, tr.agent == mt.key)
        cols: list[Any] = [mt.key, mt.n, labelled]
        if seen:
            cols += [select(func.min(tr.created_at)).where(mine).scalar_subquery(),
                     select(func.max(tr.updated_at)).where(mine).scalar_subquery()]
        q = select(*cols).where(mt.tenant_id == tenant, mt.name == "agent_runs", mt.n > 0)
        with self.read() as db:
            rows = db.execute(q).all()
        return [(str(r[0]), int(r[1]), int(r[2] or 0), _utc(r[3]) if seen else None, _utc(r[4]) if seen else None)
                for r in rows]

    def stored_agent(self, tenant: str, trace_id: str) -> tuple[str, str | None] | None:
        """The agent a stored run was given and how (its stored answer's ``agent_source``), or None."""
        with self.db.peek() as db:  # the one JSON field, not the whole answer (this runs for every unnamed run)
            rows = _STORED_AGENT.execute(db, {"t": tenant, "i": trace_id})
        row = rows[0] if rows else None
        if row is None:
            return None
        return str(row[0]), row[1] if isinstance(row[1], str) else None

    def agent_runs(self, db: Session, tenant: str, agent: str, *, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` stored traces of ``agent`` (whole JSON), in transaction ``db``."""
        rows = db.scalars(select(TraceRow).where(TraceRow.tenant_id == tenant, TraceRow.agent == agent)
                          .order_by(TraceRow.created_at.desc()).limit(limit)).all()
        return [trace_json(db, r) for r in rows]

    def existing_trace_ids(self, db: Session, tenant: str, agent: str, ids: Sequence[str]) -> list[str]:
        """Those of ``ids`` that are stored runs of ``agent``."""
        return list(db.scalars(select(TraceRow.id).where(TraceRow.tenant_id == tenant, TraceRow.agent == agent,
                                                         TraceRow.id.in_(list(ids)))))

    # -- writes (inside a transaction the caller opened with :meth:`write`) ------------------------
    def lock_agents(self, db: Session, tenant: str) -> None:
        """Serialise the creation of the tenant's agents: SQLite's writers already take turns (``BEGIN
        IMMEDIATE``); PostgreSQL takes a transaction-scoped advisory lock on the tenant."""
        if self.dialect == "postgresql":
            k = int.from_bytes(hashlib.blake2b(f"agents:{tenant}".encode(), digest_size=8).digest(), "big", signed=True)
            db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": k})

    def insert_agent(self, db: Session, tenant: str, key: str, *, source: str, profile: dict[str, Any] | None = None,
                     n_runs: int = 0, name: str | None = None) -> bool:
        """A new agent row; ``False`` (and nothing written) when the key exists."""
        now = utcnow()
        ins = self._insert(core(AgentRow)).values(
            tenant_id=tenant, key=key, name=name, source=source, profile=profile, n_runs=n_runs, alias_of=None,
            created_at=now, updated_at=now).on_conflict_do_nothing()
        return rowcount(db.execute(ins)) > 0

    def delete_agent_row(self, db: Session, tenant: str, key: str) -> None:
        """Drop the agent row of ``key`` (an alias about to become an agent again)."""
        db.execute(delete(core(AgentRow)).where(core(AgentRow).c.tenant_id == tenant, core(AgentRow).c.key == key))

    def lock_agent_profile(self, db: Tx, tenant: str, key: str, *, alias: bool = False) -> dict[str, Any] | None:
        """The agent's profile JSON, locked for this transaction (None: no row, or no profile).
        ``alias``: the profile kept by an agent merged into another (its row is an alias)."""
        rows = _profile(self.dialect == "postgresql", alias).execute(db, {"t": tenant, "k": key})
        value = rows[0][0] if rows else None
        return value if isinstance(value, dict) else None

    def count_agent_run(self, db: Tx, tenant: str, key: str, *, profile_at: tuple[int, int] | None = None
                        ) -> tuple[int, dict[str, Any] | None] | None:
        """One more run matched to the agent: its new ``n_runs``, and its profile JSON, locked for this
        transaction, when ``profile_at`` = ``(every, sample)`` and that count is at most ``every`` or a
        multiple of ``sample`` (else None, as when it has no profile); None: no such agent, or an alias."""
        params = {"t": tenant, "k": key, "now": utcnow()}
        if profile_at is None:
            rows = _COUNT_RUN.execute(db, params)
            return (int(rows[0][0]), None) if rows else None
        rows = _COUNT_RUN_PROFILE.execute(db, {**params, "every": profile_at[0], "sample": profile_at[1]})
        if not rows:
            return None
        return int(rows[0][0]), rows[0][1] if isinstance(rows[0][1], dict) else None

    def save_agent(self, db: Tx, tenant: str, key: str, **values: Any) -> None:
        """Set columns of the agent's row (profile, n_runs, name, alias_of, …)."""
        _SAVE.execute(db, {"t": tenant, "k": key, **values, "updated_at": utcnow()})

    def rekey(self, db: Session, tenant: str, old: str, new: str, *, trace_ids: Sequence[str] | None = None) -> int:
        """Move the runs of ``old`` (all, or those of ``trace_ids``) to ``new``: traces, their failure
        rows and their counts (labels follow their runs); the number of runs moved."""
        tq = update(TraceRow).where(TraceRow.tenant_id == tenant, TraceRow.agent == old)
        fq = update(FailureRow).where(FailureRow.tenant_id == tenant, FailureRow.agent == old)
        if trace_ids is not None:
            tq = tq.where(TraceRow.id.in_(list(trace_ids)))
            fq = fq.where(FailureRow.trace_id.in_(list(trace_ids)))
        n = rowcount(db.execute(tq.values(agent=new)))
        db.execute(fq.values(agent=new))
        move_runs(db, tenant, old, new, None if trace_ids is None else list(trace_ids))
        return n

    def move_streams(self, db: Session, tenant: str, old: str, new: str, *, reset: bool) -> None:
        """``old``'s streams become ``new``'s. A stream ``new`` already has keeps its row, its
        observations numbered after ``old``'s; ``reset``: every stream of ``new`` starts its warm-up
        again (detector state emptied, alarm closed). The caller applies the streams' feed first
        (:meth:`serve.services.streams.Streams.apply_waiting_in`)."""
        s = core(StreamRow).c
        o = core(ObservationRow).c
        theirs = {r.name: r for r in db.execute(select(s.name, s.n).where(s.tenant_id == tenant, s.agent == new))}
        for name, n in db.execute(select(s.name, s.n).where(s.tenant_id == tenant, s.agent == old)).all():
            if name in theirs:
                offset = int(theirs[name].n)
                db.execute(update(core(ObservationRow)).where(o.tenant_id == tenant, o.stream == name, o.agent == old)
                           .values(agent=new, seq=o.seq + offset))
                db.execute(update(core(StreamRow)).where(s.tenant_id == tenant, s.name == name, s.agent == new)
                           .values(n=s.n + int(n)))
                db.execute(delete(core(StreamRow)).where(s.tenant_id == tenant, s.name == name, s.agent == old))
            else:
                db.execute(update(core(ObservationRow)).where(o.tenant_id == tenant, o.stream == name, o.agent == old)
                           .values(agent=new))
                db.execute(update(core(StreamRow)).where(s.tenant_id == tenant, s.name == name, s.agent == old)
                           .values(agent=new))
        if reset:
            self.reset_streams(db, tenant, new)

    def reset_streams(self, db: Session, tenant: str, agent: str) -> None:
        """Every stream of ``agent`` starts its warm-up again (observations kept)."""
        s = core(StreamRow).c
        db.execute(update(core(StreamRow)).where(s.tenant_id == tenant, s.agent == agent)
                   .values(state={}, alarm_open=False, alarm=None, updated_at=utcnow()))

    def move_activations(self, db: Session, tenant: str, old: str, new: str) -> None:
        """``old``'s model activations become ``new``'s (the artefacts: :meth:`Registry.adopt`)."""
        db.execute(update(ModelActivationRow).where(ModelActivationRow.tenant_id == tenant,
                                                    ModelActivationRow.agent == old).values(agent=new))

    def add_activation(self, db: Session, tenant: str, agent: str, version: str, *, actor: str, action: str) -> None:
        db.add(ModelActivationRow(tenant_id=tenant, agent=agent, version=version, actor=actor[:200], action=action))

    def newest_activation(self, db: Session, tenant: str, agent: str) -> str | None:
        return db.scalars(select(ModelActivationRow.version).where(
            ModelActivationRow.tenant_id == tenant, ModelActivationRow.agent == agent)
            .order_by(ModelActivationRow.id.desc()).limit(1)).first()

    def point_aliases(self, db: Session, tenant: str, old: str, new: str) -> None:
        """Aliases of ``old`` now lead to ``new`` (an alias never leads to another alias)."""
        db.execute(update(AgentRow).where(AgentRow.tenant_id == tenant, AgentRow.alias_of == old)
                   .values(alias_of=new, updated_at=utcnow()))


def _utc(value: Any) -> datetime | None:
    """An aggregate's time (SQLite gives naive UTC, or its text) as aware UTC."""
    return None if value is None else as_utc(value if isinstance(value, datetime) else str(value))


__all__ = ["AgentStats", "AgentStore"]
