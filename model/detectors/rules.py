"""Rule detectors: fast, explainable checks over one trace.

Each rule is a registered trace detector (``inspect(trace) -> list[Finding]``), linear in the
number of steps. Every finding names the step (index into ``Trace.steps``), its ``source_index``
and ``span_id``, an evidence excerpt and structured ``details``.

Confidences are fixed per kind of evidence, highest where the trace says so explicitly:

========================================  ==========
evidence                                  confidence
========================================  ==========
an explicit failed status / error step    0.95
a JSON error envelope, a Traceback        0.90
HTTP 4xx/5xx, timeout or 429 text         0.85
an exception line, ``Error:`` prefix      0.75–0.80
heuristics (ignored error, assumption)    0.65–0.80
weak or contradicted evidence (a refusal  0.40–0.45
followed by an answer, an unknown tool,
an error the answer worked around)
a failure that a later step recovered     0.30 (:data:`RECOVERED_CONFIDENCE`)
========================================  ==========

Everything below 0.5 (the default fusion threshold in :mod:`model.diagnosis.diagnoser`) is meant as a
signal: reported, not acted on.

A failure that a later step recovered from (a successful retry of the same tool; an LLM answer
after a provider error) is still reported, at :data:`RECOVERED_CONFIDENCE` with
``details["recovered_by_step"]``, so that fusion keeps it as a signal, not a failure.

>>> from model.data.builder import make_trace
>>> [f.step for f in ToolErrorRule().inspect(make_trace("tool_error", seed=0))]
[5]
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from model.core.errors import InputError
from model.core.findings import Finding
from model.core.graph import ExecutionGraph, StepFailure, distinctive_tokens, safe_dumps, step_failure
from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, StepStatus, Trace
from model.detectors.base import register_trace_detector

#: Confidence of a failure that a later step recovered from (a signal under any sane threshold).
RECOVERED_CONFIDENCE = 0.3

_ANSWER_KINDS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT})
_AGENT_ACTIONS = frozenset({StepKind.LLM_OUTPUT, StepKind.FINAL_OUTPUT, StepKind.TOOL_CALL})


def _excerpt(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _finding(
    rule: _Rule,
    trace: Trace,
    step: int,
    kind: FailureKind,
    confidence: float,
    evidence: str,
    details: dict[str, Any],
) -> Finding:
    s = trace.steps[step]
    return Finding(
        detector=rule.name,
        kind=kind,
        confidence=confidence,
        step=step,
        source_index=s.source_index,
        span_id=s.span_id,
        evidence=evidence,
        details=details,
    )


_CONTROL_WORD = re.compile(r"^\W*TERMINATE\W*$", re.IGNORECASE)


def final_answer_step(trace: Trace) -> int | None:
    """The step holding the run's final answer, or ``None``.

    The last ``final_output`` step (when it is only a control word such as ``TERMINATE``, the
    assistant message right before it); without one, a non-empty ``llm_output`` that ends the
    trace (importers of plain chat logs can't always tell the last assistant message is the answer).

    >>> from model.data.builder import make_trace
    >>> final_answer_step(make_trace(None, seed=0))
    6
    """
    steps = trace.steps
    for i in range(len(steps) - 1, -1, -1):
        if steps[i].kind is StepKind.FINAL_OUTPUT:
            if _CONTROL_WORD.match(steps[i].content):
                # "TERMINATE" (AG2 group chats) ends the run; the answer is the message before it
                for j in range(i - 1, -1, -1):
                    if steps[j].kind in _ANSWER_KINDS and steps[j].content.strip():
                        return j
                    if steps[j].kind is not StepKind.LLM_REASONING:
                        break
            return i
    if steps and steps[-1].kind is StepKind.LLM_OUTPUT and steps[-1].content.strip():
        return len(steps) - 1
    return None


class _Rule:
    """Shared plumbing: parameters are the constructor's keyword arguments, stored as given."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    kinds: ClassVar[tuple[FailureKind, ...]]
    _params: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:  # rules without parameters take none
        pass

    def get_params(self) -> dict[str, Any]:
        """The constructor's parameters as given (``type(d)(**d.get_params())`` rebuilds it)."""
        return {p: getattr(self, p) for p in self._params}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def inspect(self, trace: Trace) -> list[Finding]:  # pragma: no cover - overridden
        raise NotImplementedError


# ---------------------------------------------------------------------- empty / incomplete


@register_trace_detector
class EmptyResponseRule(_Rule):
    """An answer with no content: a blank final answer or a blank assistant message.

    A blank ``llm_output`` that shares its ``source_index`` with tool calls is an assistant
    message that only called tools, not an empty response. A step whose importer says the content
    was not recorded (OpenTelemetry records message content only when switched on:
    ``metadata["content_recorded"] is False``) is unknown, not empty.
    """

    name: ClassVar[str] = "empty_response"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.EMPTY_RESPONSE,)

    _NULLISH = frozenset({"null", "undefined", "none", "nan"})

    def inspect(self, trace: Trace) -> list[Finding]:
        out: list[Finding] = []
        with_calls = {s.source_index for s in trace.steps if s.kind is StepKind.TOOL_CALL}
        for i, s in enumerate(trace.steps):
            if s.kind not in _ANSWER_KINDS:
                continue
            if s.metadata.get("content_recorded") is False:
                continue
            text = s.content.strip()
            final = s.kind is StepKind.FINAL_OUTPUT
            if not text:
                if not final and s.source_index in with_calls:
                    continue
                conf = 0.95 if final else 0.85
                evidence = "the final answer is empty" if final else "the assistant message is empty"
            elif text.lower() in self._NULLISH:
                conf, evidence = 0.8, f"the answer is only {text!r}"
            else:
                continue
            out.append(
                _finding(self, trace, i, FailureKind.EMPTY_RESPONSE, conf, evidence, {"final": final})
            )
        return out


_HANDOFF_TOOL = re.compile(r"transfer|hand_?off|escalat|human|agent_?handover", re.IGNORECASE)


def ended_by_design(trace: Trace) -> bool:
    """Whether a run with no final-answer step still ended as a conversation may end.

    A chat may end on the user's turn after the agent answered (the user's closing "Thanks!",
    τ-bench's ``###STOP###``), or on the result of a hand-off tool (``transfer_to_human_agents``):
    the agent passed the run on. Real runs end both ways, successful ones included (τ-bench
    airline: 147 of 200 on the user's turn, 48 on a transfer).
    """
    steps = trace.steps
    last = len(steps) - 1
    if steps[last].kind is StepKind.USER_INPUT:
        j = last
        while j >= 0 and steps[j].kind is StepKind.USER_INPUT:
            j -= 1
        return j >= 0 and steps[j].kind in _ANSWER_KINDS and bool(steps[j].content.strip())
    if steps[last].kind is StepKind.TOOL_RESULT and steps[last].status is not StepStatus.ERROR:
        name = steps[last].tool_name or next(
            (s.tool_name for s in reversed(steps) if s.kind is StepKind.TOOL_CALL and s.call_id == steps[last].call_id),
            None)
        return bool(name and _HANDOFF_TOOL.search(name))
    return False


@register_trace_detector
class IncompleteRule(_Rule):
    """The run ends without a final answer; the finding is on the last step.

    Confidence 0.9 when the trace stops at a tool call, tool result, error or reasoning step (cut
    off mid-work), 0.75 otherwise. An empty trace gives no finding: there is no step to point at,
    nor does a run that ended as conversations may (:func:`ended_by_design`).
    """

    name: ClassVar[str] = "incomplete"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.INCOMPLETE,)

    _CUT_OFF = frozenset({StepKind.TOOL_CALL, StepKind.TOOL_RESULT, StepKind.ERROR, StepKind.LLM_REASONING})

    def inspect(self, trace: Trace) -> list[Finding]:
        if not trace.steps or final_answer_step(trace) is not None or ended_by_design(trace):
            return []
        last = len(trace.steps) - 1
        kind = trace.steps[last].kind
        conf = 0.9 if kind in self._CUT_OFF else 0.75
        return [
            _finding(
                self,
                trace,
                last,
                FailureKind.INCOMPLETE,
                conf,
                f"the run ends with a {kind.value} step and no final answer",
                {"last_kind": kind.value},
            )
        ]


# ---------------------------------------------------------------------- failed calls


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
        if s.kind in _AGENT_ACTIONS:
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
        if steps[j].kind in _AGENT_ACTIONS:
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


def handled_by(trace: Trace, failed: int, call: int | None) -> tuple[str, int] | None:
    """How the agent handled the failed step ``failed`` with its next action, or ``None``.

    ``told_user``: its next message names the failure or asks the user (a question: "I couldn't
    find that user — could you give me your zip code?"); ``other_route``: its next action is a
    call to another tool, or to the same tool with other arguments. A repeat of the same call is a
    retry (recovered, or not), and an answer that passes over the error is the ``ignored_error``
    rule's.
    """
    steps = trace.steps
    for j in range(failed + 1, len(steps)):
        s = steps[j]
        if s.kind is StepKind.USER_INPUT:
            return None
        if s.kind in _ANSWER_KINDS and s.content.strip():
            if _ACK.search(s.content) or "?" in s.content or "？" in s.content:
                return "told_user", j
            return None
        if s.kind is StepKind.TOOL_CALL:
            prior = steps[call] if call is not None else None
            if prior is None:
                return None
            if s.tool_name != prior.tool_name or _text(s) != _text(prior):
                return "other_route", j
            return None
    return None


class _FailedStepRule(_Rule):
    """Findings for the failed steps of one kind, as :func:`model.core.graph.step_failure` reads them."""

    failure_kind: ClassVar[FailureKind]

    def inspect(self, trace: Trace) -> list[Finding]:
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        if not graph.failures:
            return []
        recovered = _recovery(trace, graph)
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
        return _finding(self, trace, i, self.failure_kind, conf, f.evidence, details)


@register_trace_detector
class ToolErrorRule(_FailedStepRule):
    """A tool call failed: failed status, exception text / Traceback, HTTP 4xx/5xx, or an error
    envelope in the payload (``{"error": …}``, ``{"success": false}``, ``{"ok": false}``,
    ``{"status": "error"}``) even when the span says OK. Timeouts and 429s are their own kinds."""

    name: ClassVar[str] = "tool_error"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.TOOL_ERROR,)
    failure_kind: ClassVar[FailureKind] = FailureKind.TOOL_ERROR


@register_trace_detector
class TimeoutRule(_FailedStepRule):
    """A call timed out: status timeout, timeout text, ``ETIMEDOUT``, HTTP 504 / 408."""

    name: ClassVar[str] = "timeout"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.TIMEOUT,)
    failure_kind: ClassVar[FailureKind] = FailureKind.TIMEOUT


@register_trace_detector
class RateLimitedRule(_FailedStepRule):
    """A call was rate limited: HTTP 429, "Too Many Requests", "rate limit"; ``details["retry_after"]``
    (seconds) is read from a ``Retry-After`` header line or a ``retry_after`` JSON field when present."""

    name: ClassVar[str] = "rate_limited"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.RATE_LIMITED,)
    failure_kind: ClassVar[FailureKind] = FailureKind.RATE_LIMITED


@register_trace_detector
class ProviderErrorRule(_FailedStepRule):
    """The LLM call itself failed: an ``error`` step without a tool (429s and timeouts of the LLM
    call are ``rate_limited`` / ``timeout``). Recovered when the model answered afterwards."""

    name: ClassVar[str] = "provider_error"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.PROVIDER_ERROR,)
    failure_kind: ClassVar[FailureKind] = FailureKind.PROVIDER_ERROR


# ---------------------------------------------------------------------- refusal

_APOS = "['’]"
_NEG_I = (  # what follows "I " in a refusal
    rf"(?:can(?:no|{_APOS})t|cannot|won{_APOS}t(?: be able to)?|will not(?: be able to)?|must decline to|"
    rf"do not feel comfortable|don{_APOS}t feel comfortable)"
)
_NEG_AM = r"(?:not able|unable|not allowed|not permitted|not going) to"  # what follows "I'm " / "I am "
_REFUSE_VERB = (
    r"(?:help|assist|comply|provide|fulfil+|do (?:that|this|it)|answer|support|continue|engage|"
    r"complete (?:this|that|your|the)|perform (?:this|that|the|such)|process (?:this|that|your)|"
    r"share (?:this|that)|go ahead)"
)
_I_NEG = rf"\bI(?:\s+{_NEG_I}|{_APOS}m\s+{_NEG_AM}|\s+am\s+{_NEG_AM})"
_REFUSAL_STRONG = re.compile(
    rf"{_I_NEG}\s+{_REFUSE_VERB}"
    r"|\bI must (?:respectfully )?decline\b"
    rf"|\bas an AI(?:[ -]\w+){{0,2}},?\s+I(?:\s+{_NEG_I}|{_APOS}m\s+{_NEG_AM}|\s+am\s+{_NEG_AM}|"
    rf"\s+(?:don{_APOS}t|do not))"
    rf"|\bcan(?:no|{_APOS})t comply\b"
    r"|\bagainst my (?:guidelines|policies|programming)\b",
    re.IGNORECASE,
)
_REFUSAL_ZH = re.compile(
    r"我无法(?:提供|帮助|帮你|帮您|协助|回答|完成|满足|处理|执行|为您|给你|给您|参与)"
    r"|(?:抱歉|对不起|很抱歉)[，,。！!\s]*我(?:不能|无法|不可以|没法|没办法)"
    r"|我不能(?:提供|帮助|帮你|帮您|协助|回答|完成|满足|参与)"
    r"|我没(?:法|办法)(?:处理|帮|提供|完成|回答|协助)"
    r"|超出了?我[^。，,！!]{0,8}范围"
    r"|作为(?:一个)?(?:AI|人工智能)(?:语言模型|助手)?[，,]?\s*我(?:不能|无法)"
)
#: "I can't provide X because the tool failed" reports a failure; it does not decline the task.
_FAILURE_REASON = re.compile(
    r"\b(?:because|since|due to|as)\b[^.!?]{0,80}?\b(?:fail\w*|errors?|timed out|time-?out|unavailable|"
    r"down|rate[- ]limit\w*|not (?:available|found|respond\w*))\b"
    r"|(?:由于|因为)[^。！？]{0,30}(?:失败|错误|出错|超时|不可用)",
    re.IGNORECASE,
)
_ANSWER_FOLLOWS = re.compile(
    r"\b(?:the (?:correct )?answer is|the result is|here(?:'s| is| are)\b|instead,? (?:here|I)|"
    r"however,? (?:here|the|I can)|I misread|I made a mistake|correction:|let me correct)"
    r"|答案是|结果是|以下是|更正",
    re.IGNORECASE,
)


@register_trace_detector
class RefusalRule(_Rule):
    """The model declines the task (English and Chinese patterns) in an assistant message.

    Phrases are anchored on declining to *help / assist / provide / comply / answer*, so "I'm
    unable to access the file" (a failure report) and "Sorry, I misread — the answer is 396" (a
    self-correction) are not refusals; a refusal phrase followed by an answer ("…, but here is …")
    or explained by a failure ("… because the service is down") is dropped to a 0.4 signal, and so
    is a refusal the agent's own instructions require (:func:`policy_required`: τ-bench airline's
    policy forbids changing a basic-economy flight, and a successful run says no), one in a sentence
    that opens a condition ("If I may not modify the tests, I cannot complete the task …",
    ``details.hypothetical``), and one after which the agent goes on calling tools before the user
    speaks again (``details.went_on``: it did not decline the task; a resolved mini-SWE-agent run).
    """

    name: ClassVar[str] = "refusal"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.REFUSAL,)

    _SCAN = 600  # refusals come first; a long answer that quotes one further down is not one

    def inspect(self, trace: Trace) -> list[Finding]:
        out: list[Finding] = []
        for i, s in enumerate(trace.steps):
            if s.kind not in _ANSWER_KINDS or not s.content:
                continue
            head = s.content[: self._SCAN]
            m = _REFUSAL_STRONG.search(head) or _REFUSAL_ZH.search(head)
            if m is None:
                continue
            rest = s.content[m.end() :]
            answered = _ANSWER_FOLLOWS.search(rest) is not None
            reason = _FAILURE_REASON.search(s.content[: self._SCAN]) is not None
            policy = policy_required(trace, s.content[: self._SCAN])
            sentence = re.split(r"[.!?\n。！？]", head[: m.start()])[-1]
            hypothetical = _CONDITIONAL.search(sentence) is not None
            went_on = _works_on(trace, i)
            conf = 0.4 if answered or reason or policy or hypothetical or went_on else 0.9
            details = {"pattern": m.group(0), "answer_follows": answered, "failure_given": reason,
                       "policy_required": policy, "hypothetical": hypothetical, "went_on": went_on}
            out.append(_finding(self, trace, i, FailureKind.REFUSAL, conf, _excerpt(s.content), details))
        return out


#: A sentence that opens a condition: "If I may not modify the tests, I cannot complete …" weighs
#: an option, it declines nothing (a resolved mini-SWE-agent run's reasoning).
_CONDITIONAL = re.compile(r"^\s*(?:if|unless|even if|assuming|suppose)\b|如果|假如", re.IGNORECASE)


def _works_on(trace: Trace, i: int) -> bool:
    """Whether the agent calls a tool after message ``i`` before the user speaks again: it went on
    with the task, so whatever it said it could not do, it did not decline the task."""
    for s in trace.steps[i + 1 :]:
        if s.kind is StepKind.USER_INPUT:
            return False
        if s.kind is StepKind.TOOL_CALL:
            return True
    return False


_PROHIBITION = re.compile(
    r"[^.\n]*\b(?:must not|mustn't|cannot|can not|can't|not allowed|not permitted|do not|don't|never|"
    r"should not|only (?:if|when|be)|refuse|deny|prohibited|forbidden|no longer)\b[^.\n]*|[^。\n]*(?:不能|不得|禁止|不可以|不允许)[^。\n]*",
    re.IGNORECASE)
_CONTENT_WORD = re.compile(r"[^\W\d_]{4,}|[\u4e00-\u9fff]{2}")
_POLICY_WORDS = re.compile(r"\b(?:policy|policies|rules?|not (?:allowed|permitted|eligible)|terms)\b|政策|规定",
                           re.IGNORECASE)


def policy_required(trace: Trace, refusal: str) -> bool:
    """Whether the system / developer instructions forbid what the refusal declines.

    True when the refusal cites a policy ("per our policy", "not eligible") and there is an
    instruction at all, or when a prohibitive sentence of the instructions ("basic economy flights
    cannot be modified") shares at least two content words with the refusal.
    """
    rules = [st.content for st in trace.steps if st.kind is StepKind.SYSTEM and st.content]
    if not rules:
        return False
    if _POLICY_WORDS.search(refusal):
        return True
    words = {w.lower() for w in _CONTENT_WORD.findall(refusal)}
    for text in rules:
        for m in _PROHIBITION.finditer(text[:50_000]):
            if len(words & {w.lower() for w in _CONTENT_WORD.findall(m.group())}) >= 2:
                return True
    return False


# ---------------------------------------------------------------------- malformed calls

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _type_ok(value: Any, expected: str) -> bool:
    types = _JSON_TYPES.get(expected)
    if types is None:
        return True  # a type we don't know: don't guess
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    if expected == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, types)


def schema_problems(value: Any, schema: dict[str, Any], path: str = "", depth: int = 0) -> list[str]:
    """What is wrong with ``value`` under a JSON Schema subset (``type``, ``properties``, ``required``,
    ``additionalProperties: false``, ``enum``, ``items``); ``[]`` when nothing is.

    A small validator on purpose: tool schemas use this subset, and it costs microseconds.

    >>> for p in schema_problems({"city": 3, "x": 1}, {"type": "object", "required": ["city", "units"],
    ...         "properties": {"city": {"type": "string"}}, "additionalProperties": False}):
    ...     print(p)
    missing required property 'units'
    city: expected string, got int
    unknown property 'x'
    """
    if depth > 8 or not isinstance(schema, dict):
        return []
    where = f"{path}: " if path else ""
    expected = schema.get("type")
    if isinstance(expected, str) and not _type_ok(value, expected):
        return [f"{where}expected {expected}, got {type(value).__name__}"]
    if isinstance(expected, list) and expected and not any(_type_ok(value, t) for t in expected):
        return [f"{where}expected one of {expected}, got {type(value).__name__}"]
    problems: list[str] = []
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        problems.append(f"{where}{value!r} is not one of {enum}")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for req in schema.get("required") or []:
            if req not in value:
                problems.append(f"{where}missing required property {req!r}")
        for key, sub in value.items():
            if isinstance(props, dict) and key in props:
                problems += schema_problems(sub, props[key], f"{path}.{key}" if path else key, depth + 1)
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}unknown property {key!r}")
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for k, item in enumerate(value[:100]):
            problems += schema_problems(item, schema["items"], f"{path}[{k}]", depth + 1)
    return problems


@register_trace_detector
class MalformedCallRule(_Rule):
    """A tool call whose arguments are not valid JSON (0.95), not a JSON object (0.9), break the
    tool's JSON Schema when the trace carries tool definitions (0.9), or name a tool the trace's
    definitions don't have (0.4, a signal). The finding is on the call step.

    A malformed call the agent then corrected — a later call of the same tool, before the user
    speaks again, got a result that did not fail — is a signal (:data:`RECOVERED_CONFIDENCE`, ``details.recovered``), as a failed
    tool step recovered by a later success is: on real runs the AgentProcessBench search agent sent
    cut-off JSON, got ``{"error": "missing query_list/query"}``, called again and answered right
    (2 of 134 successful runs flagged)."""

    name: ClassVar[str] = "malformed_call"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.MALFORMED_CALL,)

    def inspect(self, trace: Trace) -> list[Finding]:
        out = self._inspect(trace)
        if not out:
            return out
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        steps = trace.steps
        ok_calls = sorted(c for c, r in graph.result_of_call.items()
                          if r not in graph.failures and c not in graph.failures)
        for f in out:
            assert f.step is not None
            tool = steps[f.step].tool_name or ""
            # corrected in the same turn: before the user speaks again (a new task may call it anew)
            turn_end = next((j for j in range(f.step + 1, len(steps)) if steps[j].kind is StepKind.USER_INPUT),
                            len(steps))
            later = next((c for c in ok_calls if f.step < c < turn_end and (steps[c].tool_name or "") == tool), None)
            if later is not None and f.confidence > RECOVERED_CONFIDENCE:
                f.confidence = RECOVERED_CONFIDENCE
                f.details["recovered"] = True
                f.details["recovered_by_step"] = later
        return out

    def inspect_steps(self, trace: Trace) -> list[Finding]:
        """Every malformed call, corrected later or not (the step-level fact: labelling votes it)."""
        return self._inspect(trace)

    def _inspect(self, trace: Trace) -> list[Finding]:
        tools = {t.name: t for t in trace.tools}
        out: list[Finding] = []
        for i, s in enumerate(trace.steps):
            if s.kind is not StepKind.TOOL_CALL:
                continue
            details: dict[str, Any] = {"tool": s.tool_name}
            args: Any = s.tool_args
            if args is None and s.tool_args_raw is not None and s.tool_args_raw.strip():
                try:
                    args = json.loads(s.tool_args_raw)
                except RecursionError:
                    continue  # nesting too deep to read here: leave the call alone (no schema check either)
                except ValueError as exc:
                    details |= {"reason": "invalid_json", "error": str(exc)}
                    evidence = f"arguments are not valid JSON ({exc}): {_excerpt(s.tool_args_raw, 120)}"
                    out.append(_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.95, evidence, details))
                    continue
                if not isinstance(args, dict):
                    details["reason"] = "not_an_object"
                    evidence = f"arguments are JSON but not an object: {_excerpt(s.tool_args_raw, 120)}"
                    out.append(_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.9, evidence, details))
                    continue
            if not tools:
                continue
            tool = tools.get(s.tool_name or "")
            if tool is None:
                details["reason"] = "unknown_tool"
                details["known_tools"] = sorted(tools)
                evidence = f"tool {s.tool_name!r} is not among the tools the agent was given"
                # a signal only: the definitions may be partial, and a real miss shows up as the
                # call's failed result (tool_error) or, with an allow-list, as disallowed_tool
                out.append(_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.4, evidence, details))
                continue
            if tool.parameters:
                problems = schema_problems(args if args is not None else {}, tool.parameters)
                if problems:
                    details |= {"reason": "schema", "problems": problems}
                    evidence = f"arguments break {tool.name}'s schema: " + "; ".join(problems[:3])
                    out.append(_finding(self, trace, i, FailureKind.MALFORMED_CALL, 0.9, evidence, details))
        return out


# ---------------------------------------------------------------------- disallowed tool


@register_trace_detector
class DisallowedToolRule(_Rule):
    """A call to a tool outside the request's allow-list (``allowed_tools``; ``None`` = no check).

    Parameters
    ----------
    allowed_tools:
        Tool names the agent may call; stored as given.

    >>> from model.data.builder import make_trace
    >>> t = make_trace("disallowed_tool", seed=0)
    >>> [f.details["tool"] for f in DisallowedToolRule(allowed_tools=["search"]).inspect(t)]
    ['shell']
    """

    name: ClassVar[str] = "disallowed_tool"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.DISALLOWED_TOOL,)
    _params: ClassVar[tuple[str, ...]] = ("allowed_tools",)

    def __init__(self, *, allowed_tools: list[str] | None = None) -> None:
        self.allowed_tools = allowed_tools

    def inspect(self, trace: Trace) -> list[Finding]:
        if self.allowed_tools is None:
            return []
        if isinstance(self.allowed_tools, str) or not all(isinstance(t, str) for t in self.allowed_tools):
            raise InputError(
                f"allowed_tools must be a list of tool names; got {self.allowed_tools!r}",
                path="options.allowed_tools",
            )
        allowed = set(self.allowed_tools)
        out: list[Finding] = []
        for i, s in enumerate(trace.steps):
            if s.kind is StepKind.TOOL_CALL and (s.tool_name or "") not in allowed:
                out.append(
                    _finding(
                        self,
                        trace,
                        i,
                        FailureKind.DISALLOWED_TOOL,
                        0.99,
                        f"tool {s.tool_name!r} is not in the allow-list",
                        {"tool": s.tool_name, "allowed_tools": sorted(allowed)},
                    )
                )
        return out


# ---------------------------------------------------------------------- loop


#: Past this nesting, loop keys compare a marker: deeper structure never decides a loop, and the
#: recursion stays far from Python's limit whatever an importer let through.
_NORM_DEPTH = 32


def _norm_value(v: Any, depth: int = 0) -> Any:
    if isinstance(v, dict | list) and depth >= _NORM_DEPTH:
        return "<deep>"
    if isinstance(v, dict):
        return {str(k).strip().lower(): _norm_value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [_norm_value(x, depth + 1) for x in v]
    if isinstance(v, str):
        return " ".join(v.split()).lower()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def normalise_args(step: Step) -> str:
    """A call's arguments with key order, whitespace and case normalised away (a string key).

    >>> from model.core.schema import Step
    >>> normalise_args(Step(kind="tool_call", tool_args={"b": 1.0, "A": " Paris  "})) == \\
    ...     normalise_args(Step(kind="tool_call", tool_args={"a": "paris", "b": 1}))
    True
    """
    if step.tool_args is not None:
        return safe_dumps(_norm_value(step.tool_args), sort_keys=True)
    return " ".join((step.tool_args_raw or "").split()).lower()


def _norm_result(text: str) -> str:
    s = text.strip()
    if s[:1] in ("{", "[") and len(s) < 200_000:
        try:
            return safe_dumps(_norm_value(json.loads(s)), sort_keys=True)
        except (ValueError, RecursionError):
            pass
    return " ".join(s.split()).lower()


@register_trace_detector
class LoopRule(_Rule):
    """The same tool with the same (normalised) arguments, ``repeats`` times, and nothing changes in
    what comes back.

    Runs are counted per (tool, normalised arguments) and reset when that call's result changes
    (polling that progresses, a retry after an error that then succeeds) or a user message
    arrives (a new turn may legitimately ask again). Calls that got no result, and calls whose
    arguments were not recorded (hidden by the instrumentation), are not counted.
    The finding is on the *result* of the ``repeats``-th call; ``details["repeats"]`` lists every
    call of the run (steps and source indices), including repeats after the ``repeats``-th.

    Results are compared after normalising JSON key order, whitespace and case; a result that
    differs only in a timestamp counts as a change (conservative: fewer false loops).

    A loop is a short cycle: consecutive repeats are at most ``cycle`` calls apart (the same call
    back to back, or a cycle through at most ``cycle`` different calls: search A, search B, search
    A …). A call repeated after more other work in between (a file re-read, a check rerun after
    edits) starts a new run: on real runs that is what successful agents do — the mini-SWE-agent
    runs repeated a command with the same output, 4–47 calls apart, in 26 of 371 resolved runs
    (7 %), and τ-airline's three loops, all on failed runs, repeated 1–2 calls apart.

    Parameters
    ----------
    repeats:
        How many identical calls with identical results make a loop (at least 2).
    cycle:
        The longest cycle: consecutive repeats at most this many calls apart (at least 1).
    """

    name: ClassVar[str] = "loop"
    kinds: ClassVar[tuple[FailureKind, ...]] = (FailureKind.LOOP,)
    _params: ClassVar[tuple[str, ...]] = ("repeats", "cycle")

    def __init__(self, *, repeats: int = 3, cycle: int = 3) -> None:
        self.repeats = repeats
        self.cycle = cycle

    def inspect(self, trace: Trace) -> list[Finding]:
        if isinstance(self.repeats, bool) or not isinstance(self.repeats, int) or self.repeats < 2:
            raise InputError(
                f"loop.repeats must be an integer >= 2; got {self.repeats!r}", path="options.detectors.loop"
            )
        if isinstance(self.cycle, bool) or not isinstance(self.cycle, int) or self.cycle < 1:
            raise InputError(
                f"loop.cycle must be an integer >= 1; got {self.cycle!r}", path="options.detectors.loop"
            )
        graph = ExecutionGraph.from_trace(trace, data_flow=False)
        steps = trace.steps
        runs: dict[tuple[str, str], tuple[str, list[tuple[int, int]], Finding | None]] = {}
        last_call: dict[tuple[str, str], int] = {}  # key → its latest call's number among all calls
        out: list[Finding] = []
        n_calls = 0
        for i, s in enumerate(steps):
            if s.kind is StepKind.USER_INPUT:
                runs.clear()
                continue
            if s.kind is not StepKind.TOOL_CALL:
                continue
            n_calls += 1
            r = graph.result_of_call.get(i)
            if r is None or (s.tool_args is None and s.tool_args_raw is None):
                continue  # no result, or arguments not recorded (hidden): nothing to compare
            key = ((s.tool_name or "").strip().lower(), normalise_args(s))
            result = _norm_result(steps[r].content)
            prev = runs.get(key)
            near = n_calls - last_call.get(key, -(1 << 30)) <= self.cycle
            last_call[key] = n_calls
            if prev is None or prev[0] != result or not near:
                runs[key] = (result, [(i, r)], None)
                continue
            run, found = prev[1], prev[2]
            run.append((i, r))
            entries = [
                {
                    "call_step": c,
                    "call_source_index": steps[c].source_index,
                    "result_step": res,
                    "result_source_index": steps[res].source_index,
                }
                for c, res in run
            ]
            if found is None and len(run) >= self.repeats:
                found = _finding(
                    self,
                    trace,
                    r,
                    FailureKind.LOOP,
                    0.9,
                    f"{s.tool_name} called {len(run)} times with the same arguments "
                    f"and the same result: {_excerpt(steps[r].content, 100)}",
                    {"tool": s.tool_name, "arguments": key[1], "count": len(run), "repeats": entries},
                )
                out.append(found)
            elif found is not None:
                found.details["count"] = len(run)
                found.details["repeats"] = entries
            runs[key] = (result, run, found)
        return out


# ---------------------------------------------------------------------- ignored error

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


@register_trace_detector
class IgnoredErrorRule(_Rule):
    """A failed tool step, then a final answer that goes on as if it had succeeded.

    A failed tool step (tool error, timeout, rate limit) counts when no later result of the same
    tool succeeded before the final answer, and neither the final answer nor any assistant message
    after the failure acknowledges it (words such as failed, error, unable, couldn't, 无法, 失败).
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
            elif s.kind in _ANSWER_KINDS and _ACK.search(s.content):
                acknowledged_after = j
        unrecovered = [
            i
            for i in failed
            if ok_after.get(_tool_of(trace, graph, i), -1) <= i and acknowledged_after <= i
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
            f"the final answer does not say so: {_excerpt(steps[final].content, 100)}"
        )
        return [_finding(self, trace, final, FailureKind.IGNORED_ERROR, conf, evidence, details)]


# ---------------------------------------------------------------------- assumption violated

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


def is_empty_result(text: str) -> bool:
    """Whether a tool result is empty: blank, ``[]``, ``{}``, ``null``, a JSON object whose lists are
    all empty or whose count is 0 (or a null beside "no …"), or text such as "no results", "未找到".

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


@register_trace_detector
class AssumptionViolatedRule(_Rule):
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
                    seen.update(_values(_text(steps[j]), numbers=True))
                held.clear()
            for j in range(scanned, upto):
                if agent_too or steps[j].kind not in _AGENT_KINDS:
                    seen.update(_values(_text(steps[j]), numbers=True))
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
            if pending is None or s.kind not in _AGENT_ACTIONS:
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
            return 0.7 if _values(_text(s)) - seen else None
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
            f"{e.tool_name} returned nothing ({_excerpt(e.content, 60)!s}) at step {empty}; "
            f"the {what} at step {dependent} goes on as if it had: {_excerpt(_text(d), 100)}"
        )
        return _finding(self, trace, dependent, FailureKind.ASSUMPTION_VIOLATED, conf, evidence, details)


def _text(s: Step) -> str:
    if s.kind is StepKind.TOOL_CALL:
        if s.tool_args is not None:
            return safe_dumps(s.tool_args)
        return s.tool_args_raw or ""
    return s.content


__all__ = [
    "RECOVERED_CONFIDENCE",
    "AssumptionViolatedRule",
    "DisallowedToolRule",
    "EmptyResponseRule",
    "IgnoredErrorRule",
    "IncompleteRule",
    "LoopRule",
    "MalformedCallRule",
    "ProviderErrorRule",
    "RateLimitedRule",
    "RefusalRule",
    "TimeoutRule",
    "ToolErrorRule",
    "final_answer_step",
    "is_empty_result",
    "normalise_args",
    "schema_problems",
]
