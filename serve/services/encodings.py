"""``triage encode-runs``: the stored runs' step vectors, encoded once (the backfill of ``run_encodings``).

A run diagnosed by an agent model that reads the encoder block keeps the vectors it was read with
(:mod:`serve.store.encodings`). Runs stored before revision 0014, or answered by a model without the
block (zero-shot, an n-gram model, a cheap learner), have none, and a retrain whose served
configuration reads the block would encode them. This backfill encodes them once: it pages through the
stored runs in (tenant, trace id) order, ``batch`` at a time, encodes the steps of each run that lack a
vector of this encoder (a session's steps already encoded are kept) and writes the run's vectors whole,
one transaction per batch.

It is **idempotent** (a run whose steps all have a vector of this encoder is skipped without reading
it) and **resumable** (each batch commits; run it again after an interruption and it goes on where the
runs are still unencoded). A run that no longer reads as a trace is counted and left alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from model.core.schema import Trace
from model.scoring.agentmodel.encoded import encode_missing, unencoded
from serve.store.encodings import EncodingStore
from serve.store.traces import TraceStore

#: ``progress(runs looked at, runs in all)``.
Progress = Callable[[int, int], None]


@dataclass
class EncodeResult:
    """What one backfill did: runs looked at, runs encoded, steps encoded, runs unreadable, seconds."""

    looked: int = 0
    encoded: int = 0
    steps: int = 0
    unreadable: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def encode_runs(encodings: EncodingStore, traces: TraceStore, encoder: Any, *, tenant: str | None = None,
                batch: int = 200, progress: Progress | None = None) -> EncodeResult:
    """Encode every stored run (of ``tenant``, else of every tenant) whose steps lack vectors of ``encoder``
    (a :class:`~model.scoring.encoder.StaticEncoder`), ``batch`` runs a transaction."""
    start = time.perf_counter()
    out = EncodeResult()
    total = encodings.count_runs(tenant)
    after: tuple[str, str] | None = ("", "")
    while after is not None:
        todo, after, looked = encodings.unencoded(encoder.version, tenant=tenant, after=after, limit=batch)
        if after is None:
            break
        read: list[tuple[str, str, Trace]] = []
        for run in todo:
            got = traces.get_trace_json(run.tenant, run.trace_id)
            if got is None:  # deleted meanwhile
                continue
            try:
                read.append((run.tenant, run.trace_id, Trace.model_validate(got[1])))
            except ValidationError:
                out.unreadable += 1
        known: dict[tuple[str, str], np.ndarray] = {}  # the page's stored vectors: one read a tenant
        for ten in {t for t, _, _ in read}:
            got_v = encodings.vectors(ten, [(tid, len(tr.steps)) for t, tid, tr in read if t == ten], encoder.version)
            known.update({(ten, tid): v for tid, v in got_v.items()})
        done: list[tuple[str, str, Any]] = []
        for ten, tid, trace in read:
            have = known.get((ten, tid))
            out.steps += len(unencoded(trace.steps, have))
            done.append((ten, tid, encode_missing(encoder, trace.steps, have)))
        if done:
            with encodings.write() as db:
                for ten, tid, vectors in done:
                    encodings.put(db, ten, tid, 0, encoder.version, vectors)
            out.encoded += len(done)
        out.looked += looked
        if progress is not None:
            progress(out.looked, max(total, out.looked))
    out.seconds = time.perf_counter() - start
    return out


__all__ = ["EncodeResult", "Progress", "encode_runs"]
