"""The classifier's input: how one step and its context become one text (versioned).

This is the ONE function training and serving share (:func:`step_text`). Its settings travel in the
exported artefact's metadata (:meth:`RepresentationConfig.to_dict`), and serving refuses an
artefact whose representation version it does not know, so training and serving cannot drift apart.

Layout of a text (version ``rep-v4``)::

    <kind> [@speaker] [tool] [status] [error type] [repeat N] : <step content, head … tail>
    [grounding] after tool <last result's status> [empty] · [args: <schema check>] · new figures <n>: v v · new names <n>: v · from goal: v · from results: v · said before: v
    [prev] <the step before>
    [goal] <the first user input>
    [prev] <the one before that> …

The step comes first, then where its claims come from and the latest result, then the goal, so
that a tokenizer truncating at ``max_length`` drops older context before any of those. Long tool
payloads keep their head and tail (errors and "no results" live at both ends). ``repeat N`` counts
earlier identical calls (tool + normalised arguments) or identical results, which a short window
of context could not otherwise show (loops).

The grounding line (agent steps only: LLM output, reasoning, final answer, tool call) answers "where
does this come from?" for the step's checkable values: numbers (thousands separators and trailing
decimal zeros normalised, ``h:mm`` times), codes and names (Latin words with a digit, an inner
capital, or a capital that does not start a sentence). Each is looked up in everything *before* the
step, in order: tool results, then user input, then anything else said earlier; a value found
nowhere is new (figures and names counted apart). A fluent answer after an empty result or an
error, an answer about another city or year, a call that uses an id no result returned: the words
cannot show them, the sources of their values do. For a call it also says whether the arguments
parse and fit the tool's JSON Schema when the trace declares its tools (``args: fit schema``,
``args: not JSON``, ``args: missing required property 'city'`` …). It reads nothing after the step.

``rep-v4`` is that domain-general core only. The pieces ``rep-v2`` and ``rep-v3`` added by reading
the generator's own misses — constraint cue words and limit phrases (English and Chinese), computed
values, goal-term coverage, a call's record checked against a limit, unit words, table header
names — are gone: each was a table of one generator's phrasings (docs/classifier.md, "Input
representation", says item by item why), and only real runs may select features.

>>> from model.core.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="Find flights to Oslo"),
...                  Step(kind="llm_output", content="Here are some hotels in Rome.", source_index=1)])
>>> print(step_text(t, 1))
llm_output : Here are some hotels in Rome.
[grounding] after no tool · new figures none · new names one: Rome
[prev] user_input : Find flights to Oslo
[goal] Find flights to Oslo
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from model.core.errors import InputError
from model.core.json_schema import schema_problems
from model.core.schema import Step, StepKind, StepStatus, ToolDefinition, Trace

REPRESENTATION_VERSION = "rep-v4"
KNOWN_VERSIONS = (REPRESENTATION_VERSION,)
#: Versions this code no longer builds: their artefacts are refused with this reason.
RETIRED_VERSIONS = {
    "rep-v1": "no grounding line",
    "rep-v2": "generator-tuned constraint and limit phrase tables, removed in rep-v4",
    "rep-v3": "generator-tuned constraint, limit, goal-term and computed-value tables, removed in rep-v4",
}


@dataclass(frozen=True)
class RepresentationConfig:
    """Character budgets of :func:`step_text` (stored in the artefact's metadata).

    Parameters
    ----------
    step_chars:
        Characters kept of the step itself (head and tail when longer).
    goal_chars:
        Characters kept of the first user input (the goal).
    context_steps:
        How many preceding steps are shown, most recent first.
    context_chars:
        Characters kept of each preceding step.
    grounding_tokens:
        How many values each list of the grounding line shows.
    """

    version: str = REPRESENTATION_VERSION
    step_chars: int = 300
    goal_chars: int = 160
    context_steps: int = 3
    context_chars: int = 140
    grounding_tokens: int = 8

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RepresentationConfig:
        """Rebuild from metadata; an unknown version or field is an :class:`InputError`."""
        version = data.get("version")
        if isinstance(version, str) and version in RETIRED_VERSIONS:
            raise InputError(
                f"input-representation version {version!r} is retired ({RETIRED_VERSIONS[version]}); "
                f"this code builds {list(KNOWN_VERSIONS)} only: retrain the artefact (`dvc repro`)",
                path="representation.version",
            )
        if version not in KNOWN_VERSIONS:
            raise InputError(
                f"unknown input-representation version {version!r}; this code knows {list(KNOWN_VERSIONS)}",
                path="representation.version",
            )
        fields = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - fields)
        if unknown:
            raise InputError(f"unknown representation fields {unknown}", path="representation")
        return cls(**data)


DEFAULT_CONFIG = RepresentationConfig()


def clip(text: str, limit: int) -> str:
    """Keep ``text`` within ``limit`` characters: the head and the tail, joined by `` … ``.

    >>> clip("abcdefghij", 7)
    'abc … j'
    """
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit <= 5:
        return text[:limit]
    keep = limit - 3
    head = (keep * 2 + 2) // 3
    tail = keep - head
    return f"{text[:head]} … {text[len(text) - tail:]}" if tail > 0 else text[:head]


def _call_key(step: Step) -> str | None:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            args = json.dumps(step.tool_args, sort_keys=True, ensure_ascii=False, default=str)
        else:
            args = " ".join((step.tool_args_raw or step.content).split())
        return f"call:{step.tool_name}:{args}"
    if step.kind is StepKind.TOOL_RESULT:
        return f"result:{step.tool_name}:{' '.join(step.content.split())}"
    return None


def _body(step: Step) -> str:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            args = json.dumps(step.tool_args, ensure_ascii=False, separators=(",", ":"), default=str)
        elif step.tool_args_raw is not None:
            args = "<raw> " + step.tool_args_raw
        else:
            args = ""
        return f"{args} {step.content}".strip()
    return step.content


def _head(step: Step, repeats: int) -> str:
    parts: list[str] = [step.kind]  # a StrEnum: its text is its value (no enum property lookup)
    if step.speaker:
        parts.append(f"@{step.speaker}")
    if step.tool_name:
        parts.append(step.tool_name)
    if step.status is not None and step.status is not StepStatus.OK:
        parts.append(f"[{step.status}]")  # a StrEnum formats as its value
    if step.error_type:
        parts.append(f"[{step.error_type}]")
    if repeats:
        parts.append(f"[repeat {repeats}]")
    return " ".join(parts)


def _line(step: Step, limit: int, repeats: int = 0, body: str | None = None) -> str:
    body = clip(_body(step) if body is None else body, limit)
    return f"{_head(step, repeats)} : {body}" if body else f"{_head(step, repeats)} :"


_TIME = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?![\d:])")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_']*")
_DIGIT = re.compile(r"[0-9]")
_ANY_DIGIT = re.compile(r"\d")  # what _TIME's and _NUMBER's \d match (any Unicode decimal digit)
#: Calendar words: a date restated from an ISO date in a result ("12 May" from "2026-05-12") is not
#: an unsupported claim, so month and weekday names are not checked (their numbers are).
_CALENDAR = frozenset(
    ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun"]
)
_THOUSANDS = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_SENTENCE_START = set(".!?:;\n\"'(（。！？：；「“")
_SCAN_CHARS = 4000  # characters of each earlier step looked up (long payloads: head only)
_LONG_ARG = 60  # a call's string argument longer than this is code or a query, not a value
_GROUNDED_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.LLM_REASONING, StepKind.FINAL_OUTPUT,
                             StepKind.TOOL_CALL})
_COUNT_WORDS = ("none", "one", "two", "three")


def _count_word(n: int) -> str:
    return _COUNT_WORDS[n] if n < len(_COUNT_WORDS) else "many"


def _numbers(text: str, plain: str | None = None) -> list[str]:
    """Times as ``h:mm``; other numbers without thousands separators, leading zeros or trailing
    decimal zeros; integers below 10 (counts, days, list markers) are left out. ``plain``: ``text``
    with its times blanked (``_TIME.sub(" ", text)``) when the caller has it."""
    if not _ANY_DIGIT.search(text):  # no time, no number (both need a digit)
        return []
    out = [f"{int(m.group(1))}:{m.group(2)}" for m in _TIME.finditer(text)]
    for m in _NUMBER.finditer(_TIME.sub(" ", text) if plain is None else plain):
        raw = m.group()
        parts = [raw.replace(",", "")] if _THOUSANDS.fullmatch(raw) else raw.split(",")
        for part in parts:
            if "." in part:
                part = part.rstrip("0").rstrip(".")
            if "." not in part:
                part = part.lstrip("0")
                if len(part) < 2:
                    continue
            if part and not part.startswith("."):
                out.append(part)
    return out


@functools.lru_cache(maxsize=16384)
def value_tokens(text: str) -> frozenset[str]:
    """Every number (normalised) and Latin word (lower case) of ``text``: what a claim is looked up in.

    Cached by text (as :func:`looks_empty`): the real-time path builds a new step's text from all
    earlier steps, so without the cache a long session would read its whole history again per step.

    >>> sorted(value_tokens("Fare $1,177.00 for Nikhil at 09:30, 2 stops"))
    ['1177', '9:30', 'at', 'fare', 'for', 'nikhil', 'stops']
    """
    text = text[:_SCAN_CHARS]
    if not _ANY_DIGIT.search(text):  # no time to blank, no number
        return frozenset({w.lower() for w in _WORD.findall(text)})
    plain = _TIME.sub(" ", text)
    return frozenset(_numbers(text, plain)) | {w.lower() for w in _WORD.findall(plain)}


def checkable_values(text: str) -> list[str]:
    """The values of ``text`` a reader could check against a source, in order, without repeats.

    >>> checkable_values("Done - flight LH4879 at 16:45 is confirmed for Nikhil Ivanova. Fare $177.00, ref VL1MU7.")
    ['LH4879', 'Nikhil', 'Ivanova', 'VL1MU7', '16:45', '177']
    """
    seen: dict[str, None] = {}
    plain = _TIME.sub(" ", text)
    for m in _WORD.finditer(plain):
        word = m.group()
        if len(word) < 2 or word.lower() in _CALENDAR:
            continue
        # a digit, or a capital after the first letter (the word is ASCII: lower() changes only capitals)
        if _DIGIT.search(word) or word[1:].lower() != word[1:]:
            seen.setdefault(word, None)
        elif word[0].isupper():
            # a capital that does not start a sentence: what precedes it, spaces left out, is not
            # empty and ends neither with a sentence mark nor with " -"
            k = m.start()
            while k and plain[k - 1].isspace():
                k -= 1
            if k and plain[k - 1] not in _SENTENCE_START and not (k >= 2 and plain[k - 2:k] == " -"):
                seen.setdefault(word, None)
    for number in _numbers(_WORD.sub(" ", text)):
        seen.setdefault(number, None)
    return list(seen)


def _arg_values(value: Any) -> list[str]:
    """The checkable values of a call's arguments: numbers and short strings (not code or queries)."""
    if isinstance(value, dict):
        return [v for item in value.values() for v in _arg_values(item)]
    if isinstance(value, list):
        return [v for item in value for v in _arg_values(item)]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return _numbers(str(value))
    text = str(value)
    return checkable_values(text) if len(text) <= _LONG_ARG else []


def _claims(step: Step) -> list[str]:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            return list(dict.fromkeys(_arg_values(step.tool_args)))
        return checkable_values(step.tool_args_raw or step.content)[:16]
    return checkable_values(step.content)


def _key(value: str) -> str:
    return value if value[0].isdigit() else value.lower()


_EMPTY_OUTPUT = re.compile(r"(?:stdout|output|result|results)\s*[:=]\s*(?:0\s+nan|nan|none|null|\[\]|\{\})?\s*$", re.I)


def _empty_json(value: Any) -> bool:
    lists = []
    nulls = False

    def walk(v: Any, depth: int) -> None:
        nonlocal nulls
        if depth > 6:
            return
        if isinstance(v, dict):
            for item in v.values():
                if item is None:
                    nulls = True
                walk(item, depth + 1)
        elif isinstance(v, list):
            lists.append(v)
            for item in v:
                walk(item, depth + 1)

    walk(value, 0)
    if lists:
        return all(all(x is None or x == [] or x == [None] for x in lst) for lst in lists)
    return nulls or value in ({}, [], "", None)


@functools.lru_cache(maxsize=16384)
def looks_empty(content: str) -> bool:
    """Whether a successful tool result carries no data: every list in its JSON is empty (or holds
    only nulls), or with no list a field is null; a text output that ends at its ``stdout:`` label.

    >>> [looks_empty(x) for x in ('{"results": [], "total": 0}', '{"rows": [[null]], "row_count": 1}',
    ...  '{"order": null, "message": "no order 88"}', 'exit_code=0\\nstdout:\\n', '{"slots": ["09:00"]}', "42")]
    [True, True, True, True, False, False]
    """
    text = content.strip()
    if not text:
        return True
    if text[0] in "[{":
        try:
            return _empty_json(json.loads(text))
        except (ValueError, RecursionError):
            return False
    return bool(_EMPTY_OUTPUT.search(text[-200:]))


def _args_check(step: Step, tools: dict[str, ToolDefinition]) -> str:
    """Whether a call's arguments parse and fit the tool's declared JSON Schema (when the trace has one)."""
    args: Any = step.tool_args
    if args is None:
        raw = (step.tool_args_raw or "").strip()
        if not raw:
            return "args: none"
        try:
            args = json.loads(raw)
        except (ValueError, RecursionError):
            return "args: not JSON"
    tool = tools.get(step.tool_name or "")
    if tool is None:
        return "args: unknown tool" if tools else "args: no schema"
    if not tool.parameters:
        return "args: no schema"
    problems = schema_problems(args, tool.parameters)
    return "args: fit schema" if not problems else "args: " + clip("; ".join(problems), 100)


class _Sources:
    """The value tokens of the steps seen so far, by where they came from, and the latest tool result."""

    def __init__(self) -> None:
        self.results: set[str] = set()
        self.goal: set[str] = set()
        self.said: set[str] = set()
        self.last_tool: str = "no tool"

    def add(self, step: Step, body: str | None = None) -> None:
        if step.kind is StepKind.TOOL_RESULT:
            self.results |= value_tokens(step.content)
            status = step.status.value if step.status is not None else "ok"
            empty = status == "ok" and looks_empty(step.content)
            self.last_tool = f"tool {status}" + (" empty" if empty else "")
        elif step.kind is StepKind.USER_INPUT:
            self.goal |= value_tokens(step.content)
        else:
            self.said |= value_tokens(_body(step) if body is None else body)
            if step.kind is StepKind.ERROR:
                self.last_tool = "provider error"

    def line(self, step: Step, limit: int, tools: dict[str, ToolDefinition]) -> str:
        groups: dict[str, list[str]] = {"from goal": [], "from results": [], "said before": []}
        figures: list[str] = []
        names: list[str] = []
        for value in _claims(step):
            key = _key(value.removesuffix("'s"))
            if key in self.results:
                groups["from results"].append(value)
            elif key in self.goal:
                groups["from goal"].append(value)
            elif key in self.said:
                groups["said before"].append(value)
            else:
                (figures if value[0].isdigit() else names).append(value)
        parts = [f"after {self.last_tool}"]
        if step.kind is StepKind.TOOL_CALL:
            parts.append(_args_check(step, tools))
        parts.append(f"new figures {_count_word(len(figures))}" + (": " + " ".join(figures[:limit]) if figures else ""))
        if names:
            parts.append(f"new names {_count_word(len(names))}: " + " ".join(names[:limit]))
        parts += [f"{name}: {' '.join(vals[:limit])}" for name, vals in groups.items() if vals]
        return "[grounding] " + " · ".join(parts)


def step_text(trace: Trace, index: int, config: RepresentationConfig = DEFAULT_CONFIG) -> str:
    """The classifier's text for ``trace.steps[index]``, reading only that step and earlier ones.

    Reading nothing after ``index`` is what lets the real-time path score a new step alone, with
    the same text the whole-trace path gives it.

    Raises
    ------
    InputError
        ``index`` is outside the trace.
    """
    if not 0 <= index < len(trace.steps):
        raise InputError(f"step index {index} is outside a trace of {len(trace.steps)} steps", path="step")
    return _texts(trace, config, index, index + 1)[0]


def trace_texts(trace: Trace, config: RepresentationConfig = DEFAULT_CONFIG, *, start: int = 0) -> list[str]:
    """:func:`step_text` for the steps of ``trace`` from ``start`` on, in order (one pass: what earlier
    steps say is collected once, not once per step)."""
    return _texts(trace, config, start, len(trace.steps))


def _texts(trace: Trace, config: RepresentationConfig, start: int, stop: int) -> list[str]:
    """The texts of ``steps[start:stop]`` in one pass over ``steps[:stop]``, reading of the earlier
    steps only what those texts need: call keys of the kinds that count repeats, sources for the
    grounding line when one of them has it. Each step's context line (``[prev] …``) and the goal's
    are built once, however many texts show them."""
    steps = trace.steps
    targets = steps[start:stop]
    counted = {s.kind for s in targets if s.kind in (StepKind.TOOL_CALL, StepKind.TOOL_RESULT)}
    grounded = any(s.kind in _GROUNDED_KINDS for s in targets)
    tools = {t.name: t for t in trace.tools} if grounded else {}
    seen: Counter[tuple[StepKind, str]] = Counter()
    sources = _Sources()
    context: dict[int, str] = {}  # step index → its "[prev] …" line
    bodies: dict[int, str] = {}  # step index → _body (a call's arguments as JSON: made once)

    def body(j: int) -> str:
        got = bodies.get(j)
        if got is None:
            got = bodies[j] = _body(steps[j])
        return got

    goal: str | None = None  # the "[goal] …" line, once a user input with text is seen
    out = []
    for i, step in enumerate(steps[:stop]):
        if goal is None and step.kind is StepKind.USER_INPUT and step.content.strip():
            goal = "[goal] " + clip(step.content, config.goal_chars)
        key = _call_key(step) if step.kind in counted else None
        if i >= start:
            repeats = seen[(step.kind, key)] if key is not None else 0
            lines = [_line(step, config.step_chars, repeats, body(i))]
            if grounded and step.kind in _GROUNDED_KINDS:
                lines.append(sources.line(step, config.grounding_tokens, tools))
            prevs = []
            for j in range(i - 1, max(0, i - config.context_steps) - 1, -1):  # the newest first
                line = context.get(j)
                if line is None:
                    line = context[j] = "[prev] " + _line(steps[j], config.context_chars, 0, body(j))
                prevs.append(line)
            lines.extend(prevs[:1])
            if goal is not None:
                lines.append(goal)
            lines.extend(prevs[1:])
            out.append("\n".join(lines))
        if key is not None:
            seen[(step.kind, key)] += 1
        if grounded:
            sources.add(step, body(i) if step.kind not in (StepKind.TOOL_RESULT, StepKind.USER_INPUT) else None)
    return out


__all__ = [
    "DEFAULT_CONFIG",
    "KNOWN_VERSIONS",
    "REPRESENTATION_VERSION",
    "RETIRED_VERSIONS",
    "RepresentationConfig",
    "checkable_values",
    "clip",
    "looks_empty",
    "step_text",
    "trace_texts",
    "value_tokens",
]
