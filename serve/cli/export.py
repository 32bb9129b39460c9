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
from typing import Annotated

import typer

from model.core.errors import TriageError
from model.core.schema import Trace
from serve.cli.output import fail
from serve.services.run_labels import labels_for
from serve.settings import get_settings


def export(
    from_store: Annotated[
        bool, typer.Option("--from-store", help="Export the service's stored runs (the only source so far).")
    ] = False,
    out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE", help="The JSON-lines file to write.")] = Path(
        "datasets/store/history.jsonl"
    ),
    tenant: Annotated[str | None, typer.Option("--tenant", metavar="TENANT", help="Only this tenant's runs.")] = None,
    include_unconfirmed: Annotated[
        bool, typer.Option("--include-unconfirmed",
                           help="Also the runs with no label and no repair outcome, labelled by their diagnosis (weak).")
    ] = False,
) -> None:
    """Export the service's labelled runs as training data.

    One trace per line, labelled from what the service knows of it: its labels first, then the
    outcomes of its repairs. Stored text stays redacted.
    """
    if not from_store:
        raise fail("say where from: --from-store (the service's history) is the only source so far")
    from serve.store import open_stores  # imported on use: SQLAlchemy/Alembic are slow to import

    settings = get_settings()
    try:
        store = open_stores(settings).labels
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
        raise fail(str(exc)) from None
    summary = ", ".join(f"{n} {s}" for s, n in sorted(by_source.items())) or "none"
    typer.echo(f"wrote {written} traces to {out} (labels: {summary}); skipped {skipped} without labels")


def register(app: typer.Typer) -> None:
    """Add ``export`` to the ``datasets`` group (``serve/cli/datasets.py`` owns the group)."""
    from serve.cli.datasets import datasets_app

    datasets_app.command("export")(export)
