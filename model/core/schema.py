"""The trace schema: :class:`Trace` and :class:`Step` (pydantic v2), and the labels a trace may carry.

Indexing (binding: docs/architecture.md, "Indexing"): a step's position in ``Trace.steps`` is its ``step`` index
(0-based; it is not stored on the step, it is the position). ``Step.source_index`` is the 0-based
position of the input element the step came from (message index; for spans, the position after
ordering by start time, then span id), shared by all steps made from one element.

>>> t = Trace(steps=[Step(kind="user_input", content="hi", source_index=0)])
>>> t.steps[0].kind
<StepKind.USER_INPUT: 'user_input'>
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from model.core.kinds import FailureKind

SCHEMA_VERSION = "1.0"


class StepKind(StrEnum):
    SYSTEM = "system"  # system / developer instructions (docs/architecture.md, "Refinements of the contract")
    USER_INPUT = "user_input"
    LLM_REASONING = "llm_reasoning"
    LLM_OUTPUT = "llm_output"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    FINAL_OUTPUT = "final_output"
    ERROR = "error"


class StepStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


class Step(_Model):
    """One step of an agent run.

    ``tool_args`` holds parsed arguments; when the call's arguments were not valid JSON the raw
    text is kept in ``tool_args_raw`` and ``tool_args`` is ``None`` (the ``malformed_call`` rule
    reads that).
    """

    kind: StepKind
    content: str = ""
    speaker: str | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    tool_args_raw: str | None = None
    call_id: str | None = None
    status: StepStatus | None = None
    error_type: str | None = None
    latency_ms: float | None = Field(default=None, ge=0)
    tokens_in: int | None = Field(default=None, ge=0)
    tokens_out: int | None = Field(default=None, ge=0)
    model: str | None = None
    temperature: float | None = None
    timestamp: datetime | None = None
    source_index: int = Field(default=0, ge=0)
    span_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class ToolDefinition(_Model):
    """A tool the agent was given; ``parameters`` is its JSON Schema when the input carries it.

    Also read as the providers write them: OpenAI's ``{"type": "function", "function": {name,
    description, parameters}}`` and Anthropic's ``{name, description, input_schema}``.

    >>> ToolDefinition.model_validate({"type": "function", "function": {"name": "search"}}).name
    'search'
    >>> ToolDefinition.model_validate({"name": "f", "input_schema": {"type": "object"}}).parameters
    {'type': 'object'}
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _provider_shapes(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if "name" not in data and isinstance(data.get("function"), dict) and data.get("type", "function") == "function":
            extra = sorted(set(data) - {"type", "function"})
            fn = {k: v for k, v in data["function"].items() if k != "strict"}  # OpenAI's, no bearing here
            return {**fn, **{k: data[k] for k in extra}}  # an unknown key stays an error
        if "input_schema" in data and "parameters" not in data:
            out = {k: v for k, v in data.items() if k not in ("input_schema", "type", "cache_control")}
            return {**out, "parameters": data["input_schema"]}
        return data


class LabelSource(StrEnum):
    GENERATED = "generated"
    RULE_VOTE = "rule_vote"
    HUMAN = "human"
    REPAIR_OUTCOME = "repair_outcome"
    CHECKER = "checker"  # an automatic task checker's verdict (posted as a label with author_type checker)


class FailureLabel(_Model):
    """One labelled failure: its kind and where it happens (``step`` into ``Trace.steps``).

    ``kind`` is ``None`` when the label says where a run went wrong but not how (the real sets'
    step labels: AgentProcessBench's first −1 step, Who&When's ``mistake_step``).
    """

    kind: FailureKind | None
    step: int | None = Field(default=None, ge=0)
    source_index: int | None = Field(default=None, ge=0)
    source: LabelSource = LabelSource.GENERATED
    confidence: float = Field(default=1.0, ge=0.0, le=1.0)


class TraceLabels(_Model):
    """What is known to be wrong with a trace.

    ``failed`` is the run-level verdict when one is known (a task checker's or a reviewer's: the
    real sets' reward / resolved / final label), kept apart from ``failures``: a run known only as
    failed has ``failed=True`` and may have no failure label at all. With ``failed`` unset, an
    empty ``failures`` means healthy (the generated data).

    ``first_failing_step`` indexes ``Trace.steps``; ``provenance`` records how the trace was made
    (generator family, template, injection recipe) when it was generated.
    """

    failed: bool | None = None
    failures: list[FailureLabel] = Field(default_factory=list)
    first_failing_step: int | None = Field(default=None, ge=0)
    source: LabelSource = LabelSource.GENERATED
    provenance: dict[str, Any] = Field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return not self.failed if self.failed is not None else not self.failures

    @property
    def kinds(self) -> list[FailureKind]:
        return sorted({f.kind for f in self.failures if f.kind is not None}, key=list(FailureKind).index)


class Trace(_Model):
    """An agent run: ordered steps plus what the input told us about the run."""

    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    session_id: str | None = None
    task_type: str | None = None
    language: str | None = None
    steps: list[Step] = Field(default_factory=list)
    tools: list[ToolDefinition] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)
    labels: TraceLabels | None = None


def write_json_schema(path: Path) -> None:
    """Write the Trace JSON Schema to ``path`` (``triage schema`` and a test call this)."""
    schema = Trace.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://agent-triage.local/trace.schema.json?v={SCHEMA_VERSION}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n", encoding="utf-8")


__all__ = [
    "SCHEMA_VERSION",
    "FailureLabel",
    "LabelSource",
    "Step",
    "StepKind",
    "StepStatus",
    "ToolDefinition",
    "Trace",
    "TraceLabels",
    "write_json_schema",
]
