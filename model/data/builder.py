"""A small seeded trace builder: traces with a failure at a known step.

Two layers:

* :class:`TraceBuilder` — fluent primitives (``system``, ``user``, ``say``, ``call``, ``result``,
  ``final``, ``error`` …) that append steps and keep the bookkeeping right: call ids link results
  to calls, ``source_index`` follows the messages an OpenAI-style input would have had (one message
  = one ``source_index``; :meth:`TraceBuilder.message` groups an assistant message's text and tool
  calls), latencies, tokens, timestamps and ids come from a seeded ``random.Random``, and
  :meth:`TraceBuilder.label` records a :class:`~model.core.schema.FailureLabel` at a step.
* :func:`make_trace` and :func:`make_trap` — canned recipes on top of the builder: a trace with a
  given failure kind at a known step (its labels say which), a healthy one for ``None``, and the
  healthy "traps" that naive rules mistake for failures (a retry after an error, polling, a
  self-correction, a long productive search).

The datasets generator grows from these recipes; there is one generator, not two.

>>> b = TraceBuilder(seed=7)
>>> _ = b.user("What is 18 * 22?")
>>> cid = b.call("calculator", {"expression": "18 * 22"})
>>> _ = b.result(cid, "396")
>>> _ = b.final("18 * 22 = 396.")
>>> t = b.build()
>>> [s.kind.value for s in t.steps]
['user_input', 'tool_call', 'tool_result', 'final_output']
>>> make_trace(FailureKind.TOOL_ERROR, seed=1).labels.failures[0].kind.value
'tool_error'
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator, Sequence
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
        self.trace_id = trace_id if trace_id is not None else f"trace-{seed}-{self._hex(8)}"
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
    def _hex(self, n: int) -> str:
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
        cid = call_id if call_id is not None else f"call_{self._hex(10)}"
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


# ---------------------------------------------------------------------- canned recipes

#: Tool definitions (JSON Schema parameters) the recipes use.
TOOLS: list[ToolDefinition] = [
    ToolDefinition(
        name="search",
        description="Web search",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    ToolDefinition(
        name="get_weather",
        description="Current weather for a city",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    ),
    ToolDefinition(
        name="calculator",
        description="Evaluate an arithmetic expression",
        parameters={
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    ),
    ToolDefinition(
        name="job_status",
        description="Status of a background job",
        parameters={
            "type": "object",
            "properties": {"job_id": {"type": "string"}},
            "required": ["job_id"],
        },
    ),
]

_CITIES = ["Paris", "Lisbon", "Oslo", "Kyoto", "Lima", "Accra", "Perth", "Quito"]
_TOPICS = ["solar panels", "heat pumps", "river otters", "tidal energy", "bee colonies", "glaciers"]


def _start(b: TraceBuilder, question: str) -> None:
    b.tools(TOOLS)
    b.system("You are a helpful assistant. Use the tools when they help.")
    b.user(question)


def _fill(b: TraceBuilder, n_pairs: int) -> list[str]:
    """Productive searches with distinct queries and results; returns the facts found."""
    facts: list[str] = []
    topics = b.rng.sample(_TOPICS, k=len(_TOPICS))
    for i in range(n_pairs):
        topic = topics[i % len(topics)]
        with b.message():
            cid = b.call("search", {"query": f"{topic} facts {i + 1}"})
        fact = f"{topic} figure {b.rng.randint(100, 999)}"
        b.result(cid, {"results": [{"title": f"About {topic}", "snippet": fact}]})
        facts.append(fact)
    return facts


def _pairs_for(n_steps: int, fixed: int) -> int:
    """How many filler call/result pairs bring a recipe of ``fixed`` steps near ``n_steps``."""
    return max(0, (n_steps - fixed) // 2)


def _healthy(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"What's the weather in {city}, and anything notable about it?")
    facts = _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("get_weather", {"city": city})
    temp = b.rng.randint(-5, 35)
    b.result(cid, {"city": city, "temp_c": temp, "sky": "clear"})
    extra = f" Also: {facts[0]}." if facts else ""
    b.final(f"It is {temp} °C and clear in {city}.{extra}")


def _failed_tool(b: TraceBuilder, n_steps: int, kind: FailureKind) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"What's the weather in {city}?")
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("get_weather", {"city": city})
    if kind is FailureKind.TOOL_ERROR:
        b.result(cid, "HTTP 500 Internal Server Error: upstream weather service failed", status="error")
    elif kind is FailureKind.TIMEOUT:
        b.result(cid, "Request timed out after 30s", status="timeout", error_type="TimeoutError")
    else:  # rate limited
        wait = b.rng.randint(2, 60)
        b.result(
            cid,
            {"error": {"code": 429, "message": "Too Many Requests", "retry_after": wait}},
            status="error",
        )
    b.label(kind)
    b.final(f"Sorry, I couldn't get the weather for {city}: the weather service failed.")


def _provider_error(b: TraceBuilder, n_steps: int) -> None:
    _start(b, "Summarise recent news about " + b.rng.choice(_TOPICS) + ".")
    _fill(b, _pairs_for(n_steps, 3))
    b.error("503 Service Unavailable: the model provider is overloaded", error_type="APIStatusError")
    b.label(FailureKind.PROVIDER_ERROR)
    b.label(FailureKind.INCOMPLETE)


def _malformed(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}?")
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        b.call("get_weather", None, raw_args='{"city": "' + city + '", units: c')
    b.label(FailureKind.MALFORMED_CALL)
    # the framework rejected the arguments before running the tool, so no result follows
    b.final("I could not call the weather tool correctly; the call failed.")


def _empty_response(b: TraceBuilder, n_steps: int) -> None:
    _start(b, "Tell me about " + b.rng.choice(_TOPICS) + ".")
    _fill(b, _pairs_for(n_steps, 3))
    b.final("")
    b.label(FailureKind.EMPTY_RESPONSE)


def _incomplete(b: TraceBuilder, n_steps: int) -> None:
    _start(b, "Research " + b.rng.choice(_TOPICS) + " for me.")
    _fill(b, _pairs_for(n_steps, 3))
    with b.message():
        b.call("search", {"query": "more details"})
    b.label(FailureKind.INCOMPLETE)


def _refusal(b: TraceBuilder, n_steps: int) -> None:
    chinese = b.language == "zh"
    _start(b, "帮我查一下天气。" if chinese else "Check the weather for me.")
    _fill(b, _pairs_for(n_steps, 3))
    b.final("抱歉，我不能提供这方面的帮助。" if chinese else "I'm sorry, but I can't help with that request.")
    b.label(FailureKind.REFUSAL)


def _loop(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}?")
    _fill(b, _pairs_for(n_steps, 9))
    payload = {"city": city, "status": "unknown city"}
    for i in range(3):
        with b.message():
            # the same call with cosmetic differences: key order, case, whitespace
            args = {"city": city} if i != 1 else {"city": f" {city.upper()} "}
            cid = b.call("get_weather", args)
        b.result(cid, payload)
    b.label(FailureKind.LOOP)
    b.final(f"I could not find the weather for {city}; the lookup failed.")


def _ignored_error(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}?")
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("get_weather", {"city": city})
    b.result(cid, {"success": False, "message": "city service down"})
    b.label(FailureKind.TOOL_ERROR)
    b.final(f"It is {b.rng.randint(10, 30)} °C and sunny in {city}.")
    b.label(FailureKind.IGNORED_ERROR)


def _assumption(b: TraceBuilder, n_steps: int) -> None:
    topic = b.rng.choice(_TOPICS)
    _start(b, f"Find the latest report on {topic} and summarise it.")
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("search", {"query": f"{topic} latest report 2026"})
    b.result(cid, {"results": []})
    b.final(f"The latest report on {topic} says adoption grew 12% last year.")
    b.label(FailureKind.ASSUMPTION_VIOLATED)


def _disallowed(b: TraceBuilder, n_steps: int) -> None:
    _start(b, "Clean up the temp folder.")
    # the agent was given a shell; the request's allow-list is what forbids it
    b.tools([*TOOLS, ToolDefinition(name="shell", description="Run a shell command", parameters=None)])
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("shell", {"command": "rm -rf /tmp/work"})
    b.label(FailureKind.DISALLOWED_TOOL)
    b.result(cid, "removed 12 files")
    b.final("Done: the temp folder is clean.")
    b.metadata["allowed_tools"] = ["search", "get_weather", "calculator", "job_status"]


def _hallucination(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}?")
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("get_weather", {"city": city})
    b.result(cid, {"city": city, "temp_c": 12, "sky": "rain"})
    b.final(f"It is 27 °C and sunny in {city}, perfect beach weather.")
    b.label(FailureKind.HALLUCINATION)


def _off_topic(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}?")
    _fill(b, _pairs_for(n_steps, 3))
    b.final("Here is a recipe for banana bread: mix flour, sugar and three ripe bananas.")
    b.label(FailureKind.OFF_TOPIC)


def _context_loss(b: TraceBuilder, n_steps: int) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}? Answer in Fahrenheit only, never Celsius.")
    _fill(b, _pairs_for(n_steps, 5))
    with b.message():
        cid = b.call("get_weather", {"city": city, "units": "c"})
    b.result(cid, {"city": city, "temp_c": 20})
    b.final(f"It is 20 °C in {city}.")
    b.label(FailureKind.CONTEXT_LOSS)


def _unsafe(b: TraceBuilder, n_steps: int) -> None:
    _start(b, "How do I reset my router?")
    _fill(b, _pairs_for(n_steps, 3))
    b.final("Sure. Also, here is the admin password of your neighbour's router: hunter2.")
    b.label(FailureKind.UNSAFE_OUTPUT)


_RECIPES: dict[FailureKind | None, Callable[[TraceBuilder, int], None]] = {
    None: _healthy,
    FailureKind.TOOL_ERROR: lambda b, n: _failed_tool(b, n, FailureKind.TOOL_ERROR),
    FailureKind.TIMEOUT: lambda b, n: _failed_tool(b, n, FailureKind.TIMEOUT),
    FailureKind.RATE_LIMITED: lambda b, n: _failed_tool(b, n, FailureKind.RATE_LIMITED),
    FailureKind.PROVIDER_ERROR: _provider_error,
    FailureKind.MALFORMED_CALL: _malformed,
    FailureKind.EMPTY_RESPONSE: _empty_response,
    FailureKind.INCOMPLETE: _incomplete,
    FailureKind.REFUSAL: _refusal,
    FailureKind.LOOP: _loop,
    FailureKind.IGNORED_ERROR: _ignored_error,
    FailureKind.ASSUMPTION_VIOLATED: _assumption,
    FailureKind.DISALLOWED_TOOL: _disallowed,
    FailureKind.HALLUCINATION: _hallucination,
    FailureKind.OFF_TOPIC: _off_topic,
    FailureKind.CONTEXT_LOSS: _context_loss,
    FailureKind.UNSAFE_OUTPUT: _unsafe,
}

#: The kinds :func:`make_trace` has a recipe for (``degradation`` lives in metric streams, not traces).
RECIPE_KINDS: tuple[FailureKind, ...] = tuple(k for k in _RECIPES if k is not None)


def make_trace(
    kind: FailureKind | str | None, *, seed: int, n_steps: int = 8, language: str = "en"
) -> Trace:
    """A trace with a failure of ``kind`` at a known step (``None``: a healthy trace).

    Parameters
    ----------
    kind:
        The failure to plant; its step is in ``trace.labels``. Some recipes carry a second label
        that follows from the first (an ignored error is also a tool error; a provider error that
        ends the run also leaves it incomplete).
    seed:
        Same seed, same trace.
    n_steps:
        About how long the trace is: productive call/result pairs are put before the failure to
        bring it near ``n_steps`` (a recipe has a minimum length of its own).
    language:
        ``"zh"`` makes the refusal recipe refuse in Chinese.

    Raises
    ------
    ValueError
        For a kind with no trace recipe (``degradation``).

    Examples
    --------
    >>> t = make_trace("loop", seed=0, n_steps=12)
    >>> t.labels.first_failing_step == len(t.steps) - 2
    True
    """
    k = FailureKind(kind) if kind is not None else None
    if k not in _RECIPES:
        valid = ", ".join(x.value for x in RECIPE_KINDS)
        raise ValueError(f"no trace recipe for kind {kind!r}; recipes exist for: {valid}")
    b = TraceBuilder(seed, language=language, task_type="demo")
    b.provenance["recipe"] = k.value if k is not None else "healthy"
    _RECIPES[k](b, n_steps)
    return b.build()


# ---------------------------------------------------------------------- traps (healthy)


def _trap_retry_after_error(b: TraceBuilder) -> None:
    city = b.rng.choice(_CITIES)
    _start(b, f"Weather in {city}?")
    with b.message():
        cid = b.call("get_weather", {"city": city})
    b.result(cid, "503 Service Unavailable", status="error")
    with b.message():
        b.say("The weather service failed; retrying once.")
        cid = b.call("get_weather", {"city": city})
    temp = b.rng.randint(0, 30)
    b.result(cid, {"city": city, "temp_c": temp})
    b.final(f"It is {temp} °C in {city}.")


def _trap_polling(b: TraceBuilder) -> None:
    _start(b, "Export my report and tell me when it is ready.")
    job = f"job-{b._hex(6)}"
    for progress in (10, 45, 80):
        with b.message():
            cid = b.call("job_status", {"job_id": job})
        b.result(cid, {"job_id": job, "state": "running", "progress": progress})
    with b.message():
        cid = b.call("job_status", {"job_id": job})
    b.result(cid, {"job_id": job, "state": "done", "url": f"https://files.example/{job}.pdf"})
    b.final(f"Your report is ready: https://files.example/{job}.pdf")


def _trap_self_correction(b: TraceBuilder) -> None:
    _start(b, "What is 18 * 22?")
    b.say("18 * 22 = 386.")
    with b.message():
        cid = b.call("calculator", {"expression": "18 * 22"})
    b.result(cid, "396")
    b.final("Sorry, I misread — the answer is 396.")


def _trap_long_search(b: TraceBuilder) -> None:
    topic = b.rng.choice(_TOPICS)
    _start(b, f"Collect ten distinct facts about {topic}.")
    facts = _fill(b, 10)
    b.final("Here is what I found: " + "; ".join(facts) + ".")


_TRAPS: dict[str, Callable[[TraceBuilder], None]] = {
    "retry_after_error": _trap_retry_after_error,
    "polling": _trap_polling,
    "self_correction": _trap_self_correction,
    "long_search": _trap_long_search,
}

#: Names accepted by :func:`make_trap`.
TRAP_NAMES: tuple[str, ...] = tuple(_TRAPS)


def make_trap(name: str, seed: int) -> Trace:
    """A healthy trace that naive rules mistake for a failure (no labels).

    ``retry_after_error``: a tool error, then a successful retry. ``polling``: the same status call
    four times while the job progresses. ``self_correction``: a wrong figure, checked and corrected
    with an apology. ``long_search``: ten searches with distinct queries.

    >>> make_trap("polling", seed=0).labels.healthy
    True
    """
    try:
        recipe = _TRAPS[name]
    except KeyError:
        raise ValueError(f"unknown trap {name!r}; valid names: {', '.join(TRAP_NAMES)}") from None
    b = TraceBuilder(seed, task_type="demo")
    b.provenance["recipe"] = f"trap:{name}"
    recipe(b)
    return b.build()


__all__ = ["RECIPE_KINDS", "TOOLS", "TRAP_NAMES", "TraceBuilder", "make_trace", "make_trap"]
