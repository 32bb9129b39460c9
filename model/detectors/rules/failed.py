"""Failed steps: ``tool_error``, ``timeout``, ``rate_limited``, ``provider_error`` (each failed step, as
:func:`model.core.graph.step_failure` reads it, recovered or handled or not), and ``ignored_error`` (a
failed tool step the final answer passes over).

>>> from model.data.builder import make_trace
>>> [f.step for f in ToolErrorRule().inspect(make_trace("tool_error", seed=0))]
[5]
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from model.core.findings import Finding
from model.core.graph import ExecutionGraph, StepFailure, distinctive_tokens
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, Trace
from model.detectors.rules.common import (
    AGENT_ACTIONS,
    ANSWER_KINDS,
    RECOVERED_CONFIDENCE,
    Rule,
    excerpt,
    final_answer_step,
    make_finding,
    step_text,
)


def _recovery(trace: Trace, graph: ExecutionGraph) -> dict[int, int]:
    """Failed step → the later step that recovered it.

    A failed tool step is recovered by a later successful result of the same tool; a failed LLM
    call (provider error, or a 429 / timeout on an ``error`` step) by a later answer or tool call.
    """
    steps = trace.steps
    last_ok_result: dict[str, int] = {}
    last_action = -1
    for i, s in enumerate(steps):
        if s.kind is StepKind.TOOL_RESULT and i not in graph.failures:
            last_ok_result[_tool_of(trace, graph, i)] = i
        if s.kind in AGENT_ACTIONS:
            last_action = i
    out: dict[int, int] = {}
    for i in graph.failures:
        s = steps[i]
        if s.kind is StepKind.ERROR and not s.tool_name:
            if last_action > i:
                out[i] = _next_action(steps, i)
        else:
            ok = last_ok_result.get(_tool_of(trace, graph, i), -1)
            if ok > i:
                out[i] = ok
    return out


def _next_action(steps: list[Step], after: int) -> int:
    for j in range(after + 1, len(steps)):
        if steps[j].kind in AGENT_ACTIONS:
            return j
    return after  # unreachable when called as above


def _tool_of(trace: Trace, graph: ExecutionGraph, step: int) -> str:
    s = trace.steps[step]
    if s.tool_name:
        return s.tool_name
    call = graph.call_of.get(step)
    return (trace.steps[call].tool_name or "") if call is not None else ""


#: Confidence of an error the agent then handled (a signal: the run went on as it should).
HANDLED_CONFIDENCE = 0.45


#: Function words that say nothing of what a call was for (never a sign an answer rests on it).
_FUNCTION_WORDS = frozenset({
    "the", "and", "for", "with", "from", "that", "this", "these", "those", "into", "onto", "over", "under",
    "are", "was", "were", "has", "have", "had", "not", "but", "you", "your", "all", "any", "can", "will",
    "its", "our", "out", "off", "per", "via", "than", "then", "them", "they", "there", "their", "what",
    "when", "where", "which", "who", "how",
})  # fmt: skip
_WORD = re.compile(r"[^\W_]{3,}")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")


def _values(v: Any) -> list[str]:
    if isinstance(v, dict):
        return [x for item in v.values() for x in _values(item)]
    if isinstance(v, list):
        return [x for item in v for x in _values(item)]
    if isinstance(v, bool) or v is None:
        return []
    return [str(v)]


def call_terms(call: Step) -> set[str]:
    """What a call asked for: the words (3+ letters or digits, no function words) of its argument
    *values*, lower-cased (a CJK run gives its two-character windows; a value with no such word,
    itself, whitespace-normalised). Empty when the call recorded no arguments (nothing to compare:
    callers then keep the failure).

    >>> sorted(call_terms(Step(kind="tool_call", tool_name="get_weather", tool_args={"city": "Lisbon", "day": 2})))
    ['lisbon']
    """
    values = _values(call.tool_args) if call.tool_args is not None else [call.tool_args_raw or ""]
    out: set[str] = set()
    for v in values:
        words: set[str] = set()
        for w in _WORD.findall(v.lower()):
            if _CJK.search(w):
                words.update(w[k: k + 2] for k in range(len(w) - 1))
            elif w not in _FUNCTION_WORDS:
                words.add(w)
        whole = " ".join(v.lower().split())
        out |= words or ({whole} if len(whole) >= 2 else set())  # "8 Fl Oz": the value itself
    return out


def rests_on(call: Step, answer: str) -> bool:
    """Whether ``answer`` could rest on what ``call`` was for: it repeats a term of the call's
    arguments (:func:`call_terms`), or the call recorded none (then nobody can tell: assumed so).

    An answer that names none of it did not go on as if that call had succeeded: the agent moved
    on to something else (a purchase after an option it could not select, a stop word that ends
    the episode), which is another route, not a claim built on the failed call."""
    terms = call_terms(call)
    if not terms:
        return True
    text = answer.lower()
    return any(t in text for t in terms)


_NEGATION = r"(?:\bno|\bnot|n['’]t|\bwithout|\bnone|\bnever|\bmissing)"
_ABSENT = r"(?:not (?:found|exist|present|there)|(?:does|did)(?: not|n['’]t) exist|missing|absent|nonexistent)"


def reports_absence(call: Step, answer: str) -> bool:
    """Whether ``answer`` says that what ``call`` asked for is not there: a negation within three
    words before one of its terms (:func:`call_terms`: "there is no requirements-lock.txt", "I found
    no reservation ABC123"), or "not found / doesn't exist / missing" within three words after one.
    That reports the failed call's outcome to the user — an acknowledgement in other words.

    >>> c = Step(kind="tool_call", tool_name="read_file", tool_args={"path": "requirements-lock.txt"})
    >>> reports_absence(c, "There is no requirements-lock.txt in the repo."), reports_absence(c, "Pinned to 2.28 in the lock file.")
    (True, False)
    """
    text = answer.lower()
    for t in call_terms(call):
        term = re.escape(t)
        if re.search(rf"{_NEGATION}\W+(?:\w+\W+){{0,3}}?{term}|{term}\W+(?:\w+\W+){{0,3}}?{_ABSENT}", text):
            return True
    return False


def states_new_values(trace: Trace, answer: int) -> bool:
    """Whether the message at step ``answer`` states a value (a token with a digit: an amount, an
    id, a date, a temperature — :func:`model.core.graph.distinctive_tokens`) that nothing before it
    in the run holds: a value that could only have come from a call that failed, or from nowhere."""
    said = distinctive_tokens(trace.steps[answer].content)
    if not said:
        return False
    seen: set[str] = set()
    for s in trace.steps[:answer]:
        seen |= distinctive_tokens(step_text(s))
        if s.kind is StepKind.TOOL_CALL:
            seen |= distinctive_tokens(s.content)
    return bool(said - seen)


#: An answer that says the work is done claims whatever the failed call was for ("Done!" after a
#: booking that failed), though it names nothing of it.
_CLAIMS_DONE = re.compile(
    r"\b(?:done|all set|success(?:ful(?:ly)?)?|complete[d]?|confirmed|booked|reserved|processed|"
    r"sent|submitted|scheduled|cancell?ed|updated|created|saved|fixed|resolved|finished)\b"
    r"|已(?:完成|预订|预定|确认|处理|发送|提交|取消|更新|创建|保存|修复|解决)|成功|搞定|办好",
    re.IGNORECASE,
)


def goes_on_from(trace: Trace, call: int | None, answer: int) -> bool:
    """Whether the answer at step ``answer`` goes on as if ``call`` had succeeded: it names
    something the call asked for (:func:`rests_on`), says the work is done ("Done!", "booked",
    "已完成") or states values nothing before it holds (:func:`states_new_values`), and it does
    not say that what the call asked for is not there (:func:`reports_absence`). An answer that
    does none of it moved on without the call: a purchase after an option the page did not offer,
    a stop word that ends the episode. Without a call (nothing to compare), it does."""
    if call is None:
        return True
    text = trace.steps[answer].content
    c = trace.steps[call]
    if reports_absence(c, text):
        return False
    return rests_on(c, text) or _CLAIMS_DONE.search(text) is not None or states_new_values(trace, answer)


def handled_by(trace: Trace, failed: int, call: int | None) -> tuple[str, int] | None:
    """How the agent handled the failed step ``failed`` with its next action, or ``None``.

    ``told_user``: its next message names the failure or asks the user (a question: "I couldn't
    find that user — could you give me your zip code?"); ``other_route``: its next action is a
    call to another tool, or to the same tool with other arguments; ``moved_on``: its next message
    does not go on from the failed call (:func:`goes_on_from`: it names nothing the call asked
    for, claims nothing done, states no value from nowhere) — the run went on without it. A repeat
    of the same call is a retry (recovered, or not), and an answer that goes on from the failed
    call is the ``ignored_error`` rule's. "Names the failure" includes saying that what the call
    asked for is not there (:func:`reports_absence`).
    """
    steps = trace.steps
    for j in range(failed + 1, len(steps)):
        s = steps[j]
        if s.kind is StepKind.USER_INPUT:
            return None
        if s.kind in ANSWER_KINDS and s.content.strip():
            if _ACK.search(s.content) or "?" in s.content or "？" in s.content or (
                    call is not None and reports_absence(steps[call], s.content)):
                return "told_user", j
            if call is not None and not goes_on_from(trace, call, j):
                return "moved_on", j
            return None
        if s.kind is StepKind.TOOL_CALL:
            prior = steps[call] if call is not None else None
            if prior is None:
                return None
            if s.tool_name != prior.tool_name or step_text(s) != step_text(prior):
                return "other_route", j
            return None
    return None


class _FailedStepRule(Rule):
    """Findings for the failed steps of one kind, as :func:`model.core.graph.step_failure` reads them."""

    failure_kind: ClassVar[FailureKind]

    def inspect(self, trace: Trace) -> list[Finding]:
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        if not any(f.kind is self.failure_kind for f in graph.failures.values()):
            return []
        recovered = graph.derived.get("recovery")
        if recovered is None:  # the same for the four rules of failed steps: worked out once per graph
            recovered = graph.derived["recovery"] = _recovery(trace, graph)
        out: list[Finding] = []
        for i in sorted(graph.failures):
            f = graph.failures[i]
            if f.kind is not self.failure_kind:
                continue
            out.append(self._make(trace, graph, i, f, recovered.get(i)))
        return out

    def _make(
        self, trace: Trace, graph: ExecutionGraph, i: int, f: StepFailure, recovered_by: int | None
    ) -> Finding:
        details: dict[str, Any] = {"reason": f.reason, **f.details}
        tool = _tool_of(trace, graph, i)
        if tool:
            details["tool"] = tool
        call = graph.call_of.get(i)
        if call is not None:
            details["call_step"] = call
        conf = f.confidence
        if recovered_by is not None:
            conf = min(conf, RECOVERED_CONFIDENCE)
            details["recovered"] = True
            details["recovered_by_step"] = recovered_by
        else:
            handled = handled_by(trace, i, call)
            if handled is not None:
                conf = min(conf, HANDLED_CONFIDENCE)
                details["handled"] = handled[0]
                details["handled_by_step"] = handled[1]
        return make_finding(self, trace, i, self.failure_kind, conf, f.evidence, details)


class ToolErrorRule(_FailedStepRule):
    """A tool call failed: failed status, exception text / Traceback, HTTP 4xx/5xx, or an error
    envelope in the payload (``{"error": …}``, ``{"success": false}``, ``{"ok": false}``,
    ``{"status": "error"}``) even when the span says OK. Timeouts and 429s are their own kinds."""

    name: ClassVar[str] = "tool_error"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.TOOL_ERROR,)
    failure_kind: ClassVar[FailureKind] = FailureKind.TOOL_ERROR


class TimeoutRule(_FailedStepRule):
    """A call timed out: status timeout, timeout text, ``ETIMEDOUT``, HTTP 504 / 408."""

    name: ClassVar[str] = "timeout"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.TIMEOUT,)
    failure_kind: ClassVar[FailureKind] = FailureKind.TIMEOUT


class RateLimitedRule(_FailedStepRule):
    """A call was rate limited: HTTP 429, "Too Many Requests", "rate limit"; ``details["retry_after"]``
    (seconds) is read from a ``Retry-After`` header line or a ``retry_after`` JSON field when present."""

    name: ClassVar[str] = "rate_limited"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.RATE_LIMITED,)
    failure_kind: ClassVar[FailureKind] = FailureKind.RATE_LIMITED


class ProviderErrorRule(_FailedStepRule):
    """The LLM call itself failed: an ``error`` step without a tool (429s and timeouts of the LLM
    call are ``rate_limited`` / ``timeout``). Recovered when the model answered afterwards."""

    name: ClassVar[str] = "provider_error"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.PROVIDER_ERROR,)
    failure_kind: ClassVar[FailureKind] = FailureKind.PROVIDER_ERROR


#: Words that own up to a failure. Not bare "sorry" / "unfortunately" / "issue": "Sorry about the
#: broken machine!" or "Unfortunately the order is past the window" apologise for something else.
_ACK = re.compile(
    r"\b(?:fail(?:ed|ure|ures|s|ing)?|errors?|erroneous|unable|could(?:n['’]t| not)|can(?:no|['’])t|"
    r"unavailable|not available|did(?:n['’]t| not) (?:work|succeed|return|respond)|timed out|time-?out|"
    r"rate[- ]limit(?:ed)?|retry(?:ing)?|try(?:ing)? again|went wrong|no data|(?:is|was|went) down|"
    r"(?:problem|issue|trouble) (?:with|reaching|contacting|accessing|connecting to) (?:the |our |my )?"
    r"(?:\w+ )?(?:tool|service|system|server|api|database|lookup|search|connection|request|backend|"
    r"code|execution|command|script|call|query)|"
    r"not (?:properly )?(?:executed|run|installed|accessible)|(?:is|was)n['’]t (?:installed|accessible|executed)|"
    r"not (?:able to )?(?:reach|connect|verify|confirm|retrieve|load|access))\b"
    r"|\berrored\b|\bno results? yet\b"
    r"|无法|失败|错误|出错|报错|重试|超时|不可用|未能|没能|异常|限流|出了问题|出问题|没有成功|未成功|不成功",
    re.IGNORECASE,
)
_TOOL_FAILURES = frozenset({FailureKind.TOOL_ERROR, FailureKind.TIMEOUT, FailureKind.RATE_LIMITED})


class IgnoredErrorRule(Rule):
    """A failed tool step, then a final answer that goes on as if it had succeeded.

    A failed tool step (tool error, timeout, rate limit) counts when no later result of the same
    tool succeeded before the final answer, and neither the final answer nor any assistant message
    after the failure acknowledges it (words such as failed, error, unable, couldn't, 无法, 失败).
    A failed step counts only when the answer goes on from it (:func:`goes_on_from`: it names
    something the call asked for, or states values nothing before it holds; an answer that does
    neither moved on without the call) and does not report that what the call asked for is not
    there ("there is no requirements-lock.txt" says the read failed, in other words).
    The finding is on the final answer; ``details`` name the failed step(s). Confidence 0.8, or
    0.45 when the answer repeats a value from a successful result that came after the failure
    (the agent may have worked around it with another tool; ``details["answer_uses_step"]``).
    """

    name: ClassVar[str] = "ignored_error"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.IGNORED_ERROR,)

    def inspect(self, trace: Trace) -> list[Finding]:
        final = final_answer_step(trace)
        if final is None:
            return []
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        steps = trace.steps
        failed = [
            i for i in sorted(graph.failures) if i < final and graph.failures[i].kind in _TOOL_FAILURES
        ]
        if not failed:
            return []
        ok_after: dict[str, int] = {}  # tool -> last successful result before the final answer
        ok_results: list[int] = []
        acknowledged_after = -1  # last assistant step before/at final that acknowledges a failure
        for j in range(failed[0] + 1, final + 1):
            s = steps[j]
            if s.kind is StepKind.TOOL_RESULT and j not in graph.failures:
                ok_after[_tool_of(trace, graph, j)] = j
                ok_results.append(j)
            elif s.kind in ANSWER_KINDS and _ACK.search(s.content):
                acknowledged_after = j
        unrecovered = [
            i
            for i in failed
            if ok_after.get(_tool_of(trace, graph, i), -1) <= i and acknowledged_after <= i
            and goes_on_from(trace, graph.call_of.get(i), final)
        ]
        if not unrecovered:
            return []
        first = unrecovered[0]
        # Worked around? The answer repeats a value from a later successful result of another tool.
        answer_values = distinctive_tokens(steps[final].content)
        workaround = next(
            (j for j in ok_results if j > first and answer_values & distinctive_tokens(steps[j].content)), None
        )
        conf = 0.45 if workaround is not None else 0.8
        details = {
            "failed_step": first,
            "failed_source_index": steps[first].source_index,
            "failed_steps": unrecovered,
            "tool": _tool_of(trace, graph, first),
            "failure_kind": graph.failures[first].kind.value,
            "failure_evidence": graph.failures[first].evidence,
        }
        if workaround is not None:
            details["answer_uses_step"] = workaround
        evidence = (
            f"step {first} ({details['tool']}) failed: {graph.failures[first].evidence}; "
            f"the final answer does not say so: {excerpt(steps[final].content, 100)}"
        )
        return [make_finding(self, trace, final, FailureKind.IGNORED_ERROR, conf, evidence, details)]


__all__ = [
    "HANDLED_CONFIDENCE",
    "IgnoredErrorRule",
    "ProviderErrorRule",
    "RateLimitedRule",
    "TimeoutRule",
    "ToolErrorRule",
    "call_terms",
    "goes_on_from",
    "handled_by",
    "reports_absence",
    "rests_on",
    "states_new_values",
]
