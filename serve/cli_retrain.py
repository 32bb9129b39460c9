"""``triage retrain [--tenant T]`` and ``triage model list | promote V | rollback [--tenant T]``.

Runs on the serving install (numpy, scipy; no torch). The registry root is the setting
``TRIAGE_MODEL_REGISTRY`` (default ``<data_dir>/models``); the active version per tenant is in the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from model.errors import TriageError

model_app = typer.Typer(help="The per-tenant run-scorer registry: list, promote, rollback.", no_args_is_help=True)
_err = Console(stderr=True)

Tenant = Annotated[str, typer.Option("--tenant", help="The tenant (`local`: make run's key and TRIAGE_AUTH=off).")]


def _fail(message: str) -> typer.Exit:
    _err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2)


def _open() -> tuple[Any, Any, Any]:
    from model.registry import Registry
    from serve.settings import get_settings
    from serve.store import open_store

    settings = get_settings()
    return settings, open_store(settings), Registry(settings.resolved_model_registry)


@model_app.command("list")
def list_cmd(tenant: Tenant = "local") -> None:
    """The tenant's registered versions (the active one marked), gate figures, and the activations."""
    from model.registry import SHIPPED_VERSION

    try:
        _, store, registry = _open()
        active = store.active_model(tenant) or SHIPPED_VERSION
        versions = registry.versions(tenant)
        history = store.model_history(tenant)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"tenant {tenant}: run scorers under {registry.root} (* = active)")
    typer.echo(f"{'':1} {'version':<22} {'created':<21} {'parent':<22} {'tenant slice AUROC':<18} gate")
    typer.echo(f"{'*' if active == SHIPPED_VERSION else '':1} {SHIPPED_VERSION:<22} {'':<21} {'':<22} {'':<18} shipped")
    for v in versions:
        g = v.summary.get("gate", {})
        comp = next((c for c in g.get("comparisons", []) if c["name"] == "tenant slice"), None)
        auc = f"{comp['champion']:.3f} -> {comp['challenger']:.3f}" if comp else "-"
        verdict = "passed" if g.get("promote") else ("refused" if g.get("refused") else "failed")
        typer.echo(f"{'*' if v.version == active else '':1} {v.version:<22} {v.created_at:<21} "
                   f"{v.parent or '':<22} {auc:<18} {verdict}")
    if history:
        typer.echo("activations, newest first:")
    for h in history:
        typer.echo(f"  {h['activated_at']:%Y-%m-%d %H:%M:%S} {h['action']:<8} {h['version']} by {h['actor']}")


@model_app.command("promote")
def promote_cmd(version: Annotated[str, typer.Argument(help="A version `triage model list` shows.")],
                tenant: Tenant = "local",
                actor: Annotated[str, typer.Option("--actor", help="Who promotes (recorded).")] = "cli") -> None:
    """Serve VERSION for the tenant from now on (it is loaded and smoke-checked first)."""
    from serve.retrain import promote_version

    try:
        _, store, registry = _open()
        promote_version(store, registry, tenant, version, actor=actor)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"tenant {tenant}: {version} is active")


@model_app.command("rollback")
def rollback_cmd(tenant: Tenant = "local",
                 actor: Annotated[str, typer.Option("--actor", help="Who rolls back (recorded).")] = "cli") -> None:
    """Serve the version that was active before the current one (promotions stack; rollbacks pop)."""
    from serve.retrain import rollback_version

    try:
        _, store, registry = _open()
        target = rollback_version(store, registry, tenant, actor=actor)
    except TriageError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"tenant {tenant}: rolled back to {target}")


def register(app: typer.Typer) -> None:
    """Add ``retrain`` and the ``model`` group to ``app``."""

    @app.command("retrain")
    def retrain_cmd(
        tenant: Tenant = "local",
        no_promote: Annotated[bool, typer.Option("--no-promote", help="Register the challenger only.")] = False,
        params: Annotated[Path, typer.Option("--params", help="params.yaml (section runscore).")] = Path("params.yaml"),
        root: Annotated[Path | None, typer.Option("--root", help="The vendored real sets (default datasets/real).")]
        = None,
        exclude: Annotated[list[str] | None, typer.Option(
            "--exclude-set", help="A real set to leave out of the base data and the fixed splits (repeatable).")]
        = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the slice draw and the bootstrap.")] = 0,
    ) -> None:
        """Retrain the run scorer on the tenant's labelled history; promote it if it passes the gate.
        Exit 0: promoted (or registered with --no-promote); 1: the gate kept the champion; 2: error."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from serve.retrain import retrain

        try:
            settings, store, _ = _open()
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=_err, transient=True) as bar:
                tasks: dict[str, Any] = {}

                def tick(stage: str, done: int, total: int) -> None:
                    if stage not in tasks:
                        tasks[stage] = bar.add_task(stage, total=total)
                    bar.update(tasks[stage], total=total, completed=done)

                res = retrain(store, settings, tenant, promote=not no_promote, root=root, params=params,
                              exclude=tuple(exclude or ()), seed=seed, progress=tick)
        except TriageError as exc:
            raise _fail(str(exc)) from None
        c = res.counts
        typer.echo(f"tenant {tenant}: {c['tenant_runs']} labelled runs ({c['tenant_failed']} failed): "
                   f"{c['tenant_train']} trained on, {c['tenant_slice']} held back; base {c['base_runs']} real runs; "
                   f"feature cache {res.cache['hits']} hits, {res.cache['misses']} computed")
        for comp in res.gate.comparisons:
            typer.echo("  " + comp.line())
        typer.echo(f"registered {res.version.version} ({res.version.path}) over {res.champion}")
        if res.promoted:
            typer.echo(f"promoted {res.version.version}: {res.gate.reason()}")
            return
        if no_promote:
            typer.echo(f"not promoted (--no-promote); the gate says: "
                       f"{'pass' if res.gate.promote else 'keep the champion'}: {res.gate.reason()}")
            return
        typer.echo(f"kept the champion {res.champion}: {res.gate.reason()}")
        raise typer.Exit(code=1)

    app.add_typer(model_app, name="model")


__all__ = ["model_app", "register"]
