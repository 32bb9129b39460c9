"""Canned traces on top of :class:`~model.data.tracebuilder.TraceBuilder`: a failure at a known step.

:func:`make_trace` gives a trace with a given failure kind at a known step (its labels say which), a
healthy one for ``None``; :func:`make_trap` the healthy "traps" that naive rules mistake for failures
(a retry after an error, polling, a self-correction, a long productive search).

The datasets generator grows from these recipes; there is one generator, not two.

>>> make_trace(FailureKind.TOOL_ERROR, seed=1).labels.failures[0].kind.value
'tool_error'
"""

from __future__ import annotations

from collections.abc import Callable

from model.core.kinds import FailureKind
from model.core.schema import ToolDefinition, Trace
from model.data.tracebuilder import TraceBuilder

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
    job = f"job-{b.hex_id(6)}"
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


__all__ = ["RECIPE_KINDS", "TOOLS", "TRAP_NAMES", "make_trace", "make_trap"]
