"""``triage retrain [--tenant T] [--agent A]``, ``triage encode-runs [--tenant T]`` and
``triage model list | promote V | rollback [--tenant T] --agent A``.

Runs on the serving install (numpy, scipy, scikit-learn for the gate's cheap learners; no torch). The
registry root is the setting ``TRIAGE_MODEL_REGISTRY`` (default ``<data_dir>/models``); the active
version per (tenant, agent) is in the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from model.core.errors import TriageError
from serve.cli.output import console, fail

model_app = typer.Typer(help="The agent models: list the versions, promote one, roll back.", no_args_is_help=True)

Tenant = Annotated[str, typer.Option(
    "--tenant", metavar="TENANT",
    help="The tenant ('local' is the tenant of the key that 'make run' prints, and of every call when "
         "TRIAGE_AUTH=off).")]
Agent = Annotated[str, typer.Option(
    "--agent", metavar="AGENT", help="The agent's key ('_pooled': the tenant's pooled model).")]


def _open() -> tuple[Any, Any, Any]:
    from model.scoring.agent_registry import Registry
    from serve.settings import get_settings
    from serve.store import open_stores

    settings = get_settings()
    return settings, open_stores(settings), Registry(settings.resolved_model_registry)


@model_app.command("list")
def list_cmd(tenant: Tenant = "local") -> None:
    """List each agent's model versions and the promotions.

    The version served is marked *. CV AUROC, TF-IDF, length and zero-shot are the gate's grouped
    cross-validated AUROCs of the agent model and of the cheap learners it is compared with.
    """
    from model.scoring.agent_registry import ZERO_SHOT

    try:
        _, stores, registry = _open()
        agents = registry.agents(tenant)
        active = stores.activations.active_models(tenant)
        history = stores.activations.model_history(tenant)
    except TriageError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"tenant {tenant}: agent models under {registry.root} (* = active)")
    for agent in agents:
        on = active.get(agent, ZERO_SHOT)
        typer.echo(f"agent {agent}: {'zero-shot (active)' if on == ZERO_SHOT else 'active ' + on}")
        typer.echo(f"  {'':1} {'version':<22} {'created':<21} {'runs':>5} {'CV AUROC':>8} {'TF-IDF':>7} "
                   f"{'length':>7} {'zero-shot':>9} {'serves':<6} gate")
        for v in registry.versions(tenant, agent):
            g = v.summary.get("gate", {})
            e = g.get("estimate", {})

            def a(m: str, e: dict[str, Any] = e) -> str:
                x = (e.get(m) or {}).get("auroc")
                return "-" if x is None else f"{x:.3f}"

            typer.echo(f"  {'*' if v.version == on else '':1} {v.version:<22} {v.created_at:<21} {e.get('runs', '-'):>5} "
                       f"{a('agent'):>8} {a('tfidf'):>7} {a('length'):>7} {a('zero-shot'):>9} "
                       f"{str(v.summary.get('learner') or 'agent'):<6} {'passed' if g.get('promote') else 'failed'}")
    if history:
        typer.echo("activations, newest first:")
    for h in history:
        who = h["agent"] if h["agent"] is not None else "(tenant run scorer, before agent models)"
        typer.echo(f"  {h['activated_at']:%Y-%m-%d %H:%M:%S} {h['action']:<8} {who} {h['version']} by {h['actor']}")


@model_app.command("promote")
def promote_cmd(version: Annotated[str, typer.Argument(
                    metavar="VERSION", help="A version that 'triage model list' shows.")],
                agent: Agent, tenant: Tenant = "local",
                actor: Annotated[str, typer.Option("--actor", metavar="NAME", help="Who promotes (recorded).")]
                = "cli") -> None:
    """Serve VERSION for the agent from now on.

    The version is loaded and checked first.
    """
    from serve.services.retrain import promote_version

    try:
        _, stores, registry = _open()
        promote_version(stores.activations, registry, tenant, agent, version, actor=actor)
    except TriageError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"tenant {tenant} agent {agent}: {version} is active")


@model_app.command("rollback")
def rollback_cmd(agent: Agent, tenant: Tenant = "local",
                 actor: Annotated[str, typer.Option("--actor", metavar="NAME", help="Who rolls back (recorded).")]
                 = "cli") -> None:
    """Serve the version the agent had before the current one.

    Each rollback goes one promotion further back; before the first, the agent is scored zero-shot
    (the shipped model, no model of its own).
    """
    from model.scoring.agent_registry import ZERO_SHOT
    from serve.services.retrain import rollback_version

    try:
        _, stores, registry = _open()
        target = rollback_version(stores.activations, registry, tenant, agent, actor=actor)
    except TriageError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"tenant {tenant} agent {agent}: rolled back to {target or ZERO_SHOT}")


def _print(res: Any, no_promote: bool) -> None:
    """The retrain, in lines: each model with its gate, each agent's outcome, each refusal's code."""
    from serve.services.retrain_gate import LEARNER_NAMES

    for r in res.models:
        who = f"pooled (trained on {', '.join(r.trained_on)}; serves {', '.join(r.members) or 'none'})" \
            if r.trained_on else r.agent
        typer.echo(f"agent {who}: {r.runs} labelled runs ({r.failed} failed, {r.groups} task groups); "
                   f"registered {r.version.version} ({r.version.path}) over {r.champion}; serves the "
                   f"{LEARNER_NAMES.get(r.learner, r.learner)}")
        for comp in r.gate.comparisons:
            typer.echo("  " + comp.line())
        if r.promoted:
            typer.echo(f"  promoted {r.version.version}: {r.gate.reason()}")
        elif no_promote:
            typer.echo(f"  not promoted (--no-promote); the gate says: "
                       f"{'pass' if r.gate.promote else 'keep the champion'}: {r.gate.reason()}")
        else:
            typer.echo(f"  kept the champion {r.champion}: {r.gate.reason()}")
    for a, st in sorted(res.agents.items()):
        if st["status"] == "pooled":
            how = "served by the pooled model" if st.get("promoted") else "covered by the pooled model (not promoted)"
            typer.echo(f"agent {a}: {how}: {st.get('code')}: {st.get('message', '')}")
    for ref in res.refusals:
        typer.echo(f"refused {ref.agent}{' run ' + ref.trace_id if ref.trace_id else ''}: {ref.code}: {ref.message}")
    typer.echo(f"{res.seconds:.1f} s; zero-shot prior: {res.cache['zero_shot_hits']} cached, "
               f"{res.cache['zero_shot_computed']} computed")


def register(app: typer.Typer) -> None:
    """Add ``retrain`` and the ``model`` group to ``app``."""

    @app.command("retrain")
    def retrain_cmd(
        tenant: Tenant = "local",
        agent: Annotated[list[str] | None, typer.Option(
            "--agent", metavar="AGENT", help="Retrain this agent only (repeatable; '_pooled': the pooled model).")]
        = None,
        no_promote: Annotated[bool, typer.Option(
            "--no-promote", help="Register the new models but keep serving the current ones.")] = False,
        params: Annotated[Path | None, typer.Option(
            "--params", metavar="FILE", help="The parameters file (its section learning_curve); default: "
            "TRIAGE_PARAMS_PATH, else the checkout's params.yaml.")]
        = None,
        seed: Annotated[int, typer.Option("--seed", metavar="N", help="Seed of the folds and the bootstrap.")] = 0,
        as_json: Annotated[bool, typer.Option("--json", help="Print the retrain record as JSON (what the "
                                                              "registry keeps and the console's Models page shows).")]
        = False,
    ) -> None:
        """Train each agent's model from its labelled runs.

        An agent with enough labelled runs gets a model of its own; the others share the tenant's
        pooled model ('_pooled'). A gate compares, by cross-validation grouped by task, the agent
        model and two cheap learners (TF-IDF, and a fit on the run's length) with the model served
        now; the best one is served when it beats it. An agent that cannot be learned is refused with
        a reason: too_few_runs, one_class (all its runs have the same label), too_few_task_groups, or
        corrupt_run (a stored run that does not read back).

        Exit code: 0 when every agent was fitted, or refused for lack of data; 1 when a gate kept the
        model served now; 2 on an input or store error (a corrupt stored run among them).
        """
        import json

        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from serve.services.retrain import retrain

        try:
            settings, stores, _ = _open()
            if params is not None:
                settings = settings.model_copy(update={"params_path": params})
            with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console(stderr=True), transient=True,
                          disable=as_json) as bar:
                tasks: dict[str, Any] = {}

                def tick(stage: str, done: int, total: int) -> None:
                    if stage not in tasks:
                        tasks[stage] = bar.add_task(stage, total=total)
                    bar.update(tasks[stage], total=total, completed=done)

                res = retrain(stores.activations, stores.labels, settings, tenant, promote=not no_promote, seed=seed,
                              progress=tick, only=agent or None, encodings=stores.encodings)
        except TriageError as exc:
            raise fail(str(exc)) from None
        except OSError as exc:  # the registry or the zero-shot cache could not be written
            raise fail(f"could not write the model registry or its cache: {exc}") from None
        if as_json:
            typer.echo(json.dumps(res.to_dict(), indent=1, sort_keys=True, default=str))
        else:
            _print(res, no_promote)
        corrupt = [r for r in res.refusals if r.code == "corrupt_run"]
        if corrupt:
            ids = ", ".join(str(r.trace_id) for r in corrupt[:5]) + (" …" if len(corrupt) > 5 else "")
            raise fail(f"{len(corrupt)} stored labelled run(s) do not read back as traces (corrupt_run: {ids}); "
                        "the others were used")
        raise typer.Exit(code=res.exit_code)

    @app.command("encode-runs")
    def encode_runs_cmd(
        tenant: Annotated[str | None, typer.Option(
            "--tenant", metavar="TENANT", help="This tenant's runs only (default: every tenant's).")] = None,
        batch: Annotated[int, typer.Option("--batch", min=1, max=5000, metavar="N",
                                           help="Runs encoded and written per transaction.")] = 200,
    ) -> None:
        """Encode the stored runs' steps once (the encoder block).

        For agent models that read the encoder block: a run diagnosed by such a model keeps the
        vectors it was read with; this encodes the others (runs stored before, or answered by another
        model), so that 'triage retrain' encodes none.
        Idempotent and resumable: a run already encoded is skipped, and each batch is committed.
        """
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from model.scoring.encoder import shared_encoder
        from serve.services.encodings import encode_runs

        try:
            _, stores, _ = _open()
            encoder = shared_encoder()
            with Progress(TextColumn("[bold]encoding stored runs"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=console(stderr=True), transient=True) as bar:
                task = bar.add_task("encode", total=None)
                res = encode_runs(stores.encodings, stores.traces, encoder, tenant=tenant, batch=batch,
                                  progress=lambda done, total: bar.update(task, completed=done, total=total))
        except TriageError as exc:
            raise fail(str(exc)) from None
        typer.echo(f"encoder {encoder.version}: looked at {res.looked} stored runs, encoded {res.encoded} "
                   f"({res.steps} steps) in {res.seconds:.1f} s" +
                   (f"; {res.unreadable} do not read as traces (left alone)" if res.unreadable else ""))

    app.add_typer(model_app, name="model")


__all__ = ["model_app", "register"]
