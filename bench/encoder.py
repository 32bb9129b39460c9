"""The static encoder (model/scoring/encoder.py): its cost a message, and what it reads of each language.

1. **Cost**: µs to encode one step's text, alone (what a session step pays) and in a run's batch
   (what a diagnosis pays), on the real sets' own step texts (``model.data.realdata``), p50 / p99.
2. **Languages**: per language of the frozen semantic cases (``datasets/semantic/cases.jsonl``: 60
   English, 60 Chinese runs, written by hand) and of the real sets (English): the share of tokens
   MiniLM's vocabulary does not know (``[UNK]``, dropped by the encoder), the share of messages it
   reads as nothing at all (a zero vector), and the share of the n-gram block's words (the agent
   model's ``[a-z_]{2,}`` tokens read no Chinese).
3. **What it tells, per language**: failing case against its look-alike (each pair in one fold), a
   logistic regression on each block alone — the encoder's pooled row, the n-grams — leave-one-pair-out
   AUROC with a bootstrap interval over pairs. 30 pairs a language: a coarse figure, and the only
   Chinese we have.

Run: ``.venv/bin/python bench/encoder.py [--per-set 40]``.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model.core.metrics import auroc  # noqa: E402
from model.data import realdata  # noqa: E402
from model.importers import load_trace  # noqa: E402
from model.scoring.agentmodel.encoded import encode_steps, prefix_rows, step_text  # noqa: E402
from model.scoring.agentmodel.features import step_tokens  # noqa: E402
from model.scoring.encoder import shared_encoder  # noqa: E402
from model.training.semantic import load_cases  # noqa: E402


def cost(per_set: int) -> None:
    enc = shared_encoder()
    rng = random.Random(0)
    texts_by_run: list[list[str]] = []
    for s in realdata.RUN_LEVEL_SOURCES:
        runs = realdata.load_source(s)
        for r in rng.sample(runs, min(per_set, len(runs))):
            texts_by_run.append([t for t in (step_text(x) for x in r.trace.steps[:30]) if t is not None])
    singles: list[float] = []
    batches: list[float] = []
    enc.encode(["warm up"])
    for texts in texts_by_run:
        for t in texts:
            t0 = time.perf_counter()
            enc.encode([t])
            singles.append((time.perf_counter() - t0) * 1e6)
        t0 = time.perf_counter()
        enc.encode(texts)
        batches.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles
    print(f"cost: {len(singles)} step texts of {len(texts_by_run)} runs (first 30 steps), "
          f"{statistics.mean(len(t) for r in texts_by_run for t in r):.0f} characters on average")
    print(f"  one step alone: p50 {statistics.median(singles):.0f} µs, p99 {q(singles, n=100)[98]:.0f} µs")
    print(f"  a run's steps in one batch: p50 {statistics.median(batches):.2f} ms, p99 {q(batches, n=100)[98]:.2f} ms "
          f"({statistics.mean(len(r) for r in texts_by_run):.1f} steps a run)")


def languages() -> None:
    enc = shared_encoder()
    cases = load_cases(ROOT / "datasets" / "semantic" / "cases.jsonl")
    groups: dict[str, list[str]] = {}
    for c in cases:
        tr = load_trace(c.trace)
        groups.setdefault(c.language, []).extend(t for t in (step_text(s) for s in tr.steps) if t is not None)
    rng = random.Random(0)
    real = [t for s in realdata.RUN_LEVEL_SOURCES for r in rng.sample(realdata.load_source(s), 20)
            for t in (step_text(x) for x in r.trace.steps) if t is not None]
    groups["en (real sets, 20 runs each)"] = real
    print("\nlanguages: tokens unknown to MiniLM's vocabulary | messages read as nothing (zero vector) | "
          "characters the n-gram words cover")
    for lang, texts in groups.items():
        v = enc.encode(texts)
        zero = float(np.mean(~v.any(axis=1)))
        words = sum(len(w) for t in texts for w in re.findall(r"[a-z_][a-z_]+", t.lower()))
        chars = sum(len(t) for t in texts)
        print(f"  {lang:30s} {enc.unknown_share(texts):6.1%} | {zero:6.1%} of {len(texts)} | {words / chars:6.1%}")


def separation() -> None:
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    enc = shared_encoder()
    cases = load_cases(ROOT / "datasets" / "semantic" / "cases.jsonl")
    print("\nfailing case vs its look-alike, leave one pair out, AUROC [95 % over pairs]:")
    for lang in ("en", "zh"):
        cs = [c for c in cases if c.language == lang]
        pair = {c.id: (c.lookalike_of or c.id) for c in cs}
        traces = [load_trace(c.trace) for c in cs]
        y = np.array([c.failing for c in cs], float)
        E = np.array([prefix_rows(encode_steps(enc, t.steps), t.steps, [len(t.steps)])[0] for t in traces])
        words = [" ".join(w for s in t.steps for w in step_tokens(s)) or "_" for t in traces]
        keys = sorted(set(pair.values()))
        out: dict[str, np.ndarray] = {"encoder": np.zeros(len(cs)), "n-grams": np.zeros(len(cs))}
        for k in keys:
            te = np.array([i for i, c in enumerate(cs) if pair[c.id] == k])
            tr = np.setdiff1d(np.arange(len(cs)), te)
            mu, sd = E[tr].mean(0), E[tr].std(0) + 1e-9
            out["encoder"][te] = LogisticRegression(C=1.0, max_iter=2000).fit((E[tr] - mu) / sd, y[tr]) \
                .decision_function((E[te] - mu) / sd)
            vec = TfidfVectorizer(token_pattern=r"\S+", sublinear_tf=True)
            Xtr = vec.fit_transform([words[i] for i in tr])
            out["n-grams"][te] = LogisticRegression(C=1.0, max_iter=2000).fit(Xtr, y[tr]) \
                .decision_function(vec.transform([words[i] for i in te]))
        rng = np.random.default_rng(0)
        for m, sc in out.items():
            boots = []
            for _ in range(1000):
                pick = rng.choice(len(keys), len(keys))
                idx = np.concatenate([[i for i, c in enumerate(cs) if pair[c.id] == keys[j]] for j in pick]).astype(int)
                if y[idx].min() != y[idx].max():
                    boots.append(auroc(y[idx], sc[idx]))
            lo, hi = np.quantile(boots, [0.025, 0.975])
            print(f"  {lang} {m:8s} {auroc(y, sc):.3f} [{lo:.3f}, {hi:.3f}]  ({int(y.sum())} failing, "
                  f"{int(len(y) - y.sum())} look-alikes, {len(keys)} pairs)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-set", type=int, default=40, help="runs drawn from each real set for the cost")
    a = ap.parse_args()
    cost(a.per_set)
    languages()
    separation()


if __name__ == "__main__":
    main()
