"""``triage`` model commands: ``baseline``, ``train``, ``distill``, ``export``, ``evaluate``
(``--real``: the real-run evaluation). The training commands need the ``train`` extra (torch, transformers,
scikit-learn); they import it only when run. Each one is the same code the DVC stage runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from model.core.errors import TriageError

Params = Annotated[Path, typer.Option("--params", help="params.yaml holding the stage's section.")]
Splits = Annotated[Path, typer.Option("--splits", help="Folder with train/val/test/heldout_families.jsonl.")]
Build = Annotated[Path, typer.Option("--build", help="Working folder of the trained candidates.")]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def _need_training_extra() -> None:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise _fail(f"this command needs the training extra (pip install -e '.[train]'): {exc}") from exc


def _learning_curve(params: Path, root: Path | None, reports: Path, limit: int | None) -> None:
    try:
        import matplotlib  # noqa: F401
        import sklearn  # noqa: F401  (the cheap learners it is judged against)
    except ImportError as exc:
        raise _fail(f"triage evaluate --learning-curve needs the train extra (pip install -e '.[train]'): {exc}") from exc
    from model.training.agentmodel import learning

    try:
        cfg = learning.LearningConfig.from_params(params)
        if limit is not None:
            cfg = learning.LearningConfig.from_dict({**learning._cfg_dict(cfg), "limit": limit})
        report = learning.run(cfg, root, progress=typer.echo)
        paths = learning.write(report, reports)
    except (TriageError, OSError) as exc:
        raise _fail(str(exc)) from exc
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
        raise _fail(f"triage evaluate --real needs the train extra (pip install -e '.[train]'): {exc}") from exc
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
        raise _fail(str(exc)) from exc
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
                     out: Path = Path("build/classifier/baseline")) -> None:
        """Train the TF-IDF + logistic-regression baseline."""
        from model.training.classifier import baseline
        from model.training.classifier.config import BaselineConfig

        try:
            info = baseline.run(BaselineConfig.from_params(params), splits, out)
        except TriageError as exc:
            raise _fail(str(exc)) from exc
        typer.echo(f"baseline: val step macro-F1 {info['val_step_macro_f1']:.4f} -> {out}")

    @app.command("train")
    def train_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                  out: Path = Path("build/classifier/minilm")) -> None:
        """Fine-tune all-MiniLM-L6-v2 (resumes from OUT/checkpoint.pt)."""
        _need_training_extra()
        from model.training.classifier import train
        from model.training.classifier.config import TrainConfig

        try:
            info = train.run(TrainConfig.from_params(params), splits, out)
        except TriageError as exc:
            raise _fail(str(exc)) from exc
        typer.echo(f"minilm: val step macro-F1 {info['val_step_macro_f1']:.4f} -> {out}/best")

    @app.command("distill")
    def distill_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                    teacher: str = "build/classifier/minilm/best",
                    out: Path = Path("build/classifier/student")) -> None:
        """Train the small student on the teacher's soft labels ("none": ground truth only)."""
        _need_training_extra()
        from model.training.classifier import distill
        from model.training.classifier.config import DistillConfig

        try:
            info = distill.run(DistillConfig.from_params(params), splits,
                               None if teacher == "none" else Path(teacher), out)
        except TriageError as exc:
            raise _fail(str(exc)) from exc
        typer.echo(f"student: val step macro-F1 {info['val_step_macro_f1']:.4f} -> {out}/best")

    @app.command("export")
    def export_cmd(params: Params = Path("params.yaml"), build: Build = Path("build/classifier"),
                   splits: Splits = Path("datasets/splits"),
                   artifacts: Path = Path("model/artifacts")) -> None:
        """Export every candidate to ONNX (fp32, fused, int8) and ship the best within the latency target."""
        _need_training_extra()
        from model.training.classifier import export

        try:
            export.main(["--params", str(params), "--build", str(build), "--splits", str(splits),
                         "--artifacts", str(artifacts)])
        except (TriageError, FileNotFoundError) as exc:
            raise _fail(str(exc)) from exc

    @app.command("evaluate")
    def evaluate_cmd(params: Params = Path("params.yaml"), splits: Splits = Path("datasets/splits"),
                     build: Build = Path("build/classifier"), reports: Path = Path("reports"),
                     artifacts: Path = Path("model/artifacts"),
                     real: Annotated[bool, typer.Option(
                         "--real", help="The real-run evaluation (leave-one-source-out) instead: "
                                        "reports/real.json, reports/real.md and figures.")] = False,
                     root: Annotated[Path | None, typer.Option(
                         "--root", help="With --real / --learning-curve: the vendored real sets (default datasets/real).")] = None,
                     limit: Annotated[int | None, typer.Option(
                         "--limit", min=2, help="With --real: only the first N tasks of each set; with --learning-curve: "
                                                "about N runs a set (a quick look).")] = None,
                     semantic: Annotated[Path, typer.Option(
                         "--semantic", help="With --real: the frozen semantic cases to report too.")]
                     = Path("datasets/semantic/cases.jsonl"),
                     learning_curve: Annotated[bool, typer.Option(
                         "--learning-curve", help="The agent model's learning curve instead (params.yaml → "
                                                  "learning_curve): reports/learning.json, reports/learning.md, "
                                                  "reports/learning-figures/learning_curve.png.")] = False) -> None:
        """Write reports/metrics.json, reports/eval.md (+ PNGs) and the model card; with --real, the
        real-run evaluation that picks the model (reports/real.json, reports/real.md)."""
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
            raise _fail(str(exc)) from exc
        typer.echo(f"{m['evaluated']}: test macro-F1 {m['test']['macro_f1']:.4f}, held-out families "
                   f"{m['heldout_families']['macro_f1']:.4f}, localisation exact "
                   f"{m['step_localisation']['exact']:.3f} -> {reports}/metrics.json")
