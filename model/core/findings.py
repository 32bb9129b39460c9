"""What detectors report (:class:`Finding`) and what a diagnosis returns (:class:`DiagnosisResponse`).

The response is the one pydantic model of docs/architecture.md's "Request and response". It changes only by adding
fields; ``schema_version`` says which fields a consumer can expect.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from model.core.coverage import Coverage
from model.core.kinds import SYMPTOM_KINDS, Category, FailureKind, Severity, Strategy

RESPONSE_SCHEMA_VERSION = "1.6"  # 1.1: failure_probability, attribution; 1.2: arm; 1.3: failure_probability_basis;
# 1.4: agent, agent_source; 1.5: recommendation.addresses; 1.6: failure_probability_basis.localiser


class Finding(BaseModel):
    """One detector's claim: a failure kind, how sure, and where.

    ``step`` indexes ``Trace.steps``; ``source_index`` is that step's input position.
    """

    model_config = ConfigDict(extra="forbid")

    detector: str
    kind: FailureKind
    confidence: float = Field(ge=0.0, le=1.0)
    step: int | None = Field(default=None, ge=0)
    source_index: int | None = Field(default=None, ge=0)
    span_id: str | None = None
    evidence: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class Failure(BaseModel):
    """A fused finding at or above its kind's threshold (or below it, as a signal)."""

    kind: FailureKind
    category: Category
    severity: Severity
    confidence: float = Field(ge=0.0, le=1.0)
    detector: str
    detectors: list[str] = Field(default_factory=list)
    step: int | None = None
    source_index: int | None = None
    span_id: str | None = None
    evidence: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


class Recommendation(BaseModel):
    """What the agent should do next, usable as it is."""

    id: str
    strategy: Strategy
    params: dict[str, Any] = Field(default_factory=dict)
    instruction: str = ""
    rationale: str = ""
    next: list[Strategy] = Field(default_factory=list)
    budgets: dict[str, Any] = Field(default_factory=dict)
    addresses: str | None = Field(
        default=None,
        description="The failure this repair addresses, `<kind>@<source_index>` (schema 1.5): the primary "
        "failure unless that one is resolved; absent for `continue`.",
    )


class Attribution(BaseModel):
    """Where the run most likely went wrong, given that it failed (an agent message)."""

    step: int = Field(ge=0, description="index into the trace's steps (the message's first step)")
    source_index: int = Field(ge=0, description="the input message's position")
    speaker: str | None = None
    probability: float = Field(ge=0.0, le=1.0, description="P(this message is where it went wrong | failed)")


class ProbabilityBasis(BaseModel):
    """Which model gave ``failure_probability``, and how far to trust it (schema 1.3)."""

    model: Literal["zero-shot", "agent"] = Field(
        description="`agent`: the agent's own model (trained on its labelled runs, scoring the run so far); "
        "`zero-shot`: the shipped recipe (`version` names it): the prior, the rules' measured confidences and "
        "the step classifier's evidence, each able only to raise the probability (near chance on a new agent)."
    )
    agent: str = Field(description="The run's agent (model/core/agents.py): the key of its model.")
    labelled_runs: int = Field(
        default=0, ge=0,
        description="The agent's labelled runs: those its model was trained on (`agent`), or those the "
        "zero-shot probability was re-centred on (its observed failure rate; 0: not re-centred).",
    )
    cv_auroc: float | None = Field(
        default=None, description="The agent model's grouped cross-validated AUROC on its labelled runs (`agent` only)."
    )
    version: str | None = Field(default=None, description="The agent model's registry version (`agent`), or the "
                               "zero-shot recipe that gave the probability (`zero-shot`, e.g. `zero-shot-evidence-1`).")
    learner: Literal["agent", "tfidf", "length"] | None = Field(
        default=None,
        description="(schema 1.4) Which learner the agent's registered model is (`agent` only): `agent`, its own "
        "agent model; `tfidf` or `length`, the cheap learner (TF-IDF + logistic regression; the run's length) "
        "that `triage retrain` measured better than the agent model in its grouped cross-validation.",
    )
    localiser: Literal["position prior", "where model"] | None = Field(
        default=None,
        description="(schema 1.6) What gave `attribution`: `where model`, the agent's own where-model (kept by "
        "`triage retrain` only where its grouped cross-validation on the agent's labelled failing runs beat the "
        "position prior's exact accuracy, interval above 0); `position prior`, the shipped position attribution.",
    )
    zero_shot_probability: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="The zero-shot probability before re-centring or the agent model (its prior).",
    )


class DiagnosisResponse(BaseModel):
    """The answer to one diagnosis (CLI ``--json`` and ``POST /v1/diagnose``).

    ``failure_probability`` is the calibrated probability that the run has failed (calibrated on
    real labelled runs; ``None`` when no run scorer is loaded or the trace has no agent step);
    ``attribution`` is present whenever the trace has agent steps, healthy or not.
    ``healthy`` is ``False`` with a failure, ``True`` without one, and ``None`` (unknown) when no
    failure was found but an agent step's text was not recorded or is only a redaction
    placeholder (:mod:`model.core.coverage`); ``coverage`` counts those steps and ``warnings`` say
    which setting records them. ``arm``: see the field (the canary share, ``serve/services/canary.py``).
    """

    schema_version: str = RESPONSE_SCHEMA_VERSION
    trace_id: str
    model_version: str = Field(
        description="The models that answered: `<classifier version>+<run-scorer version>`; the classifier's "
        "`model_version` (`rules-<package version>` without one), then the tenant's active run-scorer "
        "version in the model registry (`v<N>-<YYYYMMDDTHHMMSSZ>`) or `shipped-<hash>` for the shipped one (no `+…` without a run scorer).",
    )
    detector_versions: dict[str, str] = Field(default_factory=dict)
    healthy: bool | None
    failure_probability: float | None = Field(default=None, ge=0.0, le=1.0)
    failure_probability_basis: ProbabilityBasis | None = Field(
        default=None, description="Which model gave `failure_probability` (absent outside the service)."
    )
    attribution: Attribution | None = None
    failures: list[Failure] = Field(default_factory=list)
    signals: list[Failure] = Field(default_factory=list)
    primary: Failure | None = None
    recommendation: Recommendation
    steps: int = 0
    coverage: Coverage = Field(default_factory=Coverage)
    warnings: list[str] = Field(default_factory=list)
    arm: Literal["repair", "shadow"] | None = Field(
        default=None,
        description="The service's arm for this run: `repair` (the recommendation is meant to be carried "
        "out) or `shadow` (diagnosed and recorded, `continue` recommended: the canary share's other arm, "
        "or `options.shadow`); absent outside the service.",
    )
    agent: str | None = Field(
        default=None,
        description="The run's agent (schema 1.4): the key its streams, agent model, labels and patterns are "
        "kept under (model/core/agents.py, docs/agents.md); absent outside the service.",
    )
    agent_source: Literal["option", "span", "task_type", "inferred"] | None = Field(
        default=None,
        description="How the agent was found (schema 1.4): `option` (the caller named it), `span` (the root "
        "agent span's name), `task_type` (the task type, when `options.agent_from_task_type` asked for it) or "
        "`inferred` (matched to the tenant's agents by what the run shows: instructions template, tools, "
        "model, `service.name`); absent outside the service.",
    )


_KIND_ORDER = {kind: i for i, kind in enumerate(FailureKind)}


def step_order(f: Failure) -> tuple[int, int, int]:
    """The order failures and signals are listed in: by step (trace-level ones last), a symptom
    (:data:`~model.core.kinds.SYMPTOM_KINDS`) after its root cause on the same step, then by kind."""
    return (f.step if f.step is not None else 1 << 30, int(f.kind in SYMPTOM_KINDS), _KIND_ORDER[f.kind])


def precedence(f: Failure) -> tuple[int, int, int, int]:
    """The one rule that says which failure to act on first: the most severe, then the earliest
    (:func:`step_order`: the root cause before its symptom). The primary failure of a diagnosis and
    the failure a repair addresses are both the first by this key.

    >>> a = Failure(kind="incomplete", category="logical", severity="high", confidence=1, detector="x", step=6)
    >>> b = Failure(kind="loop", category="logical", severity="high", confidence=1, detector="y", step=6)
    >>> c = Failure(kind="at_risk", category="logical", severity="medium", confidence=1, detector="z", step=1)
    >>> min([a, b, c], key=precedence).kind.value
    'loop'
    """
    return (-f.severity.rank, *step_order(f))


def primary_of(failures: list[Failure]) -> Failure | None:
    """The failure to act on first among ``failures`` (:func:`precedence`); ``None`` when there are none."""
    return min(failures, key=precedence) if failures else None


__all__ = ["RESPONSE_SCHEMA_VERSION", "Attribution", "DiagnosisResponse", "Failure", "Finding", "ProbabilityBasis",
           "Recommendation", "precedence", "primary_of", "step_order"]
