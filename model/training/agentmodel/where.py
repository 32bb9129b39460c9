"""Where a failed run went wrong, measured in domain: the learned where-model against the position prior.

:func:`localisation_curve` is the in-domain measurement of issue 20 item 3: folds grouped by task,
K labelled failing runs drawn from the training folds, exact / ±1 / ±3 accuracy (in messages) of
the learned model (:class:`model.scoring.agentmodel.where.WhereModel`), of the agent's position prior
alone, and of the fixed position chosen on the same K runs, with the gains' paired bootstrap intervals
(resampling tasks). Whether an agent's own where-model serves is :mod:`model.training.agentmodel.where_served`.

Run ``python -m model.training.agentmodel.where`` for the table on Who&When and AgentProcessBench.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.metrics import draw_whole_groups, group_bootstrap
from model.scoring.agentmodel.where import (
    Message,
    Prepared,
    WhereModel,
    featurise,
    inner_folds,
    messages,
    prepare,
)

# ---- fixed positions ----------------------------------------------------------------------------

#: The fixed positions a baseline may choose among: k-th message from the start or the end, or a
#: relative position.
FIXED_POSITIONS: tuple[str, ...] = (
    *(f"first+{k}" for k in range(10)), *(f"last-{k}" for k in range(10)),
    *(f"relative {r / 10:.1f}" for r in range(11)),
)


def fixed_row(rule: str, n: int) -> int:
    """The candidate row a fixed-position rule picks among ``n`` messages."""
    if rule.startswith("first+"):
        return min(int(rule[6:]), n - 1)
    if rule.startswith("last-"):
        return max(0, n - 1 - int(rule[5:]))
    return int(round(float(rule.split()[1]) * (n - 1)))


def _rates(pred_si: int, true_si: int) -> tuple[float, float, float]:
    d = abs(pred_si - true_si)
    return float(d == 0), float(d <= 1), float(d <= 3)


def choose_fixed(items: Sequence[Prepared]) -> str:
    """The fixed position with the best exact (then ±1, then ±3) accuracy on ``items``."""
    best, score = FIXED_POSITIONS[0], (-1.0, -1.0, -1.0)
    for rule in FIXED_POSITIONS:
        acc = np.zeros(3)
        for p in items:
            assert p.target is not None
            acc += _rates(p.msgs[fixed_row(rule, len(p.msgs))].source_index, p.msgs[p.target].source_index)
        s = (float(acc[0]), float(acc[1]), float(acc[2]))
        if s > score:
            best, score = rule, s
    return best


# ---- the measurement --------------------------------------------------------------------------

METHODS = ("learned", "position prior", "fixed position")
METRICS = ("exact", "within_1", "within_3")
N_BOOT = 2000


def _draw(items: Sequence[Prepared], k: int, rng: np.random.Generator) -> list[Prepared]:
    """``k`` runs: whole task groups in random order, the last one cut to fit (all when fewer)."""
    return [items[i] for i in draw_whole_groups([p.group for p in items], k, rng)]


def _boot(values: np.ndarray, groups: Sequence[str], rng: np.random.Generator, n: int = N_BOOT) -> tuple[float, list[float]]:
    """Mean over runs and its bootstrap interval, resampling task groups (:func:`group_bootstrap`)."""
    labels, keys = np.asarray(groups), sorted(set(groups))
    sums = np.array([values[labels == g].sum() for g in keys])  # the point summed by group
    boot = group_bootstrap(keys, rng, n).means(values, groups)
    return float(sums.sum() / len(values)), [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))]


def localisation_curve(runs: Sequence[Any], k: int = 100, draws: int = 5, seed: int = 0, folds: int = 5) -> dict[str, Any]:
    """In-domain localisation of one set's failed runs (those whose set says where).

    For each of ``draws`` random partitions of the tasks into ``folds`` folds, and each fold: ``k``
    labelled failing runs are drawn by task from the other folds (all of them when fewer); the
    learned model, the position prior alone, and the fixed position with the best exact accuracy on
    those same ``k`` runs are fitted there and judged on the fold's runs. A run's hit is averaged
    over the draws; means and the paired gains get bootstrap intervals resampling tasks.

    ``runs``: objects with ``trace``, ``group``, ``failed`` and ``fail_source_index``
    (:class:`model.data.realdata.RealRun`).
    """
    if draws < 1 or folds < 2:
        raise InputError(f"draws must be ≥ 1 and folds ≥ 2; got {draws}, {folds}", path="draws")
    items = [prepare(r.trace, r.fail_source_index, r.group) for r in runs if r.failed
             and r.fail_source_index is not None]
    usable = [p for p in items if p.target is not None and len(p.msgs) > 1]
    if len({p.group for p in usable}) < folds:
        raise InputError(f"need labelled failing runs of at least {folds} tasks; got "
                         f"{len({p.group for p in usable})}", path="runs")
    hits = {m: np.zeros((len(usable), 3)) for m in METHODS}
    chosen: list[str] = []
    l2s: list[tuple[float, float | None]] = []
    n_train: list[int] = []
    rng = np.random.default_rng(seed)
    for d in range(draws):
        for test in inner_folds(usable, folds, seed * 1000 + d):
            tset = set(test.tolist())
            train = _draw([p for i, p in enumerate(usable) if i not in tset], k, rng)
            n_train.append(len(train))
            learned = WhereModel(content=True, seed=d)._fit_prepared(train)
            prior = WhereModel(content=False, seed=d)._fit_prepared(train)
            rule = choose_fixed(train)
            chosen.append(rule)
            l2s.append((learned.l2_position_, learned.l2_content_))
            for i in test:
                p = usable[i]
                assert p.target is not None
                truth = p.msgs[p.target].source_index
                for name, row in (("learned", learned._locate_prepared(p)), ("position prior", prior._locate_prepared(p)),
                                  ("fixed position", fixed_row(rule, len(p.msgs)))):
                    hits[name][i] += _rates(p.msgs[row].source_index, truth)
    for m in METHODS:
        hits[m] /= draws
    groups = [p.group for p in usable]

    brng = np.random.default_rng(seed + 7)
    out_methods: dict[str, dict[str, Any]] = {}
    for m in METHODS:
        out_methods[m] = {}
        for j, metric in enumerate(METRICS):
            mean, ci = _boot(hits[m][:, j], groups, np.random.default_rng(brng.integers(1 << 31)))
            out_methods[m][metric] = {"mean": round(mean, 4), "ci": [round(c, 4) for c in ci]}
    gains: dict[str, dict[str, Any]] = {}
    for base in ("position prior", "fixed position"):
        gains[f"learned − {base}"] = {}
        for j, metric in enumerate(METRICS):
            mean, ci = _boot(hits["learned"][:, j] - hits[base][:, j], groups,
                             np.random.default_rng(brng.integers(1 << 31)))
            gains[f"learned − {base}"][metric] = {"mean": round(mean, 4), "ci": [round(c, 4) for c in ci]}
    uniform = np.mean([[np.mean([_rates(m.source_index, p.msgs[p.target].source_index)[j] for m in p.msgs])
                        for j in range(3)] for p in usable if p.target is not None], axis=0)
    rules: dict[str, int] = defaultdict(int)
    for r in chosen:
        rules[r] += 1
    return {
        "k": k, "draws": draws, "folds": folds, "seed": seed,
        "failed_runs": len(items), "labelled_runs": len(usable), "tasks": len(set(groups)),
        "unlocatable": len(items) - len(usable), "train_runs_mean": round(float(np.mean(n_train)), 1),
        "candidates_mean": round(float(np.mean([len(p.msgs) for p in usable])), 2),
        "methods": out_methods, "gains": gains,
        "uniform": {metric: round(float(v), 4) for metric, v in zip(METRICS, uniform, strict=True)},
        "fixed_positions_chosen": dict(sorted(rules.items(), key=lambda kv: -kv[1])),
        "l2_chosen": {"position": sorted({a for a, _ in l2s}), "content": sorted({b for _, b in l2s if b is not None})},
    }


def _cell(d: dict[str, Any]) -> str:
    return f"{d['mean']:.3f} [{d['ci'][0]:.3f}, {d['ci'][1]:.3f}]"


def localisation_markdown(results: dict[str, Any]) -> str:
    """One table per set: ``results`` maps set name → :func:`localisation_curve`'s dict."""
    lines = []
    for name, d in results.items():
        lines += [f"### {name}: K = {d['k']} (mean {d['train_runs_mean']} training runs), {d['labelled_runs']} "
                  f"labelled failing runs of {d['tasks']} tasks, {d['candidates_mean']} candidate messages a run, "
                  f"{d['folds']} folds × {d['draws']} draws", "",
                  "| method | exact | ±1 | ±3 |", "| --- | --- | --- | --- |"]
        for m, row in d["methods"].items():
            lines.append(f"| {m} | " + " | ".join(_cell(row[x]) for x in METRICS) + " |")
        lines.append("| uniform pick (expected) | " + " | ".join(f"{d['uniform'][x]:.3f}" for x in METRICS) + " |")
        for g, row in d["gains"].items():
            lines.append(f"| **gain {g}** | " + " | ".join(_cell(row[x]) for x in METRICS) + " |")
        rules = ", ".join(f"{r} ×{c}" for r, c in d["fixed_positions_chosen"].items())
        lines += ["", f"Fixed positions chosen on the training folds: {rules}. "
                  f"Unlocatable failing runs (label on no candidate message, or one message): {d['unlocatable']}.", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m model.training.agentmodel.where", description=__doc__.splitlines()[0])
    ap.add_argument("--sets", nargs="+", default=["whowhen", "agentprocessbench"])
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = ap.parse_args(argv)
    from model.data.realdata import load_source

    results = {s: localisation_curve(load_source(s), k=a.k, draws=a.draws, seed=a.seed) for s in a.sets}
    if a.json is not None:
        a.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(localisation_markdown(results))


if __name__ == "__main__":
    main()


__all__ = ["FIXED_POSITIONS", "Message", "WhereModel", "choose_fixed", "featurise", "fixed_row",
           "localisation_curve", "localisation_markdown", "messages"]
