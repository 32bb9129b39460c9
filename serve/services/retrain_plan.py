"""``triage retrain``'s plan: the labelled runs it reads, which model each agent's runs train, and why an
agent gets none (a refusal with a fixed code).

Refusal codes (:data:`REFUSAL_CODES`), per agent (or for the pooled model, :data:`POOLED`):

* ``corrupt_run`` — a stored run that does not read back as a trace (one refusal a run, naming it; the
  others are used);
* ``one_class`` — every labelled run of the agent has the same label (no AUROC, nothing to learn);
* ``too_few_runs`` — fewer than ``min_runs`` labelled runs, or fewer than ``min_class`` of a class;
* ``too_few_task_groups`` — fewer than :data:`MIN_TASK_GROUPS` task groups (grouped CV needs two: a
  fold is held out while the others train), or no grouped fold holds out runs of both classes while
  training on both.

An agent short of data trains the tenant's pooled model with the other such agents; it is served by it
only when the pooled model's out-of-fold AUROC on its own labels is at least the zero-shot score's
(:func:`pooled_members`): its status is then ``pooled``, else ``refused``, and either way its ``code``
says why it has no model of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from pydantic import ValidationError

from model.core.agents import POOL_AGENT
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.scoring.agent_registry import POOLED
from serve.services.run_labels import labels_for
from serve.store.labels import LabelStore

TOO_FEW_RUNS = "too_few_runs"
ONE_CLASS = "one_class"
TOO_FEW_TASK_GROUPS = "too_few_task_groups"
CORRUPT_RUN = "corrupt_run"
REFUSAL_CODES: tuple[str, ...] = (TOO_FEW_RUNS, ONE_CLASS, TOO_FEW_TASK_GROUPS, CORRUPT_RUN)
#: Grouped cross-validation holds one task group out while it trains on the others: two at least.
MIN_TASK_GROUPS = 2


@dataclass
class LabelledRun:
    """One stored run with its effective label (not on the trace: labels are never inputs)."""

    trace: Trace
    agent: str
    failed: bool
    task: str | None
    #: the service answered it unhealthy for a cause other than the early warning (:func:`other_alarm`)
    flagged: bool = False
    #: where a failed run went wrong, as its label says (:func:`failing_source_index`); ``None``: not said
    fail_source_index: int | None = None


def failing_source_index(trace: Trace, labels: Any) -> int | None:
    """The ``source_index`` of the first located failure of an effective label (its ``source_index``,
    else its ``step``'s; a step past the trace's end says nothing); ``None`` when no failure says where."""
    for f in getattr(labels, "failures", None) or []:
        if f.source_index is not None:
            return int(f.source_index)
        if f.step is not None and 0 <= f.step < len(trace.steps):
            return int(trace.steps[f.step].source_index)
    return None


def other_alarm(response: Any) -> bool:
    """Whether a stored answer said the run was unhealthy for a cause other than the early warning (a rule,
    the classifier, a stream): such a successful run already spends the false-alarm budget the early
    warning's point is set against (:func:`model.scoring.agentmodel.model.warning_point`).

    >>> other_alarm({"healthy": False, "failures": [{"kind": "loop"}]}), other_alarm({"healthy": True})
    (True, False)
    >>> other_alarm({"healthy": False, "failures": [{"kind": "at_risk"}]}), other_alarm(None)
    (False, False)
    """
    if not isinstance(response, dict) or response.get("healthy") is not False:
        return False
    return any(isinstance(f, dict) and f.get("kind") != FailureKind.AT_RISK.value for f in response.get("failures") or [])


@dataclass(frozen=True)
class Refusal:
    """Why an agent (or the pooled model, or one stored run) trains no model."""

    agent: str
    code: str
    message: str
    trace_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_runs(store: LabelStore, tenant: str) -> tuple[list[LabelledRun], list[Refusal]]:
    """The tenant's stored runs that carry a run-level label, oldest first (stored time, then id), and a
    ``corrupt_run`` refusal for each labelled one that does not read back as a trace. In the order they
    were stored, not by id: the service makes random ids for runs posted without one, and the folds and
    fits follow the runs' order, so the same history gives the same retrain."""
    out: list[LabelledRun] = []
    when: list[tuple[str, str]] = []
    bad: list[Refusal] = []
    for record in store.iter_history(tenant):
        if record["tenant"] != tenant:  # iter_history filters already; never train on another tenant
            continue
        labels = labels_for(record, include_unconfirmed=False)
        if labels is None or labels.failed is None:
            continue
        agent = str(record.get("agent") or POOL_AGENT)
        raw = record.get("trace")
        try:
            trace = Trace.model_validate(raw)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err.get("loc", ())) or "trace"
            tid = str(raw.get("id")) if isinstance(raw, dict) and raw.get("id") is not None else None
            bad.append(Refusal(agent, CORRUPT_RUN, f"stored run {tid or '?'} does not read as a trace "
                               f"({exc.error_count()} error(s); {where}: {err.get('msg')}); left out", tid))
            continue
        trace.labels = None
        task = trace.metadata.get("task_id") if isinstance(trace.metadata, dict) else None
        out.append(LabelledRun(trace, agent, bool(labels.failed), None if task in (None, "") else str(task),
                               other_alarm(record.get("response")),
                               failing_source_index(trace, labels) if labels.failed else None))
        created = record.get("created_at")
        when.append((created.isoformat() if created is not None else "", trace.id))
    order = sorted(range(len(out)), key=when.__getitem__)
    return [out[i] for i in order], bad


def labelled_runs(store: LabelStore, tenant: str) -> list[LabelledRun]:
    """The tenant's stored runs that carry a run-level label and read as traces, oldest first."""
    return read_runs(store, tenant)[0]


def shortage(agent: str, rs: Sequence[LabelledRun], *, min_runs: int, min_class: int) -> Refusal | None:
    """The refusal for too little data, or ``None``: ``too_few_runs`` under ``min_runs``, else
    ``one_class`` when every run has one label, else ``too_few_runs`` under ``min_class`` of a class."""
    nf = sum(r.failed for r in rs)
    n = len(rs)
    counts = f"{n} labelled runs ({nf} failed, {n - nf} successful)"
    if n < min_runs:
        return Refusal(agent, TOO_FEW_RUNS, f"{counts}; a model needs {min_runs}, {min_class} of each class")
    if nf in (0, n):
        return Refusal(agent, ONE_CLASS, f"{counts}: every one {'failed' if nf else 'succeeded'}; a model "
                       f"needs {min_class} failed and {min_class} successful runs")
    if min(nf, n - nf) < min_class:
        return Refusal(agent, TOO_FEW_RUNS, f"{counts}; a model needs {min_runs}, {min_class} of each class")
    return None


def too_few_groups(agent: str, groups: Sequence[str]) -> Refusal | None:
    """``too_few_task_groups`` when the runs form fewer than :data:`MIN_TASK_GROUPS` task groups."""
    k = len(set(groups))
    if k >= MIN_TASK_GROUPS:
        return None
    return Refusal(agent, TOO_FEW_TASK_GROUPS,
                   f"its {len(groups)} labelled runs form {k} task group; grouped cross-validation needs "
                   f"{MIN_TASK_GROUPS} (send metadata.task_id, or label runs of other tasks)")


def plan(runs: Sequence[LabelledRun], *, min_runs: int, min_class: int,
         groups_of: Any = None) -> tuple[dict[str, list[LabelledRun]], dict[str, Refusal]]:
    """Which runs train which model: ``{agent or POOLED: runs}``, and each agent sent to the pool with
    its own refusal (what it lacks). ``groups_of(runs) -> groups`` (``group_runs`` of their traces and
    tasks): an agent with enough runs of too few task groups goes to the pool too."""
    by_agent: dict[str, list[LabelledRun]] = {}
    for r in runs:
        by_agent.setdefault(r.agent, []).append(r)
    out: dict[str, list[LabelledRun]] = {}
    rest: list[LabelledRun] = []
    short: dict[str, Refusal] = {}
    for agent, rs in sorted(by_agent.items()):
        why = shortage(agent, rs, min_runs=min_runs, min_class=min_class)
        if why is None and groups_of is not None:
            why = too_few_groups(agent, groups_of(rs))
        if why is None:
            out[agent] = rs
        else:
            short[agent] = why
            rest.extend(rs)
    if rest:
        out[POOLED] = rest
    return out, short


def pooled_members(agents: Sequence[str], y: np.ndarray, oof: np.ndarray, zero_shot: np.ndarray
                   ) -> dict[str, dict[str, Any]]:
    """Per agent of a pooled model: the served learner's out-of-fold AUROC on that agent's own runs
    (mean over draws; ``oof``: draws × runs, NaN where a run was not held out) beside the zero-shot
    score's on the same runs, and whether the pooled model serves it (its AUROC ≥ zero-shot's)."""
    from model.core.metrics import auroc

    out: dict[str, dict[str, Any]] = {}
    arr = np.asarray(agents)
    for a in sorted(set(agents)):
        rows = np.flatnonzero(arr == a)
        mine, zs = [], []
        for draw in oof:
            ok = rows[~np.isnan(draw[rows])]
            if len(ok) and 0 < y[ok].sum() < len(ok):
                mine.append(auroc(y[ok], draw[ok]))
                zs.append(auroc(y[ok], zero_shot[ok]))
        if not mine:
            out[a] = {"runs": len(rows), "auroc": None, "zero-shot": None, "serves": False}
            continue
        m, z = float(np.mean(mine)), float(np.mean(zs))
        out[a] = {"runs": len(rows), "auroc": m, "zero-shot": z, "serves": bool(m >= z)}
    return out


__all__ = ["CORRUPT_RUN", "MIN_TASK_GROUPS", "ONE_CLASS", "REFUSAL_CODES", "TOO_FEW_RUNS", "TOO_FEW_TASK_GROUPS",
           "LabelledRun", "Refusal", "failing_source_index", "labelled_runs", "plan", "pooled_members", "read_runs", "shortage",
           "too_few_groups"]
