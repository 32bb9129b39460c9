"""``assumption_violated``: an empty tool result the next steps depend on (a made-up value, an answer,
figures from nowhere), with the English and Chinese cue tables of emptiness and of acknowledging it."""

from __future__ import annotations

import functools
import json
import re
from typing import Any, ClassVar

from model.core.findings import Finding
from model.core.graph import distinctive_tokens, step_failure
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, Trace
from model.detectors.rules.common import AGENT_ACTIONS, Rule, excerpt, make_finding, step_text

_EMPTY_TEXT = re.compile(
    r"^\W*(?:no (?:results?|matches|records|data|items|entries|documents)(?: (?:were )?found)?|"
    r"0 (?:results?|matches|records|items|hits)|nothing (?:was )?found|not found|empty result|"
    r"(?:the )?search returned no results?)\W*$"
    r"|^\W*(?:未找到|没有找到|找不到|无结果|没有结果|查询结果为空)",
    re.IGNORECASE,
)
#: Code-execution output whose printed part is empty or only null-ish tokens ("0 nan").
_EXEC_HEADER = re.compile(
    r"^\s*(?:exit_?code[=:]\s*0\b[^\n]*\n\s*(?:code output|stdout)\s*:|(?:code output|stdout)\s*:)",
    re.IGNORECASE,
)
_NULLISH_TOKENS = frozenset({"", "0", "nan", "none", "null", "[]", "{}", "undefined", "na", "n/a"})
_META_KEYS = frozenset(
    {"columns", "fields", "schema", "headers", "meta", "metadata", "query", "params", "page", "links"}
)
_COUNT_KEYS = (
    "count", "total", "total_results", "totalResults", "num_results", "row_count", "rowCount", "total_pages",
    "totalPages", "hits_total", "total_count", "totalCount",
)  # fmt: skip
_MESSAGE_KEYS = ("message", "detail", "msg", "info", "note", "status", "reason")
_EMPTY_MESSAGE = re.compile(
    r"^\W*no\b|\bnot found\b|\bno (?:\w+ ){0,3}(?:available|found|exists?|matching)\b|\bnothing\b|"
    r"未找到|没有|不存在|找不到|无结果",
    re.IGNORECASE,
)
_EMPTY_ACK = re.compile(
    r"\bno (?:results?|matches|records|data|information|info|items)\b|\bnot (?:find|found|locate)\b|"
    r"\bcould(?:n['’]t| not) (?:find|locate|get)|\bcan(?:no|['’])t\b|\bnothing\b|\bempty\b|\bunable\b|"
    r"\bnone\b|\bnobody\b|\bno one\b|\bno (?:\w+ ){0,3}(?:was|were) found\b|\bdid(?:n['’]t| not) (?:return|find)|"
    r"\bthere(?:['’]s| is| are| was| were) no\b|\b(?:returned|found|has|have|had) no\b|"
    r"\bno (?:\w+ ){0,2}(?:match(?:es|ing)?|found|available|exists?)\b|"
    r"\bno output\b|\bwithout (?:any )?output\b|\b(?:does|did)(?:n['’]t| not) (?:include|contain|print|output|produce)|"
    r"\b(?:was|were)(?:n['’]t| not) (?:printed|returned|shown|produced)|\bnothing (?:was )?printed\b|"
    r"未找到|没有找到|找不到|没有|无结果|无法|不存在|没有输出",
    re.IGNORECASE,
)
_RESEARCH_TOOL = re.compile(r"search|find|lookup|look_up|query|list|browse|retrieve", re.IGNORECASE)
_URL = re.compile(r"https?://[^\s\"'<>)\]]+", re.IGNORECASE)


_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?!\w)")  # a free-standing number, not part of an id
_AGENT_KINDS = frozenset({StepKind.LLM_REASONING, StepKind.LLM_OUTPUT, StepKind.TOOL_CALL, StepKind.FINAL_OUTPUT})


def _values(text: str, *, numbers: bool = False) -> set[str]:
    """Distinctive tokens and URLs of ``text`` (with ``numbers``, every number too): the values an
    agent could only have got from somewhere."""
    head = text[:20_000]
    out = distinctive_tokens(head)
    for m in _URL.finditer(head):
        out.add(m.group(0).rstrip(".,;:").lower())
    if numbers:
        out.update(m.group(0) for m in _NUMBER.finditer(head))
    return out


@functools.lru_cache(maxsize=4096)
def is_empty_result(text: str) -> bool:
    """Whether a tool result is empty: blank, ``[]``, ``{}``, ``null``, a JSON object whose lists are
    all empty or whose count is 0 (or a null beside "no …"), or text such as "no results", "未找到".
    Cached by text: a session's window reads the same results again at every append.

    >>> [is_empty_result(x) for x in ['{"results": []}', '[]', 'No results found.', '未找到相关内容', '[1]']]
    [True, True, True, True, False]
    """
    s = text.strip()
    if s in ("", "[]", "{}", "null", "None", '""', "''"):
        return True
    if s[:1] in ("{", "[") and len(s) < 200_000:
        try:
            payload = json.loads(s)
        except (ValueError, RecursionError):
            payload = None
        if isinstance(payload, list):
            return not payload
        if isinstance(payload, dict):
            return _empty_payload(payload)
        return False
    m = _EXEC_HEADER.match(s)
    if m:
        printed = s[m.end() :].split()
        return len(printed) <= 8 and all(tok.lower() in _NULLISH_TOKENS for tok in printed)
    return len(s) <= 200 and _EMPTY_TEXT.search(s) is not None


def _hollow(v: Any, depth: int = 0) -> bool:
    """Nothing but nulls and empties inside (``[[null]]``, ``{"a": []}``)."""
    if v is None or v == "":
        return True
    if depth > 3:
        return False
    if isinstance(v, list):
        return all(_hollow(x, depth + 1) for x in v[:50])
    if isinstance(v, dict):
        return all(_hollow(x, depth + 1) for x in list(v.values())[:50])
    return False


def _empty_payload(payload: dict[str, Any]) -> bool:
    """A JSON object that carries no data: a count of 0, only empty (or all-null) lists / objects
    besides metadata such as ``columns``, or a null value beside a message saying there is none
    (``{"order": null, "message": "no order #9"}``)."""
    if not payload:
        return True
    if any(payload.get(k) == 0 for k in _COUNT_KEYS):
        return True
    containers = [v for k, v in payload.items() if isinstance(v, list | dict) and k not in _META_KEYS]
    if any(not _hollow(v) for v in containers):  # some data came back
        return False
    if containers:  # there were lists / objects, all empty
        return True
    has_null = any(v is None for v in payload.values())
    said_none = any(
        isinstance(payload.get(k), str) and _EMPTY_MESSAGE.search(payload[k]) for k in _MESSAGE_KEYS
    )
    return has_null and said_none


_SILENT_TOOL = re.compile(r"think|thought|reflect|scratch|memo|note_?to_?self|notes?$", re.IGNORECASE)


class AssumptionViolatedRule(Rule):
    """An empty tool result that the next steps go on to depend on.

    After an empty result the rule follows the agent until the question is settled:

    * a call to the same tool, or to a search-like tool (search, find, lookup, query, list,
      browse, retrieve), is a re-search: fine;
    * an assistant message that acknowledges the emptiness ("no results", "couldn't find",
      "未找到" …): fine;
    * a call to another tool whose arguments carry a value that is not grounded — a distinctive
      token (id, figure) or a URL that no step up to the empty result, and no tool, user or system
      message since, contains (the agent naming it after the empty result does not count): made
      up where the empty result should have supplied it: **finding on that call** (0.7);
    * a final answer that does not acknowledge it: **finding on the answer** (0.75; 0.45 when a
      successful non-empty result of another tool came in between, which the answer may rest on);
    * an intermediate assistant message stating at least two numbers or values seen nowhere
      before ("mean=16.6 over 14 rows"): **finding on that message** (0.65);
    * other calls (no made-up values) and intermediate messages: keep watching; a user message
      ends the watch.

    The finding sits on the dependent step, because that is where the agent acted on a premise
    that failed (the empty result by itself is legitimate); ``details["empty_result_step"]``
    points back at the empty result.
    """

    name: ClassVar[str] = "assumption_violated"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.ASSUMPTION_VIOLATED,)

    def inspect(self, trace: Trace) -> list[Finding]:
        steps = trace.steps
        out: list[Finding] = []
        # Tools whose results are empty by design: a think / note tool (every result of it in the
        # trace empty) returns nothing to depend on (τ-bench's `think`: 92 calls, all empty).
        names = {s.tool_name for s in steps if s.kind is StepKind.TOOL_RESULT and s.tool_name}
        quiet = {n for n in names if _SILENT_TOOL.search(n) and all(
            is_empty_result(s.content) for s in steps if s.kind is StepKind.TOOL_RESULT and s.tool_name == n)}

        def silent(name: str | None) -> bool:
            return name in quiet

        # Grounded values: everything up to the watched empty result, plus what tools, users and
        # the system said since. What the agent itself said after the empty result is not
        # grounded ("Going with CA9075." does not make CA9075 real); those steps wait in `held`
        # and become grounded once a later empty result starts a new watch.
        seen: set[str] = set()
        held: list[int] = []
        scanned = 0
        pending: int | None = None  # the empty result being watched
        other_data = False  # a successful, non-empty result came in while watching
        last = len(steps) - 1

        def ground(upto: int, agent_too: bool) -> None:
            nonlocal scanned
            if agent_too:
                for j in held:
                    seen.update(_values(step_text(steps[j]), numbers=True))
                held.clear()
            for j in range(scanned, upto):
                if agent_too or steps[j].kind not in _AGENT_KINDS:
                    seen.update(_values(step_text(steps[j]), numbers=True))
                else:
                    held.append(j)
            scanned = max(scanned, upto)

        for i, s in enumerate(steps):
            if s.kind is StepKind.USER_INPUT:
                pending = None
                continue
            if s.kind is StepKind.TOOL_RESULT:
                if is_empty_result(s.content) and step_failure(s) is None and not silent(s.tool_name):
                    ground(i, agent_too=True)
                    pending, other_data = i, False
                elif pending is not None and step_failure(s) is None:
                    other_data = True
                continue
            if pending is None or s.kind not in AGENT_ACTIONS:
                continue
            ground(i, agent_too=False)
            verdict = self._judge(steps[pending], s, seen, i == last, other_data)
            if verdict is not None:
                if verdict > 0:
                    out.append(self._make(trace, pending, i, verdict))
                pending = None
        return out

    @staticmethod
    def _judge(empty: Step, s: Step, seen: set[str], last: bool, other_data: bool) -> float | None:
        """``None``: keep watching; ``0``: settled, no finding; ``> 0``: a finding's confidence."""
        if s.kind is StepKind.TOOL_CALL:
            name = s.tool_name or ""
            if name == (empty.tool_name or "") or _RESEARCH_TOOL.search(name):
                return 0.0
            return 0.7 if _values(step_text(s)) - seen else None
        if _EMPTY_ACK.search(s.content):
            return 0.0
        if s.kind is StepKind.FINAL_OUTPUT or last:
            if not s.content.strip():
                return 0.0
            return 0.45 if other_data else 0.75
        # an intermediate message that states figures from nowhere ("mean=16.6 over 14 rows")
        if len(_values(s.content, numbers=True) - seen) >= 2:
            return 0.65
        return None

    def _make(self, trace: Trace, empty: int, dependent: int, conf: float) -> Finding:
        e = trace.steps[empty]
        d = trace.steps[dependent]
        details = {
            "empty_result_step": empty,
            "empty_result_source_index": e.source_index,
            "tool": e.tool_name,
            "dependent_kind": d.kind.value,
        }
        what = f"call to {d.tool_name}" if d.kind is StepKind.TOOL_CALL else "answer"
        evidence = (
            f"{e.tool_name} returned nothing ({excerpt(e.content, 60)!s}) at step {empty}; "
            f"the {what} at step {dependent} goes on as if it had: {excerpt(step_text(d), 100)}"
        )
        return make_finding(self, trace, dependent, FailureKind.ASSUMPTION_VIOLATED, conf, evidence, details)


__all__ = [
    "AssumptionViolatedRule",
    "is_empty_result",
]
