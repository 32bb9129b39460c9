"""A small seeded trace builder: fluent primitives that keep a trace's bookkeeping right.

:class:`TraceBuilder` — ``system``, ``user``, ``say``, ``call``, ``result``, ``final``, ``error`` … —
appends steps: call ids link results to calls, ``source_index`` follows the messages an OpenAI-style
input would have had (one message = one ``source_index``; :meth:`TraceBuilder.message` groups an
assistant message's text and tool calls), latencies, tokens, timestamps and ids come from a seeded
``random.Random``, and :meth:`TraceBuilder.label` records a :class:`~model.core.schema.FailureLabel`
at a step. The canned recipes (:func:`model.data.builder.make_trace`, ``make_trap``) and the datasets
generator (:mod:`model.data.datagen`) build on it.

>>> b = TraceBuilder(seed=7)
>>> _ = b.user("What is 18 * 22?")
>>> cid = b.call("calculator", {"expression": "18 * 22"})
>>> _ = b.result(cid, "396")
>>> _ = b.final("18 * 22 = 396.")
>>> [s.kind.value for s in b.build().steps]
['user_input', 'tool_call', 'tool_result', 'final_output']
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from model.core.kinds import FailureKind
from model.core.schema import (
    FailureLabel,
    LabelSource,
    Step,
    StepKind,
    StepStatus,
    ToolDefinition,
    Trace,
    TraceLabels,
)

_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class TraceBuilder:
    """Append steps to a trace with consistent ids, indices and labels.

    Parameters
    ----------
    seed:
        Seeds every random choice (ids, latencies, tokens, timestamps): the same seed and the same
        calls give the same trace.
    trace_id, session_id, task_type, language:
        Copied onto the trace; ``trace_id`` defaults to one derived from the seed.
    model:
        Model name put on the LLM steps.

    Examples
    --------
    >>> b = TraceBuilder(seed=3)
    >>> _ = b.user("weather in Paris?")
    >>> with b.message():
    ...     _ = b.say("Let me check.")
    ...     cid = b.call("get_weather", {"city": "Paris"})
    >>> _ = b.result(cid, {"temp_c": 21})
    >>> [s.source_index for s in b.build().steps]
    [0, 1, 1, 2]
    """

    def __init__(
        self,
        seed: int,
        *,
        trace_id: str | None = None,
        session_id: str | None = None,
        task_type: str | None = None,
        language: str | None = "en",
        model: str = "demo-model",
    ) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.trace_id = trace_id if trace_id is not None else f"trace-{seed}-{self.hex_id(8)}"
        self.session_id = session_id
        self.task_type = task_type
        self.language = language
        self.model = model
        self.steps: list[Step] = []
        self.labels: list[FailureLabel] = []
        self.tool_defs: list[ToolDefinition] = []
        self.metadata: dict[str, Any] = {}
        self.provenance: dict[str, Any] = {}
        self._next_source = 0
        self._group_source: int | None = None  # set while a message groups several steps
        self._clock = _EPOCH + timedelta(seconds=self.rng.randrange(0, 86_400))
        self._call_tool: dict[str, str] = {}  # call id -> tool name
        self._answered: set[str] = set()  # call ids that have a result

    # ------------------------------------------------------------------ bookkeeping
    def hex_id(self, n: int) -> str:
        """``n`` random hex digits from the builder's seeded generator (ids)."""
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def _source(self) -> int:
        if self._group_source is not None:
            return self._group_source
        src = self._next_source
        self._next_source += 1
        return src

    def new_message(self) -> TraceBuilder:
        """Start a message: the steps appended until :meth:`end_message` share one ``source_index``."""
        self._group_source = self._next_source
        self._next_source += 1
        return self

    def end_message(self) -> TraceBuilder:
        """End the message started by :meth:`new_message`; the next step gets a new ``source_index``."""
        self._group_source = None
        return self

    @contextmanager
    def message(self) -> Iterator[TraceBuilder]:
        """Context manager form of :meth:`new_message` / :meth:`end_message`."""
        self.new_message()
        try:
            yield self
        finally:
            self.end_message()

    def _append(self, step_kind: StepKind, content: str, **fields: Any) -> int:
        latency = fields.pop("latency_ms", None)
        if latency is None:
            latency = self._latency(step_kind)
        self._clock += timedelta(milliseconds=latency if latency is not None else 5)
        step = Step(
            kind=step_kind,
            content=content,
            latency_ms=latency,
            timestamp=self._clock,
            source_index=self._source(),
            **fields,
        )
        self.steps.append(step)
        return len(self.steps) - 1

    def _latency(self, step_kind: StepKind) -> float | None:
        if step_kind in (StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT, StepKind.LLM_REASONING):
            return float(self.rng.randint(300, 2500))
        if step_kind is StepKind.TOOL_RESULT:
            return float(self.rng.randint(20, 900))
        return None

    def _llm_fields(self, content: str) -> dict[str, Any]:
        return {
            "model": self.model,
            "tokens_in": self.rng.randint(200, 1500),
            "tokens_out": max(1, len(content.split()) + self.rng.randint(0, 5)),
        }

    @property
    def last(self) -> int:
        """Index of the last step appended (``-1`` when none)."""
        return len(self.steps) - 1

    # ------------------------------------------------------------------ primitives
    def system(self, text: str) -> int:
        """A system message; returns its step index."""
        return self._append(StepKind.SYSTEM, text)

    def user(self, text: str, *, speaker: str | None = None) -> int:
        """A user message; returns its step index."""
        return self._append(StepKind.USER_INPUT, text, speaker=speaker)

    def reasoning(self, text: str, *, speaker: str | None = None) -> int:
        """Model reasoning (thinking) text; returns its step index."""
        return self._append(StepKind.LLM_REASONING, text, speaker=speaker, model=self.model)

    def say(self, text: str, *, speaker: str | None = None, latency_ms: float | None = None) -> int:
        """Intermediate assistant text (``llm_output``); returns its step index."""
        return self._append(
            StepKind.LLM_OUTPUT, text, speaker=speaker, latency_ms=latency_ms, **self._llm_fields(text)
        )

    def final(self, text: str, *, speaker: str | None = None) -> int:
        """The final answer (``final_output``); returns its step index."""
        return self._append(StepKind.FINAL_OUTPUT, text, speaker=speaker, **self._llm_fields(text))

    def error(self, text: str, *, error_type: str = "provider_error") -> int:
        """A failed LLM call (``error`` step, status error); returns its step index."""
        return self._append(
            StepKind.ERROR, text, status=StepStatus.ERROR, error_type=error_type, model=self.model
        )

    def call(
        self,
        tool: str,
        args: dict[str, Any] | None = None,
        *,
        call_id: str | None = None,
        raw_args: str | None = None,
        speaker: str | None = None,
    ) -> str:
        """A tool call; returns its call id.

        ``raw_args`` alone (``args=None``) makes a call whose arguments were not valid JSON: the
        text is kept in ``tool_args_raw`` and ``tool_args`` is ``None``.
        """
        cid = call_id if call_id is not None else f"call_{self.hex_id(10)}"
        if args is not None and raw_args is None:
            raw_args = json.dumps(args)
        self._append(
            StepKind.TOOL_CALL,
            "",
            speaker=speaker,
            tool_name=tool,
            tool_args=args,
            tool_args_raw=raw_args,
            call_id=cid,
        )
        self._call_tool[cid] = tool
        return cid

    def result(
        self,
        call_id_or_tool: str,
        content: Any,
        *,
        status: StepStatus | str = StepStatus.OK,
        error_type: str | None = None,
        latency_ms: float | None = None,
        speaker: str | None = None,
    ) -> int:
        """A tool result for a call id (or a tool name: its latest unanswered call); returns its step.

        ``content`` that is not a string is JSON-encoded.
        """
        if call_id_or_tool in self._call_tool:
            cid: str | None = call_id_or_tool
            tool: str | None = self._call_tool[call_id_or_tool]
        else:
            tool, cid = call_id_or_tool, None
            for c, t in reversed(list(self._call_tool.items())):
                if t == tool and c not in self._answered:
                    cid = c
                    break
        if cid is not None:
            self._answered.add(cid)
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        return self._append(
            StepKind.TOOL_RESULT,
            text,
            tool_name=tool,
            call_id=cid,
            status=StepStatus(status),
            error_type=error_type,
            latency_ms=latency_ms,
            speaker=speaker,
        )

    def tools(self, defs: Sequence[ToolDefinition | dict[str, Any]]) -> TraceBuilder:
        """Set the tool definitions the agent was given."""
        self.tool_defs = [d if isinstance(d, ToolDefinition) else ToolDefinition(**d) for d in defs]
        return self

    def label(
        self, kind: FailureKind | str, step: int | None = None, *, confidence: float = 1.0
    ) -> TraceBuilder:
        """Record a failure of ``kind`` at ``step`` (default: the last step appended)."""
        at = self.last if step is None else step
        if not 0 <= at < len(self.steps):
            raise IndexError(f"label step {at} is outside the trace (0..{len(self.steps) - 1})")
        self.labels.append(
            FailureLabel(
                kind=FailureKind(kind),
                step=at,
                source_index=self.steps[at].source_index,
                source=LabelSource.GENERATED,
                confidence=confidence,
            )
        )
        return self

    def build(self) -> Trace:
        """The trace; ``labels`` always set (no failures = healthy)."""
        labels = TraceLabels(
            failures=list(self.labels),
            first_failing_step=min((lb.step for lb in self.labels if lb.step is not None), default=None),
            source=LabelSource.GENERATED,
            provenance={"generator": "model.data.builder", "seed": self.seed, **self.provenance},
        )
        return Trace(
            id=self.trace_id,
            session_id=self.session_id,
            task_type=self.task_type,
            language=self.language,
            steps=[s.model_copy() for s in self.steps],
            tools=list(self.tool_defs),
            metadata=dict(self.metadata),
            labels=labels,
        )


__all__ = ["TraceBuilder"]
