"""The service's responses as the client reads them.

Lenient on purpose: unknown fields are kept (``extra="allow"``) and the service's enums (kinds,
strategies, …) are open: ``Literal[<the values known today>] | str``, so a newer service (responses
change only by adding fields and values) never breaks an older client. ``served`` is the client's
own field: ``False`` on a fail-open fallback, which also carries the reason in ``client_error``.
``tests/test_client_schema.py`` checks every model here against the service's OpenAPI schema
(field names, required-ness, types, enum values).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field

FailureKind: TypeAlias = Literal[
    "tool_error", "timeout", "rate_limited", "provider_error", "malformed_call", "empty_response", "incomplete",
    "refusal", "loop", "ignored_error", "hallucination", "off_topic", "context_loss", "assumption_violated",
    "disallowed_tool", "unsafe_output", "degradation", "at_risk",
] | str
Category: TypeAlias = Literal["technical", "logical"] | str
Severity: TypeAlias = Literal["low", "medium", "high", "critical"] | str
Strategy: TypeAlias = Literal[
    "retry", "adjust_parameters", "switch_tool", "self_correct", "clarify", "refresh_context", "rollback",
    "replan_local", "replan_global", "fallback_model", "human_handoff", "continue",
] | str


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Versioned(_Open):
    schema_version: str = ""
    model_version: str = ""
    detector_versions: dict[str, str] = Field(default_factory=dict)
    served: bool = True
    client_error: str | None = None


class Failure(_Open):
    kind: FailureKind
    category: Category = ""
    severity: Severity = ""
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
    strategy: Strategy
    params: dict[str, Any] = Field(default_factory=dict)
    instruction: str = ""
    rationale: str = ""
    next: list[Strategy] = Field(default_factory=list)
    budgets: dict[str, Any] = Field(default_factory=dict)
    addresses: str | None = None  # schema 1.5: the failure it repairs, "<kind>@<source_index>"; None before


class Coverage(_Open):
    steps: int = 0
    without_content: int = 0
    redacted: int = 0
    unreadable_agent_steps: list[int] = Field(default_factory=list)  # empty from older services


class ProbabilityBasis(_Open):
    """Which model gave ``failure_probability`` (schema 1.3): ``agent`` (the agent's own model) or
    ``zero-shot``, the agent, its labelled runs, its cross-validated AUROC."""

    model: Literal["zero-shot", "agent"] | str = ""
    agent: str = ""
    labelled_runs: int = 0
    cv_auroc: float | None = None
    version: str | None = None
    zero_shot_probability: float | None = None
    learner: Literal["agent", "tfidf", "length"] | str | None = None  # schema 1.4; None from older services
    localiser: Literal["position prior", "where model"] | str | None = None  # schema 1.6: what gave `attribution`


class Attribution(_Open):
    """Where the run most likely went wrong, given that it failed (schema 1.1): an agent message,
    and the probability that it is the one."""

    step: int
    source_index: int
    speaker: str | None = None
    probability: float


class Diagnosis(Versioned):
    """``POST /v1/diagnose``'s answer. ``healthy`` is ``None`` when the content needed to tell is missing."""

    trace_id: str = ""
    healthy: bool | None = None
    failure_probability: float | None = None
    failure_probability_basis: ProbabilityBasis | None = None  # None from services before 1.3
    attribution: Attribution | None = None
    failures: list[Failure] = Field(default_factory=list)
    signals: list[Failure] = Field(default_factory=list)
    primary: Failure | None = None
    recommendation: Recommendation
    steps: int = 0
    coverage: Coverage = Field(default_factory=Coverage)
    warnings: list[str] = Field(default_factory=list)
    arm: Literal["repair", "shadow"] | str | None = None  # "repair" / "shadow" (the service's canary share); None from older services
    # schema 1.4: the run's agent and how it was found ("option", "span", "task_type", "inferred"); None before
    agent: str | None = None
    agent_source: Literal["option", "span", "task_type", "inferred"] | str | None = None


class SessionStep(Diagnosis):
    """``POST /v1/sessions/{id}/steps``'s answer: the session's diagnosis so far."""

    session_id: str = ""
    appended: list[int] = Field(default_factory=list)
    source_indices: list[int] = Field(default_factory=list)  # per appended message (newer services)
    session_steps: int = 0


class FailureState(_Open):
    key: str
    kind: FailureKind
    source_index: int | None = None
    step: int | None = None
    status: Literal["open", "resolved", "handoff"] | str
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
    note: str | None = None  # why nothing was recorded, when it wasn't
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
    author_type: Literal["human", "checker"] | str = "human"
    created_at: datetime | None = None
    failures: list[LocatedFailure] = Field(default_factory=list)
    labels: int = 0


class AgentProfileInfo(_Open):
    """What an agent's runs show (``GET /v1/agents``)."""

    tools: list[str] = Field(default_factory=list)
    models: list[str] = Field(default_factory=list)
    service_names: list[str] = Field(default_factory=list)
    template_excerpt: str = ""
    n_runs: int = 0


class AgentInfo(_Open):
    """One agent of the tenant (``GET /v1/agents``, service 1.4): its key (the ``agent`` answers
    carry), the name a person gave it, how it was first found, its runs and what they show."""

    key: str
    name: str | None = None
    source: Literal["option", "span", "task_type", "inferred", "split"] | str = ""
    runs: int = 0
    labelled_runs: int = 0
    first_seen: datetime | None = None
    last_seen: datetime | None = None
    aliases: list[str] = Field(default_factory=list)
    profile: AgentProfileInfo | None = None


class Agents(_Open):
    """``GET /v1/agents``'s answer."""

    tenant: str = ""
    agents: list[AgentInfo] = Field(default_factory=list)


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
    # the baseline the alarm was measured against, and the bound a run's own value is judged by
    # (None from services before them)
    mean: float | None = None
    std: float | None = None
    bound: float | None = None


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
    "AgentInfo",
    "AgentProfileInfo",
    "Agents",
    "Alarm",
    "Attribution",
    "Category",
    "Changepoints",
    "Coverage",
    "Diagnosis",
    "Failure",
    "FailureKind",
    "FailureState",
    "GivenRecommendation",
    "Graph",
    "Label",
    "LocatedFailure",
    "Observations",
    "Outcome",
    "ProbabilityBasis",
    "Recommendation",
    "ReportedOutcome",
    "RunLabel",
    "Segment",
    "SessionStep",
    "SessionView",
    "Severity",
    "Strategy",
    "TraceDetail",
    "TracePage",
    "TraceSummary",
    "Versioned",
    "fallback_recommendation",
]
