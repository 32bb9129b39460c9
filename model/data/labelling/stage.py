"""The DVC ``label`` stage: generated traces keep their ground truth; imported logs get weak labels.

* ``datasets/generated/traces.jsonl``: passed through with their generated labels (training uses
  them: weak labels are for logs that have none, so the classifier does not merely learn the rules);
* ``datasets/raw/`` (imports, see :mod:`model.data.labelling.raw`): the rule detectors and heuristics
  vote (:mod:`model.data.labelling.functions`), the label model turns votes into weak labels with a
  confidence (:mod:`model.data.labelling.labelmodel`), source ``rule_vote``; a trace with a label in the
  review band (or LFs that disagree) is marked ``provenance.review = true``;
* ``datasets/labels/human.jsonl``: human labels replace any other (source ``human``).

Writes ``datasets/labelled/traces.jsonl`` and ``summary.json`` beside it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from model.core.errors import InputError
from model.core.schema import FailureLabel, LabelSource, Trace, TraceLabels
from model.data.datagen.generator import read_jsonl, summary, write_jsonl
from model.data.labelling.functions import apply_lfs, lf_names
from model.data.labelling.human import HumanLabelStore, apply_human
from model.data.labelling.labelmodel import LabelModel, WeakLabel
from model.data.labelling.raw import load_raw


@dataclass
class LabelConfig:
    """The ``label`` section of params.yaml."""

    method: str = "dawid_skene"
    threshold: float = 0.5
    review_band: list[float] = field(default_factory=lambda: [0.35, 0.85])
    allowed_tools: list[str] | None = None
    human_labels: str = "datasets/labels/human.jsonl"
    raw_dir: str = "datasets/raw"

    def __post_init__(self) -> None:
        if self.method not in ("dawid_skene", "majority"):
            raise InputError(f"must be dawid_skene or majority, got {self.method!r}", path="label.method")
        if len(self.review_band) != 2 or not 0 <= self.review_band[0] <= self.review_band[1] <= 1:
            raise InputError(f"must be [low, high] in [0, 1], got {self.review_band!r}", path="label.review_band")

    @classmethod
    def from_params(cls, section: dict[str, Any]) -> LabelConfig:
        known = set(cls.__dataclass_fields__)
        extra = set(section) - known
        if extra:
            raise InputError(f"unknown keys {sorted(extra)}; valid: {sorted(known)}", path="label")
        return cls(**section)


def _cjk_share(t: Trace) -> float:
    text = "".join(s.content[:200] for s in t.steps[:12])
    if not text:
        return 0.0
    return sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff") / len(text)


def weak_label(traces: list[Trace], cfg: LabelConfig, *, import_ids: list[str | None] | None = None) -> LabelModel:
    """Weak-label ``traces`` in place (rule votes → one label model fitted on all of them)."""
    votes = [apply_lfs(t, allowed_tools=cfg.allowed_tools) for t in traces]
    lm = LabelModel(method=cfg.method, threshold=cfg.threshold).fit(votes)
    lo, hi = cfg.review_band
    ids = import_ids if import_ids is not None else [None] * len(traces)
    for t, vs, import_id in zip(traces, votes, ids, strict=True):
        weak: list[WeakLabel] = lm.predict(vs)
        if t.language is None:
            t.language = "zh" if _cjk_share(t) > 0.15 else "en"
        voted = {(v.kind.value, v.source_index) for v in vs}
        kept = {(w.kind.value, w.source_index) for w in weak}
        review = any(lo <= w.confidence < hi for w in weak) or bool(voted - kept)
        prov: dict[str, Any] = {"label_model": lm.method, "import": import_id, "review": review,
                                "votes": [{"lf": v.lf, "kind": v.kind.value, "step": v.step,
                                           "confidence": round(v.confidence, 3)} for v in vs]}
        if t.labels is not None and t.labels.failures:
            prov["original"] = [f.model_dump(mode="json", exclude_none=True) for f in t.labels.failures]
        fails = [FailureLabel(kind=w.kind, step=w.step, source_index=w.source_index, source=LabelSource.RULE_VOTE,
                              confidence=w.confidence) for w in weak]
        t.labels = TraceLabels(failures=fails, first_failing_step=min((f.step for f in fails if f.step is not None),
                                                                      default=None),
                               source=LabelSource.RULE_VOTE, provenance=prov)
    return lm


def run(cfg: LabelConfig, generated: Path, out: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    humans = HumanLabelStore(Path(cfg.human_labels)).load()
    traces: list[Trace] = list(read_jsonl(generated)) if generated.exists() else []
    n_generated = len(traces)
    raw: list[Trace] = []
    raw_ids: list[str | None] = []
    for rec, _name, ts in load_raw(Path(cfg.raw_dir)):
        raw.extend(ts)
        raw_ids.extend([rec.id] * len(ts))
    model = weak_label(raw, cfg, import_ids=raw_ids).describe() if raw else None
    traces.extend(raw)
    n_raw = len(raw)
    n_human = 0
    for t in traces:
        if t.id in humans:
            apply_human(t, humans[t.id])
            n_human += 1
    write_jsonl(iter(traces), out)
    s = summary(traces)
    s.update({"generated": n_generated, "imported": n_raw, "human": n_human,
              "review": sum(1 for t in traces if t.labels and t.labels.provenance.get("review")),
              "sources": _sources(traces), "label_functions": lf_names(), "label_model": model})
    (out.parent / "summary.json").write_text(json.dumps(s, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    s["seconds"] = round(time.perf_counter() - t0, 1)  # printed, not written: outputs stay reproducible
    return s


def _sources(traces: list[Trace]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in traces:
        for f in t.labels.failures if t.labels else []:
            out[f.source.value] = out.get(f.source.value, 0) + 1
    return dict(sorted(out.items()))


__all__ = ["LabelConfig", "run", "weak_label"]
