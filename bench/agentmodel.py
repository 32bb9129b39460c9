"""The agent model's cost (issue 20 item 9): retrain of N labelled runs with a warm feature cache, the
artefact's size, and the online per-step update and score.

- **fit**: ``AgentModel.fit`` of the configuration ``triage retrain`` fits (``--params``:
  ``learning_curve.served``) on ``--runs`` real runs (SWE then WebShop: the longest runs we hold),
  with its own 5-fold grouped CV (the early-warning point and the card) — the whole retrain — after
  one cold fit has filled the feature cache; target ≤ 60 s for 1,000 runs on 2 cores.
- **size**: the saved JSON artefact; target ≤ 5 MB.
- **per step**: ``PrefixState.add(step)`` and ``score_state`` over every step of 50 runs, p50 / p99
  (µs), and the same at the first and last tenth of long runs (it must not grow with the run).

Set ``OPENBLAS_NUM_THREADS=1`` on a shared machine (two BLAS threads on two busy cores made the
optimiser's vector operations ≈ 60× slower here). Run::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python bench/agentmodel.py --runs 1000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from model.core.paths import PARAMS
from model.data.realdata import load_source
from model.scoring.agentmodel.features import FeatureCache
from model.scoring.agentmodel.model import AgentModel
from serve.services.retrain import model_config


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--sets", default="swe,webshop")
    ap.add_argument("--params", type=Path, default=PARAMS, help="learning_curve.served: what retrain fits")
    a = ap.parse_args()
    runs = [r for s in a.sets.split(",") for r in load_source(s)][: a.runs]
    traces = [r.trace for r in runs]
    failed = [r.failed for r in runs]
    groups = [r.group for r in runs]
    steps = sum(len(t.steps) for t in traces)
    cfg, _ = model_config(a.params)  # the zero-shot prior, when served, is cached on disk: not timed here
    cache = FeatureCache()
    t0 = time.perf_counter()
    AgentModel.fit(traces, failed, groups, config=replace(cfg, internal_folds=0), cache=cache)
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    m = AgentModel.fit(traces, failed, groups, config=cfg, cache=cache)
    warm = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "agent.json"
        m.save(p)
        size = p.stat().st_size
        t0 = time.perf_counter()
        AgentModel.load(p)
        load_s = time.perf_counter() - t0
    add_us: list[float] = []
    score_us: list[float] = []
    early: list[float] = []
    late: list[float] = []
    for t in sorted(traces, key=lambda t: -len(t.steps))[:50]:
        st = m.start()
        n = len(t.steps)
        for i, s in enumerate(t.steps):
            t0 = time.perf_counter()
            st.add(s)
            t1 = time.perf_counter()
            m.score_state(st)
            t2 = time.perf_counter()
            add_us.append((t1 - t0) * 1e6)
            score_us.append((t2 - t1) * 1e6)
            (early if i < n / 10 else late if i >= 0.9 * n else []).append((t2 - t0) * 1e6)
    print(f"runs {len(runs)} ({a.sets}), steps {steps}, failed {sum(failed)}, tasks {len(set(groups))}")
    print(f"configuration (retrain's, {a.params}): {asdict(cfg)}")
    print(f"fit, cold cache, no own CV: {cold:.1f} s")
    print(f"retrain, warm cache, with its own 5-fold CV (threshold, card): {warm:.1f} s (target ≤ 60 s)")
    print(f"cv_auroc {m.card['cv_auroc']:.3f} {m.card['cv_auroc_interval']}, at_risk_threshold "
          f"{m.at_risk_threshold:.3f}" if m.card["cv_auroc"] is not None else "no own CV")
    print(f"artefact {size / 1e6:.2f} MB (target ≤ 5 MB), {len(m.fitted_.buckets) if m.fitted_ else 0} "
          f"learned buckets; load {load_s * 1e3:.0f} ms")
    print(f"per step: add p50 {np.percentile(add_us, 50):.0f} µs p99 {np.percentile(add_us, 99):.0f} µs; "
          f"score_state p50 {np.percentile(score_us, 50):.0f} µs p99 {np.percentile(score_us, 99):.0f} µs")
    print(f"add+score, first tenth of the 50 longest runs p50 {np.percentile(early, 50):.0f} µs, "
          f"last tenth p50 {np.percentile(late, 50):.0f} µs (constant in the run's length)")


if __name__ == "__main__":
    main()
