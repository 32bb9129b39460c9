"""Fit the shipped run scorer on every vendored real set (DVC stage ``runscore``).

``python -m model.training.runscore.train --params params.yaml --root datasets/real --out model/artifacts/runscore.json``

The hyper-parameters (``params.yaml``, section ``runscore``) are the ones the leave-one-source-out
evaluation (``triage evaluate --real``) reports; nothing here is tuned on a test set.

The shipped scorer is fitted on the **training part** of each set only: :func:`fixed_test` holds
back :data:`FIXED_TEST_FRACTION` of every set's tasks (by a hash of the task, so the split never
moves), the fixed test splits that ``triage retrain``'s gate scores champion and challenger on.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from model.core.errors import InputError, TriageError
from model.data.realdata import DEFAULT_ROOT, SOURCES, load_all
from model.scoring.runscore.model import ARTIFACT, RunScorer


@dataclass(frozen=True)
class RunScoreConfig:
    """``params.yaml`` → ``runscore``: the :class:`RunScorer` parameters."""

    l2_message: float = 1.0
    target_false_alarm: float = 0.1
    delta: float = 0.2
    tolerance: float = 0.02
    run_features: bool = False
    attribution: str = "position"

    @classmethod
    def from_params(cls, path: Path) -> RunScoreConfig:
        try:
            section = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("runscore", {}) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"{path}: cannot read params ({exc})", path=str(path)) from exc
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise InputError(f"{path}: runscore: unknown keys {unknown}; valid: {sorted(known)}", path="runscore")
        return cls(**section)

    def as_params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


#: The share of each real set's tasks in its fixed test split (never trained on by a shipped model).
FIXED_TEST_FRACTION = 0.3


def fixed_test(source: str, group: str) -> bool:
    """Whether the task ``group`` of set ``source`` is in the fixed test split (a stable hash)."""
    h = int(hashlib.sha256(f"{source}\x00{group}".encode()).hexdigest()[:8], 16)
    return h / 2**32 < FIXED_TEST_FRACTION


def data_hashes(root: Path) -> dict[str, str]:
    """sha256 of every vendored file the scorer saw (the model card records them)."""
    out = {}
    for s, folder in SOURCES.items():
        for f in sorted((root / folder).iterdir()):
            if f.suffix in (".xz", ".json") and f.is_file():
                out[f"{s}/{f.name}"] = hashlib.sha256(f.read_bytes()).hexdigest()[:16]
    return out


def fit_shipped(config: RunScoreConfig, root: Path, out: Path) -> RunScorer:
    from model.training.runscore.evaluate import prepare

    examples = [p.example for p in prepare(load_all(root), classifier=True)
                if not fixed_test(p.run.source, p.run.group)]
    scorer = RunScorer(**config.as_params()).fit(examples)
    scorer.meta_["data"] = data_hashes(root)
    scorer.meta_["fixed_test_fraction"] = FIXED_TEST_FRACTION  # those tasks are held out (fixed_test)
    scorer.save(out)
    return scorer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    ap.add_argument("--out", type=Path, default=ARTIFACT)
    a = ap.parse_args(argv)
    try:
        scorer = fit_shipped(RunScoreConfig.from_params(a.params), a.root, a.out)
    except TriageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{scorer.version} ({scorer.recipe}): features {scorer.features_}, threshold {scorer.threshold:.3f} -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
