"""``triage datasets generate|import|card`` and ``triage label apply|review``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from model.core.errors import InputError, TriageError

_console = Console()
_err = Console(stderr=True)

datasets_app = typer.Typer(help="Generate, import and describe datasets.", no_args_is_help=True)
label_app = typer.Typer(help="Label imported logs and review weak labels.", no_args_is_help=True)


def _fail(message: str) -> typer.Exit:
    _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def _params(path: Path, section: str) -> dict[str, object]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise InputError(f"not valid YAML: {exc}", path=str(path)) from exc
    return dict(data.get(section, {}) or {})


@datasets_app.command("generate")
def generate_cmd(
    out: Annotated[Path, typer.Option(help="JSONL file to write")] = Path("datasets/generated/traces.jsonl"),
    n: Annotated[int | None, typer.Option("--n", help="number of traces (default: params.yaml)")] = None,
    seed: Annotated[int | None, typer.Option(help="master seed (default: params.yaml)")] = None,
    params: Annotated[Path, typer.Option(help="params.yaml with a generate section")] = Path("params.yaml"),
) -> None:
    """Generate labelled traces (the DVC ``generate`` stage, with overrides)."""
    from model.data.datagen.generator import GenerateConfig, generate, write_jsonl

    try:
        section = _params(params, "generate")
        if n is not None:
            section["n_traces"] = n
        if seed is not None:
            section["seed"] = seed
        cfg = GenerateConfig.from_params(section)
    except InputError as exc:
        raise _fail(str(exc)) from None
    count = write_jsonl(generate(cfg), out)
    _console.print(f"wrote {count} traces to {out}")


@datasets_app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(help="a file, a folder, or JSONL with one trace per line")],
    format: Annotated[str, typer.Option("--format", help="auto|native|openai|otel|openinference")] = "auto",
    raw_dir: Annotated[Path, typer.Option(help="where raw logs are kept")] = Path("datasets/raw"),
    speaker: Annotated[list[str] | None, typer.Option(help="NAME=ROLE for multi-agent logs (repeatable)")] = None,
) -> None:
    """Copy logs into ``datasets/raw/`` (immutable) after checking every file reads; add a manifest record."""
    from model.data.labelling.raw import import_logs

    speakers: dict[str, str] = {}
    for item in speaker or []:
        name, sep, role = item.partition("=")
        if not sep or not name or not role:
            raise _fail(f"--speaker: expected NAME=ROLE, got {item!r}")
        speakers[name] = role
    try:
        rec, added = import_logs(path, raw_dir, format=format, speakers=speakers or None)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    verb = "imported" if added else "already imported"
    _console.print(f"{verb} {rec.traces} traces from {len(rec.files)} file(s) as {rec.id} in {raw_dir}")


CARD_BEGIN = "<!-- counts:begin (written by `triage datasets card`; do not edit by hand) -->"
CARD_END = "<!-- counts:end -->"


def _table(title: str, rows: dict[str, Any], cols: list[str]) -> str:
    out = [f"**{title}**", "", "| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for k, v in rows.items():
        vals = v if isinstance(v, list) else [v]
        out.append("| " + " | ".join([str(k)] + [str(x) for x in vals]) + " |")
    return "\n".join(out) + "\n"


def render_counts(summary: dict[str, Any]) -> str:
    """The data card's count tables from ``datasets/splits/summary.json``."""
    splits = summary["splits"]
    total = summary["total"]
    names = list(splits)
    parts = [f"Totals: {total['traces']} traces, {total['steps']} steps, {total['healthy']} without a failure; "
             f"length min {total['length']['min']}, median {total['length']['median']}, "
             f"max {total['length']['max']} steps.\n"]
    kinds = sorted(total["kinds_traces"])
    rows: dict[str, Any] = {}
    for k in kinds:
        by_lang = total["kinds_by_language"].get(k, {})
        rows[k] = [total["kinds_traces"][k], total["kinds_steps"].get(k, 0), by_lang.get("en", 0), by_lang.get("zh", 0)]
        rows[k] += [splits[n]["kinds_traces"].get(k, 0) for n in names]
    parts.append(_table("Failure kinds (traces with the kind; labelled steps; by language; traces per split)",
                        rows, ["kind", "traces", "steps", "en", "zh"] + names))
    parts.append(_table("Splits", {n: [splits[n]["traces"], splits[n]["groups"], splits[n]["healthy"],
                                        splits[n]["languages"].get("en", 0), splits[n]["languages"].get("zh", 0)]
                                   for n in names}, ["split", "traces", "groups", "healthy", "en", "zh"]))
    fams = {f: [c] + [splits[n]["families"].get(f, 0) for n in names]
            for f, c in total["families"].items()}
    parts.append(_table("Task families (traces; per split)", fams, ["family", "traces"] + names))
    parts.append(_table("Languages", dict(total["languages"]), ["language", "traces"]))
    return "\n".join(parts)


@datasets_app.command("card")
def card_cmd(
    summary: Annotated[Path, typer.Option(help="the split stage's summary")] = Path("datasets/splits/summary.json"),
    card: Annotated[Path, typer.Option(help="the data card to update")] = Path("datasets/README.md"),
    check: Annotated[bool, typer.Option(help="exit 1 when the card's counts are out of date")] = False,
) -> None:
    """Write the count tables of the data card from the pipeline's summary (between the markers)."""
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
        text = card.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise _fail(f"{exc}") from None
    if CARD_BEGIN not in text or CARD_END not in text:
        raise _fail(f"{card}: the markers {CARD_BEGIN!r} … {CARD_END!r} are missing")
    head, rest = text.split(CARD_BEGIN, 1)
    _, tail = rest.split(CARD_END, 1)
    new = head + CARD_BEGIN + "\n\n" + render_counts(data) + "\n" + CARD_END + tail
    if check:
        if new != text:
            _err.print(f"{card} is out of date: run `triage datasets card`")
            raise typer.Exit(code=1)
        return
    card.write_text(new, encoding="utf-8")
    _console.print(f"updated the counts in {card}")


@label_app.command("apply")
def apply_cmd(
    params: Annotated[Path, typer.Option(help="params.yaml with a label section")] = Path("params.yaml"),
    generated: Annotated[Path, typer.Option()] = Path("datasets/generated/traces.jsonl"),
    out: Annotated[Path, typer.Option()] = Path("datasets/labelled/traces.jsonl"),
) -> None:
    """Run the label stage: generated traces pass through; imported logs get weak labels; human labels win."""
    from model.data.labelling.stage import LabelConfig, run

    try:
        s = run(LabelConfig.from_params(_params(params, "label")), generated, out)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    _console.print(f"labelled {s['traces']} traces: {s['generated']} generated, {s['imported']} imported, "
                   f"{s['human']} human, {s['review']} to review → {out}")


def _key(prompt: str, allowed: str) -> str:
    """One key press (no Enter) among ``allowed``; Enter comes back as ``\\r``."""
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        ch = typer.getchar()
        sys.stdout.write("\n")
        if ch == "\n":
            ch = "\r"
        if ch in allowed:
            return ch
        sys.stdout.write(f"  (press one of: {' '.join(c if c != chr(13) else 'Enter' for c in allowed)})\n")


@label_app.command("review")
def review_cmd(
    path: Annotated[Path | None, typer.Argument(
        help="labelled traces (JSONL), e.g. datasets/labelled/traces.jsonl (not with --from-store)")] = None,
    human: Annotated[Path, typer.Option(help="human-label file (appended as you go)")] = Path(
        "datasets/labels/human.jsonl"),
    everything: Annotated[bool, typer.Option("--all", help="review every non-human trace, not only uncertain ones")]
    = False,
    labeller: Annotated[str, typer.Option(help="your name, stored with each label")] = "human",
    from_store: Annotated[bool, typer.Option(
        "--from-store", help="review the service's history instead: most uncertain first, labels as the API writes")]
    = False,
    tenant: Annotated[str, typer.Option(help="with --from-store: whose history")] = "local",
    store_url: Annotated[str | None, typer.Option(
        "--store", help="with --from-store: the database URL (default: TRIAGE_DATABASE_URL / the data dir's)")] = None,
    author: Annotated[str | None, typer.Option(help="with --from-store: the labels' author (default cli:<user>)")]
    = None,
    order: Annotated[str | None, typer.Option(
        help="with --from-store: margin (most uncertain first) or queue (uncertainty, near-duplicates once); "
             "default: the measured choice, docs/retraining.md")] = None,
) -> None:
    """Walk uncertain traces one at a time: a key per label, saved as you go, resumable."""
    if from_store:
        if path is not None:
            raise _fail("give a file or --from-store, not both")
        _review_store(tenant, store_url, author, order)
        return
    if path is None:
        raise _fail("say what to review: a labelled JSONL file, or --from-store (the service's history)")
    from model.core.kinds import FailureKind
    from model.data.datagen.generator import read_jsonl
    from model.data.labelling.human import HumanLabel, HumanLabelStore
    from model.data.labelling.review import KIND_KEYS, compact, legend, review_queue

    try:
        traces = list(read_jsonl(path))
        store = HumanLabelStore(human)
        done = set(store.load())
    except (TriageError, OSError) as exc:
        raise _fail(str(exc)) from None
    queue = review_queue(traces, done, everything=everything)
    print(f"{len(queue)} trace(s) to review ({len(done)} already labelled in {human})")
    for n, t in enumerate(queue, 1):
        print(f"\n=== {n}/{len(queue)}  {t.id}  ({t.language or '?'}, {len(t.steps)} steps)")
        print(compact(t))
        weak = [w for w in t.labels.failures if w.kind is not None] if t.labels else []  # weak labels carry a kind
        keep: list[tuple[FailureKind, int | None]] = []
        verdicts = []
        for w in weak:
            assert w.kind is not None
            ch = _key(f"  {w.kind.value} @ step {w.step} (conf {w.confidence:.2f})  [y] keep  [n] reject  [q] quit: ",
                      "ynq")
            if ch == "q":
                print("stopped; progress is saved")
                return
            verdicts.append({"kind": w.kind.value, "step": w.step, "verdict": "keep" if ch == "y" else "reject"})
            if ch == "y":
                keep.append((w.kind, w.step))
        print(f"  add a failure: {legend()}")
        while True:
            ch = _key("  kind key, [Enter] done, [q] quit: ", "".join(KIND_KEYS) + "\rq")
            if ch == "q":
                print("stopped; progress is saved")
                return
            if ch == "\r":
                break
            step = typer.prompt("  step", type=int)
            if not 0 <= step < len(t.steps):
                print(f"  step must be in 0..{len(t.steps) - 1}")
                continue
            keep.append((KIND_KEYS[ch], step))
        store.append(HumanLabel(t.id, keep, labeller=labeller, weak=verdicts))
        print("  saved: " + (", ".join(f"{k.value}@{s}" for k, s in keep) or "healthy"))
    print("\nnothing left to review")


def _review_store(tenant: str, store_url: str | None, author: str | None, order: str | None = None) -> None:
    """``label review --from-store``: see :mod:`serve.offline.label_review`."""
    import getpass

    from model.diagnosis.diagnoser import Diagnoser
    from serve.offline.label_review import DEFAULT_ORDER, TerminalKeys, review_queue, run_review
    from serve.settings import get_settings
    from serve.store import check_tenant_name
    from serve.wiring import build_service, load_runscorer

    settings = get_settings()
    if store_url:
        settings = settings.model_copy(update={"database_url": store_url})
    who = author if author is not None else f"cli:{getpass.getuser()}"
    if not who.strip():
        raise _fail("--author: give a name (or leave it out for cli:<user>)")
    try:
        check_tenant_name(tenant)
        scorer = load_runscorer(settings)
        # rules only: the review diagnoses nothing, it needs the store, the scorer's operating
        # point, and the service's add_label (the API's code path)
        service = build_service(settings, Diagnoser(runscorer=scorer))
    except TriageError as exc:
        raise _fail(str(exc)) from None
    try:
        fixed = scorer.threshold if scorer is not None else None

        def threshold_for(agent: str | None) -> float | None:
            # the run's agent (traces.agent): the streams the threshold reads are the agent's
            rel = service.relative_threshold(tenant, agent, scorer) if agent else None
            return rel if rel is not None else fixed

        how = order or DEFAULT_ORDER
        queue, done = review_queue(service.store, tenant, author=who, threshold_for=threshold_for, order=how)
        first = "most uncertain first" if how == "margin" else "uncertain first, near-duplicates once"
        print(f"{len(queue)} trace(s) of tenant {tenant!r} to review, {first} "
              f"({done} already labelled by {who})")
        run_review(service, tenant, queue, author=who, keys=TerminalKeys(), out=sys.stdout)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    finally:
        service.store.dispose()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(datasets_app, name="datasets")
    app.add_typer(label_app, name="label")
