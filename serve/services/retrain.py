"""``triage retrain``: a tenant's labelled history → one agent model per agent → the gate → the registry.

1. **Runs.** The tenant's stored runs whose effective label (:mod:`serve.services.run_labels`) says ``failed``
   true or false — only this tenant's rows are read — each with its agent (``traces.agent``,
   :mod:`model.core.agents`) and its task (``metadata.task_id`` when the run sent one). Labels are never
   inputs: the traces go to the model without them.
2. **Who gets a model** (:mod:`serve.services.retrain_plan`). An agent with at least ``TRIAGE_RETRAIN_MIN_RUNS``
   (20) labelled runs, of which at least ``TRIAGE_RETRAIN_MIN_CLASS`` (5) failed and as many succeeded,
   forming at least two task groups, gets its own model; the runs of every other agent train the
   tenant's **pooled** model (registry agent :data:`~model.scoring.agent_registry.POOLED`), which serves
   an agent only when its out-of-fold AUROC on that agent's own labels is ≥ the zero-shot score's (its
   ``members``). What cannot be learned is refused with a fixed code (``too_few_runs``, ``one_class``,
   ``too_few_task_groups``, ``corrupt_run``), agent by agent: one refusal never stops the others.
3. **The features.** A served configuration that reads the encoder block gets each run's step vectors as
   the service stored them when it diagnosed the run (:func:`feature_cache`, :mod:`serve.store.encodings`);
   only steps without one are encoded (``triage encode-runs`` backfills them once).
   **The prior.** Each run's zero-shot probability (the shipped run scorer, cached on disk by trace
   content under ``<data_dir>/cache/agentmodel/``) is the model's prior, as at serving time.
4. **The gate**, from grouped cross-validation (:func:`model.training.agentmodel.cv.cross_validate`,
   ``min(TRIAGE_RETRAIN_CV_FOLDS, task groups)`` folds): folds grouped by task id, else by
   :func:`model.training.agentmodel.cv.group_runs`; the agent model and both cheap learners (a length fit;
   TF-IDF + logistic regression, MEASUREMENTS' recipe) are fitted on the same training folds and score
   the same held-out runs. The learner served is the agent model when its AUROC is above both cheap
   learners', else the better cheap learner (:func:`served_learner`; exported numpy-servable,
   :mod:`model.scoring.agentmodel.cheap`). It is promoted only when its AUROC is higher than the
   champion's (point estimates; the paired 95 % interval over task groups is stated). The champion is
   the (tenant, agent)'s active model: zero-shot when there is none (its scores on the same held-out
   runs: paired); a registered model is compared on the runs labelled since it was trained (its own
   scores there against the challenger's out-of-fold ones: paired) when there are at least
   :data:`MIN_UNSEEN` of them with both classes, else against its recorded cross-validated AUROC
   (unpaired; said so).
5. Every challenger is registered (``<registry>/<tenant>/agents/<agent>/<version>/``) whatever the
   gate says, its card carrying the agent's learning curve so far; it is activated only when it passes.
   The retrain's record (every agent fitted, pooled or refused, with its code) is kept beside the
   registry (:meth:`~model.scoring.agent_registry.Registry.save_retrain`).
6. **Localisation** (:mod:`serve.services.retrain_where`): an agent whose failed runs' labels say where they
   went wrong gets its own where-model beside its model when its grouped CV beats the position prior.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from model.core.errors import InputError, RetrainRefused, TriageError
from model.core.schema import Trace
from model.scoring.agent_registry import POOLED, ZERO_SHOT, ModelVersion, Registry
from serve.services.retrain_gate import (
    LEARNER_NAMES,
    Gate,
    gate,
    trace_hash,
)
from serve.services.retrain_plan import (
    REFUSAL_CODES,
    LabelledRun,
    Refusal,
    labelled_runs,
    plan,
    pooled_members,
    read_runs,
    shortage,
)
from serve.services.retrain_where import localiser_for
from serve.settings import Settings
from serve.store.activations import ActivationStore
from serve.store.encodings import EncodingStore
from serve.store.labels import LabelStore

Progress = Callable[[str, int, int], None]



def _noop(stage: str, done: int, total: int) -> None:
    return None


class ZeroShotCache:
    """The zero-shot ``failure_probability`` of each run (the shipped rules, classifier and run scorer:
    :data:`model.scoring.runscore.zeroshot.RECIPE`), by trace content, kept in one JSON file per recipe
    and shipped models under ``folder`` (a warm cache makes a retrain cost only the fits)."""

    def __init__(self, folder: Path | None) -> None:
        from model.diagnosis.diagnoser import Diagnoser
        from model.scoring.agent_registry import SHIPPED_VERSION
        from model.scoring.runscore.model import ARTIFACT, RunScorer
        from model.scoring.runscore.zeroshot import RECIPE

        scorer = RunScorer.load(ARTIFACT) if ARTIFACT.is_file() else None
        self.diagnoser = Diagnoser.with_shipped_models(runscorer=scorer, runscore=scorer is not None)
        models = hashlib.sha256(self.diagnoser.model_version.encode()).hexdigest()[:12]
        #: the cache key: the recipe, the shipped run scorer and the models that feed it
        self.key = f"{RECIPE}-{SHIPPED_VERSION}-{models}"
        self.path = None if folder is None else folder / f"zero-shot-{self.key}.json"
        self.scorer = scorer
        self.values: dict[str, float] = {}
        if self.path is not None and self.path.is_file():
            try:
                self.values = {str(k): float(v) for k, v in json.loads(self.path.read_text()).items()}
            except (OSError, ValueError):
                self.values = {}
        self.hits = self.misses = 0

    def probabilities(self, traces: Sequence[Trace], progress: Progress = _noop) -> list[float]:
        out = []
        for i, t in enumerate(traces):
            key = trace_hash(t)
            p = self.values.get(key)
            if p is None:
                self.misses += 1
                scored = self.diagnoser.diagnose(t).failure_probability if self.scorer is not None else None
                p = 0.5 if scored is None or not math.isfinite(scored) else float(scored)
                self.values[key] = p
            else:
                self.hits += 1
            out.append(p)
            if i % 50 == 0:
                progress("zero-shot prior", i, len(traces))
        progress("zero-shot prior", len(traces), len(traces))
        if self.path is not None and self.misses:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.values))
            tmp.replace(self.path)
        return out


@dataclass
class AgentResult:
    agent: str                      # the registry key: the agent, or POOLED
    members: tuple[str, ...]        # a pooled model: the agents it serves (its AUROC on theirs ≥ zero-shot's)
    runs: int
    failed: int
    groups: int
    champion: str                   # "zero-shot" or a version
    version: ModelVersion
    gate: Gate
    promoted: bool
    trained_on: tuple[str, ...] = ()                                  # a pooled model: every agent in it
    per_agent: dict[str, dict[str, Any]] = field(default_factory=dict)  # a pooled model: AUROC per agent

    @property
    def learner(self) -> str:
        return str(self.gate.estimate.get("served", "agent"))

    def to_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "members": list(self.members), "trained_on": list(self.trained_on),
                "runs": self.runs, "failed": self.failed, "groups": self.groups, "champion": self.champion,
                "version": self.version.version, "path": str(self.version.path), "learner": self.learner,
                "promoted": self.promoted, "gate": self.gate.to_dict(), "per_agent": self.per_agent}


@dataclass
class RetrainResult:
    """What one ``triage retrain`` did: the models it registered, and every refusal (fixed codes,
    :data:`~serve.services.retrain_plan.REFUSAL_CODES`), agent by agent; ``agents`` says per agent
    ``fitted`` / ``pooled`` / ``refused`` (what the stored record and ``--json`` carry)."""

    tenant: str
    models: list[AgentResult]
    refusals: list[Refusal]
    agents: dict[str, dict[str, Any]]
    cache: dict[str, int]
    seconds: float = 0.0
    started_at: str = ""
    kept: bool = False  # a gate kept a champion (with promotion asked for)

    @property
    def exit_code(self) -> int:
        """2: a stored run could not be read; 1: a gate kept a champion (not with ``--no-promote``);
        0: every agent fitted, or refused for lack of data."""
        if any(r.code == "corrupt_run" for r in self.refusals):
            return 2
        return 1 if self.kept else 0

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "started_at": self.started_at, "seconds": round(self.seconds, 3),
                "exit_code": self.exit_code, "agents": self.agents,
                "models": [m.to_dict() for m in self.models], "refusals": [r.to_dict() for r in self.refusals],
                "codes": list(REFUSAL_CODES), "cache": self.cache}


def model_config(params: Path) -> tuple[Any, bool]:
    """The agent model's configuration and whether it takes the zero-shot prior: the parameters file's
    ``learning_curve`` candidate ``served`` (the learning curve's best over every set); a file without
    that section gets the defaults (one candidate, the default model, no prior).

    Raises :class:`~model.core.errors.InputError` naming ``params`` when it is missing or not YAML."""
    from model.training.agentmodel.learning import LearningConfig

    if not params.is_file():
        raise InputError(f"the parameters file {params} does not exist: set TRIAGE_PARAMS_PATH or pass --params "
                         "(its learning_curve section configures the agent model)", path="params")
    try:
        loaded = yaml.safe_load(params.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise InputError(f"{params}: not readable YAML ({exc})".replace("\n", " "), path="params") from exc
    section = dict((loaded.get("learning_curve") or {}) if isinstance(loaded, dict) else {})
    return LearningConfig.from_dict(section).served_config()


def _curve_rows(registry: Registry, tenant: str, agent: str) -> list[dict[str, Any]]:
    rows = []
    for v in registry.versions(tenant, agent):
        est = (v.summary.get("gate") or {}).get("estimate") or {}
        if est:
            rows.append({"version": v.version, "runs": est.get("runs"), "failed": est.get("failed"),
                         **{m: (est.get(m) or {}).get("auroc") for m in ("agent", "zero-shot", "tfidf", "length")},
                         "promoted": bool((v.summary.get("gate") or {}).get("promote"))})
    return rows


def card(tenant: str, agent: str, members: Sequence[str], champion: str, g: Gate, curve: list[dict[str, Any]],
         model_card: dict[str, Any]) -> str:
    """The model card: what it learned from, the gate, the learning curve so far."""

    def f(x: Any) -> str:
        return "–" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.3f}"

    who = f"the tenant's pooled model (serving {', '.join(members) or 'no agent'})" if agent == POOLED \
        else f"agent `{agent}`"
    e = g.estimate
    lines = [f"# Agent model: tenant {tenant}, {who}", "",
             f"Trained by `triage retrain` on {e.get('runs')} labelled runs ({e.get('failed')} failed, "
             f"{e.get('groups')} task groups); serves the "
             f"{LEARNER_NAMES.get(str(e.get('served', 'agent')), 'agent model')}; early-warning threshold "
             f"{f(model_card.get('at_risk_threshold'))} (at most 5 % of successful runs reach it at any prefix, out of fold).", "",
             "## Gate", "",
             f"Grouped {e.get('folds')}-fold cross-validation ({e.get('draws')} draw(s)), every scorer on the same "
             f"held-out runs. Decision: **{'promote' if g.promote else 'keep the champion'}** over `{champion}` — "
             f"{g.reason()}.", "",
             f"Served learner: **{LEARNER_NAMES.get(str(e.get('served', 'agent')), e.get('served'))}** (the agent "
             "model when it is above both cheap learners in this cross-validation, else the better cheap learner).",
             "",
             "| comparison | AUROC challenger | AUROC other | diff [95 % paired CI] | passed |",
             "| --- | --- | --- | --- | --- |"]
    for c in g.comparisons:
        ci = "unpaired" if c.interval is None else f"[{c.interval[0]:+.3f}, {c.interval[1]:+.3f}]"
        lines.append(f"| {c.name} | {f(c.challenger)} | {f(c.other)} | {c.diff:+.3f} {ci} | "
                     f"{'yes' if c.passed else 'no'} |")
    lines += ["", "## Learning curve so far", "",
              "| version | labelled runs (failed) | agent model | zero-shot | TF-IDF | length | promoted |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in curve:
        lines.append(f"| {r['version']} | {r['runs']} ({r['failed']}) | {f(r['agent'])} | {f(r['zero-shot'])} | "
                     f"{f(r['tfidf'])} | {f(r['length'])} | {'yes' if r['promoted'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _champion(store: ActivationStore, registry: Registry, tenant: str, key: str,
              progress: Progress) -> tuple[Any, ModelVersion | None, set[str], str | None]:
    """The (tenant, key)'s active model, its record and the runs it saw; an unreadable one is compared
    as zero-shot, and said so."""
    active = store.active_model(tenant, key)
    if active is None or active == ZERO_SHOT:
        return None, None, set(), None
    try:
        champion = registry.load(tenant, key, active)
        record = registry.get(tenant, key, active)
        data = json.loads((record.path / "data.json").read_text(encoding="utf-8"))
        return champion, record, {str(r["sha256"]) for r in data.get("runs", [])}, active
    except (TriageError, OSError, ValueError, KeyError, TypeError) as exc:
        progress(f"champion {active} unreadable ({exc}); comparing with zero-shot", 0, 1)
        return None, None, set(), None


def _fit_served(learner: str, traces: list[Trace], failed: list[bool], groups: list[str], prior: list[float] | None,
                config: Any, agent: str, cache: Any, g: Gate, flagged: list[bool] | None = None) -> Any:
    """The model a retrain registers: the agent model, or the cheap learner the gate measured better
    (``flagged``: runs answered unhealthy for another cause, which spend the early warning's budget)."""
    from model.scoring.agentmodel.model import AgentModel
    from model.training.agentmodel.cheap_export import fit_cheap

    model: Any
    if learner == "agent":
        model = AgentModel.fit(traces, failed, groups, config=config, prior=prior, agent=agent, cache=cache,
                               flagged=flagged)
    else:
        e = g.estimate[learner]
        model = fit_cheap(learner, traces, failed, groups, folds=int(g.estimate.get("cv_folds") or 5),
                          target_false_alarm=config.target_false_alarm, flagged=flagged,
                          card={"agent": agent, "labelled_runs": len(traces), "failed_runs": int(sum(failed)),
                                "groups": len(set(groups)), "cv_auroc": e["auroc"],
                                "cv_auroc_interval": e["interval"], "learning_curve": []})
    model.card_["gate"] = {"estimate": g.estimate, "promote": g.promote}
    model.card_["learner"] = learner
    return model


def feature_cache(config: Any, runs: Sequence[LabelledRun], tenant: str, encodings: EncodingStore | None,
                  encoder: Any = None) -> tuple[Any, dict[str, int]]:
    """The retrain's :class:`~model.scoring.agentmodel.features.FeatureCache`; for a configuration that
    reads the encoder block, the shared static encoder (or ``encoder``) and every run's step vectors
    the store kept (:mod:`serve.store.encodings`), so that only the steps without one are encoded.
    Returns it and ``{"encoded_runs_stored": …, "encoded_runs_missing": …}``."""
    from model.scoring.agentmodel.features import FeatureCache
    from model.scoring.encoder import shared_encoder

    if config.encoder_weight <= 0:
        return FeatureCache(), {}
    enc = encoder or shared_encoder()
    cache = FeatureCache(enc)
    stored = {} if encodings is None else encodings.vectors(
        tenant, [(r.trace.id, len(r.trace.steps)) for r in runs], enc.version)
    for r in runs:
        v = stored.get(r.trace.id)
        if v is not None and v.shape[1] == enc.dim:
            cache.add_vectors(r.trace, v)
    return cache, {"encoded_runs_stored": len(stored), "encoded_runs_missing": len(runs) - len(stored)}


def retrain(activations: ActivationStore, labels: LabelStore, settings: Settings, tenant: str, *,
            promote: bool = True, seed: int = 0, actor: str = "triage retrain", progress: Progress = _noop,
            only: Sequence[str] | None = None, record: bool = True, encodings: EncodingStore | None = None,
            encoder: Any = None) -> RetrainResult:
    """Fit, gate and register a model for every agent of ``tenant`` with enough labelled runs, and a
    pooled one for the rest (see the module docstring); refuse, agent by agent and with a fixed code,
    what cannot be learned. ``only``: these agents (registry keys, :data:`~model.scoring.agent_registry.POOLED`
    for the pooled model) and no other. ``record``: keep the result in the registry
    (:meth:`~model.scoring.agent_registry.Registry.save_retrain`; the console's Models page shows it).
    The agent model's configuration: :func:`model_config` of ``settings.params_path``. ``encodings``: the
    store of the runs' step vectors, read when the configuration reads the encoder block (a run encoded
    when it was diagnosed is not encoded again; :func:`feature_cache`); ``encoder``: the static encoder
    (default: the shipped one)."""
    import time

    from model.training.agentmodel.cv import group_runs

    start = time.perf_counter()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    registry = Registry(settings.resolved_model_registry)
    config, use_prior = model_config(settings.params_path)
    progress("reading the tenant's labelled history", 0, 1)
    runs, refusals = read_runs(labels, tenant)

    def groups_of(rs: Sequence[LabelledRun]) -> list[str]:
        return group_runs([r.trace for r in rs], [r.task for r in rs])

    sets, short = plan(runs, min_runs=settings.retrain_min_runs, min_class=settings.retrain_min_class,
                       groups_of=groups_of)
    if only is not None:
        unknown = sorted(set(only) - set(sets) - set(short))
        if unknown:
            raise InputError(f"tenant {tenant!r} has no labelled runs of agent(s) {unknown} (known: "
                             f"{', '.join(sorted(set(sets) | set(short))) or 'none'})", path="agent")
        sets = {a: rs for a, rs in sets.items() if a in set(only)}
        short = {a: r for a, r in short.items() if a in set(only) or POOLED in set(only)}
        refusals = [r for r in refusals if r.agent in set(only) or POOLED in set(only)]
    agents: dict[str, dict[str, Any]] = {
        a: {"status": "refused", "code": r.code, "message": r.message, "model": None} for a, r in short.items()}
    zero = ZeroShotCache(settings.data_dir / "cache" / "agentmodel")
    cache, encoded = feature_cache(config, [r for rs in sets.values() for r in rs], tenant, encodings, encoder)
    results = []
    kept = False
    for key, rs in sets.items():
        if key == POOLED:
            why = shortage(POOLED, rs, min_runs=settings.retrain_min_runs, min_class=settings.retrain_min_class)
            if why is not None:
                refusals.append(Refusal(POOLED, why.code, "the agents without a model of their own, together: "
                                        + why.message))
                continue
        traces = [r.trace for r in rs]
        failed = [r.failed for r in rs]
        groups = groups_of(rs)
        zs = zero.probabilities(traces, progress)
        prior = zs if use_prior else None
        champion, champion_record, seen, active = _champion(activations, registry, tenant, key, progress)
        progress(f"gate: {key}", 0, 1)
        try:
            g = gate(traces, failed, groups, prior, zs, config, folds=settings.retrain_cv_folds,
                     draws=settings.retrain_cv_draws, seed=seed, champion=champion, champion_record=champion_record,
                     seen=seen, cache=cache)
        except RetrainRefused as exc:
            refusals.append(Refusal(key, exc.code, exc.message))
            if key != POOLED:
                agents[key] = {"status": "refused", "code": exc.code, "message": exc.message, "model": None}
            continue
        progress(f"gate: {key}", 1, 1)
        learner = str(g.estimate["served"])
        progress(f"fitting: {key} ({learner})", 0, 1)
        trained_on = tuple(sorted({r.agent for r in rs})) if key == POOLED else ()
        per_agent: dict[str, dict[str, Any]] = {}
        members: tuple[str, ...] = ()
        if key == POOLED:
            per_agent = pooled_members([r.agent for r in rs], np.array(failed, float), g.oof, np.asarray(zs, float))
            members = tuple(a for a in trained_on if per_agent[a]["serves"])
        model = _fit_served(learner, traces, failed, groups, prior, config, key, cache, g, [r.flagged for r in rs])
        progress(f"fitting: {key} ({learner})", 1, 1)
        champion_name = active if champion is not None and active is not None else "zero-shot"
        data = {"runs": [{"trace_id": r.trace.id, "task": gr, "sha256": trace_hash(r.trace), "failed": r.failed,
                          "agent": r.agent} for r, gr in zip(rs, groups, strict=True)],
                "labels_read_at": datetime.now(UTC).isoformat(timespec="seconds"), "members": list(members),
                "trained_on": list(trained_on)}
        report = {"tenant": tenant, "agent": key, "members": list(members), "trained_on": list(trained_on),
                  "per_agent": per_agent, "champion": champion_name, "learner": learner, "gate": g.to_dict(),
                  "card": model.card,
                  "data_sha256": hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()}
        curve = _curve_rows(registry, tenant, key) + [{
            "version": "(this one)", "runs": g.estimate["runs"], "failed": g.estimate["failed"],
            **{m: g.estimate[m]["auroc"] for m in ("agent", "zero-shot", "tfidf", "length")}, "promoted": g.promote}]
        model.card_["learning_curve"] = curve
        where = localiser_for(key, rs, groups, seed=seed, min_runs=settings.retrain_min_where_runs)
        report["localisation"] = where.to_dict()
        text = card(tenant, key, members, champion_name, g, curve, model.card) + where.card()
        mv = registry.save(tenant, key, model, parent=champion_name, card=text, report=report, data=data,
                           members=members, where=where.model.to_dict() if where.model is not None else None)
        promoted = bool(g.promote and promote)
        if promoted:
            activations.activate_model(tenant, mv.version, actor=actor, action="promote", agent=key)
        elif promote:
            kept = True
        results.append(AgentResult(key, members, len(rs), sum(failed), len(set(groups)), champion_name, mv, g,
                                   promoted, trained_on, per_agent))
        if key != POOLED:
            agents[key] = {"status": "fitted", "code": None, "model": key, "learner": learner,
                           "version": mv.version, "promoted": promoted}
        for a in trained_on:
            pa = per_agent[a]
            if pa["serves"]:
                agents[a] = {"status": "pooled", "code": short[a].code if a in short else None, "model": POOLED, "learner": learner,
                             "version": mv.version, "promoted": promoted, "message":
                             f"the pooled model's out-of-fold AUROC on its runs {pa['auroc']:.3f} ≥ zero-shot's "
                             f"{pa['zero-shot']:.3f}; {short[a].message if a in short else ''}".rstrip("; ")}
            elif a in agents:
                note = "not measurable on its runs" if pa["auroc"] is None else \
                    f"{pa['auroc']:.3f} < zero-shot's {pa['zero-shot']:.3f} on its runs"
                agents[a]["message"] = f"{agents[a]['message']}; the pooled model does not serve it ({note})"
    for a, r in short.items():
        if agents[a]["status"] == "refused":
            refusals.append(Refusal(a, r.code, str(agents[a]["message"])))
    res = RetrainResult(tenant, results, refusals, agents,
                        {"zero_shot_hits": zero.hits, "zero_shot_computed": zero.misses, **encoded},
                        time.perf_counter() - start, started, kept)
    if record:
        registry.save_retrain(tenant, res.to_dict())
    return res


def rollback_target(history: list[dict[str, Any]]) -> str | None:
    """The version a rollback activates: promotions push, rollbacks pop; the new top (``None``: zero-shot)."""
    stack: list[str] = []
    for h in reversed(history):  # history is newest first
        if h["action"] == "rollback":
            if stack:
                stack.pop()
        else:
            stack.append(h["version"])
    if not stack:
        raise InputError("nothing to roll back: the agent is answered zero-shot", path="agent")
    stack.pop()
    return stack[-1] if stack else None


def load_checked(registry: Registry, tenant: str, agent: str, version: str) -> Any:
    """Load ``version`` and run the service's own smoke check on it (:func:`serve.services.agent_models.check_model`,
    what every worker runs before it swaps a version in), so a promotion refuses what a worker would."""
    from model.core.errors import SmokeCheckError
    from serve.services.agent_models import check_model

    model = registry.load(tenant, agent, version)
    try:
        check_model(model)
    except SmokeCheckError as exc:
        raise InputError(f"{tenant}/{agent}/{version}: {exc}", path="version") from exc
    return model


def learning_curve(registry: Registry, tenant: str, agent: str) -> list[dict[str, Any]]:
    """The agent's learning curve so far, one row per registered version (oldest first): labelled runs
    (failed) and the cross-validated AUROC of the agent model, zero-shot and the two cheap learners at
    its gate, and whether it passed (what its model card's table shows; the console's Models page)."""
    return _curve_rows(registry, tenant, agent)


def promote_version(store: ActivationStore, registry: Registry, tenant: str, agent: str, version: str, *, actor: str) -> None:
    """``triage model promote``, ``POST /v1/operator/models/promote`` and the console's Models page:
    load and smoke-check the agent's ``version``, then record that the tenant serves it for ``agent``."""
    load_checked(registry, tenant, agent, version)
    store.activate_model(tenant, version, actor=actor, action="promote", agent=agent)


def rollback_version(store: ActivationStore, registry: Registry, tenant: str, agent: str, *, actor: str) -> str | None:
    """``triage model rollback``, ``POST /v1/operator/models/rollback`` and the console's Models page:
    serve the agent's version active before the current one (checked like a promotion); returns it,
    None when the agent goes back to zero-shot (past its first promotion).

    Raises :class:`~model.core.errors.InputError` (path ``agent``) when the agent is already answered
    zero-shot."""
    from model.scoring.agent_registry import ZERO_SHOT

    target = rollback_target(store.model_history(tenant, agent))
    if target is not None:
        load_checked(registry, tenant, agent, target)
    store.activate_model(tenant, target or ZERO_SHOT, actor=actor, action="rollback", agent=agent)
    return target


__all__ = ["AgentResult", "Gate", "LabelledRun", "RetrainResult", "ZeroShotCache", "card", "feature_cache", "gate",
           "labelled_runs",
           "learning_curve", "load_checked", "model_config", "plan", "promote_version", "retrain", "rollback_target",
           "rollback_version", "trace_hash"]
