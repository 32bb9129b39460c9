"""Request options shared by the CLI, the HTTP API and the library (docs/architecture.md, "Request and response")."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

#: An agent's name as a caller gives it: 1-200 characters, no control character, not blank.
AgentName = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]*[^\x00-\x20\x7f][^\x00-\x1f\x7f]*$")
]


class DiagnoseOptions(BaseModel):
    """What the caller tells us about the run, beyond the trace itself.

    >>> DiagnoseOptions(allowed_tools=["search"]).shadow
    False
    """

    model_config = ConfigDict(extra="forbid")

    allowed_tools: list[str] | None = Field(
        default=None, description="Tools the agent may call; a call to any other is `disallowed_tool`."
    )
    tool_equivalents: dict[str, list[str]] = Field(
        default_factory=dict,
        description="For `switch_tool`: tool name → equivalent tools, in order of preference.",
    )
    fallback_models: list[str] = Field(
        default_factory=list, description="For `fallback_model`: models to fall back to, in order."
    )
    detectors: list[str] | None = Field(
        default=None, description="Trace detectors to run (registry names); default: all available."
    )
    shadow: StrictBool = Field(
        default=False, description="Observe only: diagnose and report, but recommend `continue`."
    )
    speakers: dict[str, str] = Field(
        default_factory=dict,
        description="Multi-agent logs: speaker name → role (user, assistant, tool, system).",
    )
    agent: AgentName | None = Field(
        default=None,
        description="The agent that ran it: its agent model and metric streams are keyed by it "
        "(per tenant). Default: the root `invoke_agent` span's `gen_ai.agent.name`, else the task type when "
        "`agent_from_task_type` is set, else an agent inferred from the run (its instructions template, tools, "
        "model, `service.name`); see model/core/agents.py and docs/agents.md.",
    )
    agent_from_task_type: StrictBool = Field(
        default=False,
        description="Let the trace's `task_type` name its agent when neither `agent` nor a root agent span "
        "does (off by default: a task type is the caller's field, and several agents may share one).",
    )
    session: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="The run's session id: spans of that session (and spans naming none) are one run, "
        "whatever their trace ids; default: runs group by session.id / gen_ai.conversation.id.",
    )


class DiagnoseRequest(BaseModel):
    """The envelope of ``POST /v1/diagnose``: a trace in any supported format, plus options.

    A body without a ``trace`` key is the trace itself (as ``triage diagnose`` takes it).
    """

    model_config = ConfigDict(extra="forbid")

    trace: Any = Field(description="native Trace JSON | OpenAI messages | OTLP/JSON | span list")
    format: Literal["auto", "native", "openai", "otel", "openinference"] = Field(
        default="auto", description="The trace's format; `auto` detects it."
    )
    options: DiagnoseOptions = Field(default_factory=DiagnoseOptions)


__all__ = ["AgentName", "DiagnoseOptions", "DiagnoseRequest"]
