"""The service's responses as the client reads them.

Lenient on purpose: unknown fields are kept (``extra="allow"``) and kinds / strategies are plain
strings, so a newer service (responses change only by adding fields) never breaks an older
client. ``served`` is the client's own field: ``False`` on a fail-open fallback, which also
carries the reason in ``client_error``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Versioned(_Open):
    schema_version: str = ""
    model_version: str = ""
    detector_versions: dict[str, str] = Field(default_factory=dict)
    served: bool = True
    client_error: str | None = None


class Failure(_Open):
    kind: str
    category: str = ""
    severity: str = ""
    confidence: float = 0.0
    detector: str = ""
    detectors: list[str] = Field(default_factory=list)
    step: int | None = None
    source_index: int | None = None
    span_id: str | None = None
    evidence: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    # how far its evidence reaches (a loop: its last repeat), the service's word on it; in a
    # session step's answer only (None in /v1/diagnose's and from services before it)
    reach_step: int | None = None
    reach_source_index: int | None = None


class Recommendation(_Open):
    id: str
    strategy: str
    params: dict[str, Any] = Field(default_factory=dict)
    instruction: str = ""
    rationale: str = ""
    next: list[str] = Field(default_factory=list)
    budgets: dict[str, Any] = Field(default_factory=dict)


class Coverage(_Open):
    steps: int = 0
    without_content: int = 0
    redacted: int = 0


class ProbabilityBasis(_Open):
    """Which model gave ``failure_probability`` (schema 1.3): ``agent`` (the agent's own model) or
    ``zero-shot``, the agent, its labelled runs, its cross-validated AUROC."""

    model: str = ""
    agent: str = ""
    labelled_runs: int = 0
    cv_auroc: float | None = None
    version: str | None = None
    zero_shot_probability: float | None = None


class Diagnosis(Versioned):
    """``POST /v1/diagnose``'s answer. ``healthy`` is ``None`` when the content needed to tell is missing."""

    trace_id: str = ""
    healthy: bool | None = None
    failure_probability: float | None = None
    failure_probability_basis: ProbabilityBasis | None = None  # None from services before 1.3
    failures: list[Failure] = Field(default_factory=list)
    signals: list[Failure] = Field(default_factory=list)
    primary: Failure | None = None
    recommendation: Recommendation
    steps: int = 0
    coverage: Coverage = Field(default_factory=Coverage)
    warnings: list[str] = Field(default_factory=list)
    arm: str | None = None  # "repair" / "shadow" (the service's canary share); None from older services


class SessionStep(Diagnosis):
    """``POST /v1/sessions/{id}/steps``'s answer: the session's diagnosis so far."""

    session_id: str = ""
    appended: list[int] = Field(default_factory=list)
    source_indices: list[int] = Field(default_factory=list)  # per appended message (newer services)
    session_steps: int = 0


class FailureState(_Open):
    key: str
    kind: str
    source_index: int | None = None
    step: int | None = None
    status: str
    rung: int = 0
    attempt: int = 0
    recommendation: Recommendation | None = None


class SessionView(Versioned):
    session_id: str
    trace_id: str
    agent: str | None = None  # the session's agent (None from older services)
    created_at: datetime
    updated_at: datetime
    steps: int
    next_source_index: int
    failures: list[FailureState] = Field(default_factory=list)
    replan_global_used: int = 0
    last: Diagnosis | None = None


class Outcome(Versioned):
    recommendation_id: str
    recorded: bool = True
    escalated: bool = False
    next: Recommendation | None = None
    session_id: str | None = None


class TraceSummary(_Open):
    id: str
    session_id: str | None = None
    task_type: str | None = None
    created_at: datetime
    updated_at: datetime
    steps: int = 0
    healthy: bool = True
    primary_kind: str | None = None
    shadow: bool = False
    agent: str | None = None  # the run's agent (None from older services)


class TracePage(Versioned):
    items: list[TraceSummary] = Field(default_factory=list)
    next_cursor: str | None = None


class GivenRecommendation(_Open):
    """A recommendation as the history keeps it."""

    id: str
    strategy: str
    kind: str | None = None
    rung: int = 0
    attempt: int = 0
    created_at: datetime
    body: dict[str, Any] = Field(default_factory=dict)


class ReportedOutcome(_Open):
    """An outcome as the history keeps it."""

    recommendation_id: str
    strategy: str = ""
    success: bool
    duration_s: float | None = None
    cost: float | None = None
    note: str = ""
    created_at: datetime


class LocatedFailure(_Open):
    kind: str | None = None
    step: int | None = None
    source_index: int | None = None


class RunLabel(_Open):
    """A trace's effective run-level label: per author the newest label, a human's over a checker's."""

    failed: bool
    author: str = ""
    author_type: str = "human"
    created_at: datetime | None = None
    failures: list[LocatedFailure] = Field(default_factory=list)
    labels: int = 0


class TraceDetail(TraceSummary, Versioned):
    trace: dict[str, Any] = Field(default_factory=dict)
    diagnosis: dict[str, Any] = Field(default_factory=dict)
    recommendations: list[GivenRecommendation] = Field(default_factory=list)
    outcomes: list[ReportedOutcome] = Field(default_factory=list)
    label: RunLabel | None = None


class Graph(Versioned):
    trace_id: str
    graph: dict[str, Any] | None = None
    mermaid: str | None = None


class Label(Versioned):
    trace_id: str
    labels: int = 0
    label: RunLabel | None = None  # the effective label after this one


class Alarm(_Open):
    index: int
    direction: str
    start: int
    statistic: float


class Observations(Versioned):
    stream: str
    agent: str = ""
    task_type: str = ""
    n: int = 0
    alarms: list[Alarm] = Field(default_factory=list)
    alarm_open: bool = False
    monitoring: bool = False


class Segment(_Open):
    start: int
    end: int
    mean: float


class Changepoints(Versioned):
    stream: str = ""
    agent: str = ""
    task_type: str = ""
    n: int = 0
    changepoints: list[int] = Field(default_factory=list)
    segments: list[Segment] = Field(default_factory=list)
    method: str = ""


def fallback_recommendation(reason: str) -> Recommendation:
    """What a fail-open call recommends: carry on as if triage were not there."""
    return Recommendation(
        id="unavailable",
        strategy="continue",
        instruction="Triage is unavailable; continue.",
        rationale=reason,
    )


__all__ = [
    "Alarm",
    "Changepoints",
    "Coverage",
    "Diagnosis",
    "Failure",
    "FailureState",
    "GivenRecommendation",
    "Graph",
    "Label",
    "Observations",
    "Outcome",
    "Recommendation",
    "ReportedOutcome",
    "Segment",
    "SessionStep",
    "SessionView",
    "TraceDetail",
    "TracePage",
    "TraceSummary",
    "Versioned",
    "fallback_recommendation",
]
