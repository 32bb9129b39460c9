"""Train / val / test / held-out-family splits, grouped so that nothing leaks across them.

* Whole task families listed in ``heldout_families`` go to ``heldout_families`` and nowhere else:
  they measure how the classifier generalises to tasks it never saw.
* The rest is split by **group**: a generated trace's goal template (``provenance.template``; the
  sessions of a template stay with it), an imported trace's session (or its id). Groups are
  assigned per (family, language) stratum, in a seeded order, until each split has its share, so
  every family and language appears in every split and a test example never shares a template (or
  a session) with a training one.

Run as the DVC ``split`` stage: ``python -m model.data.splits --params params.yaml``.

>>> from model.data.datagen import GenerateConfig, generate
>>> cfg = SplitConfig(heldout_families=["calendar"], val_fraction=0.1, test_fraction=0.2)
>>> parts = split_traces(list(generate(GenerateConfig(n_traces=200, seed=3))), cfg)
>>> sorted(parts)
['heldout_families', 'test', 'train', 'val']
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from model.core.errors import InputError
from model.core.schema import StepKind, Trace
from model.data.datagen.generator import read_jsonl, summary, write_jsonl

SPLITS = ("train", "val", "test", "heldout_families")


@dataclass
class SplitConfig:
    """The ``split`` section of params.yaml.

    ``step_samples`` says how many step examples each later stage should draw from a split
    (training on 2 cores cannot take every step of 20,000 traces); :func:`sample_steps` draws them.
    """

    heldout_families: list[str] = field(default_factory=lambda: ["calendar", "sql_analytics"])
    val_fraction: float = 0.1
    test_fraction: float = 0.15
    seed: int = 13
    step_samples: dict[str, int] = field(
        default_factory=lambda: {"train": 12000, "val": 2000, "test": 4000, "heldout_families": 4000}
    )

    def __post_init__(self) -> None:
        if not (0 <= self.val_fraction < 1 and 0 <= self.test_fraction < 1
                and self.val_fraction + self.test_fraction < 1):
            raise InputError(
                f"val_fraction + test_fraction must be in [0, 1), got {self.val_fraction} + {self.test_fraction}",
                path="split",
            )
        for k in self.step_samples:
            if k not in SPLITS:
                raise InputError(f"unknown split {k!r}; valid: {', '.join(SPLITS)}", path="split.step_samples")

    @classmethod
    def from_params(cls, section: dict[str, Any]) -> SplitConfig:
        known = set(cls.__dataclass_fields__)
        extra = set(section) - known
        if extra:
            raise InputError(f"unknown keys {sorted(extra)}; valid: {sorted(known)}", path="split")
        return cls(**section)


def group_of(t: Trace) -> str:
    """The leakage group: the goal template for generated traces, else the session (or the id)."""
    prov = t.labels.provenance if t.labels else {}
    if prov.get("template"):
        return f"template:{prov['template']}"
    return f"session:{t.session_id}" if t.session_id else f"trace:{t.id}"


def _h(seed: int, s: str) -> str:
    return hashlib.sha256(f"{seed}:{s}".encode()).hexdigest()


def split_traces(traces: list[Trace], cfg: SplitConfig) -> dict[str, list[Trace]]:
    """Assign every trace to one split (see the module docstring)."""
    out: dict[str, list[Trace]] = {s: [] for s in SPLITS}
    held = set(cfg.heldout_families)
    strata: dict[tuple[str, str], dict[str, list[Trace]]] = defaultdict(lambda: defaultdict(list))
    for t in traces:
        if t.task_type in held:
            out["heldout_families"].append(t)
        else:
            strata[(t.task_type or "?", t.language or "?")][group_of(t)].append(t)
    for key in sorted(strata):
        groups = strata[key]
        order = sorted(groups, key=lambda g: _h(cfg.seed, g))
        total = sum(len(v) for v in groups.values())
        done = 0
        for g in order:
            # a group goes where the running share says; the first groups fill test, then val
            share = done / total if total else 0.0
            if share < cfg.test_fraction and len(order) >= 3:
                name = "test"
            elif share < cfg.test_fraction + cfg.val_fraction and len(order) >= 3:
                name = "val"
            else:
                name = "train"
            out[name].extend(groups[g])
            done += len(groups[g])
    return out


def check_disjoint(parts: dict[str, list[Trace]]) -> None:
    """Raise when a group (template / session) or a held-out family appears in two splits."""
    seen: dict[str, str] = {}
    for name, ts in parts.items():
        for t in ts:
            g = group_of(t)
            if seen.setdefault(g, name) != name:
                raise AssertionError(f"group {g} is in both {seen[g]} and {name}")


#: Step kinds a classifier scores (the ones a failure can be labelled on).
SCORED_KINDS = (StepKind.LLM_OUTPUT, StepKind.LLM_REASONING, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL,
                StepKind.TOOL_RESULT, StepKind.ERROR)


def sample_steps(traces: list[Trace], n: int, seed: int = 0) -> list[tuple[int, int, list[str]]]:
    """Draw ``n`` step examples ``(trace index, step index, kinds at that step)``.

    Every failure kind gets an equal share of the positives (all of a rare kind's steps when it has
    fewer), and about half the sample is negatives, drawn first from steps of the same kind as the
    failing ones in traces that have failures elsewhere or are hard negatives (the steps a
    classifier confuses), then from the rest.
    """
    r = random.Random(seed)
    pos: dict[str, list[tuple[int, int]]] = defaultdict(list)
    labelled: dict[tuple[int, int], list[str]] = defaultdict(list)
    for ti, t in enumerate(traces):
        if t.labels is None:
            continue
        for f in t.labels.failures:
            if f.step is not None and f.kind is not None:
                labelled[(ti, f.step)].append(f.kind.value)
    for key, kinds in labelled.items():
        for k in kinds:
            pos[k].append(key)
    neg_hard: list[tuple[int, int]] = []
    neg: list[tuple[int, int]] = []
    for ti, t in enumerate(traces):
        hard = t.labels is not None and (not t.labels.healthy or t.labels.provenance.get("variant") not in
                                         (None, "clean"))
        for si, s in enumerate(t.steps):
            if s.kind in SCORED_KINDS and (ti, si) not in labelled:
                (neg_hard if hard and s.kind in (StepKind.FINAL_OUTPUT, StepKind.LLM_OUTPUT, StepKind.TOOL_RESULT)
                 else neg).append((ti, si))
    n_pos = n // 2
    chosen: set[tuple[int, int]] = set()
    kinds = sorted(pos)
    if kinds:
        quota = max(1, n_pos // len(kinds))
        for k in kinds:
            items = pos[k][:]
            r.shuffle(items)
            chosen.update(items[:quota])
    rest = n - len(chosen)
    r.shuffle(neg_hard)
    r.shuffle(neg)
    take_hard = min(len(neg_hard), rest * 2 // 3)
    chosen.update(neg_hard[:take_hard])
    chosen.update(neg[: max(0, n - len(chosen))])
    out = [(ti, si, labelled.get((ti, si), [])) for ti, si in sorted(chosen)]
    return out


def run(params_path: Path, labelled: Path, out_dir: Path) -> dict[str, Any]:
    """The split stage: read the labelled traces, write the four splits and ``summary.json``."""
    params = yaml.safe_load(params_path.read_text(encoding="utf-8")) or {}
    cfg = SplitConfig.from_params(params.get("split", {}) or {})
    traces = list(read_jsonl(labelled))
    parts = split_traces(traces, cfg)
    check_disjoint(parts)
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"config": cfg.__dict__, "splits": {}}
    for name in SPLITS:
        write_jsonl(iter(parts[name]), out_dir / f"{name}.jsonl")
        s = summary(parts[name])
        s["groups"] = len({group_of(t) for t in parts[name]})
        result["splits"][name] = s
    result["total"] = summary(traces)
    (out_dir / "summary.json").write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m model.data.splits", description=__doc__.split("\n")[0])
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--labelled", type=Path, default=Path("datasets/labelled/traces.jsonl"))
    ap.add_argument("--out", type=Path, default=Path("datasets/splits"))
    a = ap.parse_args(argv)
    try:
        res = run(a.params, a.labelled, a.out)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v["traces"] for k, v in res["splits"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
