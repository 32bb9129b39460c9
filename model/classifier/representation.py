"""The classifier's input: how one step and its context become one text (versioned).

This is the ONE function training and serving share (:func:`step_text`). Its settings travel in the
exported artefact's metadata (:meth:`RepresentationConfig.to_dict`), and serving refuses an
artefact whose representation version it does not know, so training and serving cannot drift apart.

Layout of a text (version ``rep-v3``)::

    <kind> [@speaker] [tool] [status] [repeat N] : <step content, head … tail>
    [grounding] after tool <last result's status> [empty] · [args: <schema check>] · new figures <n>: v v · new names <n>: v · from goal: v · from results: v · said before: v · computed: v · goal terms <n> of <m> · constraint … · limit …
    [prev] <the step before>
    [goal] <the first user input>
    [prev] <the one before that> …

The step comes first, then what most often decides it (where its claims come from, the latest
result, the goal), so that a tokenizer truncating at ``max_length`` drops older context before any
of those. Long tool payloads keep their head and tail (errors and "no results" live at both
ends). ``repeat N`` counts earlier identical calls (tool + normalised arguments) or identical
results, which a short window of context could not otherwise show (loops).

The grounding line (``rep-v2``; agent steps only: LLM output, reasoning, final answer, tool call)
answers "is this backed by anything?" for the step's checkable values: numbers (thousands
separators and trailing decimal zeros normalised), codes and names (Latin words with a digit, an
inner capital, or a capital that does not start a sentence). Each is looked up in everything
*before* the step, in order: tool results, then user input, then anything else said earlier; a
value found nowhere is ``new``. A fluent answer after an empty result or an error, an answer about
another city or year, a call that uses an id no result returned: the words cannot show them, the
sources of their values do. For a call it also says whether the arguments parse and fit the
tool's JSON Schema when the trace declares its tools (``args: fit schema``, ``args: not JSON``,
``args: missing required property 'city'`` …). It reads nothing after the step, like the rest of
the text.

``rep-v3`` adds (each measured on the held-out task families, docs/classifier.md):

* ``computed``: a figure that is not in any earlier step but is one step of arithmetic away from
  the numbers of the results and the goal (a sum, a difference, a ratio, a per cent, °C→°F) is not
  ``new``; new figures and new names are counted apart (one made-up total among grounded figures);
* ``goal terms <n> of <m>`` (answers and messages): how many of the goal's content words, numbers and
  Chinese character pairs the step mentions — an answer to another question mentions none;
* limits read more carefully (Chinese "not before", "nothing after", a per-night limit against a
  total for several nights, sample sizes are no years); a call that names a record of an earlier
  result (a hotel id) is checked on that record's figures (its price over the budget: ``limit broken``);
* ``calls kept constraint`` / ``calls dropped constraint: k`` (answers and messages): whether the
  earlier calls that act on the goal's values carried the goal's constraint;
* a table result whose rows are empty is ``empty`` even with its column names.

>>> from model.schema import Step, Trace
>>> t = Trace(steps=[Step(kind="user_input", content="Find flights to Oslo"),
...                  Step(kind="llm_output", content="Here are some hotels in Rome.", source_index=1)])
>>> print(step_text(t, 1))
llm_output : Here are some hotels in Rome.
[grounding] after no tool · new figures none · new names one: Rome · goal terms none of two
[prev] user_input : Find flights to Oslo
[goal] Find flights to Oslo
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from model.errors import InputError
from model.schema import Step, StepKind, StepStatus, ToolDefinition, Trace

REPRESENTATION_VERSION = "rep-v3"
#: ``rep-v1``: no grounding line; ``rep-v2``: no ``computed`` values, no ``goal terms``, the first
#: limit rules (artefacts trained with either still load and score the same way).
KNOWN_VERSIONS = ("rep-v1", "rep-v2", REPRESENTATION_VERSION)


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
        (``rep-v2``) How many values each list of the grounding line shows.
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
    parts = [step.kind.value]
    if step.speaker:
        parts.append(f"@{step.speaker}")
    if step.tool_name:
        parts.append(step.tool_name)
    if step.status is not None and step.status is not StepStatus.OK:
        parts.append(f"[{step.status.value}]")
    if step.error_type:
        parts.append(f"[{step.error_type}]")
    if repeats:
        parts.append(f"[repeat {repeats}]")
    return " ".join(parts)


def _line(step: Step, limit: int, repeats: int = 0) -> str:
    body = clip(_body(step), limit)
    return f"{_head(step, repeats)} : {body}" if body else f"{_head(step, repeats)} :"


def _goal(trace: Trace, index: int) -> str:
    for step in trace.steps[: index + 1]:
        if step.kind is StepKind.USER_INPUT and step.content.strip():
            return step.content
    return ""


_TIME = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?![\d:])")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_']*")
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


def _numbers(text: str) -> list[str]:
    """Times as ``h:mm``; other numbers without thousands separators, leading zeros or trailing
    decimal zeros; integers below 10 (counts, days, list markers) are left out."""
    out = [f"{int(m.group(1))}:{m.group(2)}" for m in _TIME.finditer(text)]
    for m in _NUMBER.finditer(_TIME.sub(" ", text)):
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
    return frozenset(_numbers(text)) | {w.lower() for w in _WORD.findall(_TIME.sub(" ", text))}


def checkable_values(text: str) -> list[str]:
    """The values of ``text`` a reader could check against a source, in order, without repeats.

    >>> checkable_values("Done - flight LH4879 at 16:45 is confirmed for Nikhil Ivanova. Fare $177.00, ref VL1MU7.")
    ['LH4879', 'Nikhil', 'Ivanova', 'VL1MU7', '16:45', '177']
    """
    seen: dict[str, None] = {}
    plain = _TIME.sub(" ", text)
    for m in _WORD.finditer(plain):
        word = m.group()
        inner_capital = any(c.isupper() for c in word[1:])
        before = plain[: m.start()].rstrip()
        starts_sentence = not before or before[-1] in _SENTENCE_START or before.endswith(" -")
        if len(word) < 2 or word.lower() in _CALENDAR:
            continue
        if any(c.isdigit() for c in word) or inner_capital or (word[0].isupper() and not starts_sentence):
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


def _call_strings(step: Step) -> list[str]:
    """A call's short string arguments (ids, names), top level and in lists."""
    args = step.tool_args if isinstance(step.tool_args, dict) else {}
    out = []
    for value in args.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and 3 <= len(item) <= _LONG_ARG:
                out.append(item)
    return out[:16]


def _claims(step: Step) -> list[str]:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            return list(dict.fromkeys(_arg_values(step.tool_args)))
        return checkable_values(step.tool_args_raw or step.content)[:16]
    return checkable_values(step.content)


def _key(value: str) -> str:
    return value if value[0].isdigit() else value.lower()


_EMPTY_OUTPUT = re.compile(r"(?:stdout|output|result|results)\s*[:=]\s*(?:0\s+nan|nan|none|null|\[\]|\{\})?\s*$", re.I)


_HEADER_KEYS = frozenset(["columns", "column_names", "fields", "headers", "header", "schema", "keys"])


def _empty_json(value: Any, headers: bool = False) -> bool:
    lists = []
    nulls = False

    def walk(v: Any, depth: int) -> None:
        nonlocal nulls
        if depth > 6:
            return
        if isinstance(v, dict):
            for key, item in v.items():
                if item is None:
                    nulls = True
                if headers and isinstance(key, str) and key.lower() in _HEADER_KEYS:
                    continue  # a table's column names are no data
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
def looks_empty(content: str, headers: bool = False) -> bool:
    """Whether a successful tool result carries no data: every list in its JSON is empty (or holds
    only nulls), or with no list a field is null; a text output that ends at its ``stdout:`` label.

    >>> [looks_empty(x) for x in ('{"results": [], "total": 0}', '{"rows": [[null]], "row_count": 1}',
    ...  '{"order": null, "message": "no order 88"}', 'exit_code=0\\nstdout:\\n', '{"slots": ["09:00"]}', "42")]
    [True, True, True, True, False, False]

    With ``headers`` (``rep-v3``) the column names of a table are not data:

    >>> looks_empty('{"columns": ["sum"], "rows": [[null]]}'), looks_empty('{"columns": ["sum"], "rows": [[null]]}', True)
    (False, True)
    """
    text = content.strip()
    if not text:
        return True
    if text[0] in "[{":
        try:
            return _empty_json(json.loads(text), headers)
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
    from model.detectors.rules import schema_problems

    problems = schema_problems(args, tool.parameters)
    return "args: fit schema" if not problems else "args: " + clip("; ".join(problems), 100)


_CLAUSE_END = re.compile(r"[.!?;](?!\d)|[。！？；\n]")
_CUES_EN = re.compile(
    r"\b(?:only|must|mustn't|not|no|don't|never|exclud\w*|without|ignore|except|avoid|under|below|above|"
    r"over|at most|at least|no more than|before|after|caps?|limit\w*|budget|maximum|minimum)\b", re.I)
_CUES_ZH = ("不", "别", "只", "仅", "排除", "去掉", "除了", "以内", "以下", "以上", "至少", "最多", "之前", "之后",
            "预算", "忽略", "勿")
_FILLER = frozenset(["please", "must", "only", "not", "never", "don't", "exclude", "excluding", "without", "ignore", "except", "avoid", "under", "below", "above", "over", "most", "least", "more", "than", "before", "after", "cap", "caps", "limit", "budget", "max", "maximum", "min", "minimum", "the", "and", "for", "any", "anything", "nothing", "that", "this", "with", "from", "are", "is", "be"])
_CJK = re.compile(r"[\u3400-\u9fff]+")


def constraint_keys(goal: str, *, v3: bool = False) -> list[str]:
    """What a stated constraint of the goal hinges on: the numbers, the longer Latin words (their
    first five letters) and the Chinese character pairs of each clause that carries a cue word
    ("only", "exclude", "no more than", "before", 不超过, 去掉 …), cue words themselves left out.

    >>> constraint_keys("Q2 2023, LATAM: total sales please. Exclude refunds.")
    ['refun']
    >>> constraint_keys("Book a room in Oslo (2 nights, 30 min from the airport). No more than €133.50 a night.")
    ['133.5', 'night']
    """
    keys: dict[str, None] = {}
    for clause in _CLAUSE_END.split(goal):
        if not (_CUES_EN.search(clause) or any(c in clause for c in _CUES_ZH) or (v3 and _UNIT_CUE.search(clause))):
            continue
        for number in _numbers(clause):
            keys.setdefault(number, None)
        for word in _WORD.findall(clause):
            if len(word) >= 4 and word.lower() not in _FILLER and not (v3 and word.lower() in _STOP):
                keys.setdefault(word.lower()[:5], None)
        for run in _CJK.findall(clause):
            for cue in _CUES_ZH:
                run = run.replace(cue, " ")
            for part in run.split():
                for k in range(len(part) - 1):
                    pair = part[k : k + 2]
                    if not (v3 and any(c in _ZH_FUNCTION for c in pair)):
                        keys.setdefault(pair, None)
    return list(keys)[:12]


#: (``rep-v3``) a clause that asks for a unit is a constraint too ("in Fahrenheit please", 请用华氏度)
_UNIT_CUE = re.compile(r"fahrenheit|celsius|metric|imperial|华氏|摄氏|公制|英制", re.I)
#: (``rep-v3``) Chinese characters of grammar and of asking, not of what is asked: a constraint key
#: with one of them ("请用", "要计") is never in an answer that keeps the constraint either.
_ZH_FUNCTION = frozenset("请用我你他她它的了在要是把给让和也都就吗呢吧啊这那个们有没被对从到以之及或与并再还会能可想告诉帮已算内")


_MIN_CUES = re.compile(
    r"\b(?:or later|or after|since|after|at least|minimum|not? earlier than)\b|"
    r"\b(?:nothing|no|not|never|ignore|exclude|avoid|don't)\b[^.;]*\bbefore\b|以后|之后|以上|至少|起", re.I)
_MAX_CUES = re.compile(
    r"\b(?:no more than|at most|under|below|max|maximum|caps?|capped|budget|up to|cheaper than)\b|"
    r"\b(?:ignore|exclude|drop|remove|discard)\b[^.;]*\b(?:above|over)\b|不超过|以内|以下|最多|上限|大于|超过", re.I)
_CLOCK = re.compile(r"(?<![\d:])(\d{1,2})(?::(\d{2}))?\s*(am|pm|点|時)", re.I)


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _hours(text: str) -> list[float]:
    out = [float(int(m.group(1)) + int(m.group(2)) / 60) for m in _TIME.finditer(text)]
    for m in _CLOCK.finditer(text):
        h = int(m.group(1)) % 12 + (12 if m.group(3).lower() == "pm" else 0) if m.group(3).isascii() else int(m.group(1))
        out.append(float(h + (int(m.group(2)) / 60 if m.group(2) else 0)))
    return out


def goal_limit(goal: str) -> tuple[str, str, float] | None:
    """A numeric limit the goal states: ``(direction, unit, value)`` with direction ``min`` or ``max``
    and unit ``hour`` (a clock time), ``year`` or ``amount``; ``None`` when it states none.

    >>> goal_limit("Find a slot on May 3 for a 30 min call. Nothing before 10am please.")
    ('min', 'hour', 10.0)
    >>> goal_limit("Book a flight to Oslo. Budget is $1,400.00 max.")
    ('max', 'amount', 1400.0)
    >>> goal_limit("Only use studies published in 2018 or later.")
    ('min', 'year', 2018.0)
    """
    for clause in _CLAUSE_END.split(goal):
        direction = "min" if _MIN_CUES.search(clause) else "max" if _MAX_CUES.search(clause) else None
        if direction is None:
            continue
        bound = _clause_bound(clause)
        if bound is not None:
            return direction, *bound
    return None


def _clause_bound(clause: str) -> tuple[str, float] | None:
    """The first bound a limit clause states: ``("hour", h)`` for a clock time, else ``("year", y)``
    or ``("amount", x)`` for its first number; ``None`` when it has none."""
    hours = _hours(clause)
    if hours:
        return "hour", hours[0]
    for number in _numbers(clause):
        value = _as_float(number)
        if value is not None:
            return ("year" if value.is_integer() and 1900 <= value <= 2100 else "amount"), value
    return None


def limit_check(limit: tuple[str, str, float], text: str, goal_values: set[str]) -> str | None:
    """``limit kept`` / ``limit broken`` for the comparable numbers of ``text`` (those the goal itself
    states are left out), ``None`` when it has none."""
    direction, unit, bound = limit
    if unit == "hour":
        values = _hours(text)
    else:
        values = []
        for number in _numbers(_WORD.sub(" ", _TIME.sub(" ", text))):  # not the digits of codes (EK4031)
            value = _as_float(number)
            if value is None or number in goal_values:
                continue
            is_year = value.is_integer() and 1900 <= value <= 2100
            if (unit == "year") == is_year and (unit == "year" or bound / 10 <= value <= bound * 10):
                values.append(value)
    if not values:
        return None
    broken = any(v < bound for v in values) if direction == "min" else any(v > bound for v in values)
    return "limit broken" if broken else "limit kept"


# ---- rep-v3: computed values, goal terms, limits read more carefully -------------------------------

_ANY_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:,\d{3})*(?:\.\d+)?")
_SAMPLE_SIZE = re.compile(r"\b[nN]\s*=\s*[\d,]+|样本\s*[\d,]+")
_COUNTED = re.compile(r"(\d{1,2})\s*(?:-\s*)?(?:nights?|days?|people|persons?|guests?|months?|晚|天|人|个月)", re.I)
_POOL_SIZE = 48  # numbers kept for derivations (the most recent), so a long run stays cheap
_CONSTANTS = (12.0, 24.0, 60.0, 100.0, 1000.0)


@functools.lru_cache(maxsize=16384)
def pool_numbers(text: str) -> tuple[float, ...]:
    """Every number of ``text`` as a float (small ones too: counts, nights, months), times left out
    (cached by text, as :func:`value_tokens`)."""
    out = []
    for m in _ANY_NUMBER.finditer(_TIME.sub(" ", text[:_SCAN_CHARS])):
        value = _as_float(m.group().replace(",", ""))
        if value is not None:
            out.append(value)
    return tuple(out[:64])


@functools.lru_cache(maxsize=64)
def _derivations(pool: tuple[float, ...]) -> tuple[Any, Any]:
    """Sorted values one step of arithmetic away from ``pool``: (all of them, those for short claims).

    Short claims (under three significant digits) are matched only by conversions and by products
    with a constant (°C→°F, per cent, per month …): a pair of small numbers adds or divides to
    almost any small number by chance."""
    import numpy as np

    p = np.asarray(pool, dtype=np.float64)
    c = np.asarray(_CONSTANTS)
    unary = [p * 1.8 + 32, (p - 32) / 1.8, np.outer(p, c).ravel(), (p[:, None] / c).ravel()]
    a, b = p[:, None], p[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        binary = [(a + b).ravel(), np.abs(a - b).ravel(), (a * b).ravel(), (a / b).ravel(), (a * b * 12).ravel(),
                  (a / b * 100).ravel()]
    short = np.unique(np.concatenate(unary))
    every = np.concatenate([short, *binary])
    every = np.unique(every[np.isfinite(every)])
    return every, short[np.isfinite(short)]


def derived(claim: str, pool: tuple[float, ...]) -> bool:
    """Whether the number ``claim`` is one step of arithmetic away from the numbers of ``pool``
    (sum, difference, product, ratio, per cent, a unit conversion), to the claim's own precision.

    >>> derived("534264", (2968.13, 15.0)), derived("715483", (1222712.0, 68077.0, 63756.0))
    (True, False)
    """
    import numpy as np

    value = _as_float(claim)
    if value is None or not pool:
        return False
    every, short = _derivations(pool)
    digits = claim.replace(".", "").lstrip("0")
    table = every if len(digits) >= 3 else short
    decimals = len(claim.split(".")[1]) if "." in claim else 0
    tol = max(abs(value) * 2e-5, 0.5 * 10.0 ** -decimals)
    i = int(np.searchsorted(table, value - tol))
    return bool(i < len(table) and table[i] <= value + tol)


_STOP = frozenset(["should", "would", "could", "count", "counted", "counts", "need", "want", "make", "sure",
                   "also", "them", "their", "there", "these", "those", "which", "what", "when", "where", "will",
                   "into", "have", "does", "keep", "just", "like", "less", "even", "then", "your", "yours",
                   "mine", "some", "each", "every", "much", "many", "please", "thanks", "thank", "here", "give",
                   "tell", "show", "find", "list", "know", "help", "about", "again", "other", "want", "with",
                   "from", "that", "this", "than", "more", "most", "only", "must", "never", "before", "after"])


def goal_terms(goal: str) -> frozenset[str]:
    """What an answer to ``goal`` would mention: its longer Latin words (first five letters), its
    numbers, its Chinese character pairs."""
    terms = {w.lower()[:5] for w in _WORD.findall(goal) if len(w) >= 4 and w.lower() not in _STOP
             and w.lower() not in _FILLER}
    terms |= {"#" + n for n in _numbers(goal)}
    for run in _CJK.findall(goal):
        terms |= {run[k: k + 2] for k in range(len(run) - 1)}
    return frozenset(terms)


def goal_coverage(terms: frozenset[str], text: str) -> int:
    """How many of the goal's ``terms`` ``text`` mentions."""
    words = {w.lower()[:5] for w in _WORD.findall(text)} | {"#" + n for n in _numbers(text)}
    return sum(1 for t in terms if (t in words if t[0].isascii() else t in text))


_MIN_CUES_V3 = re.compile(
    r"\b(?:or later|or after|since|after|at least|minimum|not? earlier than)\b|"
    r"\b(?:nothing|no|not|never|ignore|exclude|avoid|don't)\b[^.;]*\bbefore\b|"
    r"(?:之前|以前)[^。；，,]{0,3}?(?:不行|不可以|不要|不方便|不能|不算)|(?:不要|别|不能)[^。；]*(?:之前|以前)|不早于|最早|"
    r"以后|之后|以上|至少", re.I)
_MAX_CUES_V3 = re.compile(
    r"\b(?:no more than|at most|under|below|max|maximum|caps?|capped|budget|up to|cheaper than)\b|"
    r"\b(?:ignore|exclude|drop|remove|discard)\b[^.;]*\b(?:above|over)\b|"
    r"\b(?:nothing|no|not|never|avoid|don't)\b[^.;]*\bafter\b|"
    r"(?:之后|以后)[^。；，,]{0,3}?(?:不行|不可以|不要|不方便|不能|不算)|(?:不要|别|不能)[^。；]*(?:之后|以后)|不晚于|最晚|"
    r"不超过|以内|以下|最多|上限|大于|超过", re.I)
_PER_UNIT = re.compile(r"\b(?:per|a|each|every)\s+(?:night|day|person|month|item|unit)\b|/\s*(?:night|day|person)|"
                       r"每晚|每天|每人|每月|每件|一晚", re.I)


def goal_limit_v3(goal: str) -> tuple[str, str, float, bool] | None:
    """As :func:`goal_limit`, read more carefully (``rep-v3``): Chinese "not before/after" phrasings
    (上午10点之前不行, 不晚于…), "nothing after", a date that merely starts a stay (…日起) is no
    limit; the fourth item says the limit is per unit (per night, 每晚 …).

    >>> goal_limit_v3("请不要安排在10点以前。"), goal_limit_v3("Max €267.00/night.")
    (('min', 'hour', 10.0, False), ('max', 'amount', 267.0, True))
    """
    for clause in _CLAUSE_END.split(goal):
        lo, hi = _MIN_CUES_V3.search(clause), _MAX_CUES_V3.search(clause)
        if lo and hi:  # the more specific phrase wins ("nothing after 5pm" also has "after")
            direction = "min" if len(lo.group()) > len(hi.group()) else "max"
        elif lo or hi:
            direction = "min" if lo else "max"
        else:
            continue
        bound = _clause_bound(clause)
        if bound is not None:
            unit, value = bound
            return direction, unit, value, unit != "hour" and bool(_PER_UNIT.search(clause))
    return None


def limit_check_v3(limit: tuple[str, str, float, bool], text: str, goal_values: set[str],
                   counts: tuple[float, ...]) -> str | None:
    """As :func:`limit_check` (``rep-v3``): a sample size (``n=1994``) is no year; a total within a
    per-unit limit times a count the goal states (3 nights) keeps it."""
    direction, unit, bound, per_unit = limit
    text = _SAMPLE_SIZE.sub(" ", text)
    within = 0
    if per_unit and direction == "max" and counts:
        # a total for several nights is checked per night
        def per(m: re.Match[str]) -> str:
            nonlocal within
            value = _as_float((m.group(1) or m.group(2)).replace(",", ""))
            if value is None or not any(value / k <= bound for k in counts if k > 1):
                return m.group()
            within += 1
            return " "
        text = _TOTAL.sub(per, text)
    verdict = limit_check((direction, unit, bound), text, goal_values)
    return "limit kept" if verdict is None and within else verdict


_TOTAL = re.compile(r"(?:total|总价|总共|合计|总额)\W{0,12}?(\d[\d,]*(?:\.\d+)?)|(\d[\d,]*(?:\.\d+)?)\W{0,3}(?:in )?total",
                    re.I)


def _records(value: Any, out: dict[str, str], depth: int = 0) -> None:
    """Index the objects of a JSON result by their short string values (ids, names): what a later
    call that names one of them refers to."""
    if depth > 4:
        return
    if isinstance(value, list):
        for item in value[:50]:
            _records(item, out, depth + 1)
    elif isinstance(value, dict):
        scalars = {k: v for k, v in value.items() if isinstance(v, str | int | float) and not isinstance(v, bool)}
        if len(scalars) >= 2:
            text = json.dumps(scalars, ensure_ascii=False)
            for v in scalars.values():
                if isinstance(v, str) and 3 <= len(v) <= _LONG_ARG:
                    out[v.lower()] = text
        for v in value.values():
            if isinstance(v, list | dict):
                _records(v, out, depth + 1)


@functools.lru_cache(maxsize=4096)
def result_records(content: str) -> dict[str, str]:
    """:func:`_records` of a tool result's JSON (empty when it is no JSON)."""
    text = content.strip()
    out: dict[str, str] = {}
    if text[:1] in ("[", "{"):
        with contextlib.suppress(ValueError, RecursionError):
            _records(json.loads(text), out)
    return out


_UNIT_WORDS = (("°f", " fahrenheit 华氏度"), ("℉", " fahrenheit 华氏度"), ("°c", " celsius 摄氏度"),
               ("℃", " celsius 摄氏度"), ("华氏", " fahrenheit"), ("摄氏", " celsius"))


def _with_unit_words(lowered: str) -> str:
    """``lowered`` with the names of the units its symbols stand for appended (°F → fahrenheit)."""
    extra = [word for symbol, word in _UNIT_WORDS if symbol in lowered]
    return lowered + "".join(extra)


@functools.lru_cache(maxsize=1024)
def _goal_values(goal: str) -> frozenset[str]:
    return frozenset(_key(v) for v in checkable_values(goal))


@functools.lru_cache(maxsize=16384)
def _bare_tokens(text: str) -> frozenset[str]:
    return frozenset(t.strip("'") for t in value_tokens(text))


class _Sources:
    """The value tokens of the steps seen so far, by where they came from."""

    def __init__(self, version: str = REPRESENTATION_VERSION) -> None:
        self.v3 = version not in ("rep-v1", "rep-v2")
        self.results: set[str] = set()
        self.goal: set[str] = set()
        self.said: set[str] = set()
        self.last_tool: str = "no tool"
        self.constraint: list[str] = []
        self.limit: tuple[str, str, float] | None = None
        # rep-v3
        self.limit3: tuple[str, str, float, bool] | None = None
        self.pool: list[float] = []
        self.terms: frozenset[str] = frozenset()
        self.counts: tuple[float, ...] = ()
        self.records: dict[str, str] = {}
        self.goal_values: set[str] = set()
        self.goal_calls = 0  # calls that act on the goal's values (a city, a year, a name …)
        self.dropped: dict[str, None] = {}  # constraint keys such a call left out

    def _pool(self, text: str) -> None:
        numbers = list(pool_numbers(text))
        if len(numbers) > 1:
            numbers += [sum(numbers), sum(numbers) / len(numbers)]
        self.pool = list(dict.fromkeys([*self.pool, *numbers]))[-_POOL_SIZE:]

    def add(self, step: Step) -> None:
        if step.kind is StepKind.TOOL_RESULT:
            self.results |= value_tokens(step.content)
            status = step.status.value if step.status is not None else "ok"
            empty = status == "ok" and looks_empty(step.content, self.v3)
            self.last_tool = f"tool {status}" + (" empty" if empty else "")
            if self.v3 and status == "ok":
                self._pool(step.content)
                self.records.update(result_records(step.content))
                if len(self.records) > 2000:
                    self.records = dict(list(self.records.items())[-1000:])
        elif step.kind is StepKind.USER_INPUT:
            self.goal |= value_tokens(step.content)
            self.constraint = list(dict.fromkeys([*self.constraint, *constraint_keys(step.content, v3=self.v3)]))[:12]
            if not self.v3:
                self.limit = self.limit or goal_limit(step.content)
            else:  # each version reads the goal's limit its own way; only its own is used
                self.limit3 = self.limit3 or goal_limit_v3(step.content)
                self._pool(step.content)
                self.terms = self.terms or goal_terms(step.content)
                self.counts = self.counts or tuple(float(m.group(1)) for m in _COUNTED.finditer(step.content))
                self.goal_values |= _goal_values(step.content)
        else:
            body = _body(step)
            acts_on_goal = self.v3 and step.kind is StepKind.TOOL_CALL and bool(self.constraint)
            if acts_on_goal and _bare_tokens(body) & self.goal_values:  # 'APAC' in SQL
                self.goal_calls += 1
                lowered = _with_unit_words(body.lower())
                self.dropped.update(dict.fromkeys(k for k in self.constraint if k not in lowered))
            self.said |= value_tokens(body)
            if step.kind is StepKind.ERROR:
                self.last_tool = "provider error"

    def line(self, step: Step, limit: int, tools: dict[str, ToolDefinition]) -> str:
        groups: dict[str, list[str]] = {"new": [], "from goal": [], "from results": [], "said before": []}
        for value in _claims(step):
            key = _key(value.removesuffix("'s") if self.v3 else value)
            if key in self.results:
                groups["from results"].append(value)
            elif key in self.goal:
                groups["from goal"].append(value)
            elif key in self.said:
                groups["said before"].append(value)
            else:
                groups["new"].append(value)
        new = groups["new"]
        if self.v3 and new:
            pool = tuple(self.pool)
            groups["computed"] = [v for v in new if v[0].isdigit() and ":" not in v and derived(v, pool)]
            new = groups["new"] = [v for v in new if v not in groups["computed"]]
        parts = [f"after {self.last_tool}"]
        if step.kind is StepKind.TOOL_CALL:
            parts.append(_args_check(step, tools))
        if self.v3:  # figures and names apart: one made-up total among grounded figures is the hard case
            figures = [v for v in new if v[0].isdigit()]
            names = [v for v in new if not v[0].isdigit()]
            parts.append(f"new figures {_count_word(len(figures))}" + (": " + " ".join(figures[:limit]) if figures else ""))
            if names:
                parts.append(f"new names {_count_word(len(names))}: " + " ".join(names[:limit]))
        else:
            parts.append(f"new {_count_word(len(new))}" + (": " + " ".join(new[:limit]) if new else ""))
        parts += [f"{name}: {' '.join(vals[:limit])}" for name, vals in groups.items() if name != "new" and vals]
        body = _body(step)
        if self.v3 and self.terms and step.kind in (StepKind.FINAL_OUTPUT, StepKind.LLM_OUTPUT):
            covered = goal_coverage(self.terms, body)
            parts.append(f"goal terms {_count_word(covered)} of {_count_word(len(self.terms))}")
        if self.constraint:
            lowered = _with_unit_words(body.lower()) if self.v3 else body.lower()
            missing = [k for k in self.constraint if k not in lowered]
            parts.append(f"constraint missing {_count_word(len(missing))}"
                         + (": " + " ".join(missing[:limit]) if missing else ""))
            if self.v3 and self.goal_calls and step.kind is not StepKind.TOOL_CALL:
                dropped = list(self.dropped)
                parts.append("calls dropped constraint: " + " ".join(dropped[:limit]) if dropped
                             else "calls kept constraint")
        verdict = None
        if self.v3:
            if self.limit3 is not None:
                verdict = limit_check_v3(self.limit3, body, self.goal, self.counts)
                if verdict is None and step.kind is StepKind.TOOL_CALL and self.records:
                    # the call names a record of an earlier result (a hotel id): that record's figures
                    chosen = [self.records[v.lower()] for v in _call_strings(step) if v.lower() in self.records]
                    picked = [limit_check(self.limit3[:3], r, self.goal) for r in chosen[:4]]
                    if "limit broken" in picked or "limit kept" in picked:
                        verdict = "limit broken" if "limit broken" in picked else "limit kept"
        elif self.limit is not None:
            verdict = limit_check(self.limit, body, self.goal)
        if verdict is not None:
            parts.append(verdict)
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
    grounding line when one of them has it."""
    targets = trace.steps[start:stop]
    counted = {s.kind for s in targets if s.kind in (StepKind.TOOL_CALL, StepKind.TOOL_RESULT)}
    grounded = config.version != "rep-v1" and any(s.kind in _GROUNDED_KINDS for s in targets)
    tools = {t.name: t for t in trace.tools} if grounded else {}
    seen: Counter[tuple[StepKind, str]] = Counter()
    sources = _Sources(config.version)
    out = []
    for i, step in enumerate(trace.steps[:stop]):
        key = _call_key(step) if step.kind in counted else None
        if i >= start:
            repeats = seen[(step.kind, key)] if key is not None else 0
            use = sources if grounded and step.kind in _GROUNDED_KINDS else None
            out.append(_text(trace, i, config, repeats, use, tools))
        if key is not None:
            seen[(step.kind, key)] += 1
        if grounded:
            sources.add(step)
    return out


def _text(trace: Trace, index: int, config: RepresentationConfig, repeats: int, sources: _Sources | None,
          tools: dict[str, ToolDefinition]) -> str:
    step = trace.steps[index]
    first = max(0, index - config.context_steps)
    prevs = ["[prev] " + _line(p, config.context_chars) for p in reversed(trace.steps[first:index])]
    lines = [_line(step, config.step_chars, repeats)]
    if sources is not None:
        lines.append(sources.line(step, config.grounding_tokens, tools))
    lines.extend(prevs[:1])
    goal = _goal(trace, index)
    if goal:
        lines.append("[goal] " + clip(goal, config.goal_chars))
    lines.extend(prevs[1:])
    return "\n".join(lines)


__all__ = [
    "DEFAULT_CONFIG",
    "KNOWN_VERSIONS",
    "REPRESENTATION_VERSION",
    "RepresentationConfig",
    "checkable_values",
    "clip",
    "constraint_keys",
    "goal_limit",
    "limit_check",
    "looks_empty",
    "step_text",
    "trace_texts",
    "value_tokens",
]
