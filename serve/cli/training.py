"""``triage`` model commands: ``baseline``, ``train``, ``distill``, ``export``, ``evaluate``
(``--real``: the real-run evaluation; ``--learning-curve``: the agent model's). The training commands need the ``train`` extra (torch, transformers,
scikit-learn); they import it only when run. Each one is the same code the DVC stage runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer

from model.core.errors import TriageError
from serve.cli.output import fail

Params = Annotated[Path, typer.Option("--params", metavar="FILE", help="The parameters file (its section for this step).")]
Splits = Annotated[Path, typer.Option(
    "--splits", metavar="DIR", help="The folder with train, val, test and heldout_families .jsonl files.")]
Build = Annotated[Path, typer.Option("--build", metavar="DIR", help="The working folder of the trained models.")]
Reports = Annotated[Path, typer.Option("--reports", metavar="DIR", help="Where the reports go.")]
Artifacts = Annotated[Path, typer.Option(
    "--artifacts", metavar="DIR", help="The shipped models' folder (the service loads them from there).")]


def _need_training_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise fail(f"this command needs the training extra (pip install -e '.[train]'): {exc}") from exc


def _learning_curve(params: Path, root: Path | None, reports: Path, limit: int | None) -> None:
    try:
        import matplotlib  # noqa: F401
        import sklearn  # noqa: F401  (the cheap learners it is judged against)
    except ImportError as exc:
        raise fail(f"triage evaluate --learning-curve needs the train extra (pip install -e '.[train]'): {exc}") from exc
    from model.training.agentmodel import learning

    try:
        cfg = learning.LearningConfig.from_params(params)
        if limit is not None:
            cfg = dataclasses.replace(cfg, limit=limit)
        report = learning.run(cfg, root, progress=typer.echo)
        paths = learning.write(report, reports)
    except (TriageError, OSError) as exc:
        raise fail(str(exc)) from exc
    dw = report["done_when"]
    if "mean_diff_vs_better" in dw:
        m = dw["mean_diff_vs_better"]
        typer.echo(f"agent − better cheap learner at K = 100, mean over {len(dw['per_set'])} sets: "
                   f"{m['diff']:+.3f} [{m['interval'][0]:+.3f}, {m['interval'][1]:+.3f}]")
    for p in paths:
        typer.echo(str(p))


def _evaluate_real(params: Path, root: Path | None, reports: Path, limit: int | None, semantic: Path,
                   card: Path | None) -> None:
    import yaml
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from model.training.runscore import evaluate as real_eval
    from model.training.runscore.train import RunScoreConfig

    try:
        import matplotlib  # noqa: F401  (the report's figures; checked before the long part)
    except ImportError as exc:
        raise fail(f"triage evaluate --real needs the train extra (pip install -e '.[train]'): {exc}") from exc
    try:
        config = RunScoreConfig.from_params(params)
        section = (yaml.safe_load(params.read_text(encoding="utf-8")) or {}).get("evaluate_real", {}) or {}
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("reading the real runs", total=None)

            def tick(done: int, total: int) -> None:
                bar.update(task, total=total, completed=done, description="features and rules")

            report = real_eval.run(root, reports, config.as_params(), limit=limit, progress=tick,
                                   semantic=semantic, seed=int(section.get("seed", 0)), card=card,
                                   in_domain_folds=int(section.get("in_domain_folds", 5)))
    except (TriageError, OSError) as exc:
        raise fail(str(exc)) from exc
    for s, e in report["sets"].items():
        parts = [f"{s:<18}"]
        if "auroc" in e:
            b = e["vs_best_baseline"]
            parts.append(f"AUROC {e['auroc']['auroc']:.3f} [{e['auroc']['ci'][0]:.3f}, {e['auroc']['ci'][1]:.3f}]"
                         f" ({b['baseline']} {e['baselines'][b['baseline']]['auroc']:.3f}; diff {b['diff']:+.3f}"
                         f" [{b['ci'][0]:+.3f}, {b['ci'][1]:+.3f}])")
            op = e["operating_point"]
            parts.append(f"false alarms {100 * op['false_alarms']['rate']:.1f} %, recall {100 * op['recall']['rate']:.1f} %")
        if e.get("localisation"):
            loc = e["localisation"]
            parts.append(f"exact {loc['ours']['exact']:.3f} vs {loc['best_baseline']} "
                         f"{loc['baselines'][loc['best_baseline']]['exact']:.3f}")
        typer.echo("  ".join(parts))
    typer.echo(f"-> {reports}/real.json, {reports}/real.md")


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app``."""

    @app.command("baseline")
    def baseline_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                     out: Annotated[Path, typer.Option(metavar="DIR", help="Where the model goes.")]
                     = Path("build/classifier/baseline")) -> None:
        """Train the baseline step classifier.

        TF-IDF features and a logistic regression: what the fine-tuned classifier must beat.
        """
        from model.training.classifier import baseline
        from model.training.classifier.config import BaselineConfig

        try:
            info = baseline.run(BaselineConfig.from_params(params), splits, out)
        except TriageError as exc:
            raise fail(str(exc)) from exc
        typer.echo(f"baseline: val step macro-F1 {info['val_step_macro_f1']:.4f} -> {out}")

    @app.command("train")
    def train_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                  out: Annotated[Path, typer.Option(
                      metavar="DIR", help="Where the model goes; a checkpoint there is resumed.")]
                  = Path("build/classifier/minilm")) -> None:
        """Fine-tune the step classifier (all-MiniLM-L6-v2).

        Needs the train extra. Resumes from DIR/checkpoint.pt when there is one.
        """
        _need_training_extra()
        from model.training.classifier import train
        from model.training.classifier.config import TrainConfig

        try:
            info = train.run(TrainConfig.from_params(params), splits, out)
        except TriageError as exc:
            raise fail(str(exc)) from exc
        typer.echo(f"minilm: val step macro-F1 {info['val_step_macro_f1']:.4f} -> {out}/best")

    @app.command("distill")
    def distill_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                    teacher: Annotated[str, typer.Option(
                        metavar="DIR", help="The fine-tuned model to learn from; 'none': the labels only.")]
                    = "build/classifier/minilm/best",
                    out: Annotated[Path, typer.Option(metavar="DIR", help="Where the model goes.")]
                    = Path("build/classifier/student")) -> None:
        """Train the small step classifier from the fine-tuned one.

        The small model learns the large one's predicted probabilities (distillation), or only the
        labels with --teacher none. Needs the train extra.
        """
        _need_training_extra()
        from model.training.classifier import distill
        from model.training.classifier.config import DistillConfig

        try:
            info = distill.run(DistillConfig.from_params(params), splits,
                               None if teacher == "none" else Path(teacher), out)
        except TriageError as exc:
            raise fail(str(exc)) from exc
        typer.echo(f"student: val step macro-F1 {info['val_step_macro_f1']:.4f} -> {out}/best")

    @app.command("export")
    def export_cmd(params: Params = Path("params.yaml"), build: Build = Path("build/classifier"),
                   splits: Splits = Path("datasets/splits"),
                   artifacts: Artifacts = Path("model/artifacts")) -> None:
        """Export the trained step classifiers to ONNX and ship the best.

        Each model is exported three ways (fp32, fused, int8); the best one within the latency target
        is copied to the shipped models' folder. Needs the train extra.
        """
        _need_training_extra()
        from model.training.classifier import export

        try:
            export.main(["--params", str(params), "--build", str(build), "--splits", str(splits),
                         "--artifacts", str(artifacts)])
        except (TriageError, FileNotFoundError) as exc:
            raise fail(str(exc)) from exc

    @app.command("evaluate")
    def evaluate_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                     build: Build = Path("build/classifier"), reports: Reports = Path("reports"),
                     artifacts: Artifacts = Path("model/artifacts"),
                     real: Annotated[bool, typer.Option(
                         "--real", help="Evaluate the run scorer on the real runs instead (each set held out "
                                        "in turn): reports/real.json, reports/real.md and figures.")] = False,
                     root: Annotated[Path | None, typer.Option(
                         "--root", metavar="DIR",
                         help="With --real or --learning-curve: the real sets (default: datasets/real).")] = None,
                     limit: Annotated[int | None, typer.Option(
                         "--limit", min=2, metavar="N",
                         help="A quick look: with --real, the first N tasks of each set; with --learning-curve, "
                              "about N runs a set.")] = None,
                     semantic: Annotated[Path, typer.Option(
                         "--semantic", metavar="FILE",
                         help="With --real: the hand-written semantic cases (never trained on) to report too.")]
                     = Path("datasets/semantic/cases.jsonl"),
                     learning_curve: Annotated[bool, typer.Option(
                         "--learning-curve", help="The agent model's learning curve instead (section "
                                                  "learning_curve of the parameters): reports/learning.json, "
                                                  "reports/learning.md and a figure.")] = False) -> None:
        """Evaluate the step classifier and write its reports.

        Writes reports/metrics.json, reports/eval.md with its figures, and the model card. With --real:
        the evaluation on real runs that picks the shipped run scorer (reports/real.json,
        reports/real.md). With --learning-curve: how the agent model improves with labelled runs.
        Needs the train extra (matplotlib for the figures).
        """
        if learning_curve:
            _learning_curve(params, root, reports, limit)
            return
        if real:  # a quick look (--limit) leaves the model card alone
            _evaluate_real(params, root, reports, limit, semantic,
                           None if limit is not None else artifacts / "MODEL_CARD.md")
            return
        from model.training.classifier import evaluate
        from model.training.classifier.config import EvaluateConfig

        try:
            m = evaluate.run(EvaluateConfig.from_params(params), splits, build, reports, artifacts)
        except (TriageError, FileNotFoundError) as exc:
            raise fail(str(exc)) from exc
        typer.echo(f"{m['evaluated']}: test macro-F1 {m['test']['macro_f1']:.4f}, held-out families "
                   f"{m['heldout_families']['macro_f1']:.4f}, localisation exact "
                   f"{m['step_localisation']['exact']:.3f} -> {reports}/metrics.json")
