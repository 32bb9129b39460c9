"""Request and response bodies of the HTTP API's endpoints (sessions, outcomes, traces, streams, agents,
the operator's model calls, patterns): every one of them, in this one module.

``/v1/diagnose`` keeps :class:`model.core.findings.DiagnosisResponse`; a session step answers with
:class:`SessionStepResponse`, which is that model plus the session's fields (responses change only
by adding fields). Every response carries ``model_version`` and ``detector_versions``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StringConstraints,
    computed_field,
    model_validator,
)

from model.core.agents import MAX_AGENT_LENGTH
from model.core.errors import InputError
from model.core.findings import RESPONSE_SCHEMA_VERSION, DiagnosisResponse, Failure, Recommendation
from model.core.kinds import FailureKind
from model.core.options import AgentName, DiagnoseOptions
from model.core.schema import ToolDefinition
from model.diagnosis.repair_engine import reach
from model.scoring.agent_registry import POOLED, ZERO_SHOT
from serve.validation import TEXT_PARAM_PATTERN


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Versioned(BaseModel):
    schema_version: str = RESPONSE_SCHEMA_VERSION
    model_version: str = Field(
        description="The models that answered: `<classifier version>+<run-scorer version>`; the classifier's "
        "`model_version` (`rules-<package version>` without one), then the tenant's active run-scorer "
        "version in the model registry (`v<N>-<YYYYMMDDTHHMMSSZ>`) or `shipped-<hash>` for the shipped one (no `+…` without a run scorer).",
    )
    detector_versions: dict[str, str] = Field(default_factory=dict)


class AppendStepsRequest(_Strict):
    """One or more steps the agent just took: OpenAI chat messages or native steps (not both).

    Indices continue across calls: the first message of this call gets the next ``source_index``
    of the session. Native steps keep their ``source_index`` relative to this call (all 0 = one
    input element per step).
    """

    messages: list[Any] | None = Field(default=None, description="OpenAI chat messages, in order.")
    steps: list[Any] | None = Field(default=None, description="Native steps (see the Trace JSON Schema).")
    options: DiagnoseOptions = Field(default_factory=DiagnoseOptions)
    task_type: str | None = Field(default=None, max_length=200, description="Stream key; kept per session.")
    agent: AgentName | None = Field(
        default=None,
        description="The agent running the session (as `options.agent`; either may name it): the key of its "
        "agent model and metric streams; kept per session (the latest named wins). Default: the root agent "
        "span's name, else the task type, else the tenant's pool.",
    )
    language: Literal["en", "zh"] | None = Field(default=None, description="Language of injected messages.")
    tools: list[ToolDefinition] | None = Field(default=None, description="Tool definitions (once is enough).")

    @model_validator(mode="after")
    def _one_source(self) -> AppendStepsRequest:
        if (self.messages is None) == (self.steps is None):
            raise ValueError("give exactly one of `messages` or `steps`")
        if not (self.messages or self.steps):
            raise ValueError("`messages` / `steps` is empty: append at least one step")
        return self


class SessionFailure(Failure):
    """A failure as a session step reports it: with how far its evidence reaches
    (:func:`model.diagnosis.repair_engine.reach`), which an executor judging a repair reads."""

    @computed_field(  # type: ignore[prop-decorator]
        description="The latest step the failure's evidence reaches: its own, or a loop's last repeat."
    )
    @property
    def reach_step(self) -> int | None:
        return reach(self).step

    @computed_field(description="The input position (`source_index`) of that latest evidence.")  # type: ignore[prop-decorator]
    @property
    def reach_source_index(self) -> int | None:
        return reach(self).source_index


class SessionStepResponse(DiagnosisResponse):
    """The incremental diagnosis after an append: the whole session so far, plus where it stands."""

    # the diagnosis's failures, each with its reach (the response is built from the diagnosis's dump)
    failures: list[SessionFailure] = Field(default_factory=list)  # type: ignore[assignment]
    signals: list[SessionFailure] = Field(default_factory=list)  # type: ignore[assignment]
    primary: SessionFailure | None = None
    session_id: str
    appended: list[int] = Field(default_factory=list, description="Step indices this call added.")
    source_indices: list[int] = Field(
        default_factory=list,
        description="The `source_index` of each input element (message / step) this call added, in order.",
    )
    session_steps: int = 0


class FailureState(BaseModel):
    key: str
    kind: FailureKind
    source_index: int | None
    step: int | None
    status: Literal["open", "resolved", "handoff"]
    rung: int
    attempt: int
    recommendation: Recommendation | None


class SessionView(Versioned):
    session_id: str
    trace_id: str
    agent: str | None = Field(default=None, description="The session's agent (docs/agents.md): named, or fixed at its first append.")
    created_at: datetime
    updated_at: datetime
    steps: int
    next_source_index: int
    failures: list[FailureState]
    replan_global_used: int = 0
    last: DiagnosisResponse | None = None


StrictFloat = Annotated[float, Strict()]  # an int is a float; True and "1.5" are not


class OutcomeRequest(_Strict):
    """What happened when the agent carried out recommendation ``recommendation_id``."""

    recommendation_id: str = Field(min_length=1, max_length=64)
    success: StrictBool
    duration_s: StrictFloat | None = Field(default=None, ge=0, le=1e7, allow_inf_nan=False)
    cost: StrictFloat | None = Field(default=None, ge=0, le=1e9, allow_inf_nan=False)
    note: str = Field(default="", max_length=4000)
    label: FailureKind | Literal["healthy"] | None = Field(
        default=None, description="A human label for the failure this recommendation addressed."
    )


class LabelRequest(_Strict):
    """A label for a stored trace: the run-level verdict (``failed``, a task checker's or a
    reviewer's), and, when known, what went wrong (``kind``) and where (``step`` or
    ``source_index``). ``kind`` alone implies ``failed`` (a failure kind: true; ``healthy``: false).
    """

    failed: StrictBool | None = Field(default=None, description="Did the run fail (its task not done)?")
    kind: FailureKind | Literal["healthy"] | None = Field(
        default=None, description="What went wrong (with `failed: true`), or `healthy`."
    )
    step: StrictInt | None = Field(default=None, ge=0, le=2**31 - 1, description="Index into the trace's steps.")
    source_index: StrictInt | None = Field(
        default=None, ge=0, le=2**31 - 1, description="Index into the input the trace came from (a message)."
    )
    author: str = Field(default="", max_length=200, description="Who says so; default: the API key (`key:<id>`).")
    author_type: Literal["human", "checker"] = Field(
        default="human",
        description="`checker`: an automatic task checker. An author's newest label wins; a human's outranks a checker's.",
    )

    def verdict(self) -> bool:
        """``failed`` as the request says it, or as ``kind`` implies; an :class:`InputError` naming
        the field when the fields disagree or say nothing."""
        if self.failed is None and self.kind is None:
            raise InputError("say whether the run failed (`failed`: true or false) or give a failure `kind`", path="failed")
        failed = self.failed if self.failed is not None else self.kind != "healthy"
        if failed and self.kind == "healthy":
            raise InputError("`kind` is `healthy` but `failed` is true", path="kind")
        if not failed and self.kind not in (None, "healthy"):
            raise InputError(f"`failed` is false but `kind` is the failure kind {self.kind!s}", path="kind")
        if not failed and (self.step is not None or self.source_index is not None):
            where = "step" if self.step is not None else "source_index"
            raise InputError(f"`{where}` says where the run went wrong, but `failed` is false", path=where)
        if self.step is not None and self.source_index is not None:
            raise InputError("give `step` or `source_index`, not both", path="source_index")
        return failed


class LocatedFailureOut(BaseModel):
    kind: str | None = Field(description="The failure kind; null when only where is known.")
    step: int | None
    source_index: int | None


class RunLabelOut(BaseModel):
    """The trace's effective run-level label: per author the newest label, a human's over a checker's."""

    failed: bool
    author: str
    author_type: Literal["human", "checker"]
    created_at: datetime
    failures: list[LocatedFailureOut] = Field(description="What went wrong and where, when labelled.")
    labels: int = Field(description="Labels the trace has, every author.")


class LabelResponse(Versioned):
    trace_id: str
    labels: int = Field(description="Labels the trace now has, every author.")
    label: RunLabelOut = Field(description="The effective label after this one.")


class UndoLabelRequest(_Strict):
    """Withdraw the caller's newest label (``POST /v1/labels/undo``): the author's, on any trace of the
    tenant, or on ``trace_id`` only."""

    author: str = Field(default="", max_length=200, description="Whose label; default: the API key (`key:<id>`).")
    trace_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._:@\-]{1,128}$",
                                 description="Only a label on this trace.")


class WithdrawnLabelOut(BaseModel):
    failed: bool | None
    kind: str | None
    step: int | None
    source_index: int | None
    author: str
    author_type: str
    created_at: datetime
    withdrawn_at: datetime


class UndoLabelResponse(Versioned):
    trace_id: str
    withdrawn: WithdrawnLabelOut = Field(description="The label withdrawn (kept in the store, no longer counted).")
    labels: int = Field(description="Labels the trace still counts, every author.")
    label: RunLabelOut | None = Field(description="The effective label now; null when none is left.")


class OutcomeResponse(Versioned):
    recommendation_id: str
    recorded: bool = Field(default=True, description="False when this outcome repeats the recorded one.")
    note: str | None = Field(default=None, description="Why nothing was recorded, when it wasn't.")
    escalated: bool = Field(description="True when the failure moved up (a new recommendation).")
    next: Recommendation | None = Field(default=None, description="The recommendation to carry out now.")
    session_id: str | None = None


class OutcomeOut(BaseModel):
    recommendation_id: str
    strategy: str
    success: bool
    duration_s: float | None
    cost: float | None
    note: str
    created_at: datetime


class RecommendationOut(BaseModel):
    id: str
    strategy: str
    kind: str | None
    rung: int
    attempt: int
    created_at: datetime
    body: dict[str, Any]


class TraceSummary(BaseModel):
    id: str
    session_id: str | None
    task_type: str | None
    created_at: datetime
    updated_at: datetime
    steps: int
    healthy: bool
    primary_kind: str | None
    shadow: bool
    agent: str = Field(description="The run's agent (docs/agents.md): the key of its agent model and streams.")


class TracePageOut(Versioned):
    items: list[TraceSummary]
    next_cursor: str | None = Field(default=None, description="Pass as `cursor` for the next page.")


class TraceDetail(TraceSummary, Versioned):
    trace: dict[str, Any] = Field(description="The stored (redacted) trace, native JSON.")
    diagnosis: dict[str, Any] = Field(description="The latest diagnosis (DiagnosisResponse), redacted.")
    recommendations: list[RecommendationOut]
    outcomes: list[OutcomeOut]
    label: RunLabelOut | None = Field(default=None, description="The effective run-level label, when labelled.")


class GraphOut(Versioned):
    trace_id: str
    graph: dict[str, Any] | None = None
    mermaid: str | None = None


Observation = Annotated[float, Strict(), Field(ge=-1e12, le=1e12, allow_inf_nan=False)]


class ObservationsRequest(_Strict):
    values: list[Observation] = Field(
        min_length=1, max_length=10_000, description="Finite values, |x| ≤ 1e12, oldest first."
    )
    agent: str | None = Field(
        default=None,
        max_length=200,
        pattern=TEXT_PARAM_PATTERN,
        description="The agent whose stream this is (a run's agent: `options.agent`, else its root agent "
        "span's `gen_ai.agent.name`, else the agent inferred from the run: `GET /v1/agents`); its alarms are `degradation` on that "
        "agent's runs. `\"\"`: every agent of the tenant (signals only). Default: `task_type`.",
    )
    task_type: str = Field(
        default="",
        max_length=200,
        pattern=TEXT_PARAM_PATTERN,
        description="Before streams were keyed by agent: the task type, which is the agent of runs that "
        "name none. Used when `agent` is not given.",
    )
    params: dict[str, Any] | None = Field(
        default=None, description="CUSUM settings (shift, arl0, warmup, mean, std…), set on first use."
    )
    rebaseline: StrictBool = Field(default=False, description="Close an open alarm and re-estimate the baseline.")


class AlarmOut(BaseModel):
    index: int = Field(description="Observation that raised the alarm (0-based in the stream).")
    direction: str
    start: int = Field(description="Where the shift most likely began.")
    statistic: float
    mean: float = Field(description="The in-control baseline the alarm was measured against.")
    std: float
    bound: float = Field(
        description="mean ± shift · std of the agent's baseline in the alarm's direction: a run of that "
        "agent whose own value lies beyond it gets `degradation` as a failure; its other runs a signal."
    )


class ObservationsResponse(Versioned):
    stream: str
    agent: str = Field(description="The agent the stream belongs to (`\"\"`: every agent).")
    task_type: str = Field(description="The same as `agent` (streams were keyed by task type before).")
    n: int = Field(description="Observations in the stream after this call.")
    alarms: list[AlarmOut]
    alarm_open: bool
    monitoring: bool


class SegmentOut(BaseModel):
    start: int
    end: int
    mean: float


class ChangepointsResponse(Versioned):
    stream: str
    agent: str = Field(description="The agent the stream belongs to (`\"\"`: every agent).")
    task_type: str = Field(description="The same as `agent` (streams were keyed by task type before).")
    n: int
    changepoints: list[int]
    segments: list[SegmentOut]
    method: str


# -- agents (GET /v1/agents; rename, merge, split) ----------------------------------------------------
#: Trace ids one split may name (:meth:`serve.services.agents.Agents.split` refuses more; the request
#: model caps its list at this too, so the limit shows in the OpenAPI schema).
MAX_SPLIT_RUNS = 10_000

#: An agent's key or name: no control character, no outer blank.
AgentKey = Annotated[str, StringConstraints(min_length=1, max_length=MAX_AGENT_LENGTH,
                                            pattern=r"^[^\x00-\x20\x7f]([^\x00-\x1f\x7f]*[^\x00-\x20\x7f])?$")]
TraceId = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class AgentProfileOut(BaseModel):
    tools: list[str] = Field(description="The tools its runs show, most frequent first.")
    models: list[str] = Field(description="The models its runs name.")
    service_names: list[str] = Field(description="The span resources' `service.name`.")
    template_excerpt: str = Field(description="The start of its instructions (system message, first user message).")
    n_runs: int = Field(description="Runs counted into the profile.")


class AgentOut(BaseModel):
    key: str = Field(description="What runs, streams, models and patterns are kept under (`agent` in every answer).")
    name: str | None = Field(description="The name a person gave it (rename); null: none given.")
    source: Literal["option", "span", "task_type", "inferred", "split"] = Field(
        description="How it was first found: named by the caller (`option`), by the root agent span (`span`), "
        "by the task type (`task_type`), inferred from its runs (`inferred`), or split off another (`split`).")
    runs: int
    labelled_runs: int = Field(description="Runs with a label (not withdrawn).")
    first_seen: datetime | None
    last_seen: datetime | None
    aliases: list[str] = Field(description="Old keys (renamed or merged into it): runs naming them come here.")
    profile: AgentProfileOut | None = Field(
        description="What its runs show, matched against runs that name no agent (null: a named agent never merged "
        "or split).")


class AgentsOut(BaseModel):
    tenant: str
    agents: list[AgentOut]


class RenameRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description="The agent's key (`GET /v1/agents`).")
    name: AgentKey = Field(description="Its new name: it becomes the key (the old key stays an alias).")


class MergeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description="The agent merged away (it stays an alias of `into`).")
    into: AgentKey = Field(description="The agent that keeps the merged history.")


class SplitRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description="The agent some runs are split off.")
    trace_ids: list[TraceId] = Field(max_length=MAX_SPLIT_RUNS, description="Its runs that belong to another agent.")
    name: AgentKey | None = Field(default=None, description="The new agent's name (default: a key of its own).")


# -- operator: model promotion and rollback ---------------------------------------------------------
_AGENT_HELP = (f"The agent whose model this acts on (the run's agent, `triage model list` shows them; "
               f"`{POOLED}`: the tenant's pooled model).")


class RollbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description=_AGENT_HELP)


class PromoteRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: AgentKey = Field(description=_AGENT_HELP)
    version: Annotated[str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._+\-]+$")] = Field(
        description="A version `triage model list` shows (or the shipped model's name).")


class ActivationOut(BaseModel):
    agent: str | None = Field(description="Its agent; null: a tenant-wide run scorer's (before agent models).")
    version: str
    activated_at: datetime
    actor: str
    action: Literal["promote", "rollback"]


class ModelActionOut(BaseModel):
    tenant: str
    agent: str
    action: Literal["promote", "rollback"]
    active: str = Field(description=f"The version the tenant serves for the agent from now on (`{ZERO_SHOT}`: no "
                        "agent model, the shipped zero-shot scorer).")
    history: list[ActivationOut] = Field(description="The agent's activations, newest first.")


# -- failure patterns (GET /v1/patterns) ------------------------------------------------------------
#: Which findings :func:`serve.services.patterns.tenant_patterns` groups: failures only, signals only, or both.
Level = Literal["failure", "signal", "all"]


class ExampleOut(BaseModel):
    trace_id: str
    created_at: datetime
    step: int | None


class StrategyRecordOut(BaseModel):
    strategy: str
    recommended: int = Field(description="Recommendations of this strategy to the pattern's runs for its kind.")
    outcomes: int = Field(description="Outcomes reported for them.")
    succeeded: int = Field(description="Recommendations with a successful outcome.")


class PatternOut(BaseModel):
    id: str = Field(description="Stable id of the pattern's key (level, basis, kind, tool, signature, agent).")
    level: Literal["failure", "signal"]
    basis: Literal["rule", "probability"] = Field(
        description="`rule`: a detector's finding; `probability`: runs flagged only by the run scorer, "
        "grouped by the kind and tool at their attribution's step.")
    kind: str
    tool: str | None
    signature: str = Field(description="The evidence with numbers, ids and quoted values masked.")
    agent: str | None = Field(description="The runs' agent (the agent each run resolved to: the one it named, else its "
                              "root agent span's, else its task type); null: the tenant's pool of runs that name none.")
    severity: str
    runs: int = Field(description="Runs of the window with this pattern.")
    occurrences: int
    previous_runs: int = Field(description="Runs with it in the previous window of the same length.")
    trend: Literal["new", "up", "down", "flat"]
    repair_success: float | None = Field(
        description="Share of the runs with a reported outcome whose repair succeeded; null: none reported.")
    repaired_runs: int
    score: float = Field(description="runs × severity weight (low 1 … critical 4) × (1 − repair success).")
    first_seen: datetime
    last_seen: datetime
    examples: list[ExampleOut]
    repairs: list[StrategyRecordOut]


class PatternsOut(BaseModel):
    tenant: str
    since: datetime
    until: datetime
    previous_since: datetime
    runs: int = Field(description="Runs of the window with at least one failure or signal.")
    total_patterns: int = Field(description="Patterns before `limit`.")
    patterns: list[PatternOut]
    as_of: datetime = Field(description="When the answer's making started: it counts the runs committed by then. "
                            "While runs are written an answer is given again for up to `TRIAGE_PATTERNS_MAX_STALE_S` "
                            "seconds (30) after it was made.")


__all__ = [
    "ActivationOut",
    "AgentKey",
    "AgentOut",
    "AgentProfileOut",
    "AgentsOut",
    "AlarmOut",
    "AppendStepsRequest",
    "ChangepointsResponse",
    "ExampleOut",
    "FailureState",
    "GraphOut",
    "LabelRequest",
    "LabelResponse",
    "Level",
    "LocatedFailureOut",
    "MAX_SPLIT_RUNS",
    "MergeRequest",
    "ModelActionOut",
    "ObservationsRequest",
    "ObservationsResponse",
    "OutcomeOut",
    "OutcomeRequest",
    "OutcomeResponse",
    "PatternOut",
    "PatternsOut",
    "PromoteRequest",
    "RecommendationOut",
    "RenameRequest",
    "RollbackRequest",
    "RunLabelOut",
    "SegmentOut",
    "SessionFailure",
    "SessionStepResponse",
    "SessionView",
    "SplitRequest",
    "StrategyRecordOut",
    "TraceDetail",
    "TraceId",
    "TracePageOut",
    "TraceSummary",
    "UndoLabelRequest",
    "UndoLabelResponse",
    "Versioned",
    "WithdrawnLabelOut",
]
