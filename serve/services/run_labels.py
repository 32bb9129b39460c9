"""The effective run-level label of a stored trace, from the labels posted on it.

Every row of the ``labels`` table is one verdict by one author (``author_type`` ``human`` or
``checker``): ``failed`` says whether the run failed; ``kind`` / ``step`` / ``source_index``, when
given, say how and where. The rules:

* **an author's newest label wins**: their verdict is the ``failed`` of their newest row; the
  failures they located are those of their rows since their last ``failed=false`` (a reviewer may
  post two failures of one run, one at a time; a later "healthy" clears them);
* **a human outranks a checker**: with any human verdict, checkers' verdicts are ignored;
* between authors of the same type, the newest verdict decides ``failed``; when it is ``failed``,
  the failures are those of every such author whose own verdict is ``failed``.

Rows written before run-level labels (``failed`` NULL) read as ``failed = kind is not None``, as the
migration that added the column filled them.

A label its author withdrew (``POST /v1/labels/undo``: the author's newest label) keeps its row with
``withdrawn_at`` set; the store's readers leave it out, and :func:`effective_label` ignores it too, so
it counts nowhere (effective label, export, retraining, the review queue, the canary's figures).

An outcome posted with ``label`` (``POST /v1/outcomes``) is such a row too: author ``outcome``,
``author_type`` ``human``; a failure kind says the run failed there — at the place of the failure the
recommendation addressed (:func:`addressed_place`) — and ``healthy`` that it did not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from model.core.kinds import FailureKind
from model.core.schema import FailureLabel, LabelSource, TraceLabels
from serve.store.verdict import deciding_label, label_failed

AUTHOR_TYPES = ("human", "checker")
_KINDS = {k.value for k in FailureKind}


@dataclass(frozen=True)
class LocatedFailure:
    kind: str | None
    step: int | None
    source_index: int | None


@dataclass(frozen=True)
class EffectiveLabel:
    failed: bool
    author: str
    author_type: str
    created_at: datetime
    failures: list[LocatedFailure] = field(default_factory=list)
    labels: int = 0  # rows on the trace, every author


def addressed_place(failure_key: str | None, state: dict[str, Any] | None) -> tuple[int | None, int | None]:
    """(step, source_index) of the failure a recommendation addressed: from the repair state's
    record of that failure, else the ``source_index`` in its key (``"<kind>@<source_index>"``)."""
    if not failure_key:
        return None, None
    fs = ((state or {}).get("failures") or {}).get(failure_key) or {}
    step, source = fs.get("step"), fs.get("source_index")
    if source is None:
        tail = failure_key.rpartition("@")[2]
        source = int(tail) if tail.isdigit() else None
    return (step if isinstance(step, int) else None), (source if isinstance(source, int) else None)


def effective_label(rows: list[dict[str, Any]]) -> EffectiveLabel | None:
    """The trace's effective label (see the module docstring), or None when it has no labels."""
    rows = [r for r in rows if r.get("withdrawn_at") is None]
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: (r["created_at"], r.get("id") or 0))
    by_author: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in ordered:
        by_author.setdefault((r.get("author_type") or "human", r.get("author") or ""), []).append(r)
    newest = deciding_label(rows)  # the rule the store's counts keep too (serve/store/verdict.py)
    assert newest is not None
    tier = newest.get("author_type") or "human"
    authors = {k: v for k, v in by_author.items() if k[0] == tier}
    failed = label_failed(newest)
    failures: list[LocatedFailure] = []
    if failed:
        seen: set[LocatedFailure] = set()
        for own in authors.values():
            if not label_failed(own[-1]):
                continue
            cleared = max((i for i, r in enumerate(own) if not label_failed(r)), default=-1)
            for r in own[cleared + 1 :]:
                if r.get("kind") is None and r.get("step") is None:
                    continue  # "it failed", no more said
                f = LocatedFailure(r.get("kind"), r.get("step"), r.get("source_index"))
                if f not in seen:
                    seen.add(f)
                    failures.append(f)
        failures.sort(key=lambda f: (f.step if f.step is not None else 1 << 30, f.kind or ""))
    return EffectiveLabel(
        failed=failed,
        author=newest.get("author") or "",
        author_type=tier,
        created_at=newest["created_at"],
        failures=failures,
        labels=len(rows),
    )


def labels_for(record: dict[str, Any], *, include_unconfirmed: bool) -> TraceLabels | None:
    """The labels of one stored trace (``triage datasets export --from-store``, serve/cli/export.py: its
    effective label, else its repair outcomes, else with ``include_unconfirmed`` the diagnosis as weak
    rule votes), or None when nothing is known."""
    label = effective_label(record["labels"])
    if label is not None:
        source = LabelSource.CHECKER if label.author_type == "checker" else LabelSource.HUMAN
        failures = [
            FailureLabel(
                kind=FailureKind(f.kind) if f.kind in _KINDS else None,
                step=f.step,
                source_index=f.source_index,
                source=source,
            )
            for f in label.failures
            if f.kind in _KINDS or f.step is not None
        ]
        return TraceLabels(
            failed=label.failed, failures=failures, source=source, first_failing_step=_first(failures)
        )
    response = record["response"] or {}
    failures_by_key = {
        f"{f['kind']}@{'-' if f.get('source_index') is None else f['source_index']}": f
        for f in response.get("failures") or []
    }
    outcomes_by_rec: dict[str, list[bool]] = {}
    for o in record["outcomes"]:
        outcomes_by_rec.setdefault(o["recommendation_id"], []).append(bool(o["success"]))
    confirmed: dict[str, FailureLabel] = {}
    for rec in record["recommendations"]:
        key = rec.get("failure_key")
        results = outcomes_by_rec.get(rec["id"])
        if not key or not results or key not in failures_by_key:
            continue
        f = failures_by_key[key]
        conf = 0.9 if any(results) else 0.6
        prev = confirmed.get(key)
        if prev is None or prev.confidence < conf:
            confirmed[key] = FailureLabel(
                kind=FailureKind(f["kind"]),
                step=f.get("step"),
                source_index=f.get("source_index"),
                source=LabelSource.REPAIR_OUTCOME,
                confidence=conf,
            )
    if confirmed:
        failures = sorted(confirmed.values(), key=lambda x: x.step if x.step is not None else 1 << 30)
        return TraceLabels(
            failures=failures, source=LabelSource.REPAIR_OUTCOME, first_failing_step=_first(failures)
        )
    if not include_unconfirmed or response.get("healthy", False) is None:
        return None  # a verdict of "unknown" (content not recorded) is no label, not "healthy"
    weak = [
        FailureLabel(
            kind=FailureKind(f["kind"]),
            step=f.get("step"),
            source_index=f.get("source_index"),
            source=LabelSource.RULE_VOTE,
            confidence=float(f["confidence"]),
        )
        for f in failures_by_key.values()
    ]
    return TraceLabels(failures=weak, source=LabelSource.RULE_VOTE, first_failing_step=_first(weak))


def _first(failures: list[FailureLabel]) -> int | None:
    steps = [f.step for f in failures if f.step is not None]
    return min(steps) if steps else None
