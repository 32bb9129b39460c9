"""The step vectors of stored runs (``run_encodings``): what the agent model's encoder block read.

An agent model that reads the encoder block (:mod:`model.scoring.agentmodel.encoded`) encodes each
step of a run once, when the run is diagnosed. The service keeps those vectors with the run, so that
``triage retrain`` builds its prefix rows from them and never encodes the run again, and a session
re-read by another worker does not either.

**What is stored, and why the steps, not the pool.** A run-level pool (``Pool.to_dict("<f2")``, about
2 KB) is the state after the run's last step only, but a retrain trains on prefixes (the candidate's
``prefix_fractions``, 25 / 50 / 75 / 100 % of the steps by default) and its own cross-validation scores
ten more (``WARNING_PREFIXES``: 10 % … 100 %); a session does not know its final length, so it cannot
store the pools at those fractions as it goes. So the store keeps every step's vector (float16,
``dim`` × 2 bytes: 512 bytes at 256 dimensions; a system step's row is NaN), from which any prefix's
pool is exact (:func:`~model.scoring.agentmodel.encoded.prefix_rows`). Measured on the real sets:
``bench/retrain.py`` prints the bytes per stored run.

Rows are chunks: a whole diagnosis writes steps ``0 … n - 1`` (replacing every chunk of the run), a
session append its new steps (``first`` = the first new step's index). Each names the encoder's
version; a reader asks for one version and gets NaN where a step has no vector of it. The chunks are
deleted with their run (:func:`serve.store.traces._delete_traces`: the API's deletes and retention).

>>> import numpy as np
>>> from serve.store import open_stores
>>> from serve.settings import Settings
>>> stores = open_stores(Settings(database_url="sqlite://"))
>>> with stores.db.write() as db:
...     stores.encodings.put(db, "acme", "t1", 0, "enc1", np.ones((3, 4), np.float32))
>>> stores.encodings.vectors("acme", [("t1", 4)], "enc1")["t1"][:, 0].tolist()
[1.0, 1.0, 1.0, nan]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from sqlalchemy import and_, bindparam, delete, func, insert, or_, select
from sqlalchemy.orm import Session

from model.scoring.agentmodel.encoded import pack, unpack
from serve.store.base import StoreBase, core
from serve.store.prepared import Prepared, Tx, orm
from serve.store.tables import RunEncodingRow, TraceRow

#: Runs read in one query (an IN list of trace ids).
BATCH = 500


class Unencoded(NamedTuple):
    """A stored run whose steps the encoder has not all been through (:meth:`EncodingStore.unencoded`)."""

    tenant: str
    trace_id: str
    n_steps: int


class EncodingStore(StoreBase):
    """The ``run_encodings`` table (see the module docstring)."""

    def put(self, db: Tx, tenant: str, trace_id: str, first: int, encoder: str, vectors: np.ndarray, *,
            replace: bool = True) -> None:
        """Store the vectors of steps ``first`` … of a run (inside ``db``), replacing every chunk from ``first`` on
        (``first = 0``: the whole run's). ``replace=False``: the caller knows the run has no chunk from
        ``first`` on in this transaction (a whole run's ``put_trace`` has just deleted them): the delete,
        0.27 ms of a diagnosis on SQLite, is skipped."""
        if replace:
            _DROP_FROM.execute(db, {"t": tenant, "i": trace_id, "f": first})
        if not len(vectors):
            return
        _INSERT.execute(db, {"tenant_id": tenant, "trace_id": trace_id, "first": first, "n": len(vectors),
                             "encoder": encoder, "dim": int(vectors.shape[1]), "vectors": pack(vectors)})

    def drop(self, db: Session, tenant: str, trace_id: str) -> None:
        """Forget a run's vectors (inside ``db``)."""
        drop_vectors(db, tenant, trace_id)

    def read_run(self, db: Tx, tenant: str, trace_id: str, n_steps: int, encoder: str) -> np.ndarray | None:
        """Inside ``db``: the run's first ``n_steps`` vectors of ``encoder`` (NaN rows where none), or ``None``
        when it has none of that encoder."""
        return _assemble(list(orm(db).execute(
            select(RunEncodingRow.first, RunEncodingRow.dim, RunEncodingRow.vectors)
            .where(RunEncodingRow.tenant_id == tenant, RunEncodingRow.trace_id == trace_id,
                   RunEncodingRow.encoder == encoder, RunEncodingRow.first < n_steps)
            .order_by(RunEncodingRow.first))), n_steps)

    def vectors(self, tenant: str, runs: Sequence[tuple[str, int]], encoder: str) -> dict[str, np.ndarray]:
        """``{trace id: n_steps × dim}`` for the runs ``(trace id, n_steps)`` that have vectors of ``encoder``
        (NaN rows where a step has none); a run without any is left out."""
        want = dict(runs)
        out: dict[str, np.ndarray] = {}
        ids = list(want)
        for i in range(0, len(ids), BATCH):
            chunk = ids[i:i + BATCH]
            with self.read() as db:
                rows = db.execute(
                    select(RunEncodingRow.trace_id, RunEncodingRow.first, RunEncodingRow.dim, RunEncodingRow.vectors)
                    .where(RunEncodingRow.tenant_id == tenant, RunEncodingRow.trace_id.in_(chunk),
                           RunEncodingRow.encoder == encoder)
                    .order_by(RunEncodingRow.trace_id, RunEncodingRow.first)).all()
            by_run: dict[str, list[tuple[int, int, bytes]]] = {}
            for tid, first, dim, raw in rows:
                by_run.setdefault(str(tid), []).append((int(first), int(dim), bytes(raw)))
            for tid, parts in by_run.items():
                got = _assemble(parts, want[tid])
                if got is not None:
                    out[tid] = got
        return out

    def unencoded(self, encoder: str, *, tenant: str | None = None, after: tuple[str, str] = ("", ""),
                  limit: int = BATCH) -> tuple[list[Unencoded], tuple[str, str] | None, int]:
        """The stored runs (of ``tenant``, else every tenant's) after ``after`` in (tenant, trace id) order
        whose steps are not all covered by vectors of ``encoder``, looking at ``limit`` runs; the cursor
        to go on from (``None``: no run is left to look at); and how many runs it looked at. What
        ``triage encode-runs`` pages through."""
        t = TraceRow
        q = select(t.tenant_id, t.id, t.n_steps).where(
            or_(t.tenant_id > after[0], and_(t.tenant_id == after[0], t.id > after[1])))
        if tenant is not None:
            q = q.where(t.tenant_id == tenant)
        with self.read() as db:
            page = db.execute(q.order_by(t.tenant_id, t.id).limit(limit)).all()
            if not page:
                return [], None, 0
            covered: dict[tuple[str, str], int] = {}
            for ten in {r[0] for r in page}:
                ids = [r[1] for r in page if r[0] == ten]
                e = RunEncodingRow
                for tid, n in db.execute(select(e.trace_id, func.sum(e.n)).where(
                        e.tenant_id == ten, e.trace_id.in_(ids), e.encoder == encoder).group_by(e.trace_id)):
                    covered[(ten, str(tid))] = int(n or 0)
        todo = [Unencoded(str(a), str(b), int(n)) for a, b, n in page if covered.get((a, b), 0) < int(n)]
        return todo, (str(page[-1][0]), str(page[-1][1])), len(page)

    def count_runs(self, tenant: str | None = None) -> int:
        """Stored runs (of ``tenant``, else of every tenant)."""
        q = select(func.count()).select_from(TraceRow)
        if tenant is not None:
            q = q.where(TraceRow.tenant_id == tenant)
        with self.read() as db:
            return int(db.scalar(q) or 0)

    def stored_bytes(self, tenant: str) -> tuple[int, int]:
        """The tenant's runs with vectors and the bytes of their vectors (what the docs report a run costs)."""
        e = RunEncodingRow
        with self.read() as db:
            runs, size = db.execute(select(func.count(func.distinct(e.trace_id)), func.sum(func.length(e.vectors)))
                                    .where(e.tenant_id == tenant)).one()
        return int(runs or 0), int(size or 0)


def drop_vectors(db: Tx, tenant: str, trace_id: str) -> None:
    """Delete every chunk of a run's vectors (inside ``db``): :meth:`EncodingStore.drop`, and
    :meth:`serve.store.traces.TraceStore.put_trace` when a whole run replaces the stored one."""
    _DROP.execute(db, {"t": tenant, "i": trace_id})


_E = core(RunEncodingRow).c
_DROP_FROM = Prepared(delete(core(RunEncodingRow)).where(_E.tenant_id == bindparam("t"), _E.trace_id == bindparam("i"),
                                                         _E.first >= bindparam("f")))
_INSERT = Prepared(insert(core(RunEncodingRow)))
_DROP = Prepared(delete(core(RunEncodingRow)).where(core(RunEncodingRow).c.tenant_id == bindparam("t"),
                                                    core(RunEncodingRow).c.trace_id == bindparam("i")))


def _assemble(parts: Sequence[tuple[int, int, bytes]], n_steps: int) -> np.ndarray | None:
    """The chunks ``(first, dim, bytes)`` (ascending ``first``) as ``n_steps × dim``, NaN where none."""
    if not parts:
        return None
    dim = parts[0][1]
    out = np.full((n_steps, dim), np.nan, dtype=np.float32)
    for first, d, raw in parts:
        if d != dim or first >= n_steps:
            continue
        v = unpack(raw, d)[: n_steps - first]
        out[first:first + len(v)] = v
    return out


__all__ = ["BATCH", "EncodingStore", "Unencoded", "drop_vectors"]
