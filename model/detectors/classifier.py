"""The ``classifier`` trace detector: the ONNX classifier's step scores as findings.

It loads the artefact lazily (on the first :meth:`ClassifierDetector.inspect`), from the folder
given to its constructor — by default the shipped ``model/artifacts/``. Every step is scored
(the last ``max_steps`` of a very long trace); each (step, kind) whose probability reaches half
its kind's tuned threshold becomes a finding.

Confidence: the classifier's per-kind thresholds differ, while fusion compares every finding
with one threshold per kind shared with the rules (0.5 by default). So the calibrated probability
``p`` is mapped piecewise-linearly so that the kind's threshold ``t`` lands on 0.5
(``0.5·p/t`` below it, ``0.5 + 0.5·(p − t)/(1 − t)`` above it); ``details`` keeps ``p`` and ``t``.

Gate (:mod:`model.scoring.classifier.gate`): the detector reports only the kinds the classifier is a
producer of, and raises as failures only the kinds ``gate.json`` beside the model trusts (measured
precision); any other kind's confidence is scaled below 0.5, so it is reported as a signal and
drives no repair (``details.gated`` says why). No ``gate.json`` → every reported kind may fail.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from model.core.errors import NotFittedError
from model.core.findings import Finding
from model.core.kinds import FailureKind
from model.core.paths import ARTIFACTS
from model.core.schema import Trace
from model.scoring.classifier.gate import REPORTED_KINDS, failure_kinds, read_gate
from model.scoring.classifier.representation import clip
from model.scoring.classifier.runtime import DEFAULT_THREADS

DEFAULT_ARTIFACTS = ARTIFACTS


def relative_confidence(p: float, threshold: float) -> float:
    """Map probability ``p`` so that ``threshold`` becomes 0.5 (monotone, 0 → 0, 1 → 1).

    >>> relative_confidence(0.3, 0.3), relative_confidence(0.65, 0.3)
    (0.5, 0.75)
    """
    t = min(max(threshold, 1e-6), 1 - 1e-6)
    out = 0.5 * p / t if p < t else 0.5 + 0.5 * (p - t) / (1 - t)
    return float(min(1.0, max(0.0, out)))


class ClassifierDetector:
    """Per-step failure classifier (onnxruntime), as a trace detector.

    Parameters
    ----------
    path:
        Folder holding ``classifier.onnx`` and ``tokenizer.json`` (default: the shipped model).
    threads:
        onnxruntime threads.
    max_steps:
        Score at most the last ``max_steps`` steps of a trace.
    signal_ratio:
        Report (as a signal) a kind from ``signal_ratio × threshold`` on; 1.0 reports failures only.

    Examples
    --------
    >>> det = ClassifierDetector(path="model/artifacts")   # loads nothing yet
    >>> det.get_params()["max_steps"]
    512
    """

    name: ClassVar[str] = "classifier"
    version: ClassVar[str] = "1"
    kinds: ClassVar[tuple[FailureKind, ...]] = REPORTED_KINDS

    def __init__(self, *, path: str | Path | None = None, threads: int = DEFAULT_THREADS, max_steps: int = 512,
                 signal_ratio: float = 0.5) -> None:
        self.path = path
        self.threads = threads
        self.max_steps = max_steps
        self.signal_ratio = signal_ratio
        self.runtime_: Any = None
        self.gate_: dict[str, Any] | None = None

    def get_params(self) -> dict[str, Any]:
        return {"path": self.path, "threads": self.threads, "max_steps": self.max_steps,
                "signal_ratio": self.signal_ratio}

    def load(self) -> Any:
        """Load the artefact now (the service calls this at start-up); returns the runtime."""
        if self.runtime_ is None:
            from model.scoring.classifier.runtime import ClassifierRuntime

            self.runtime_ = ClassifierRuntime.load(self.path or DEFAULT_ARTIFACTS, threads=self.threads)
            self.gate_ = read_gate(self.path or DEFAULT_ARTIFACTS)
        return self.runtime_

    @property
    def failure_kinds(self) -> frozenset[str]:
        """Kinds this model may raise as failures (the gate's), once loaded."""
        return failure_kinds(self.gate_)

    def available(self) -> bool:
        """Whether the artefact's files exist (the service serves rules only when they don't)."""
        from model.scoring.classifier.runtime import MODEL_FILE, TOKENIZER_FILE

        folder = Path(self.path or DEFAULT_ARTIFACTS)
        return (folder / MODEL_FILE).is_file() and (folder / TOKENIZER_FILE).is_file()

    @property
    def model_version(self) -> str | None:
        """The loaded model's version (``None`` before :meth:`load`)."""
        return None if self.runtime_ is None else str(self.runtime_.meta.model_version)

    @property
    def runtime(self) -> Any:
        if self.runtime_ is None:
            raise NotFittedError("the classifier is not loaded yet; call load() or inspect() first")
        return self.runtime_

    def inspect(self, trace: Trace) -> list[Finding]:
        return self.inspect_scored(trace)[0]

    def inspect_scored(self, trace: Trace) -> tuple[list[Finding], dict[str, float]]:
        """The findings, and per reported kind the highest probability over the agent's steps (the
        zero-shot ``failure_probability``'s evidence: :func:`model.scoring.runscore.zeroshot.classifier_maxima`)."""
        from model.scoring.runscore.zeroshot import classifier_maxima

        rt = self.load()
        start = max(0, len(trace.steps) - self.max_steps)
        if start >= len(trace.steps):
            return [], {}
        probs = rt.score_trace(trace, start=start)
        return self._findings(trace, probs, start), classifier_maxima(trace, probs, rt.labels, start)

    def inspect_step(self, trace: Trace, index: int) -> list[Finding]:
        """Findings for one step only (the real-time path: a new step appended to a session)."""
        return self.inspect_step_scored(trace, index)[0]

    def inspect_step_scored(self, trace: Trace, index: int) -> tuple[list[Finding], dict[str, float]]:
        """:meth:`inspect_step` and the step's per-kind probabilities (0 for each kind when it is not an agent's step)."""
        from model.scoring.runscore.zeroshot import classifier_maxima

        rt = self.load()
        probs = rt.score_step(trace, index)[None, :]
        return self._findings(trace, probs, index), classifier_maxima(trace, probs, rt.labels, index)

    def _columns(self) -> tuple[list[tuple[int, FailureKind, float, bool]], np.ndarray, np.ndarray]:
        """The label columns the detector reports — ``(column, kind, threshold, trusted)`` —, their
        indices, and each one's reporting floor ``signal_ratio × threshold``; worked out once per loaded
        model and settings."""
        rt = self.runtime_
        key = (rt, self.gate_, self.signal_ratio)
        cached = self.__dict__.get("_columns_")
        if cached is not None and all(a is b for a, b in zip(cached[0], key, strict=True)):
            return cached[1], cached[2], cached[3]
        reported = {k.value for k in REPORTED_KINDS}  # the kinds the rules own (tool_error, loop, …) left out
        trusted = self.failure_kinds
        cols = [(j, FailureKind(label), float(rt.thresholds[j]), label in trusted)
                for j, label in enumerate(rt.labels) if label in reported]
        index = np.array([j for j, _, _, _ in cols], dtype=np.intp)
        floors = np.array([self.signal_ratio * t for _, _, t, _ in cols], dtype=np.float64)
        self.__dict__["_columns_"] = (key, cols, index, floors)
        return cols, index, floors

    def _findings(self, trace: Trace, probs: Any, start: int) -> list[Finding]:
        rt = self.runtime_
        cols, index, floors = self._columns()
        out: list[Finding] = []
        if not cols:
            return out
        # (row, column) pairs at or over their floor, row by row (NaN counts as over, as `not p < floor`)
        hits = np.argwhere(~(probs[:, index] < floors))
        for row, c in hits.tolist():
            j, kind, t, trusted = cols[c]
            i = start + row
            step = trace.steps[i]
            p = float(probs[row, j])
            confidence = round(relative_confidence(p, t), 4)
            details: dict[str, Any] = {"probability": round(p, 4), "threshold": round(t, 4),
                                       "model_version": rt.meta.model_version}
            if not trusted:
                # Below the failure threshold whatever p is: a signal, not a repair trigger.
                confidence = round(0.49 * confidence, 4)
                details["gated"] = "precision below the gate in gate.json: reported as a signal"
            out.append(Finding(
                detector=self.name,
                kind=kind,
                confidence=confidence,
                step=i,
                source_index=step.source_index,
                span_id=step.span_id,
                evidence=f"{kind.value} p={p:.2f} (threshold {t:.2f}) at step {i} "
                         f"({step.kind.value}): {clip(step.content, 120)!r}",
                details=details,
            ))
        return out


__all__ = ["DEFAULT_ARTIFACTS", "ClassifierDetector", "relative_confidence"]
