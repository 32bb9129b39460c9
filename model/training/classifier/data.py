"""Labels and step examples: from labelled traces to (text, multi-hot target) pairs.

Label order: :data:`model.core.kinds.CLASSIFIER_KINDS` then ``healthy`` (:data:`LABELS`); the exported
artefact stores the order it was trained with.

A step's target is the set of labelled failures whose ``step`` it is; a failure labelled without
a step (``step`` is ``None``) is put on the trace's last step. ``healthy`` is 1 exactly when no
kind is. Unlabelled steps *after* the trace's first failure are ambiguous (an agent that went off
the rails often keeps showing it): ``post_failure="healthy"`` keeps them as healthy,
``post_failure="drop"`` leaves them out of training.

>>> from model.core.schema import FailureLabel, Step, Trace, TraceLabels
>>> t = Trace(steps=[Step(kind="user_input", content="q"), Step(kind="llm_output", content="a")],
...           labels=TraceLabels(failures=[FailureLabel(kind="off_topic", step=1)]))
>>> [LABELS[j] for j, v in enumerate(step_targets(t)[1]) if v]
['off_topic']
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import ValidationError

from model.core.errors import InputError
from model.core.kinds import CLASSIFIER_KINDS, HEALTHY_LABEL
from model.core.schema import Trace
from model.scoring.classifier.representation import (
    DEFAULT_CONFIG,
    RepresentationConfig,
    step_text,
    trace_texts,
)

LABELS: tuple[str, ...] = tuple(k.value for k in CLASSIFIER_KINDS) + (HEALTHY_LABEL,)
KIND_LABELS: tuple[str, ...] = LABELS[:-1]
HEALTHY_INDEX = len(LABELS) - 1
_INDEX = {name: j for j, name in enumerate(LABELS)}

PostFailure = Literal["healthy", "drop"]


@dataclass(frozen=True)
class StepExample:
    """One training / evaluation example: a step's text and its multi-hot target over LABELS."""

    text: str
    target: tuple[int, ...]
    trace_id: str
    step: int
    language: str
    family: str


def load_traces(path: Path, *, limit: int | None = None) -> list[Trace]:
    """Read a JSONL split (one Trace per line).

    Raises
    ------
    InputError
        A line is not a valid Trace; the message names the file and its 1-based line.
    """
    traces: list[Trace] = []
    try:
        handle = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}", path=str(path)) from exc
    with handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                traces.append(Trace.model_validate_json(line))
            except ValidationError as exc:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise InputError(f"{path}: not a Trace: {first['msg']}", path=where, line=number) from exc
            if limit is not None and len(traces) >= limit:
                break
    return traces


def step_targets(trace: Trace, post_failure: PostFailure = "healthy") -> list[tuple[int, ...] | None]:
    """Multi-hot target per step (``None`` for a step left out by ``post_failure="drop"``)."""
    n = len(trace.steps)
    kinds_at: list[set[int]] = [set() for _ in range(n)]
    labels = trace.labels
    if labels is not None and n:
        for failure in labels.failures:
            j = None if failure.kind is None else _INDEX.get(failure.kind.value)
            if j is None:  # a kind the classifier is not trained on (degradation, disallowed_tool)
                continue
            at = failure.step if failure.step is not None and failure.step < n else n - 1
            kinds_at[at].add(j)
    labelled = [i for i in range(n) if kinds_at[i]]
    first = labelled[0] if labelled else n
    out: list[tuple[int, ...] | None] = []
    for i in range(n):
        if not kinds_at[i] and i > first and post_failure == "drop":
            out.append(None)
            continue
        vec = [0] * len(LABELS)
        for j in kinds_at[i]:
            vec[j] = 1
        if not kinds_at[i]:
            vec[HEALTHY_INDEX] = 1
        out.append(tuple(vec))
    return out


def trace_kinds(trace: Trace) -> set[str]:
    """The classifier kinds a trace is labelled with (empty = healthy for the classifier)."""
    if trace.labels is None:
        return set()
    return {f.kind.value for f in trace.labels.failures if f.kind is not None and f.kind.value in _INDEX}


def first_failing_step(trace: Trace) -> int | None:
    """The labelled first failing step among classifier kinds (``None`` when healthy)."""
    targets = step_targets(trace)
    for i, t in enumerate(targets):
        if t is not None and not t[HEALTHY_INDEX]:
            return i
    return None


def family_of(trace: Trace) -> str:
    if trace.labels is not None:
        fam = trace.labels.provenance.get("family")
        if isinstance(fam, str):
            return fam
    return trace.task_type or "unknown"


def trace_examples(
    trace: Trace, *, config: RepresentationConfig = DEFAULT_CONFIG, post_failure: PostFailure = "healthy"
) -> list[StepExample]:
    """Every (kept) step of one trace as an example."""
    out = []
    texts = trace_texts(trace, config)
    for i, target in enumerate(step_targets(trace, post_failure)):
        if target is None:
            continue
        out.append(
            StepExample(
                text=texts[i],
                target=target,
                trace_id=trace.id,
                step=i,
                language=trace.language or "unknown",
                family=family_of(trace),
            )
        )
    return out


def sample_examples(
    traces: Sequence[Trace],
    *,
    max_examples: int,
    seed: int,
    failure_fraction: float = 0.5,
    config: RepresentationConfig = DEFAULT_CONFIG,
    post_failure: PostFailure = "healthy",
) -> list[StepExample]:
    """A sample of step examples, ``failure_fraction`` of them failing steps where there are enough.

    Traces are visited in a seeded order; failing steps are taken first-come, healthy steps are
    drawn from the same traces (so the negatives include the hard ones: the steps just before and
    after a failure, retries, self-corrections), and from healthy traces.

    >>> sample_examples([], max_examples=10, seed=0)
    []
    """
    rng = random.Random(seed)
    order = list(range(len(traces)))
    rng.shuffle(order)
    want_fail = int(round(max_examples * failure_fraction))
    fails: list[tuple[int, int]] = []
    healthy: list[tuple[int, int]] = []
    for ti in order:
        for i, target in enumerate(step_targets(traces[ti], post_failure)):
            if target is None:
                continue
            (healthy if target[HEALTHY_INDEX] else fails).append((ti, i))
        if len(fails) >= want_fail and len(healthy) >= 4 * max_examples:
            break
    rng.shuffle(fails)
    fails = fails[:want_fail]
    rng.shuffle(healthy)
    healthy = healthy[: max(0, max_examples - len(fails))]
    picked = fails + healthy
    rng.shuffle(picked)
    out = []
    for ti, i in picked:
        trace = traces[ti]
        target = step_targets(trace, post_failure)[i]
        assert target is not None
        out.append(
            StepExample(
                text=step_text(trace, i, config),
                target=target,
                trace_id=trace.id,
                step=i,
                language=trace.language or "unknown",
                family=family_of(trace),
            )
        )
    return out


def targets_matrix(examples: Iterable[StepExample]) -> np.ndarray:
    """Stack targets into an ``(n, len(LABELS))`` float32 array."""
    rows = [e.target for e in examples]
    if not rows:
        return np.zeros((0, len(LABELS)), dtype=np.float32)
    return np.asarray(rows, dtype=np.float32)


__all__ = [
    "HEALTHY_INDEX",
    "KIND_LABELS",
    "LABELS",
    "PostFailure",
    "StepExample",
    "family_of",
    "first_failing_step",
    "load_traces",
    "sample_examples",
    "step_targets",
    "targets_matrix",
    "trace_examples",
    "trace_kinds",
]
