"""The learning curve of the run scorer over the number of training runs, leave-one-source-out.

For every held-out real set S and every size K of a grid, :func:`learning_curve` draws K runs
**by task group** from the other sets (whole groups in a seeded random order: trials of one task
are near-duplicates, so a curve over runs drawn one by one would count the same task several
times), fits a :class:`~model.scoring.runscore.model.RunScorer` on them and scores S: AUROC of
``failure_probability`` where S has both outcomes, exact localisation on ``source_index`` where
S says where its runs went wrong. Several seeds per K give the spread;
:func:`summarise` gives mean, standard deviation and range per (S, K) beside S's run-length
baseline (AUROC of the number of messages), which does not depend on K.

A small draw may hold no training set with both outcomes; that fit is recorded as failed
(``fitted=False``, AUROC NaN) rather than dropped, and the summary counts it.

>>> from model.training.runscore.curves import learning_curve, summarise       # doctest: +SKIP
>>> points = learning_curve(examples, sizes=(50, 200), seeds=(0, 1, 2))  # doctest: +SKIP
>>> summarise(points)[0]["auroc_mean"]                                 # doctest: +SKIP
0.58
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from model.core.errors import InputError
from model.core.metrics import auroc, draw_whole_groups
from model.data.realdata import first_groups, loso_family
from model.scoring.runscore.model import Example, RunScorer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The default grid of training-set sizes (runs); sizes above a pool's size are left out and the
#: whole pool is always the last point.
DEFAULT_SIZES: tuple[int, ...] = (25, 50, 100, 200, 400)
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)

_G = TypeVar("_G")


@dataclass(frozen=True)
class CurvePoint:
    """One fit of the curve: held-out set, requested and drawn size, seed, and its scores."""

    held_out: str
    k: int
    n_train: int
    seed: int
    fitted: bool
    auroc: float
    exact: float
    baseline_auroc: float
    trained_on: tuple[str, ...]
    train_groups: int


def draw_by_group(examples: Sequence[Example], k: int, rng: np.random.Generator) -> list[Example]:
    """``k`` runs of ``examples``: whole task groups in random order, the last one cut to fit.

    Raises :class:`~model.core.errors.InputError` when ``k`` is not between 1 and ``len(examples)``.
    """
    if not 1 <= k <= len(examples):
        raise InputError(f"k must be between 1 and the pool's {len(examples)} runs; got {k}", path="k")
    return [examples[i] for i in draw_whole_groups([e.group for e in examples], k, rng)]


def _exact(scorer: RunScorer, test: Sequence[Example]) -> float:
    hits = []
    for e in test:
        if e.target is None:
            continue
        _, probs = scorer.score_example(e)
        hits.append(int(np.argmax(probs)) == e.target)
    return float(np.mean(hits)) if hits else float("nan")


def learning_curve(
    examples: Sequence[Example],
    *,
    sizes: Sequence[int] = DEFAULT_SIZES,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    held_out: Sequence[str] | None = None,
    params: dict[str, Any] | None = None,
) -> list[CurvePoint]:
    """Fit on K runs drawn by group from the sets outside S's family (:func:`model.data.realdata.loso_family`),
    score the held-out set S; every (S, K, seed).

    Parameters
    ----------
    examples:
        Prepared real runs (:class:`~model.scoring.runscore.model.Example`), every set together.
    sizes:
        Training-set sizes; those above the pool (the runs of the other sets) are skipped and the
        whole pool is added as the last size (one seed: every draw of it is the same).
    seeds:
        One draw per seed and size.
    held_out:
        The sets to hold out in turn (default: every set in ``examples``).
    params:
        :class:`RunScorer` keyword arguments.
    """
    params = dict(params or {})
    sources = list(dict.fromkeys(e.source for e in examples))
    if held_out is None:
        held_out = sources
    unknown = [s for s in held_out if s not in sources]
    if unknown:
        raise InputError(f"held_out {unknown} not among the sets {sources}", path="held_out")
    if not seeds:
        raise InputError("seeds is empty: give at least one", path="seeds")
    points: list[CurvePoint] = []
    for S in held_out:
        test = [e for e in examples if e.source == S]
        pool = [e for e in examples if loso_family(e.source) != loso_family(S)]  # τ² airline is τ-bench's family
        if not pool:
            raise InputError(f"holding out {S!r} leaves no runs to train on", path="held_out")
        y = np.array([int(e.failed) for e in test])
        both = 0 < y.sum() < len(y)
        base = auroc(y, np.array([e.messages for e in test], dtype=float)) if both else float("nan")
        grid = sorted({k for k in sizes if 0 < k < len(pool)}) + [len(pool)]
        for k in grid:
            for seed in seeds if k < len(pool) else seeds[:1]:
                train = draw_by_group(pool, k, np.random.default_rng([seed, k]))
                trained_on = tuple(sorted({e.source for e in train}))
                groups = len({e.group for e in train})
                try:
                    scorer = RunScorer(**params).fit(train)
                except InputError:  # no drawn set holds both outcomes
                    points.append(CurvePoint(S, k, len(train), seed, False, float("nan"), float("nan"), base,
                                             trained_on, groups))
                    continue
                held_auroc = (auroc(y, np.array([scorer.score_example(e)[0] for e in test])) if both
                         else float("nan"))
                points.append(CurvePoint(S, k, len(train), seed, True, held_auroc, _exact(scorer, test), base,
                                         trained_on, groups))
    return points


def _stats(values: Sequence[float]) -> tuple[float, float, float, float]:
    v = np.asarray([x for x in values if not math.isnan(x)], dtype=float)
    if not len(v):
        return (float("nan"),) * 4
    return float(v.mean()), float(v.std(ddof=1)) if len(v) > 1 else 0.0, float(v.min()), float(v.max())


def summarise(points: Sequence[CurvePoint]) -> list[dict[str, Any]]:
    """Per (held-out set, K): seeds, failed fits, AUROC and exact localisation mean / sd / range."""
    by: dict[tuple[str, int], list[CurvePoint]] = defaultdict(list)
    for p in points:
        by[(p.held_out, p.k)].append(p)
    rows = []
    for (S, k), ps in by.items():
        a_mean, a_sd, a_min, a_max = _stats([p.auroc for p in ps])
        e_mean, e_sd, e_min, e_max = _stats([p.exact for p in ps])
        rows.append({"held_out": S, "k": k, "seeds": len(ps), "failed_fits": sum(not p.fitted for p in ps),
                     "auroc_mean": a_mean, "auroc_sd": a_sd, "auroc_min": a_min, "auroc_max": a_max,
                     "exact_mean": e_mean, "exact_sd": e_sd, "exact_min": e_min, "exact_max": e_max,
                     "baseline_auroc": ps[0].baseline_auroc})
    return rows


def render_markdown(summary: Sequence[dict[str, Any]]) -> str:
    """The summary as a markdown table (mean ± sd [min, max])."""

    def cell(r: dict[str, Any], m: str) -> str:
        if math.isnan(r[f"{m}_mean"]):
            return "–"
        return f"{r[f'{m}_mean']:.3f} ± {r[f'{m}_sd']:.3f} [{r[f'{m}_min']:.3f}, {r[f'{m}_max']:.3f}]"

    lines = ["| held-out set | training runs | seeds (failed fits) | AUROC | messages baseline | exact localisation |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in summary:
        b = "–" if math.isnan(r["baseline_auroc"]) else f"{r['baseline_auroc']:.3f}"
        lines.append(f"| {r['held_out']} | {r['k']} | {r['seeds']} ({r['failed_fits']}) | {cell(r, 'auroc')} | {b} | "
                     f"{cell(r, 'exact')} |")
    return "\n".join(lines)


def plot_learning_curve(summary: Sequence[dict[str, Any]]) -> Figure:
    """AUROC (left) and exact localisation (right) against training runs: mean, ± sd band, the
    held-out set's messages baseline dashed."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sets = list(dict.fromkeys(r["held_out"] for r in summary))
    for c, S in enumerate(sets):
        rows = sorted((r for r in summary if r["held_out"] == S), key=lambda r: r["k"])
        ks = np.array([r["k"] for r in rows])
        for ax, m in zip(axes, ("auroc", "exact"), strict=True):
            mean = np.array([r[f"{m}_mean"] for r in rows])
            if np.all(np.isnan(mean)):
                continue
            sd = np.array([r[f"{m}_sd"] for r in rows])
            ax.plot(ks, mean, "o-", color=f"C{c}", label=S)
            ax.fill_between(ks, mean - sd, mean + sd, color=f"C{c}", alpha=0.2)
            if m == "auroc" and not math.isnan(rows[0]["baseline_auroc"]):
                ax.axhline(rows[0]["baseline_auroc"], color=f"C{c}", ls="--", lw=1)
    axes[0].axhline(0.5, color="k", lw=0.5)
    axes[0].set_ylabel("AUROC on the held-out set")
    axes[0].set_title("did the run fail? (dashed: the set's messages baseline)", fontsize=9)
    axes[1].set_ylabel("exact localisation on the held-out set")
    axes[1].set_title("where did it go wrong?", fontsize=9)
    ticks: list[int] = []
    for k in sorted({r["k"] for r in summary}):  # the pools' sizes can sit close together
        if not ticks or k > 1.15 * ticks[-1]:
            ticks.append(k)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(ticks)
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(axis="x", labelsize=7, labelrotation=45)
        ax.set_xlabel("training runs (drawn by task group from the other sets)")
        ax.set_ylim(0, 1)
        ax.legend(fontsize=8)
    fig.suptitle("Learning curve, leave-one-source-out (mean ± sd over seeds)")
    fig.tight_layout()
    return fig


__all__ = ["DEFAULT_SEEDS", "DEFAULT_SIZES", "CurvePoint", "draw_by_group", "first_groups", "learning_curve",
           "plot_learning_curve", "render_markdown", "summarise"]
