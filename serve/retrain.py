"""``triage retrain``: a tenant's labelled history → a challenger → the gate → the registry.

1. the tenant's labelled runs from the store: each stored trace whose effective label
   (:mod:`serve.run_labels`) says ``failed`` true or false; only this tenant's rows are read;
   a run's task is ``metadata.task_id`` (else its session, else its id): the slice and the
   intervals keep a task's runs together;
2. the base data: the vendored real sets' training parts (:mod:`model.realdata`);
3. features from the cache ``<data_dir>/cache/runscore/`` (by content hash), the challenger
   (:func:`model.runscore.retrain.fit_challenger`) on base + the tenant's runs outside the slice;
4. the gate against the tenant's active model (or the shipped one); the challenger is registered
   (``<registry>/<tenant>/<version>/``) whatever the gate says, and activated only when it passes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model.errors import InputError
from model.realdata import DEFAULT_ROOT, SOURCES, RealRun, load_all
from model.registry import SHIPPED_VERSION, ModelVersion, Registry
from model.runscore.model import Example, RunScorer
from model.runscore.retrain import (
    MIN_SLICE,
    TENANT_SOURCE,
    FeatureCache,
    GateResult,
    base_training,
    fit_challenger,
    fixed_splits,
    gate,
    split_slice,
    trace_hash,
)
from model.runscore.train import RunScoreConfig, data_hashes
from model.schema import Trace
from serve.cli_export import labels_for
from serve.settings import Settings
from serve.store import Store

Progress = Callable[[str, int, int], None]


def _noop(stage: str, done: int, total: int) -> None:
    return None


def run_group(trace: Trace) -> str:
    """The task a stored run belongs to (``metadata.task_id``, else its session, else its id)."""
    task = trace.metadata.get("task_id") if isinstance(trace.metadata, dict) else None
    return str(task or trace.session_id or trace.id)


def tenant_runs(store: Store, tenant: str) -> list[RealRun]:
    """The tenant's stored runs that carry a run-level label (``labels.failed``), oldest id first."""
    out = []
    for record in store.iter_history(tenant):
        if record["tenant"] != tenant:  # iter_history filters already; never train on another tenant
            continue
        labels = labels_for(record, include_unconfirmed=False)
        if labels is None or labels.failed is None:
            continue
        trace = Trace.model_validate(record["trace"])
        trace.labels = labels
        out.append(RealRun(TENANT_SOURCE, trace.id, run_group(trace), trace))
    return out


@dataclass
class RetrainResult:
    tenant: str
    champion: str
    version: ModelVersion
    gate: GateResult
    promoted: bool
    counts: dict[str, int]
    cache: dict[str, int]


def _card(tenant: str, version: str, champion: str, gate_result: GateResult, counts: dict[str, int]) -> str:
    lines = [f"# Model card: tenant {tenant}, {version}", "",
             f"Run scorer retrained by `triage retrain` over the champion `{champion}`: the real sets' training "
             f"parts ({counts['base_runs']} runs) and {counts['tenant_train']} of the tenant's labelled runs "
             f"({counts['tenant_slice']} more held back for the gate), with a tenant head on hashed text "
             "features (model/runscore/head.py).", "", "## Gate", "",
             f"Decision: **{'promote' if gate_result.promote else 'keep the champion'}** — {gate_result.reason()}", ""]
    if gate_result.comparisons:
        lines += ["| comparison | runs (failed) | AUROC champion | AUROC challenger | diff [95 % paired CI] | passed |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for c in gate_result.comparisons:
            lines.append(f"| {c.name} | {c.runs} ({c.failed}) | {c.champion:.3f} | {c.challenger:.3f} | "
                         f"{c.diff:+.3f} [{c.ci[0]:+.3f}, {c.ci[1]:+.3f}] | {'yes' if c.passed else 'no'} |")
    return "\n".join(lines) + "\n"


def retrain(store: Store, settings: Settings, tenant: str, *, promote: bool = True, root: Path | None = None,
            params: Path = Path("params.yaml"), exclude: Sequence[str] = (), seed: int = 0,
            actor: str = "triage retrain", progress: Progress = _noop,
            transform: Callable[[list[Example]], list[Example]] | None = None) -> RetrainResult:
    """Train, gate and register a challenger for ``tenant`` (see the module docstring).

    ``exclude``: real sets left out of the base data and the fixed splits (the bench's "a base model
    that never saw τ-airline"). ``transform``: applied to the tenant's training runs only (the tests
    flip their labels to check that the gate refuses).
    """
    unknown = sorted(set(exclude) - set(SOURCES))
    if unknown:
        raise InputError(f"unknown real sets {unknown}; valid: {', '.join(SOURCES)}", path="exclude")
    if not set(SOURCES) - set(exclude):
        raise InputError("every real set is excluded: the challenger needs base data", path="exclude")
    registry = Registry(settings.resolved_model_registry)
    config = RunScoreConfig.from_params(params) if params.is_file() else RunScoreConfig()
    progress("reading the tenant's labelled history", 0, 1)
    runs = tenant_runs(store, tenant)
    n_fail = sum(r.failed for r in runs)
    if n_fail < 2 or len(runs) - n_fail < 2:
        raise InputError(f"tenant {tenant!r} has {n_fail} failed and {len(runs) - n_fail} successful labelled runs; "
                         f"a retrain needs both, and the gate at least {MIN_SLICE} of each held back (label more "
                         "runs: POST /v1/traces/{id}/labels with {\"failed\": true|false})", path="tenant")
    real_root = root or DEFAULT_ROOT
    cache = FeatureCache(settings.data_dir / "cache" / "runscore")
    progress("reading the real sets", 0, 1)
    base_runs = load_all(real_root, tuple(s for s in SOURCES if s not in exclude))
    base_all = cache.examples(base_runs, progress, "features: real sets")
    tenant_ex = cache.examples(runs, progress, "features: tenant runs")
    train_idx, slice_idx = split_slice(tenant_ex, share=settings.retrain_holdout, seed=seed)
    train_t = [tenant_ex[i] for i in train_idx]
    slice_t = [tenant_ex[i] for i in slice_idx]
    if transform is not None:
        train_t = transform(train_t)
    base = base_training(base_all, exclude)
    champion_version = store.active_model(tenant) or SHIPPED_VERSION
    champion = registry.load(tenant, champion_version)
    progress("training the challenger", 0, 1)
    challenger = fit_challenger(base, train_t, config.as_params(), tenant_weight=settings.retrain_tenant_weight)
    progress("training the challenger", 1, 1)
    progress("gate", 0, 1)
    result = gate(champion, challenger, slice_t, fixed_splits(base_all, exclude), seed=seed)
    progress("gate", 1, 1)
    counts = {"base_runs": len(base), "tenant_runs": len(runs), "tenant_train": len(train_t),
              "tenant_slice": len(slice_t), "tenant_failed": n_fail}
    challenger.meta_["retrain"] = {"tenant": tenant, "champion": champion_version, **counts,
                                   "excluded_sets": list(exclude)}
    data = {"real_sets": data_hashes(real_root), "excluded_sets": list(exclude),
            "tenant_runs": [{"trace_id": r.trace.id, "task": r.group, "sha256": trace_hash(r.trace),
                             "failed": r.failed, "slice": i in set(slice_idx)} for i, r in enumerate(runs)],
            "counts": counts, "labels_read_at": datetime.now(UTC).isoformat(timespec="seconds")}
    report = {"tenant": tenant, "champion": champion_version, "gate": result.to_dict(), "counts": counts,
              "data_sha256": hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()}
    card = _card(tenant, "(this version)", champion_version, result, counts)
    mv = registry.save(tenant, challenger, parent=champion_version, card=card, report=report, data=data)
    promoted = bool(result.promote and promote)
    if promoted:
        store.activate_model(tenant, mv.version, actor=actor, action="promote")
    return RetrainResult(tenant, champion_version, mv, result, promoted, counts,
                         {"hits": cache.hits, "misses": cache.misses})


def rollback_target(history: list[dict[str, Any]]) -> str:
    """The version a rollback activates: promotions push, rollbacks pop; the new top (else shipped)."""
    stack: list[str] = []
    for h in reversed(history):  # history is newest first
        if h["action"] == "rollback":
            if stack:
                stack.pop()
        else:
            stack.append(h["version"])
    if not stack:
        raise InputError("nothing to roll back: the tenant serves the shipped model", path="tenant")
    stack.pop()
    return stack[-1] if stack else SHIPPED_VERSION


def load_checked(registry: Registry, tenant: str, version: str) -> RunScorer:
    """Load ``version`` and run the service's own smoke check on it (:func:`serve.models.check_model`,
    what every worker runs before it swaps a version in), so a promotion refuses what a worker would."""
    from model.diagnosis import Diagnoser
    from serve.models import SmokeCheckError, check_model

    scorer = registry.load(tenant, version)
    try:
        check_model(Diagnoser.with_shipped_models(classifier=False, runscorer=scorer))
    except SmokeCheckError as exc:
        raise InputError(f"{tenant}/{version}: {exc}", path="version") from exc
    return scorer


def promote_version(store: Store, registry: Registry, tenant: str, version: str, *, actor: str) -> None:
    """``triage model promote`` and ``POST /v1/operator/models/promote``: load and smoke-check
    ``version``, then record that the tenant serves it."""
    load_checked(registry, tenant, version)
    store.activate_model(tenant, version, actor=actor, action="promote")


def rollback_version(store: Store, registry: Registry, tenant: str, *, actor: str) -> str:
    """``triage model rollback`` and ``POST /v1/operator/models/rollback``: serve the version active
    before the current one (checked like a promotion); returns it."""
    target = rollback_target(store.model_history(tenant))
    load_checked(registry, tenant, target)
    store.activate_model(tenant, target, actor=actor, action="rollback")
    return target


__all__ = ["RetrainResult", "load_checked", "promote_version", "retrain", "rollback_target", "rollback_version",
           "run_group", "tenant_runs"]
