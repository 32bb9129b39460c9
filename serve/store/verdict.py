"""A run's verdict, kept as columns of ``traces``, and which label decides a run's verdict.

**The run's columns** (:func:`run_columns`, written by :meth:`serve.store.traces.TraceStore.put_trace`
with every diagnosis; revision 0015 added them, :mod:`serve.store.upkeep` fills older rows):

* ``verdict`` — ``failed`` / ``healthy`` / ``unknown`` (the response's ``healthy``: false / true /
  null); NULL only on a row stored before the column and not backfilled yet;
* ``failure_probability`` — the response's, NULL without one;
* ``judged_threshold`` — the operating point the run scorer judged the run at (the ``runscore``
  finding's ``details.threshold``), NULL when no finding keeps it;
* ``finding_margin`` — the smallest ``|confidence − threshold|`` over the run's failures and signals
  other than the run scorer's (their kinds' thresholds: :data:`KIND_THRESHOLDS`), NULL without one.

The last three are what the label queue's margin is made of (:func:`serve.services.label_queue.measure_margin`),
so that the queue is read from an index, not from every stored response.

**The run's place in the random queue** (``traces.review_key``, revision 0018: :func:`queue_key` of its
id, written with the run's first diagnosis; :mod:`serve.store.upkeep` fills older rows): the label
queue's ``random`` order walks the runs by this key, each reviewer from their own start
(:func:`queue_key` of the author) round to it again, read with a LIMIT from ``ix_traces_review``.

**Which label decides** (the rule :func:`serve.services.run_labels.effective_label` applies, here so
that the store can keep the canary's counts of labelled and successful runs on write,
:mod:`serve.store.counters`): a withdrawn label counts nowhere; a human outranks a checker; among the
labels of the ranking type, the newest (by ``created_at``, then ``id``) decides. A row written before
run-level labels (``failed`` NULL) reads as ``failed = kind is not None``.

>>> from datetime import datetime
>>> t = datetime(2026, 1, 1)
>>> rows = [{"id": 1, "created_at": t, "author_type": "checker", "failed": False},
...         {"id": 2, "created_at": t, "author_type": "human", "failed": True},
...         {"id": 3, "created_at": t, "author_type": "checker", "failed": False}]
>>> deciding_label(rows)["id"], label_failed(deciding_label(rows))
(2, True)
>>> run_columns({"healthy": False, "failure_probability": 0.7,
...              "failures": [{"kind": "loop", "confidence": 0.9, "detector": "loop"}]})["verdict"]
'failed'
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from model.diagnosis.diagnoser import DEFAULT_THRESHOLDS
from model.diagnosis.run_verdict import RUNSCORE

Verdict = Literal["failed", "healthy", "unknown"]
#: The fused findings' thresholds, by kind value (a kind not listed: 0.5).
KIND_THRESHOLDS: dict[str, float] = {k.value: t for k, t in DEFAULT_THRESHOLDS.items()}


def queue_key(text: str) -> int:
    """A run's place in the label queue's random order (of its id: ``traces.review_key``) or a
    reviewer's start in it (of the author): the first 63 bits of the text's sha256 (a signed 64-bit
    integer on both engines).

    >>> queue_key("t1") == queue_key("t1") != queue_key("t2"), 0 <= queue_key("ana") < 2 ** 63
    (True, True)
    """
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1


def verdict_of(healthy: Any) -> Verdict:
    """The verdict of a response's ``healthy`` (``None``: unknown, content not recorded)."""
    return "unknown" if healthy is None else "healthy" if healthy else "failed"


def findings(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The response's failures then signals."""
    return list(response.get("failures") or []) + list(response.get("signals") or [])


def judged_threshold(response: dict[str, Any]) -> float | None:
    """The operating point the run scorer judged the run at, when its finding keeps it."""
    return next((float(f["details"]["threshold"]) for f in findings(response) if f.get("detector") == RUNSCORE
                 and isinstance((f.get("details") or {}).get("threshold"), int | float)), None)


def closest_finding(response: dict[str, Any]) -> tuple[float, str, float, float] | None:
    """The finding (not the run scorer's) whose confidence is closest to its kind's threshold:
    ``(distance, kind, confidence, threshold)``, the first among equals; ``None`` without one."""
    best: tuple[float, str, float, float] | None = None
    for f in findings(response):
        if f.get("detector") == RUNSCORE:
            continue  # its confidence is the failure probability
        conf = f.get("confidence")
        if not isinstance(conf, int | float):
            continue
        thr = KIND_THRESHOLDS.get(str(f.get("kind")), 0.5)
        d = abs(float(conf) - thr)
        if best is None or d < best[0]:
            best = (d, str(f.get("kind")), float(conf), thr)
    return best


def run_columns(response: dict[str, Any]) -> dict[str, Any]:
    """The ``traces`` columns a diagnosis' ``response`` sets (module docstring)."""
    p = response.get("failure_probability")
    near = closest_finding(response)
    return {"verdict": verdict_of(response.get("healthy")),
            "failure_probability": float(p) if isinstance(p, int | float) else None,
            "judged_threshold": judged_threshold(response),
            "finding_margin": None if near is None else near[0]}


def deciding_label(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The label row whose ``failed`` is the run's verdict, or None when no label counts."""
    live = [r for r in rows if r.get("withdrawn_at") is None]
    if not live:
        return None
    tier = "human" if any((r.get("author_type") or "human") == "human" for r in live) else "checker"
    return max((r for r in live if (r.get("author_type") or "human") == tier),
               key=lambda r: (r["created_at"], r.get("id") or 0))


def label_failed(row: dict[str, Any]) -> bool:
    """The verdict of one label row (True: the run failed)."""
    f = row.get("failed")
    return bool(f) if f is not None else row.get("kind") is not None


__all__ = ["KIND_THRESHOLDS", "Verdict", "closest_finding", "deciding_label", "findings",
           "judged_threshold", "label_failed", "queue_key", "run_columns", "verdict_of"]
