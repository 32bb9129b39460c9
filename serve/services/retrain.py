"""``triage retrain``: a tenant's labelled history → one agent model per agent → the gate → the registry.

1. **Runs.** The tenant's stored runs whose effective label (:mod:`serve.services.run_labels`) says ``failed``
   true or false — only this tenant's rows are read — each with its agent (``traces.agent``,
   :mod:`model.core.agents`) and its task (``metadata.task_id`` when the run sent one). Labels are never
   inputs: the traces go to the model without them.
2. **Who gets a model.** An agent with at least ``TRIAGE_RETRAIN_MIN_RUNS`` (20) labelled runs, of
   which at least ``TRIAGE_RETRAIN_MIN_CLASS`` (5) failed and as many succeeded, gets its own
   (:class:`~model.scoring.agentmodel.model.AgentModel`); the runs of every other agent train the tenant's
   **pooled** model (registry agent :data:`~model.scoring.agent_registry.POOLED`), when together they meet the same
   minimum. The pooled model serves those agents (its ``members``) and the pool ``_pool``.
3. **The prior.** Each run's zero-shot probability (the shipped run scorer, cached on disk by trace
   content under ``<data_dir>/cache/agentmodel/``) is the model's prior, as at serving time.
4. **The gate**, from grouped cross-validation (:func:`model.training.agentmodel.cv.cross_validate`): folds
   grouped by task id, else by :func:`model.training.agentmodel.cv.group_runs`' near-duplicate clustering of
   the opening request; the agent model and both cheap learners (a length fit; TF-IDF + logistic
   regression, MEASUREMENTS' recipe) are fitted on the same training folds and score the same
   held-out runs. The challenger is promoted only when its AUROC is higher than the champion's and
   both cheap learners' (point estimates; the paired 95 % interval over task groups is stated). The
   champion is the (tenant, agent)'s active model: zero-shot when there is none (its scores on the
   same held-out runs: paired); an agent model is compared on the runs labelled since it was trained
   (its own scores there against the challenger's out-of-fold ones: paired) when there are at least
   :data:`MIN_UNSEEN` of them with both classes, else against its recorded cross-validated AUROC
   (unpaired; said so).
5. Every challenger is registered (``<registry>/<tenant>/agents/<agent>/<version>/``) whatever the
   gate says, its card carrying the agent's learning curve so far; it is activated only when it passes.
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

from model.core.agents import POOL_AGENT
from model.core.errors import InputError
from model.core.schema import Trace
from model.scoring.agent_registry import POOLED, ModelVersion, Registry
from serve.services.run_labels import labels_for
from serve.settings import Settings
from serve.store import Store

Progress = Callable[[str, int, int], None]

#: An agent-model champion is compared paired on the runs labelled since it was trained when there
#: are at least this many of them (with both classes); else against its recorded estimate.
MIN_UNSEEN = 10
N_BOOT = 1000


def _noop(stage: str, done: int, total: int) -> None:
    return None


@dataclass
class LabelledRun:
    """One stored run with its effective label (not on the trace: labels are never inputs)."""

    trace: Trace
    agent: str
    failed: bool
    task: str | None


def labelled_runs(store: Store, tenant: str) -> list[LabelledRun]:
    """The tenant's stored runs that carry a run-level label, oldest id first."""
    out = []
    for record in store.iter_history(tenant):
        if record["tenant"] != tenant:  # iter_history filters already; never train on another tenant
            continue
        labels = labels_for(record, include_unconfirmed=False)
        if labels is None or labels.failed is None:
            continue
        trace = Trace.model_validate(record["trace"])
        trace.labels = None
        task = trace.metadata.get("task_id") if isinstance(trace.metadata, dict) else None
        out.append(LabelledRun(trace, str(record.get("agent") or POOL_AGENT), bool(labels.failed),
                               None if task in (None, "") else str(task)))
    return out


def trace_hash(trace: Trace) -> str:
    """sha256 of the trace's content (labels excluded)."""
    d = trace.model_dump(mode="json", exclude={"labels"}, exclude_none=True)
    return hashlib.sha256(json.dumps(d, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


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
class Comparison:
    """The challenger against one other scorer of the same runs."""

    name: str
    challenger: float
    other: float
    interval: tuple[float, float] | None  # 95 % paired interval of challenger − other; None: unpaired
    runs: int
    note: str = ""

    @property
    def diff(self) -> float:
        return self.challenger - self.other

    @property
    def passed(self) -> bool:
        return bool(self.challenger > self.other)

    def line(self) -> str:
        ci = "unpaired" if self.interval is None else f"[{self.interval[0]:+.3f}, {self.interval[1]:+.3f}]"
        note = f" ({self.note})" if self.note else ""
        return (f"vs {self.name}: AUROC {self.challenger:.3f} vs {self.other:.3f}, diff {self.diff:+.3f} {ci} "
                f"on {self.runs} runs{note}: {'passed' if self.passed else 'failed'}")

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "challenger": self.challenger, "other": self.other, "diff": self.diff,
                "interval": None if self.interval is None else list(self.interval), "runs": self.runs,
                "paired": self.interval is not None, "passed": self.passed, "note": self.note}


@dataclass
class Gate:
    comparisons: list[Comparison] = field(default_factory=list)
    estimate: dict[str, Any] = field(default_factory=dict)

    @property
    def promote(self) -> bool:
        return bool(self.comparisons) and all(c.passed for c in self.comparisons)

    def reason(self) -> str:
        failed = [c.name for c in self.comparisons if not c.passed]
        if not self.comparisons:
            return "nothing to compare"
        if failed:
            return f"not above {', '.join(failed)}"
        return "above " + ", ".join(c.name for c in self.comparisons)

    def to_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "reason": self.reason(), "comparisons": [c.to_dict() for c in self.comparisons],
                "estimate": self.estimate}


@dataclass
class AgentResult:
    agent: str                      # the registry key: the agent, or POOLED
    members: tuple[str, ...]
    runs: int
    failed: int
    groups: int
    champion: str                   # "zero-shot" or a version
    version: ModelVersion
    gate: Gate
    promoted: bool


@dataclass
class RetrainResult:
    tenant: str
    agents: list[AgentResult]
    skipped: dict[str, str]         # agent → why it got no model (its runs went to the pool, or too few)
    cache: dict[str, int]
    seconds: float = 0.0


def plan(runs: Sequence[LabelledRun], *, min_runs: int, min_class: int) -> tuple[dict[str, list[LabelledRun]],
                                                                                  dict[str, str]]:
    """Which runs train which model: ``{agent or POOLED: runs}``, and the agents left without one."""
    by_agent: dict[str, list[LabelledRun]] = {}
    for r in runs:
        by_agent.setdefault(r.agent, []).append(r)

    def enough(rs: Sequence[LabelledRun]) -> bool:
        nf = sum(r.failed for r in rs)
        return len(rs) >= min_runs and nf >= min_class and len(rs) - nf >= min_class

    out: dict[str, list[LabelledRun]] = {}
    rest: list[LabelledRun] = []
    skipped: dict[str, str] = {}
    for agent, rs in sorted(by_agent.items()):
        if agent != POOL_AGENT and enough(rs):
            out[agent] = rs
        else:
            rest.extend(rs)
    if rest:
        if enough(rest):
            out[POOLED] = rest
            for a in sorted({r.agent for r in rest}):
                skipped[a] = "pooled"
        else:
            nf = sum(r.failed for r in rest)
            for a in sorted({r.agent for r in rest}):
                skipped[a] = (f"too few labelled runs: the agents without a model of their own have {len(rest)} "
                              f"({nf} failed) together; a model needs {min_runs}, {min_class} of each class")
    return out, skipped


def model_config(params: Path) -> tuple[Any, bool]:
    """The agent model's configuration and whether it takes the zero-shot prior: ``params.yaml``'s
    ``learning_curve`` candidate ``served`` (the learning curve's best over every set), else defaults
    (one candidate, the default model, no prior)."""
    from model.training.agentmodel.learning import LearningConfig

    section: dict[str, Any] = {}
    if params.is_file():
        loaded = yaml.safe_load(params.read_text(encoding="utf-8")) or {}
        section = dict((loaded.get("learning_curve") or {}) if isinstance(loaded, dict) else {})
    return LearningConfig.from_dict(section).served_config()


def _paired_boot(y: np.ndarray, a: np.ndarray, b: np.ndarray, groups: Sequence[str], seed: int) -> tuple[float, float]:
    """95 % interval of AUROC(a) − AUROC(b) over task groups resampled with replacement."""
    from model.core.metrics import auroc

    uniq = sorted(set(groups))
    rows = {g: np.flatnonzero(np.asarray(groups) == g) for g in uniq}
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(N_BOOT):
        idx = np.concatenate([rows[uniq[j]] for j in rng.integers(0, len(uniq), len(uniq))])
        d = auroc(y[idx], a[idx]) - auroc(y[idx], b[idx])
        if math.isfinite(d):
            diffs.append(d)
    if not diffs:
        return (float("nan"), float("nan"))
    return float(np.quantile(diffs, 0.025)), float(np.quantile(diffs, 0.975))


def gate(traces: Sequence[Trace], failed: Sequence[bool], groups: Sequence[str], prior: Sequence[float] | None,
         zero_shot: Sequence[float], config: Any, *, folds: int, draws: int, seed: int,
         champion: Any | None = None, champion_record: ModelVersion | None = None,
         seen: set[str] | None = None, cache: Any | None = None) -> Gate:
    """The grouped cross-validated estimate and the comparisons (see the module docstring). ``cache``:
    a :class:`~model.scoring.agentmodel.features.FeatureCache` the final fit shares (each run counted once)."""
    from model.core.metrics import AurocUnit, auroc
    from model.training.agentmodel.cv import CVData, cross_validate, draws_folds, summarise

    data = CVData.make(traces, failed, groups, (1.0,), prior, cache)
    report = cross_validate(traces, failed, groups, ks=(None,), fractions=(1.0,), config=config, prior=prior,
                            folds=folds, draws=draws, seed=seed, n_boot=N_BOOT, data=data)
    y = np.array([bool(f) for f in failed], float)
    zs = np.asarray(zero_shot, float)
    units = []
    oof = {m: np.asarray(v, float) for m, v in ((m, report["oof"][m]) for m in ("agent", "tfidf", "length"))}
    for di, draw in enumerate(draws_folds(groups, folds, draws, seed)):
        for te in draw:
            sc = {m: oof[m][di][te] for m in ("agent", "tfidf", "length")}
            if y[te].min() == y[te].max() or any(np.isnan(v).any() for v in sc.values()):
                continue
            units.append(AurocUnit.make(y[te], {"agent": sc["agent"], "zero-shot": zs[te], **{k: sc[k] for k in
                                                                                         ("tfidf", "length")}},
                                    [groups[i] for i in te]))
    if not units:
        raise InputError("no held-out fold holds both failed and successful runs: label more runs of "
                         "more tasks", path="tenant")
    methods = ("agent", "zero-shot", "tfidf", "length")
    s = summarise(units, seed=seed, n_boot=N_BOOT, methods=methods)
    n = len(traces)
    est: dict[str, Any] = {m: {"auroc": s[m]["auroc"], "interval": s[m]["interval"]} for m in methods}
    est.update(folds=s["folds"], draws=draws, runs=n, failed=int(y.sum()), groups=len(set(groups)))

    def paired(m: str, name: str) -> Comparison:
        d = s[f"agent_minus_{m}"]
        return Comparison(name, s["agent"]["auroc"], s[m]["auroc"], (d["interval"][0], d["interval"][1]), n)

    comps = []
    if champion is None:
        comps.append(paired("zero-shot", "champion (zero-shot)"))
    else:
        name = f"champion ({champion_record.version if champion_record else 'agent model'})"
        hashes = [trace_hash(t) for t in traces]
        unseen = np.array([h not in (seen or set()) for h in hashes])
        challenger_oof = oof["agent"][0]
        ok = unseen & ~np.isnan(challenger_oof)
        if ok.sum() >= MIN_UNSEEN and 0 < y[ok].sum() < ok.sum():
            idx = [int(i) for i in np.flatnonzero(ok)]
            theirs = np.array([champion.score(traces[i], prior=None if prior is None else prior[i]) for i in idx])
            mine = challenger_oof[idx]
            g = [groups[i] for i in idx]
            comps.append(Comparison(name, auroc(y[idx], mine), auroc(y[idx], theirs),
                                    _paired_boot(y[idx], mine, theirs, g, seed), int(ok.sum()),
                                    "the runs labelled since it was trained"))
        else:
            recorded = ((champion_record.summary.get("gate") or {}).get("estimate") or {}).get("agent", {}) \
                if champion_record else {}
            other = recorded.get("auroc")
            comps.append(Comparison(name, s["agent"]["auroc"], float(other) if other is not None else float("nan"),
                                    None, n, f"its recorded cross-validated AUROC; {int(ok.sum())} runs labelled "
                                    f"since it was trained (a paired comparison needs {MIN_UNSEEN})"))
    comps.append(paired("tfidf", "TF-IDF + logistic regression"))
    comps.append(paired("length", "length fit"))
    return Gate(comps, est)


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

    who = f"the tenant's pooled model (agents {', '.join(members)})" if agent == POOLED else f"agent `{agent}`"
    e = g.estimate
    lines = [f"# Agent model: tenant {tenant}, {who}", "",
             f"Trained by `triage retrain` on {e.get('runs')} labelled runs ({e.get('failed')} failed, "
             f"{e.get('groups')} task groups) with the zero-shot score as a prior; early-warning threshold "
             f"{f(model_card.get('at_risk_threshold'))} (≤ 10 % false alarms at half the run, cross-validated).", "",
             "## Gate", "",
             f"Grouped {e.get('folds')}-fold cross-validation ({e.get('draws')} draw(s)), every scorer on the same "
             f"held-out runs. Decision: **{'promote' if g.promote else 'keep the champion'}** over `{champion}` — "
             f"{g.reason()}.", "",
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


def retrain(store: Store, settings: Settings, tenant: str, *, promote: bool = True, params: Path = Path("params.yaml"),
            seed: int = 0, actor: str = "triage retrain", progress: Progress = _noop,
            only: Sequence[str] | None = None) -> RetrainResult:
    """Fit, gate and register an agent model for every agent of ``tenant`` with enough labelled runs,
    and a pooled one for the rest (see the module docstring). ``only``: these agents (registry keys,
    :data:`~model.scoring.agent_registry.POOLED` for the pooled model) and no other."""
    import time

    from model.scoring.agentmodel.features import FeatureCache
    from model.scoring.agentmodel.model import AgentModel
    from model.training.agentmodel.cv import group_runs

    start = time.perf_counter()
    registry = Registry(settings.resolved_model_registry)
    config, use_prior = model_config(params)
    progress("reading the tenant's labelled history", 0, 1)
    runs = labelled_runs(store, tenant)
    groups_of, skipped = plan(runs, min_runs=settings.retrain_min_runs, min_class=settings.retrain_min_class)
    if only is not None:
        groups_of = {a: rs for a, rs in groups_of.items() if a in set(only)}
    if not groups_of:
        nf = sum(r.failed for r in runs)
        raise InputError(f"tenant {tenant!r} has {len(runs)} labelled runs ({nf} failed): no agent has "
                         f"{settings.retrain_min_runs} with {settings.retrain_min_class} of each class, nor do the "
                         "others together (label more runs: POST /v1/traces/{id}/labels with "
                         "{\"failed\": true|false})" + (f"; asked for {list(only)}" if only is not None else ""),
                         path="tenant")
    zero = ZeroShotCache(settings.data_dir / "cache" / "agentmodel")
    cache = FeatureCache()
    results = []
    for agent, rs in groups_of.items():
        traces = [r.trace for r in rs]
        failed = [r.failed for r in rs]
        groups = group_runs(traces, [r.task for r in rs])
        zs = zero.probabilities(traces, progress)
        prior = zs if use_prior else None
        active = store.active_model(tenant, agent)
        champion = champion_record = None
        seen: set[str] = set()
        if active is not None:
            try:
                champion = registry.load(tenant, agent, active)
                champion_record = registry.get(tenant, agent, active)
                data = json.loads((champion_record.path / "data.json").read_text(encoding="utf-8"))
                seen = {str(r["sha256"]) for r in data.get("runs", [])}
            except Exception as exc:  # an unreadable champion: compared as zero-shot, and said so
                progress(f"champion {active} unreadable ({exc}); comparing with zero-shot", 0, 1)
                champion = champion_record = None
        progress(f"gate: {agent}", 0, 1)
        g = gate(traces, failed, groups, prior, zs, config, folds=settings.retrain_cv_folds,
                 draws=settings.retrain_cv_draws, seed=seed, champion=champion, champion_record=champion_record,
                 seen=seen, cache=cache)
        progress(f"gate: {agent}", 1, 1)
        progress(f"fitting: {agent}", 0, 1)
        members = tuple(sorted({r.agent for r in rs})) if agent == POOLED else ()
        model = AgentModel.fit(traces, failed, groups, config=config, prior=prior, agent=agent, cache=cache)
        model.card_["gate"] = {"estimate": g.estimate, "promote": g.promote}
        progress(f"fitting: {agent}", 1, 1)
        champion_name = active if champion is not None and active is not None else "zero-shot"
        data = {"runs": [{"trace_id": r.trace.id, "task": gr, "sha256": trace_hash(r.trace), "failed": r.failed,
                          "agent": r.agent} for r, gr in zip(rs, groups, strict=True)],
                "labels_read_at": datetime.now(UTC).isoformat(timespec="seconds"), "members": list(members)}
        report = {"tenant": tenant, "agent": agent, "members": list(members), "champion": champion_name,
                  "gate": g.to_dict(), "card": model.card,
                  "data_sha256": hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()}
        curve = _curve_rows(registry, tenant, agent) + [{
            "version": "(this one)", "runs": g.estimate["runs"], "failed": g.estimate["failed"],
            **{m: g.estimate[m]["auroc"] for m in ("agent", "zero-shot", "tfidf", "length")}, "promoted": g.promote}]
        model.card_["learning_curve"] = curve
        text = card(tenant, agent, members, champion_name, g, curve, model.card)
        mv = registry.save(tenant, agent, model, parent=champion_name, card=text, report=report, data=data,
                           members=members)
        promoted = bool(g.promote and promote)
        if promoted:
            store.activate_model(tenant, mv.version, actor=actor, action="promote", agent=agent)
        results.append(AgentResult(agent, members, len(rs), sum(failed), len(set(groups)), champion_name, mv, g,
                                   promoted))
    return RetrainResult(tenant, results, skipped, {"zero_shot_hits": zero.hits, "zero_shot_computed": zero.misses},
                         time.perf_counter() - start)


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


def promote_version(store: Store, registry: Registry, tenant: str, agent: str, version: str, *, actor: str) -> None:
    """``triage model promote``, ``POST /v1/operator/models/promote`` and the console's Models page:
    load and smoke-check the agent's ``version``, then record that the tenant serves it for ``agent``."""
    load_checked(registry, tenant, agent, version)
    store.activate_model(tenant, version, actor=actor, action="promote", agent=agent)


def rollback_version(store: Store, registry: Registry, tenant: str, agent: str, *, actor: str) -> str | None:
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


__all__ = ["AgentResult", "Gate", "LabelledRun", "RetrainResult", "ZeroShotCache", "card", "gate", "labelled_runs",
           "learning_curve", "load_checked", "model_config", "plan", "promote_version", "retrain", "rollback_target",
           "rollback_version", "trace_hash"]
