"""Whether an agent's own where-model serves its ``attribution``: the rule ``triage retrain`` applies.

For one agent's labelled failing runs that say where they went wrong (a ``source_index``), grouped
cross-validation **inside those runs** (folds by task): in each fold a learned
:class:`~model.scoring.agentmodel.where.WhereModel` (position and content) and the agent's position
prior alone (``content=False``) are fitted on the other folds and judged on the fold's runs by exact
accuracy (the labelled message picked). The where-model is **kept** only when the paired difference
(learned − prior, one value a run) has its whole 95 % bootstrap interval (resampling tasks) above 0;
it is then refitted on every run and serves the agent's ``attribution``. Otherwise the service's
shipped attribution (a position model) answers, as before.

:func:`served_rule_curve` judges the rule itself on a set (choose on the training folds, report on the
held-out ones): the accuracy of what the rule serves against the position prior's.

>>> choose_localiser([], [], []).kept                            # too few runs: not fitted
False
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.metrics import draw_whole_groups, fold_by_group, group_bootstrap
from model.core.schema import Trace
from model.scoring.agentmodel.where import WhereModel, messages

#: Fewest labelled failing runs with a location (of at least :data:`MIN_WHERE_TASKS` tasks) before a
#: where-model is fitted for an agent.
MIN_WHERE_RUNS = 20
MIN_WHERE_TASKS = 3
#: The served localisers, as the answer's basis names them.
PRIOR, WHERE = "position prior", "where model"


@dataclass
class LocaliserChoice:
    """The decision for one agent: ``kept`` (the where-model serves), the figures behind it and the
    fitted ``model`` (``None`` unless kept); ``reason`` says why in words."""

    kept: bool
    reason: str
    runs: int = 0
    tasks: int = 0
    folds: int = 0
    exact: dict[str, Any] = field(default_factory=dict)   # learned, prior, diff, ci
    model: WhereModel | None = None

    def to_dict(self) -> dict[str, Any]:
        """The decision as JSON (the retrain's report), without the model."""
        return {"kept": self.kept, "reason": self.reason, "runs": self.runs, "tasks": self.tasks,
                "folds": self.folds, "exact": self.exact, "localiser": WHERE if self.kept else PRIOR}

    def card(self) -> str:
        """The model card's section on localisation."""
        lines = ["", "## Localisation (where a failed run went wrong)", ""]
        if self.exact:
            e = self.exact
            lines += [f"Grouped {self.folds}-fold cross-validation on {self.runs} labelled failing runs with a "
                      f"location ({self.tasks} task groups), exact accuracy (the labelled message picked): "
                      f"where-model {e['learned']:.3f}, the agent's position prior {e['prior']:.3f}, difference "
                      f"{e['diff']:+.3f} [{e['ci'][0]:+.3f}, {e['ci'][1]:+.3f}] (95 % paired, tasks resampled).", ""]
        lines.append(f"Decision: **{'the where-model serves `attribution`' if self.kept else 'the shipped position attribution serves'}** — {self.reason}.")
        return "\n".join(lines) + "\n"


def _usable(traces: Sequence[Trace], failing_index: Sequence[int | None], groups: Sequence[str]) -> list[int]:
    out = []
    for i, (t, f) in enumerate(zip(traces, failing_index, strict=True)):
        if f is None:
            continue
        sis = [m.source_index for m in messages(t)]
        if len(sis) > 1 and f in sis:
            out.append(i)
    return out


def choose_localiser(traces: Sequence[Trace], failing_index: Sequence[int | None], groups: Sequence[str], *,
                     folds: int = 3, seed: int = 0, min_runs: int = MIN_WHERE_RUNS,
                     n_boot: int = 1000) -> LocaliserChoice:
    """The rule (module docstring) on one agent's failed runs.

    Parameters
    ----------
    traces, failing_index, groups:
        The agent's failed runs, the ``source_index`` of the message where each went wrong (``None``:
        not said; left out) and each run's task.
    folds:
        Cross-validation folds (at most one a task group).
    min_runs:
        Fewer usable runs (a location among two or more messages), or fewer than
        :data:`MIN_WHERE_TASKS` tasks: nothing is fitted, the prior serves.
    """
    if not len(traces) == len(failing_index) == len(groups):
        raise InputError(f"traces, failing_index and groups must have one entry per run; got {len(traces)}, "
                         f"{len(failing_index)}, {len(groups)}", path="failing_index")
    use = _usable(traces, failing_index, groups)
    tr = [traces[i] for i in use]
    loc = [failing_index[i] for i in use]
    gr = [str(groups[i]) for i in use]
    tasks = len(set(gr))
    if len(use) < min_runs or tasks < MIN_WHERE_TASKS:
        return LocaliserChoice(False, f"{len(use)} labelled failing run(s) with a location ({tasks} task groups); "
                               f"a where-model needs {min_runs} of {MIN_WHERE_TASKS} or more tasks", len(use), tasks)
    k = min(folds, tasks)
    hit = {"learned": np.zeros(len(use)), "prior": np.zeros(len(use))}
    for test in fold_by_group(gr, k, seed):
        train = np.setdiff1d(np.arange(len(use)), test)
        ttr, tloc, tgr = [tr[i] for i in train], [loc[i] for i in train], [gr[i] for i in train]
        models = {"learned": WhereModel(content=True, seed=seed).fit(ttr, tloc, tgr),
                  "prior": WhereModel(content=False, seed=seed).fit(ttr, tloc, tgr)}
        for i in test:
            for name, m in models.items():
                hit[name][i] = float(m.locate(tr[i])[0] == loc[i])
    diff = hit["learned"] - hit["prior"]
    boot = group_bootstrap(sorted(set(gr)), np.random.default_rng(seed + 5), n_boot).means(diff, gr)
    ci = [round(float(np.quantile(boot, 0.025)), 4), round(float(np.quantile(boot, 0.975)), 4)]
    exact = {"learned": round(float(hit["learned"].mean()), 4), "prior": round(float(hit["prior"].mean()), 4),
             "diff": round(float(diff.mean()), 4), "ci": ci}
    kept = ci[0] > 0
    reason = ("its exact accuracy is above the position prior's with the whole interval above 0"
              if kept else "its exact accuracy is not above the position prior's with the whole interval above 0")
    model = WhereModel(content=True, seed=seed).fit(tr, loc, gr) if kept else None
    return LocaliserChoice(kept, reason, len(use), tasks, k, exact, model)


def served_rule_curve(runs: Sequence[Any], k: int = 100, draws: int = 2, seed: int = 0, folds: int = 5,
                      n_boot: int = 1000) -> dict[str, Any]:
    """The rule judged on one set: for each draw and task fold, ``k`` labelled failing runs of the other
    folds (whole tasks in random order) are one agent's history; :func:`choose_localiser` decides there,
    and what it serves (the where-model, else the position prior fitted on the same runs) is scored by
    exact accuracy on the fold's runs against the position prior. ``runs``: objects with ``trace``,
    ``group``, ``failed``, ``fail_source_index`` (:class:`model.data.realdata.RealRun`)."""
    rs = [r for r in runs if r.failed and r.fail_source_index is not None]
    use = _usable([r.trace for r in rs], [r.fail_source_index for r in rs], [r.group for r in rs])
    rs = [rs[i] for i in use]
    groups = [str(r.group) for r in rs]
    if len(set(groups)) < folds:
        raise InputError(f"need labelled failing runs of at least {folds} tasks; got {len(set(groups))}", path="runs")
    served = np.zeros(len(rs))
    prior = np.zeros(len(rs))
    kept = 0
    units = 0
    rng = np.random.default_rng(seed)
    for d in range(draws):
        for test in fold_by_group(groups, folds, seed * 1000 + d):
            tset = set(test.tolist())
            pool = [i for i in range(len(groups)) if i not in tset]
            train = [pool[j] for j in draw_whole_groups([groups[i] for i in pool], k, rng)]
            ttr = [rs[i].trace for i in train]
            tloc = [rs[i].fail_source_index for i in train]
            tgr = [groups[i] for i in train]
            choice = choose_localiser(ttr, tloc, tgr, seed=d, n_boot=n_boot)
            base = WhereModel(content=False, seed=d).fit(ttr, tloc, tgr)
            kept += int(choice.kept)
            units += 1
            for i in test:
                truth = rs[i].fail_source_index
                p = float(base.locate(rs[i].trace)[0] == truth)
                prior[i] += p
                served[i] += float(choice.model.locate(rs[i].trace)[0] == truth) if choice.model is not None else p
    served /= draws
    prior /= draws
    diff = served - prior
    boot = group_bootstrap(sorted(set(groups)), np.random.default_rng(seed + 9), n_boot).means(diff, groups)
    return {"k": k, "draws": draws, "folds": folds, "runs": len(rs), "tasks": len(set(groups)),
            "kept": kept, "units": units, "served_exact": round(float(served.mean()), 4),
            "prior_exact": round(float(prior.mean()), 4), "diff": round(float(diff.mean()), 4),
            "ci": [round(float(np.quantile(boot, 0.025)), 4), round(float(np.quantile(boot, 0.975)), 4)]}


def served_rule_markdown(results: dict[str, Any]) -> str:
    """The served rule per set: how often it kept the where-model, and what it served against the prior."""
    lines = ["| set | K | runs (tasks) | where-model kept (of draw × fold) | served exact | position prior exact "
             "| served − prior [95 %] |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, d in results.items():
        lines.append(f"| {name} | {d['k']} | {d['runs']} ({d['tasks']}) | {d['kept']} of {d['units']} | "
                     f"{d['served_exact']:.3f} | {d['prior_exact']:.3f} | {d['diff']:+.3f} "
                     f"[{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] |")
    return "\n".join(lines)


__all__ = ["MIN_WHERE_RUNS", "MIN_WHERE_TASKS", "PRIOR", "WHERE", "LocaliserChoice", "choose_localiser",
           "served_rule_curve", "served_rule_markdown"]
