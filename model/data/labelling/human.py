"""Human labels: one JSON object per line, appended as the reviewer goes (so a review can stop and
resume anywhere). The latest line for a trace wins.

A line: ``{"trace_id", "failures": [{"kind", "step"}], "labeller", "at", "weak": [...]}``; an empty
``failures`` list means the human says the trace is healthy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from model.core.errors import InputError
from model.core.kinds import FailureKind
from model.core.schema import FailureLabel, LabelSource, Trace, TraceLabels


@dataclass
class HumanLabel:
    trace_id: str
    failures: list[tuple[FailureKind, int | None]]
    labeller: str = "human"
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    weak: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"trace_id": self.trace_id,
                           "failures": [{"kind": k.value, "step": s} for k, s in self.failures],
                           "labeller": self.labeller, "at": self.at, "weak": self.weak}, ensure_ascii=False)


class HumanLabelStore:
    """The human-label file (JSONL). ``load()`` reads it; ``append()`` adds a line and flushes."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, HumanLabel]:
        out: dict[str, HumanLabel] = {}
        if not self.path.exists():
            return out
        for no, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                lab = HumanLabel(str(d["trace_id"]),
                                 [(FailureKind(f["kind"]), f.get("step")) for f in d.get("failures", [])],
                                 d.get("labeller", "human"), d.get("at", ""), d.get("weak", []))
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"not a human label: {exc}", path=str(self.path), line=no) from exc
            out[lab.trace_id] = lab
        return out

    def append(self, label: HumanLabel) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(label.to_json() + "\n")
            fh.flush()


def apply_human(trace: Trace, label: HumanLabel) -> Trace:
    """Human labels win: they replace whatever the trace carried (kept under ``provenance.replaced``)."""
    before = trace.labels
    prov: dict[str, Any] = dict(before.provenance) if before else {}
    if before is not None:
        prov["replaced"] = {"source": before.source.value,
                            "failures": [f.model_dump(mode="json", exclude_none=True) for f in before.failures]}
    prov.update({"labeller": label.labeller, "labelled_at": label.at})
    fails = [FailureLabel(kind=k, step=s, source_index=trace.steps[s].source_index if s is not None and
                          0 <= s < len(trace.steps) else None, source=LabelSource.HUMAN, confidence=1.0)
             for k, s in label.failures]
    trace.labels = TraceLabels(failures=fails, first_failing_step=min((f.step for f in fails if f.step is not None),
                                                                      default=None),
                               source=LabelSource.HUMAN, provenance=prov)
    return trace


__all__ = ["HumanLabel", "HumanLabelStore", "apply_human"]
