"""``triage evaluate --learning-curve``: how the agent model learns an agent from K of its own runs.

Per real set with successful runs (:data:`model.data.realdata.RUN_LEVEL_SOURCES`): K = 0 (the zero-shot run
scorer, fitted leave-one-family-out), 25, 50, 100, 200 and all labelled runs; folds grouped by task,
``draws`` shufflings; the agent model and both cheap learners fitted on the same K runs
(:func:`model.training.agentmodel.cv.cross_validate`), with paired bootstrap intervals; prefix AUROC / AUPRC at
25 / 50 / 75 / 100 % of the steps at K = 100 and all (the cheap learners fitted on the same prefixes).

**No grading of its own homework.** The agent model's configuration (regularisation, block weights,
prefix training, the zero-shot prior) is chosen per set *leave-one-family-out*: each candidate of
``candidates`` is cross-validated at ``select_k`` on every set; a set is judged with the candidate whose
mean AUROC over the *other* families is best (τ-airline and τ² are one family). The judged set's labels
never choose its configuration.

Sections from :mod:`model.training.agentmodel.where` (``localisation_curve``) and :mod:`model.training.agentmodel.queue`
(``queue_vs_random``) are added when those modules are present.

Outputs (tables, figure and Done-when: :mod:`model.training.agentmodel.learning_report`):
``reports/learning.json``, ``reports/learning.md``, ``reports/learning-figures/learning_curve.png`` (``reports/figures`` is the evaluate stage's output folder: DVC refuses overlapping outputs).
"""

from __future__ import annotations

import importlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from model.core.errors import InputError
from model.core.metrics import auroc, group_bootstrap_interval
from model.scoring.agentmodel.model import AgentModelConfig
from model.training.agentmodel.cv import CVData, cross_validate, key
from model.training.agentmodel.learning_report import (
    done_when,
    plot,
    render_markdown,
    reproduction,
    sections_markdown,
)


@dataclass(frozen=True)
class LearningConfig:
    """``params.yaml``'s ``learning_curve`` section."""

    sets: tuple[str, ...] = ()                 # empty: every set with successful runs
    ks: tuple[int | None, ...] = (25, 50, 100, 200, None)
    fractions: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    prefix_ks: tuple[int | None, ...] = (100, None)
    folds: int = 5
    draws: int = 5
    seed: int = 0
    n_boot: int = 1000
    zero_shot: bool = True
    model: dict[str, Any] = field(default_factory=dict)          # base AgentModelConfig options
    candidates: tuple[dict[str, Any], ...] = ({},)               # overrides of ``model``; "prior": bool
    select_k: int = 100
    select_draws: int = 2
    limit: int | None = None                                     # runs per set (tests, smoke runs)
    # the selection table (set → AUROC of each candidate) of an earlier run with the same code, data and
    # seeds, to judge a subset of the sets in parallel processes (merged by ``--merge``)
    selection: dict[str, list[float]] = field(default_factory=dict)
    selection_prefix: dict[str, list[float]] = field(default_factory=dict)  # the same, on prefix AUROC
    sections: bool = True                                        # localisation and queue, when present
    # the candidate ``triage retrain`` fits for a tenant's agents: the one best on the mean over every
    # family in the selection table (the report says which that is, and whether this still names it)
    served: int = 0
    # the candidate served before this configuration: fitted on the same K runs of every fold beside the
    # chosen one, so the report gives the paired change (``agent_minus_reference``); None: not compared
    reference: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> LearningConfig:
        d = dict(d or {})
        names = {f.name for f in fields(cls)}
        bad = sorted(set(d) - names)
        if bad:
            raise InputError(f"unknown learning_curve option(s) {bad}; valid: {sorted(names)}", path="learning_curve")
        for k in ("sets", "fractions", "prefix_ks", "candidates"):
            if k in d:
                d[k] = tuple(d[k])
        if "ks" in d:
            d["ks"] = tuple(None if k in (None, "all") else int(k) for k in d["ks"])
        if "prefix_ks" in d:
            d["prefix_ks"] = tuple(None if k in (None, "all") else int(k) for k in d["prefix_ks"])
        out = cls(**d)
        for name in ("served", "reference"):
            v = getattr(out, name)
            if v is not None and not 0 <= v < len(out.candidates):
                raise InputError(f"{name} must index learning_curve.candidates (0…{len(out.candidates) - 1}); got "
                                 f"{v}", path=f"learning_curve.{name}")
        return out

    @classmethod
    def from_params(cls, path: Path) -> LearningConfig:
        import yaml

        section = (yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}).get("learning_curve")
        return cls.from_dict(section)

    def _config(self, i: int, **extra: Any) -> tuple[AgentModelConfig, bool]:
        over = dict(self.candidates[i])
        prior = bool(over.pop("prior", False))
        return AgentModelConfig.from_dict({**self.model, **over, **extra}), prior

    def candidate(self, i: int) -> tuple[AgentModelConfig, bool]:
        """Candidate ``i`` as the curve fits it (no own CV: the curve's folds judge it)."""
        return self._config(i, internal_folds=0)

    def served_config(self) -> tuple[AgentModelConfig, bool]:
        """What ``triage retrain`` fits: candidate ``served`` with the model's own CV (threshold, card)."""
        return self._config(self.served)


def _family(s: str) -> str:
    from model.data import realdata

    fn = getattr(realdata, "loso_family", None)
    return str(fn(s)) if fn is not None else s


def zero_shot_priors(runs_by_set: dict[str, list[Any]], progress: Callable[[str], None],
                     root: Path | None = None, limit: int | None = None) -> dict[str, np.ndarray]:
    """The zero-shot probability of every run (the service's recipe: rules, the step classifier's evidence,
    the run scorer), each set scored by a scorer fitted without its family (on every other set with
    successful runs, judged here or not)."""
    from model.data import realdata
    from model.training.runscore.evaluate import loso_fits, prepare

    allruns = [r for rs in runs_by_set.values() for r in rs]
    for s in realdata.RUN_LEVEL_SOURCES:
        if s not in runs_by_set:
            allruns += _load(s, root, limit)
    t0 = time.time()
    prepared = prepare(allruns, classifier=True)  # the recipe reads the classifier's per-kind maxima
    progress(f"zero-shot: rules and features of {len(allruns)} runs in {time.time() - t0:.0f} s")
    out: dict[str, np.ndarray] = {}
    for fit in loso_fits(prepared):
        out[fit.source] = np.array([p for p, _ in fit.scored])
    return out


def run(cfg: LearningConfig, root: Path | None = None,
        progress: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """The learning curve (see the module docstring); returns the report dict."""
    from model.data import realdata

    sets = cfg.sets or tuple(realdata.RUN_LEVEL_SOURCES)
    t_start = time.time()
    runs_by_set: dict[str, list[Any]] = {}
    for s in sets:
        rs = _load(s, root, cfg.limit)
        if len({r.failed for r in rs}) < 2:
            continue
        runs_by_set[s] = rs
    priors = zero_shot_priors(runs_by_set, progress, root, cfg.limit) if cfg.zero_shot else {}
    priors = {s: p for s, p in priors.items() if s in runs_by_set}
    data: dict[str, CVData] = {}
    for s, rs in runs_by_set.items():
        data[s] = CVData.make([r.trace for r in rs], [r.failed for r in rs], [r.group for r in rs],
                              cfg.fractions, priors.get(s))
    # ---- selection, leave one family out -------------------------------------------------------------
    # two tables: whole-run AUROC (the run's probability) and the mean AUROC at 25 / 50 / 75 % of the steps
    # (the early warning: the model that raises at_risk is chosen on what it is asked mid-run)
    sel: dict[str, list[float]] = {s: [] for s in data}
    sel_prefix: dict[str, list[float]] = {s: [] for s in data}
    if cfg.selection:
        sel = {s: list(v) for s, v in cfg.selection.items()}
        sel_prefix = {s: list(v) for s, v in (cfg.selection_prefix or {}).items()} or \
            {s: [float("nan")] * len(cfg.candidates) for s in data}
    for i in range(0 if cfg.selection else len(cfg.candidates)):
        mcfg, use_prior = cfg.candidate(i)
        for s, d in data.items():
            if use_prior and d.prior is None:
                sel[s].append(float("nan"))
                sel_prefix[s].append(float("nan"))
                continue
            dd = d if use_prior else _without_prior(d)
            k_sel = cfg.select_k if cfg.select_k <= 0.8 * len(dd.y) - 1 else None  # else all the training folds
            mid = tuple(f for f in cfg.fractions if f in PREFIX_SELECTION)
            rep = cross_validate(dd.traces, dd.y > 0.5, dd.groups, ks=(k_sel,), fractions=(*mid, 1.0),
                                 config=mcfg, folds=cfg.folds, draws=cfg.select_draws, seed=cfg.seed + 7,
                                 n_boot=10, data=dd, methods=("agent",))
            r = rep["results"].get(key(k_sel, 1.0))
            sel[s].append(float(r["agent"]["auroc"]) if r else float("nan"))
            at = [rep["results"].get(key(k_sel, f)) for f in mid]
            sel_prefix[s].append(float(np.mean([a["agent"]["auroc"] for a in at])) if at and all(at) else float("nan"))
        progress(f"candidate {i}: " + ", ".join(f"{s} {sel[s][-1]:.3f}" for s in data) +
                 f" ({time.time() - t_start:.0f} s)")
    chosen = {s: choose_out_of_family(sel, s, len(cfg.candidates)) for s in data}
    chosen_prefix = {s: choose_out_of_family(sel_prefix, s, len(cfg.candidates), chosen[s]) for s in data}
    # ---- the curve ---------------------------------------------------------------------------------------
    per_set: dict[str, Any] = {}
    reps: dict[str, dict[str, Any]] = {}
    rcfg = None if cfg.reference is None else cfg.candidate(cfg.reference)[0]
    for s, d in data.items():
        mcfg, use_prior = cfg.candidate(chosen[s])
        dd = d if use_prior else _without_prior(d)
        t0 = time.time()
        rep = cross_validate(dd.traces, dd.y > 0.5, dd.groups, ks=cfg.ks, fractions=cfg.fractions, config=mcfg,
                             folds=cfg.folds, draws=cfg.draws, seed=cfg.seed, n_boot=cfg.n_boot, data=dd,
                             prefix_ks=cfg.prefix_ks, reference=rcfg)
        if chosen_prefix[s] != chosen[s]:
            # the prefix rows (25 / 50 / 75 %) are the early-warning model's: the candidate chosen on prefixes
            pcfg, p_prior = cfg.candidate(chosen_prefix[s])
            prep = cross_validate(d.traces, d.y > 0.5, d.groups, ks=cfg.prefix_ks, fractions=cfg.fractions,
                                  config=pcfg, folds=cfg.folds, draws=cfg.draws, seed=cfg.seed, n_boot=cfg.n_boot,
                                  data=d if p_prior else _without_prior(d), prefix_ks=cfg.prefix_ks)
            rep["results"].update({k: v for k, v in prep["results"].items() if not k.endswith("|f=1")})
        reps[s] = rep["results"]
        zs: dict[str, Any] | None = None
        if d.prior is not None:
            lo, hi = group_bootstrap_interval(d.y, d.prior, d.groups, seed=cfg.seed, n_boot=cfg.n_boot)
            zs = {"auroc": auroc(d.y, d.prior), "interval": [lo, hi]}
        msgs = np.array([v[1] for v in d.views[max(cfg.fractions)]], float)
        per_set[s] = {
            "runs": rep["runs"], "failed": rep["failed"], "groups": rep["groups"],
            "config": {"candidate": chosen[s], "model": mcfg.to_dict(), "prior": use_prior,
                       "selection_auroc": sel[s], "prefix_candidate": chosen_prefix[s],
                       "prefix_selection_auroc": sel_prefix[s]},
            "zero_shot": zs, "run_length_no_fit": auroc(d.y, msgs),
            "results": {k: _strip(v) for k, v in rep["results"].items()},
            "seconds": round(time.time() - t0, 1),
        }
        progress(f"{s}: {time.time() - t0:.0f} s")
    report: dict[str, Any] = {
        "protocol": {"folds": cfg.folds, "draws": cfg.draws, "ks": ["all" if k is None else k for k in cfg.ks],
                     "fractions": list(cfg.fractions), "prefix_ks": ["all" if k is None else k for k in cfg.prefix_ks],
                     "seed": cfg.seed, "n_boot": cfg.n_boot, "candidates": [dict(c) for c in cfg.candidates],
                     "base_model": dict(cfg.model), "select_k": cfg.select_k, "select_draws": cfg.select_draws, "served": cfg.served,
                     "reference": cfg.reference,
                     "limit": cfg.limit},
        "sets": per_set,
        "reproduction": reproduction(per_set),
        "done_when": done_when(per_set, reps),
        "replicates": {s: {k: {m: v[m]["replicates"] for m in ("agent_minus_tfidf", "agent_minus_length",
                                                                "agent_minus_reference") if m in v}
                           for k, v in r.items() if k in (key(100, 1.0), key(None, 1.0)) and v.get("folds")}
                       for s, r in reps.items()},
        "selection": sel,
        "selection_prefix": sel_prefix,
        "seconds": round(time.time() - t_start, 1),
    }
    if cfg.sections:
        report["sections"] = other_sections(runs_by_set, cfg, progress)
    return report


#: The prefixes (shares of the steps) whose mean AUROC chooses the early-warning model.
PREFIX_SELECTION = (0.25, 0.5, 0.75)


def choose_out_of_family(table: dict[str, list[float]], s: str, n: int, default: int = 0) -> int:
    """The candidate best on the mean over the families other than ``s``'s (``default`` if none can tell)."""
    others = [o for o in table if _family(o) != _family(s)]
    means = [float(np.nanmean([table[o][i] for o in others])) if others else float("nan") for i in range(n)]
    return int(np.nanargmax(means)) if not all(math.isnan(m) for m in means) else default


def _load(s: str, root: Path | None, limit: int | None) -> list[Any]:
    from model.data import realdata

    rs = realdata.load_source(s, root)
    if limit is not None:  # whole task groups, in the set's order: a small reproducible sample
        rs = realdata.first_groups(rs, max(2, limit // 3))[:limit]
    return rs


def _without_prior(d: CVData) -> CVData:
    return CVData(d.traces, d.y, d.groups, d.fractions, None, d.cache, d.views)


def _strip(r: dict[str, Any]) -> dict[str, Any]:
    out = dict(r)
    for k, v in r.items():
        if isinstance(v, dict) and "replicates" in v:
            out[k] = {a: b for a, b in v.items() if a != "replicates"}
    return out


#: The sections :func:`other_sections` computes, by name.
SECTIONS = ("localisation", "queue")


def other_sections(runs_by_set: dict[str, list[Any]], cfg: LearningConfig,
                   progress: Callable[[str], None], only: Sequence[str] = SECTIONS) -> dict[str, Any]:
    """Localisation (``where.localisation_curve``) and the queue (``queue.queue_vs_random``: every order the
    review offers against random order), when present; ``only``: those of :data:`SECTIONS` to compute."""
    bad = sorted(set(only) - set(SECTIONS))
    if bad:
        raise InputError(f"unknown section(s) {bad}; valid: {list(SECTIONS)}", path="sections")
    out: dict[str, Any] = {}
    try:
        where = importlib.import_module("model.training.agentmodel.where")
    except ImportError:
        where = None
    if where is not None and hasattr(where, "localisation_curve") and "localisation" in only:
        from model.data import realdata
        from model.training.agentmodel.where_served import served_rule_curve

        loc, served = {}, {}
        for s in ("whowhen", "agentprocessbench"):
            try:
                rs = runs_by_set.get(s) or realdata.load_source(s)
            except InputError:
                continue
            t0 = time.time()
            loc[s] = where.localisation_curve(rs, k=100, draws=cfg.draws, seed=cfg.seed, folds=cfg.folds)
            # what `triage retrain`'s rule serves, chosen on the K training runs, judged on the held-out fold
            served[s] = served_rule_curve(rs, k=100, draws=cfg.draws, seed=cfg.seed, folds=cfg.folds)
            progress(f"localisation {s}: {time.time() - t0:.0f} s")
        out["localisation"] = loc
        out["localisation_served"] = served
    try:
        queue = importlib.import_module("model.training.agentmodel.queue")
    except ImportError:
        queue = None
    if queue is not None and hasattr(queue, "queue_vs_random") and "queue" in only:
        q = {}
        for s, rs in runs_by_set.items():
            t0 = time.time()
            q[s] = queue.queue_vs_random(rs, ks=(25, 50), draws=cfg.draws, seed=cfg.seed)
            progress(f"queue {s}: {time.time() - t0:.0f} s")
        out["queue"] = q
    return out


def write(report: dict[str, Any], reports: Path) -> list[Path]:
    reports.mkdir(parents=True, exist_ok=True)
    js, md, png = reports / "learning.json", reports / "learning.md", reports / "learning-figures" / "learning_curve.png"
    js.write_text(json.dumps(report, indent=1, sort_keys=True, default=_json_default) + "\n", encoding="utf-8")
    md.write_text(render_markdown(report), encoding="utf-8")
    plot(report, png)
    return [js, md, png]


def write_sections(report: dict[str, Any], reports: Path) -> list[Path]:
    """Write ``report`` to ``learning.json`` and replace only the sections' part of ``learning.md`` (from
    its localisation heading on), so the tables above keep their order (the JSON's keys are sorted)."""
    js, md = reports / "learning.json", reports / "learning.md"
    js.write_text(json.dumps(report, indent=1, sort_keys=True, default=_json_default) + "\n", encoding="utf-8")
    old = md.read_text(encoding="utf-8") if md.is_file() else ""
    cut = old.find("## Localisation in domain")
    head = old[:cut] if cut >= 0 else render_markdown({**report, "sections": {}}).split("## Localisation in domain")[0]
    md.write_text(head + "\n".join(sections_markdown(report.get("sections") or {})) + "\n", encoding="utf-8")
    return [js, md]


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON: {type(o).__name__}")


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m model.training.agentmodel.learning", description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--reports", type=Path, default=Path("reports"))
    ap.add_argument("--root", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--sections-only", action="store_true",
                    help="add the localisation and queue sections to the existing reports/learning.json")
    ap.add_argument("--section", choices=SECTIONS, action="append", default=None,
                    help="with --sections-only: recompute only this section (repeatable), keep the others")
    ap.add_argument("--merge", type=Path, nargs="*", default=None,
                    help="merge these learning.json files (disjoint sets) into --reports")
    a = ap.parse_args(argv)
    if a.merge:
        rep = merge(a.merge)
        for p in write(rep, a.reports):
            print(p)
        return 0
    cfg = LearningConfig.from_params(a.params)
    if a.sections_only:
        rep = json.loads((a.reports / "learning.json").read_text(encoding="utf-8"))
        runs_by_set = {s: _load(s, a.root, rep["protocol"]["limit"]) for s in rep["sets"]}
        only = tuple(a.section or SECTIONS)
        rep["sections"] = {**(rep.get("sections") or {}),
                           **other_sections(runs_by_set, cfg, lambda s: print(s, flush=True), only)}
        for p in write_sections(rep, a.reports):
            print(p)
        return 0
    if a.limit is not None:
        cfg = replace(cfg, limit=a.limit)
    rep = run(cfg, a.root, progress=lambda s: print(s, flush=True))
    for p in write(rep, a.reports):
        print(p)
    return 0


def merge(paths: Sequence[Path]) -> dict[str, Any]:
    """One report from reports of disjoint subsets of the sets (same protocol and selection table)."""
    parts = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    rep = dict(parts[0])
    rep["sets"] = {s: d for p in parts for s, d in p["sets"].items()}
    rep["replicates"] = {s: d for p in parts for s, d in p["replicates"].items()}
    rep["seconds"] = max(p["seconds"] for p in parts)
    rep["protocol"] = {**rep["protocol"], "merged_from": [str(p) for p in paths]}
    reps = {}
    for s, d in rep["sets"].items():
        reps[s] = {k: {**v, **{m: {**v[m], "replicates": rep["replicates"].get(s, {}).get(k, {}).get(m, [])}
                               for m in ("agent_minus_tfidf", "agent_minus_length", "agent_minus_reference")
                               if m in v}}
                   for k, v in d["results"].items()}
    rep["reproduction"] = reproduction(rep["sets"])
    rep["done_when"] = done_when(rep["sets"], reps)
    return rep


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["SECTIONS", "LearningConfig", "choose_out_of_family", "main", "merge", "other_sections", "run", "write", "write_sections", "zero_shot_priors"]
