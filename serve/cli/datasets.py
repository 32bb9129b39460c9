"""``triage datasets generate|import|card`` and ``triage label apply|review``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from model.core.errors import InputError, TriageError
from serve.cli.output import fail

datasets_app = typer.Typer(help="Training data: generate, import, describe, export.",
                           no_args_is_help=True)
label_app = typer.Typer(help="Labels: label the imported logs; review labels by hand.", no_args_is_help=True)


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
    out: Annotated[Path, typer.Option(metavar="FILE", help="The JSON-lines file to write.")] = Path(
        "datasets/generated/traces.jsonl"),
    n: Annotated[int | None, typer.Option("--n", metavar="N", help="How many traces (default: the parameters file's).")]
    = None,
    seed: Annotated[int | None, typer.Option(metavar="N", help="The seed (default: the parameters file's).")] = None,
    params: Annotated[Path, typer.Option(metavar="FILE", help="The parameters file (its section generate).")]
    = Path("params.yaml"),
) -> None:
    """Generate labelled synthetic traces.

    The pipeline's generate stage, with --n and --seed able to override its parameters.
    """
    from model.data.datagen.generator import GenerateConfig, generate, write_jsonl

    try:
        section = _params(params, "generate")
        if n is not None:
            section["n_traces"] = n
        if seed is not None:
            section["seed"] = seed
        cfg = GenerateConfig.from_params(section)
    except InputError as exc:
        raise fail(str(exc)) from None
    count = write_jsonl(generate(cfg), out)
    typer.echo(f"wrote {count} traces to {out}")


@datasets_app.command("import")
def import_cmd(
    path: Annotated[Path, typer.Argument(
        metavar="PATH", help="A file, a folder, or a JSON-lines file with one trace per line.")],
    format: Annotated[str, typer.Option(
        "--format", metavar="FORMAT", help="auto, native, openai, otel or openinference.")] = "auto",
    raw_dir: Annotated[Path, typer.Option(metavar="DIR", help="Where the raw logs are kept.")] = Path("datasets/raw"),
    speaker: Annotated[list[str] | None, typer.Option(
        metavar="NAME=ROLE", help="In a multi-agent log, the role of a speaker (repeatable).")] = None,
) -> None:
    """Import agent logs as training data.

    Every file is read first; then the logs are copied into datasets/raw/ (never changed afterwards)
    and a record is added to its manifest. Importing the same logs again does nothing.
    """
    from model.data.labelling.raw import import_logs

    speakers: dict[str, str] = {}
    for item in speaker or []:
        name, sep, role = item.partition("=")
        if not sep or not name or not role:
            raise fail(f"--speaker: expected NAME=ROLE, got {item!r}")
        speakers[name] = role
    try:
        rec, added = import_logs(path, raw_dir, format=format, speakers=speakers or None)
    except TriageError as exc:
        raise fail(str(exc)) from None
    verb = "imported" if added else "already imported"
    typer.echo(f"{verb} {rec.traces} traces from {len(rec.files)} file(s) as {rec.id} in {raw_dir}")


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
    summary: Annotated[Path, typer.Option(metavar="FILE", help="The split stage's summary.")] = Path(
        "datasets/splits/summary.json"),
    card: Annotated[Path, typer.Option(metavar="FILE", help="The data card to update.")] = Path("datasets/README.md"),
    check: Annotated[bool, typer.Option(help="Change nothing; exit 1 when the card's counts are out of date.")]
    = False,
) -> None:
    """Update the count tables of the data card.

    The tables come from the pipeline's summary and go between the card's counts markers.
    """
    try:
        data = json.loads(summary.read_text(encoding="utf-8"))
        text = card.read_text(encoding="utf-8")
    except (OSError, ValueError) as exc:
        raise fail(f"{exc}") from None
    if CARD_BEGIN not in text or CARD_END not in text:
        raise fail(f"{card}: the markers {CARD_BEGIN!r} … {CARD_END!r} are missing")
    head, rest = text.split(CARD_BEGIN, 1)
    _, tail = rest.split(CARD_END, 1)
    new = head + CARD_BEGIN + "\n\n" + render_counts(data) + "\n" + CARD_END + tail
    if check:
        if new != text:
            typer.echo(f"{card} is out of date: run 'triage datasets card'", err=True)
            raise typer.Exit(code=1)
        return
    card.write_text(new, encoding="utf-8")
    typer.echo(f"updated the counts in {card}")


@label_app.command("apply")
def apply_cmd(
    params: Annotated[Path, typer.Option(metavar="FILE", help="The parameters file (its section label).")]
    = Path("params.yaml"),
    generated: Annotated[Path, typer.Option(metavar="FILE", help="The generated traces.")]
    = Path("datasets/generated/traces.jsonl"),
    out: Annotated[Path, typer.Option(metavar="FILE", help="The labelled traces to write.")]
    = Path("datasets/labelled/traces.jsonl"),
) -> None:
    """Label the training data (the pipeline's label stage).

    Generated traces keep their labels; imported logs get weak labels from the rules; a human
    label, where there is one, wins.
    """
    from model.data.labelling.stage import LabelConfig, run

    try:
        s = run(LabelConfig.from_params(_params(params, "label")), generated, out)
    except TriageError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"labelled {s['traces']} traces: {s['generated']} generated, {s['imported']} imported, "
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
        metavar="FILE", help="Labelled traces (JSON lines), such as datasets/labelled/traces.jsonl "
                             "(not with --from-store).")] = None,
    human: Annotated[Path, typer.Option(metavar="FILE", help="The human labels' file (appended to as you go).")]
    = Path("datasets/labels/human.jsonl"),
    everything: Annotated[bool, typer.Option(
        "--all", help="Review every trace without a human label, not only the uncertain ones.")] = False,
    labeller: Annotated[str, typer.Option(metavar="NAME", help="Your name, stored with each label.")] = "human",
    from_store: Annotated[bool, typer.Option(
        "--from-store", help="Review the service's stored runs instead, the most uncertain first; the labels are "
                             "stored as the API stores them.")] = False,
    tenant: Annotated[str, typer.Option(metavar="TENANT", help="With --from-store: whose runs.")] = "local",
    store_url: Annotated[str | None, typer.Option(
        "--store", metavar="URL",
        help="With --from-store: the database URL (default: TRIAGE_DATABASE_URL, else the data folder's).")] = None,
    author: Annotated[str | None, typer.Option(
        metavar="NAME", help="With --from-store: the labels' author (default: cli:LOGIN, your login name).")] = None,
    order: Annotated[str | None, typer.Option(
        metavar="ORDER",
        help="With --from-store: random (seeded by the author: stable across runs), margin (the most uncertain "
             "first) or queue (uncertain first, near-duplicates once); default: the one measured best against "
             "random order (reports/learning.md).")] = None,
) -> None:
    """Label uncertain traces by hand, one at a time.

    One key press per label; each label is saved at once, so a review can stop and resume.
    """
    if from_store:
        if path is not None:
            raise fail("give a file or --from-store, not both")
        _review_store(tenant, store_url, author, order)
        return
    if path is None:
        raise fail("say what to review: a labelled JSONL file, or --from-store (the service's history)")
    from model.core.kinds import FailureKind
    from model.data.datagen.generator import read_jsonl
    from model.data.labelling.human import HumanLabel, HumanLabelStore
    from serve.services.label_queue import KIND_KEYS, compact, file_review_queue, legend

    try:
        traces = list(read_jsonl(path))
        store = HumanLabelStore(human)
        done = set(store.load())
    except (TriageError, OSError) as exc:
        raise fail(str(exc)) from None
    queue = file_review_queue(traces, done, everything=everything)
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
    """``label review --from-store``: see :mod:`serve.services.label_queue` and :mod:`serve.cli.label_review`."""
    import getpass

    from model.diagnosis.diagnoser import Diagnoser
    from serve.cli.label_review import TerminalKeys, run_review
    from serve.services.label_queue import DEFAULT_ORDER, operating_points, review_queue
    from serve.settings import get_settings
    from serve.store import check_tenant_name
    from serve.wiring import build_service, load_runscorer

    settings = get_settings()
    if store_url:
        settings = settings.model_copy(update={"database_url": store_url})
    who = author if author is not None else f"cli:{getpass.getuser()}"
    if not who.strip():
        raise fail("--author: give a name (or leave it out for cli:<user>)")
    try:
        check_tenant_name(tenant)
        scorer = load_runscorer(settings)
        # rules only: the review diagnoses nothing, it needs the store, the scorer's operating
        # point, and the service's add_label (the API's code path)
        service = build_service(settings, Diagnoser(runscorer=scorer))
    except TriageError as exc:
        raise fail(str(exc)) from None
    try:
        how = order or DEFAULT_ORDER
        # the run's agent (traces.agent): the streams the threshold reads are the agent's
        queue, done = review_queue(service.stores.labels, tenant, author=who,
                                   threshold_for=operating_points(service, tenant, scorer), order=how)
        first = {"margin": "most uncertain first", "queue": "uncertain first, near-duplicates once"}.get(
            how, "in random order")
        print(f"{len(queue)} trace(s) of tenant {tenant!r} to review, {first} "
              f"({done} already labelled by {who})")
        run_review(service, tenant, queue, author=who, keys=TerminalKeys(), out=sys.stdout)
    except TriageError as exc:
        raise fail(str(exc)) from None
    finally:
        service.close()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""
    app.add_typer(datasets_app, name="datasets")
    app.add_typer(label_app, name="label")
