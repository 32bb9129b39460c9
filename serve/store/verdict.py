"""Which label decides a run's verdict (the rule :func:`serve.services.run_labels.effective_label`
applies, here so that the store can keep the canary's counts of labelled and successful runs on
write, :mod:`serve.store.counters`).

A withdrawn label counts nowhere; a human outranks a checker; among the labels of the ranking type,
the newest (by ``created_at``, then ``id``) decides. A row written before run-level labels
(``failed`` NULL) reads as ``failed = kind is not None``.

>>> from datetime import datetime
>>> t = datetime(2026, 1, 1)
>>> rows = [{"id": 1, "created_at": t, "author_type": "checker", "failed": False},
...         {"id": 2, "created_at": t, "author_type": "human", "failed": True},
...         {"id": 3, "created_at": t, "author_type": "checker", "failed": False}]
>>> deciding_label(rows)["id"], label_failed(deciding_label(rows))
(2, True)
"""

from __future__ import annotations

from typing import Any


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


__all__ = ["deciding_label", "label_failed"]
