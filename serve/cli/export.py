"""``triage datasets export --from-store``: the failure history as a labelled dataset.

One native Trace per JSONL line (the format ``triage datasets generate`` writes and the training
pipeline reads), its ``labels`` built from what the history knows, strongest source first:

1. **labels** (``POST /v1/traces/{id}/labels``, or ``POST /v1/outcomes`` with ``label``): when a
   trace has any, its effective label (:mod:`serve.services.run_labels`: per author the newest, a human's
   over a checker's) gives ``labels.failed`` and the failures it located, ``source`` ``human`` or
   ``checker``; a run labelled only ``{"failed": true}`` exports as failed with no failure kind;
2. **repair outcomes**: a recommendation that fixed its failure confirms that failure
   (confidence 0.9); one whose outcomes all failed keeps it at 0.6 (the diagnosis may have been
   right and the repair too weak, or the diagnosis wrong);
3. with ``--include-unconfirmed``, the diagnoses themselves as weak ``rule_vote`` labels (the
   fused confidence), healthy diagnoses as healthy traces; an unknown verdict (``healthy: null``,
   content not recorded) gives no label.

Stored text is redacted (``[REDACTED:email]`` and friends, or HMAC tokens in hash mode), and the
service diagnoses the redacted text too. Every exported trace says so in ``metadata.redaction``; the
training pipeline should run the same :class:`serve.redaction.Redactor` over its other sources, so
that placeholders are a token the model has seen everywhere rather than a signal peculiar to
production traces. The share of redacted tokens is small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from model.core.errors import TriageError
from model.core.kinds import FailureKind
from model.core.schema import FailureLabel, LabelSource, Trace, TraceLabels
from serve.services.run_labels import effective_label
from serve.settings import get_settings

_console = Console(stderr=True)
_KINDS = {k.value for k in FailureKind}


def _fail(message: str) -> typer.Exit:
    _console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def labels_for(record: dict[str, Any], *, include_unconfirmed: bool) -> TraceLabels | None:
    """The labels of one stored trace (see the module docstring), or None when nothing is known."""
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


def export(
    from_store: Annotated[
        bool, typer.Option("--from-store", help="Export the service's failure history.")
    ] = False,
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL file to write.")] = Path(
        "datasets/store/history.jsonl"
    ),
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's history.")] = None,
    include_unconfirmed: Annotated[
        bool, typer.Option("--include-unconfirmed", help="Also traces with no outcome or human label (weak).")
    ] = False,
) -> None:
    """Write the labelled failure history (store → datasets/) for `triage train`."""
    if not from_store:
        raise _fail("say where from: --from-store (the service's history) is the only source so far")
    from serve.store import open_store  # imported on use: SQLAlchemy/Alembic are slow to import

    settings = get_settings()
    try:
        store = open_store(settings)
        redaction = {
            "rules": sorted(r for r in settings.redact.split(",") if r),
            "mode": settings.redact_mode,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        written = skipped = 0
        by_source: dict[str, int] = {}
        with out.open("w", encoding="utf-8") as sink:
            for record in store.iter_history(tenant):
                labels = labels_for(record, include_unconfirmed=include_unconfirmed)
                if labels is None:
                    skipped += 1
                    continue
                trace = Trace.model_validate(record["trace"])
                trace.labels = labels
                trace.metadata = {
                    **trace.metadata,
                    "tenant": record["tenant"],
                    "redaction": redaction,
                    "stored_at": record["created_at"].isoformat(),
                }
                sink.write(
                    json.dumps(trace.model_dump(mode="json", exclude_none=True), ensure_ascii=False) + "\n"
                )
                written += 1
                by_source[labels.source.value] = by_source.get(labels.source.value, 0) + 1
    except TriageError as exc:
        raise _fail(str(exc)) from None
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_source.items())) or "none"
    typer.echo(f"wrote {written} traces to {out} (labels: {summary}); skipped {skipped} without labels")


def register(app: typer.Typer) -> None:
    """Add ``export`` to the ``datasets`` group (``serve/cli/datasets.py`` owns the group)."""
    from serve.cli.datasets import datasets_app

    datasets_app.command("export")(export)
