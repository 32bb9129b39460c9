"""Metric streams: each (tenant, agent, stream)'s detector row and its observations, and the feed of the
values diagnosed runs give them (``stream_feed``: written with each run, applied in batches)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from serve.store.base import StoreBase, core, store_error
from serve.store.prepared import Prepared, Tx, per_dialect
from serve.store.tables import ObservationRow, StreamFeedRow, StreamRow, utcnow

_STREAM_COLS = ("name", "detector", "params", "state", "n", "alarm_open", "alarm")
_INSERT_OBSERVATIONS = Prepared(insert(core(ObservationRow)))


@functools.cache
def _lock_streams(dialect: str, k: int) -> Prepared:
    """``k`` named streams of one (tenant, agent), locked on PostgreSQL in name order (one statement per
    ``k``: the names are bound one each, not expanded per call)."""
    t = core(StreamRow).c
    q = select(*(t[c] for c in _STREAM_COLS)).where(
        t.tenant_id == bindparam("t"), t.agent == bindparam("a"), t.name.in_([bindparam(f"n{i}") for i in range(k)]))
    return Prepared(q.order_by(t.name).with_for_update() if dialect == "postgresql" else q)


_INSERT_STREAMS = per_dialect(lambda ins: ins(core(StreamRow)).on_conflict_do_nothing())

_FEED = core(StreamFeedRow)
_ENQUEUE = Prepared(insert(_FEED))
_TAKE = Prepared(select(_FEED.c.id, _FEED.c.tenant_id, _FEED.c.agent, _FEED.c.trace_id, _FEED.c["values"])
                 .order_by(_FEED.c.id).limit(bindparam("n")))
_DONE = Prepared(delete(_FEED).where(_FEED.c.id == bindparam("i")))
_ANY = Prepared(select(_FEED.c.id).limit(1))
#: PostgreSQL: the transaction-scoped advisory lock every applier of the feed holds, so that one applies it
#: at a time across workers and replicas (SQLite's writers take turns anyway).
_FEED_LOCK = "triage.stream_feed"
_LOCK_FEED = Prepared(select(func.pg_advisory_xact_lock(func.hashtext(bindparam("n")))))


class StreamStore(StoreBase):
    """The ``streams`` and ``observations`` tables."""

    # -- the feed ------------------------------------------------------------------------------
    @staticmethod
    def enqueue_feed(db: Tx, tenant: str, agent: str, trace_id: str, values: dict[str, float]) -> None:
        """In transaction ``db`` (a diagnosis's): run ``trace_id``'s values for ``agent``'s streams, to be
        applied by :meth:`take_feed`'s caller."""
        _ENQUEUE.execute(db, {"tenant_id": tenant, "agent": agent, "trace_id": trace_id, "values": values,
                              "created_at": utcnow()})

    def lock_feed(self, db: Tx) -> None:
        """In transaction ``db``: wait for, then hold to its end, the right to apply the feed
        (PostgreSQL's advisory lock; on SQLite the write transaction is that right already)."""
        if self.dialect == "postgresql":
            _LOCK_FEED.execute(db, {"n": _FEED_LOCK})

    def take_feed(self, db: Tx, limit: int) -> list[tuple[int, str, str, str, dict[str, float]]]:
        """In transaction ``db``, after :meth:`lock_feed`: the oldest ``limit`` rows of the feed as
        ``(id, tenant, agent, trace_id, values)``, in ``id`` order; :meth:`done_feed` deletes them."""
        return [(int(i), t, a, tid, v) for i, t, a, tid, v in _TAKE.execute(db, {"n": limit})]

    @staticmethod
    def done_feed(db: Tx, ids: Sequence[int]) -> None:
        """In transaction ``db``: the feed's rows ``ids`` applied (deleted)."""
        if ids:
            _DONE.execute(db, [{"i": i} for i in ids])

    def feed_waiting(self) -> bool:
        """Whether the feed has a row not applied yet (one read of its first row)."""
        with self.peek() as db:
            return bool(_ANY.execute(db))

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
        self, db: Tx, tenant: str, agent: str, names: Sequence[str], *, detector: str
    ) -> dict[str, dict[str, Any]]:
        """Several streams of one (tenant, agent) at once, created when new, locked; as dicts
        (``name, detector, params, state, n``).

        Callers pass names in one (sorted) order, so that concurrent transactions lock alike.
        """
        q = _lock_streams(self.dialect, len(names))
        params = {"t": tenant, "a": agent, **{f"n{i}": n for i, n in enumerate(names)}}
        rows = {r[0]: dict(zip(_STREAM_COLS, r, strict=True)) for r in q.execute(db, params)}
        missing = [n for n in names if n not in rows]
        if missing:
            now = utcnow()
            _INSERT_STREAMS[self.dialect].execute(db, [
                {"tenant_id": tenant, "name": n, "agent": agent, "detector": detector, "params": {}, "state": {},
                 "n": 0, "alarm_open": False, "updated_at": now}
                for n in missing
            ])
            rows = {r[0]: dict(zip(_STREAM_COLS, r, strict=True)) for r in q.execute(db, params)}
        return rows

    @staticmethod
    def add_observations(db: Tx, rows: list[dict[str, Any]]) -> None:
        """In transaction ``db``: observations of locked streams (one executemany)."""
        if rows:
            _INSERT_OBSERVATIONS.execute(db, rows)

    _stream_update_stmt = Prepared(
        update(core(StreamRow))
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

    def update_streams(self, db: Tx, tenant: str, agent: str, changes: list[dict[str, Any]]) -> None:
        """Write back ``name, n, state, alarm_open, alarm`` of locked streams (one executemany)."""
        now = utcnow()
        self._stream_update_stmt.execute(
            db,
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


__all__ = ["StreamStore"]
