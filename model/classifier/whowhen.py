"""Step localisation on the Who&When logs, next to trivial baselines computed on the same files.

Who&When (algorithm-generated subset): real failed multi-agent runs, the message list under
``history``, the decisive mistake's 0-based message index in ``mistake_step`` (a string). Nothing
in the project needs these files; ``triage localise-whowhen PATH`` reads them only when given.

Our predictions (message index = the step's ``source_index``):

* ``first_flagged`` — the first step whose probability reaches its kind's threshold (the
  localisation the service reports); a run with no flagged step falls back to the most confident;
* ``most_confident`` — the step whose best kind is furthest above its threshold
  (``p / threshold``).

Baselines on the same files: always message 0 (in these logs the task as the manager or first
expert states it), always message 1 (the first message after it: ≈ 27 % exact, the "always the
first message" figure usually quoted), and uniform random over the
messages (its expected exact / within-3 rates, computed exactly rather than sampled). The paper's
best step-level accuracy on this subset (Who&When, Zhang et al. 2025) was 25.5 %.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from model.errors import InputError

from .runtime import ClassifierRuntime

PAPER_BEST_STEP_ACCURACY = 0.255


def read_cases(folder: Path) -> list[tuple[str, Any, int, int]]:
    """(file name, parsed JSON, mistake_step, number of messages) for every ``*.json`` in ``folder``."""
    files = sorted(folder.glob("*.json"), key=lambda p: (len(p.stem), p.stem))
    if not files:
        raise InputError(f"{folder}: no .json files (expected the Who&When algorithm-generated logs)", path=str(folder))
    out = []
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
            step = int(data["mistake_step"])
            n = len(data["history"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"{f.name}: not a Who&When log ({exc})", path=str(f)) from exc
        out.append((f.name, data, step, n))
    return out


def _rates(pred: list[int], truth: list[int]) -> dict[str, float]:
    p, t = np.asarray(pred), np.asarray(truth)
    return {"exact": float(np.mean(p == t)), "within_3": float(np.mean(np.abs(p - t) <= 3))}


def localise(folder: Path, rt: ClassifierRuntime) -> dict[str, Any]:
    """Score every log in ``folder``; returns our rates, the baselines' and the paper's."""
    from model.importers import load_trace

    cases = read_cases(folder)
    truth, first, confident, sizes = [], [], [], []
    flagged_runs = 0
    for _, data, step, n in cases:
        trace = load_trace({"history": data["history"]}, format="openai")
        probs = rt.score_trace(trace)
        thr = rt.thresholds
        kinds = [j for j, name in enumerate(rt.labels) if name != "healthy"]
        rel = probs[:, kinds] / thr[kinds]
        hit_rows = np.flatnonzero((rel >= 1.0).any(axis=1))
        best_row = int(np.argmax(rel.max(axis=1)))
        confident.append(trace.steps[best_row].source_index)
        if hit_rows.size:
            flagged_runs += 1
            first.append(trace.steps[int(hit_rows[0])].source_index)
        else:
            first.append(trace.steps[best_row].source_index)
        truth.append(step)
        sizes.append(n)
    t = np.asarray(truth)
    nn = np.asarray(sizes)
    within = np.asarray([min(s - 1, k + 3) - max(0, k - 3) + 1 for k, s in zip(truth, sizes, strict=True)])
    return {
        "runs": len(cases),
        "runs_with_a_flagged_step": flagged_runs,
        "ours": {"first_flagged": _rates(first, truth), "most_confident": _rates(confident, truth)},
        "baselines": {
            "message_0": _rates([0] * len(truth), truth),
            "message_1": _rates([min(1, n - 1) for n in sizes], truth),
            "uniform_random_expected": {"exact": float(np.mean(1.0 / nn)), "within_3": float(np.mean(within / nn))},
        },
        "paper_best_step_accuracy": PAPER_BEST_STEP_ACCURACY,
        "mistake_step_mean": float(t.mean()),
        "model": rt.describe()["model_version"],
    }


__all__ = ["PAPER_BEST_STEP_ACCURACY", "localise", "read_cases"]
