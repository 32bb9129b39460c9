"""The execution graph of a trace, and what each step's outcome was.

Nodes are the steps (``step`` = index into ``Trace.steps``). Edges, each from the later step to the
earlier one except ``followed_by``:

``followed_by``     step ``i`` → step ``i + 1``.
``result_of``       a tool result → its call: by ``call_id``; without one, the latest earlier call
                    of the same tool that has no result yet (else the latest call of that tool).
``retry_of``        a tool call → the earlier call of the same tool whose result failed, when this
                    call is the next call of that tool after the failure.
``uses_result_of``  an agent step (reasoning, text, tool call, final answer) → the latest earlier
                    tool result holding a *distinctive token* the step repeats. A distinctive token
                    is a run of letters, digits and ``_.-/:`` with at least one digit and at least
                    three characters (``396``, ``XY123``, ``job-3fa9``) that did not already
                    appear in a system or user message. Deliberately simple: data flow through
                    ids and figures, not through paraphrase.

A step's outcome (:func:`step_failure`) is read from its status and, because spans often say OK
while the payload says error, from its content: exception text, HTTP 4xx/5xx, timeouts, 429s and
JSON error envelopes (``{"error": …}``, ``{"success": false}``, ``{"ok": false}``,
``{"status": "error"}``). The rule detectors and the graph share this one reading.

>>> from model.data.builder import make_trap
>>> g = ExecutionGraph.from_trace(make_trap("retry_after_error", seed=0))
>>> [(e.source, e.target) for e in g.edges_of(EdgeKind.RETRY_OF)]
[(5, 2)]
>>> print(g.to_mermaid().splitlines()[0])
flowchart TD
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from model.core.kinds import FailureKind
from model.core.schema import Step, StepKind, StepStatus, Trace
from model.core.shared_graphs import GRAPHS

# ---------------------------------------------------------------------- step outcomes

#: How much of a text payload the content checks read: error text sits at the start, and a long
#: document that merely mentions "timeout" further down is not a failed call.
_SCAN_CHARS = 1000
#: JSON payloads larger than this are not parsed for error envelopes (speed on huge results).
_MAX_JSON_CHARS = 200_000

_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_EXCEPTION = re.compile(
    r"(?m)^\s*(?:[A-Za-z_][\w]*\.)*([A-Z]\w*(?:Error|Exception|Fault))(?::\s|\s*$)"
)
_ERROR_PREFIX = re.compile(r"(?im)^\s*(?:error|fatal|exception|failed|failure)\s*[:!]")
#: An explicit zero exit status at a result's head or tail ("<returncode>0</returncode>",
#: "exit code 0", "Exit status: 0"): the command ran; error-like text in its output is data (a diff,
#: a source listing, a script printing the bug it reproduces), not the tool failing.
_EXIT_ZERO = re.compile(
    r"(?i)\b(?:return[ _]?code|exit[ _]?(?:code|status))\W{0,3}(?:is\W{0,2})?0(?![\d.])")
_HTTP_CODE = re.compile(
    r"\b(?:HTTP(?:/\d(?:\.\d)?)?|status(?:[ _-]?code)?|error(?:[ _-]?code)?|code)\s*[:=]?\s*[\"']?([45]\d\d)\b",
    re.IGNORECASE,
)
_HTTP_REASON = re.compile(
    r"\b([45]\d\d)\s*[-:]?\s*(?:Bad Request|Unauthorized|Payment Required|Forbidden|Not Found|"
    r"Method Not Allowed|Not Acceptable|Request Time-?out|Conflict|Gone|Payload Too Large|"
    r"Unprocessable (?:Entity|Content)|Too Many Requests|Internal Server Error|Not Implemented|"
    r"Bad Gateway|Service Unavailable|Gateway Time-?out)\b",
    re.IGNORECASE,
)
_TIMEOUT_TEXT = re.compile(
    r"\btimed[ -]?out\b|\bETIMEDOUT\b|\bdeadline exceeded\b|\bgateway time-?out\b|"
    r"\brequest time-?out\b|\b(?:read|connect|connection)[ _-]?timeout\b|\b\w*TimeoutError\b|"
    r"\btime-?out (?:error|exceeded|expired)\b|\bDEADLINE_EXCEEDED\b",
    re.IGNORECASE,
)
_RATE_TEXT = re.compile(
    r"\btoo many requests\b|\brate[ _-]?limit(?:ed|s|ing|[ _-]?(?:exceeded|reached|error|exception))?\b|"
    r"\bquota exceeded\b|\bthrottl(?:ed|ing)\b|\bRESOURCE_EXHAUSTED\b",
    re.IGNORECASE,
)
_RETRY_AFTER = re.compile(
    r"retry[-_ ]?after[-_ ]?(ms|millis|milliseconds|s|sec|seconds)?[\"']?\s*[:=]\s*[\"']?(\d+(?:\.\d+)?)",
    re.IGNORECASE,
)
_RETRY_IN = re.compile(
    r"(?:try again|retry) in (\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?)\b",
    re.IGNORECASE,
)
_FAILED_STATUS_WORDS = frozenset({"error", "failed", "failure", "fail", "exception"})
_TIMEOUT_CODES = frozenset({408, 504})


@dataclass(frozen=True)
class StepFailure:
    """How a step failed, as read from its status and content.

    ``kind`` is ``tool_error``, ``timeout``, ``rate_limited`` or ``provider_error``; ``reason`` a
    short code (``status``, ``traceback``, ``exception``, ``http_status``, ``envelope``,
    ``timeout_text``, ``rate_limit_text``, ``error_prefix``); ``details`` carries ``http_status``
    and ``retry_after`` (seconds) when read.
    """

    kind: FailureKind
    confidence: float
    reason: str
    evidence: str
    details: dict[str, Any] = field(default_factory=dict)


def _excerpt(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _seconds(value: float, unit: str | None) -> float:
    u = (unit or "s").lower()
    if u.startswith("ms") or u.startswith("milli"):
        return value / 1000.0
    if u.startswith("m"):
        return value * 60.0
    return value


def retry_after_seconds(text: str, payload: Any = None) -> float | None:
    """``retry_after`` in seconds from a JSON payload field or header-like text, when present.

    >>> retry_after_seconds('HTTP 429 Too Many Requests\\nRetry-After: 12')
    12.0
    >>> retry_after_seconds('', {"error": {"retry_after_ms": 1500}})
    1.5
    """
    found = _json_retry_after(payload, 0) if payload is not None else None
    if found is not None:
        return found
    head = text[:_SCAN_CHARS]
    m = _RETRY_AFTER.search(head)
    if m:
        return _seconds(float(m.group(2)), m.group(1))
    m = _RETRY_IN.search(head)
    if m:
        return _seconds(float(m.group(1)), m.group(2))
    return None


def _json_retry_after(obj: Any, depth: int) -> float | None:
    if depth > 3:
        return None
    if isinstance(obj, dict):
        for key, value in obj.items():
            k = str(key).lower().replace("-", "_")
            if k in ("retry_after", "retryafter", "retry_after_s", "retry_after_seconds", "retry_after_ms"):
                try:
                    v = float(value)
                except (TypeError, ValueError):
                    continue
                return v / 1000.0 if k.endswith("_ms") else v
        for value in obj.values():
            if isinstance(value, dict | list):
                found = _json_retry_after(value, depth + 1)
                if found is not None:
                    return found
    elif isinstance(obj, list):
        for value in obj[:5]:
            found = _json_retry_after(value, depth + 1)
            if found is not None:
                return found
    return None


def _parse_json(text: str) -> tuple[bool, Any]:
    s = text.strip()
    if not s or s[0] not in "{[" or len(s) > _MAX_JSON_CHARS:
        return False, None
    try:
        return True, json.loads(s)
    except (ValueError, RecursionError):  # nesting deeper than the stack allows: not a payload we read
        return False, None


def safe_dumps(obj: Any, **kw: Any) -> str:
    """``json.dumps`` that never raises: too deep or unserialisable gives ``""``."""
    try:
        return json.dumps(obj, ensure_ascii=False, **kw)
    except (ValueError, TypeError, RecursionError):
        return ""


def _envelope(payload: Any) -> tuple[str, int | None] | None:
    """An error envelope in a JSON payload: (what said so, HTTP-like code) or ``None``."""
    candidates = [payload]
    if isinstance(payload, dict):
        # one level down, where wrappers put the real answer
        for key in ("result", "response", "data", "output", "body"):
            inner = payload.get(key)
            if isinstance(inner, dict):
                candidates.append(inner)
    for obj in candidates:
        if not isinstance(obj, dict):
            continue
        code = _code_in(obj)
        err = obj.get("error", obj.get("errors"))
        if err not in (None, False, "", [], {}):
            if isinstance(err, dict):
                code = code or _code_in(err)
            return "error field", code
        for key in ("success", "ok", "succeeded"):
            if obj.get(key) is False:
                return f"{key}: false", code
        status = obj.get("status", obj.get("state"))
        if isinstance(status, str) and status.strip().lower() in _FAILED_STATUS_WORDS:
            return f"status: {status}", code
        if code is not None and ("message" in obj or "detail" in obj):
            return "error code", code
    return None


def _code_in(obj: dict[str, Any]) -> int | None:
    for key in ("status_code", "statusCode", "http_status", "code", "status"):
        v = obj.get(key)
        if isinstance(v, int) and 400 <= v <= 599:
            return v
        if isinstance(v, str) and len(v) == 3 and v.isdigit() and 400 <= int(v) <= 599:
            return int(v)
    return None


def _specific_kind(text: str, code: int | None, error_type: str | None) -> FailureKind | None:
    """Timeout or rate limit, when the text, code or error type says so."""
    et = (error_type or "").lower()
    if code == 429 or "ratelimit" in et.replace("_", "") or _RATE_TEXT.search(text):
        return FailureKind.RATE_LIMITED
    if code in _TIMEOUT_CODES or "timeout" in et or _TIMEOUT_TEXT.search(text):
        return FailureKind.TIMEOUT
    return None


def _http_code(text: str) -> int | None:
    m = _HTTP_REASON.search(text) or _HTTP_CODE.search(text)
    return int(m.group(1)) if m else None


#: :func:`step_failure` results kept by what they are read from (a session re-reads the same steps
#: on every append; the regexes and JSON parsing run once per distinct step).
_FAILURE_MEMO: dict[tuple[Any, ...], StepFailure | None] = {}
_FAILURE_MEMO_MAX = 50_000
_NOT_MEMOISED = object()


def step_failure(step: Step) -> StepFailure | None:
    """How ``step`` failed, or ``None`` when it did not (or is not a step that can fail); memoised
    on the step's kind, status, tool name, error type and content (:func:`_step_failure`)."""
    if step.kind not in (StepKind.TOOL_RESULT, StepKind.ERROR, StepKind.TOOL_CALL):
        return None
    key = (step.kind, step.status, step.tool_name, step.error_type, step.content)
    hit = _FAILURE_MEMO.get(key, _NOT_MEMOISED)
    if hit is not _NOT_MEMOISED:
        return hit  # type: ignore[return-value]
    found = _step_failure(step)
    if len(_FAILURE_MEMO) >= _FAILURE_MEMO_MAX:
        _FAILURE_MEMO.clear()
    _FAILURE_MEMO[key] = found
    return found


def _step_failure(step: Step) -> StepFailure | None:
    """How ``step`` failed, or ``None`` when it did not (or is not a step that can fail).

    Tool results, ``error`` steps and tool calls carrying a failed status are read. An ``error``
    step without a tool name is the LLM call itself failing (``provider_error``).

    >>> from model.core.schema import Step
    >>> step_failure(Step(kind="tool_result", content='{"success": false}', status="ok")).kind.value
    'tool_error'
    >>> step_failure(Step(kind="tool_result", content='{"results": []}')) is None
    True
    >>> step_failure(Step(kind="tool_result", content="<returncode>0</returncode>\\nError: bug reproduced")) is None
    True
    """
    if step.kind not in (StepKind.TOOL_RESULT, StepKind.ERROR, StepKind.TOOL_CALL):
        return None
    if step.kind is StepKind.TOOL_CALL and step.status in (None, StepStatus.OK):
        return None
    generic = (
        FailureKind.PROVIDER_ERROR
        if step.kind is StepKind.ERROR and not step.tool_name
        else FailureKind.TOOL_ERROR
    )
    text = step.content or ""
    head = text[:_SCAN_CHARS]
    is_json, payload = _parse_json(text)
    details: dict[str, Any] = {}

    def done(kind: FailureKind, confidence: float, reason: str, code: int | None) -> StepFailure:
        if code is not None:
            details["http_status"] = code
        if kind is FailureKind.RATE_LIMITED:
            ra = retry_after_seconds(text, payload)
            if ra is not None:
                details["retry_after"] = ra
        if step.error_type:
            details["error_type"] = step.error_type
        evidence = _excerpt(text) or (step.error_type or f"status {step.status}")
        return StepFailure(kind, confidence, reason, evidence, details)

    if step.status is StepStatus.TIMEOUT:
        return done(FailureKind.TIMEOUT, 0.95, "status", None)
    scan = head
    if step.status is StepStatus.ERROR or step.kind is StepKind.ERROR:
        code = _code_in(payload) if isinstance(payload, dict) else None
        env = _envelope(payload) if is_json else None
        code = code or (env[1] if env else None) or _http_code(scan)
        kind = _specific_kind(scan, code, step.error_type) or generic
        return done(kind, 0.95, "status", code)
    # status OK or unknown: the payload may still say error
    if is_json:
        env = _envelope(payload)
        if env is None:
            return None
        what, code = env
        kind = _specific_kind(scan, code, step.error_type) or generic
        return done(kind, 0.9, f"envelope ({what})", code)
    if _EXIT_ZERO.search(text[:200]) or _EXIT_ZERO.search(text[-200:]):
        return None
    if _TRACEBACK.search(head):
        code = _http_code(head)
        return done(_specific_kind(head, code, step.error_type) or generic, 0.9, "traceback", code)
    code = _http_code(head)
    if code is not None:
        return done(_specific_kind(head, code, step.error_type) or generic, 0.85, "http_status", code)
    if _RATE_TEXT.search(head):
        return done(FailureKind.RATE_LIMITED, 0.85, "rate_limit_text", None)
    if _TIMEOUT_TEXT.search(head):
        return done(FailureKind.TIMEOUT, 0.85, "timeout_text", None)
    m = _EXCEPTION.search(head)
    if m:
        return done(_specific_kind(m.group(0), None, step.error_type) or generic, 0.8, "exception", None)
    if _ERROR_PREFIX.search(head):
        return done(generic, 0.75, "error_prefix", None)
    return None


# ---------------------------------------------------------------------- the graph


class EdgeKind(StrEnum):
    FOLLOWED_BY = "followed_by"
    RESULT_OF = "result_of"
    RETRY_OF = "retry_of"
    USES_RESULT_OF = "uses_result_of"


@dataclass(frozen=True)
class Node:
    """One step: its index, kind, where it came from, and whether it failed."""

    step: int
    kind: StepKind
    source_index: int
    tool: str | None = None
    status: StepStatus | None = None
    failed: bool = False

    @property
    def label(self) -> str:
        """``"3 tool_result search (error)"``: index, kind, tool, a status other than ok."""
        parts = [str(self.step), self.kind.value]
        if self.tool:
            parts.append(self.tool)
        if self.status is not None and self.status is not StepStatus.OK:
            parts.append(f"({self.status.value})")
        return " ".join(parts)


@dataclass(frozen=True)
class Edge:
    """``source`` → ``target`` (step indices); ``token`` is the shared value of ``uses_result_of``."""

    source: int
    target: int
    kind: EdgeKind
    token: str | None = None


_TOKEN = re.compile(r"[\w.\-/:]*\d[\w.\-/:]*")
_TOKEN_STRIP = ".:-/"
#: Steps whose content is the agent's own (they may reuse a tool result).
_AGENT_KINDS = frozenset(
    {StepKind.LLM_REASONING, StepKind.LLM_OUTPUT, StepKind.TOOL_CALL, StepKind.FINAL_OUTPUT}
)
#: How much of a step the data-flow scan reads.
_FLOW_CHARS = 20_000


def distinctive_tokens(text: str) -> set[str]:
    """The distinctive tokens of ``text`` (lower-cased), as ``uses_result_of`` defines them.

    >>> sorted(distinctive_tokens("Flight XY123 costs 396.50 EUR on 2026-03-01."))
    ['2026-03-01', '396.50', 'xy123']
    """
    out = set()
    for m in _TOKEN.finditer(text[:_FLOW_CHARS]):
        tok = m.group(0).strip(_TOKEN_STRIP).lower()
        if len(tok) >= 3:
            out.add(tok)
    return out


def _step_text(step: Step) -> str:
    if step.kind is StepKind.TOOL_CALL:
        if step.tool_args is not None:
            return safe_dumps(step.tool_args)
        return step.tool_args_raw or ""
    return step.content


class ExecutionGraph:
    """Steps as nodes, with ``followed_by``, ``result_of``, ``retry_of`` and ``uses_result_of`` edges.

    Build it with :meth:`from_trace`. Lookups used by the rules are dicts (all O(1)):
    ``call_of[result] -> call``, ``result_of_call[call] -> first result``, ``retry_of[call] ->
    failed call``, ``failures[step] -> StepFailure``.

    Examples
    --------
    >>> from model.data.builder import make_trap
    >>> g = ExecutionGraph.from_trace(make_trap("self_correction", seed=0))
    >>> g.call_of
    {4: 3}
    >>> [(e.source, e.target, e.token) for e in g.edges_of(EdgeKind.USES_RESULT_OF)]
    [(5, 4, '396')]
    """

    def __init__(self, nodes: list[Node], edges: list[Edge]) -> None:
        self.nodes = nodes
        self.edges = edges
        self.call_of: dict[int, int] = {}
        self.result_of_call: dict[int, int] = {}
        self.retry_of: dict[int, int] = {}
        self.failures: dict[int, StepFailure] = {}
        #: What detectors work out from the graph and its trace, by name, once per graph (it is read
        #: only once built, and shared by the rules inside :func:`model.core.shared_graphs.shared_graphs`).
        self.derived: dict[str, Any] = {}

    @classmethod
    def from_trace(cls, trace: Trace, *, data_flow: bool = True) -> ExecutionGraph:
        """Build the graph of ``trace`` in one pass (``data_flow=False`` skips ``uses_result_of``);
        once per trace inside :func:`model.core.shared_graphs.shared_graphs`."""
        shared = GRAPHS.get()
        hit = shared.get((id(trace), data_flow)) if shared is not None else None
        if hit is not None and hit[0] is trace:
            return hit[1]  # type: ignore[no-any-return]
        steps = trace.steps
        g = cls([], [])
        if shared is not None:
            shared[(id(trace), data_flow)] = (trace, g)
        failures = g.failures
        for i, s in enumerate(steps):
            f = step_failure(s)
            if f is not None:
                failures[i] = f
        nodes: list[Node] = []
        edges: list[Edge] = []
        call_by_id: dict[str, int] = {}
        unanswered: dict[str, list[int]] = {}  # tool -> calls without a result, in order
        last_call: dict[str, int] = {}
        pending_failed: dict[str, int] = {}  # tool -> call (or result) whose result failed
        known: set[str] = set()  # tokens from system / user messages: not distinctive
        produced: dict[str, int] = {}  # token -> latest tool result holding it
        for i, s in enumerate(steps):
            tool = s.tool_name
            nodes.append(
                Node(
                    step=i,
                    kind=s.kind,
                    source_index=s.source_index,
                    tool=tool,
                    status=s.status,
                    failed=i in failures,
                )
            )
            if i > 0:
                edges.append(Edge(i - 1, i, EdgeKind.FOLLOWED_BY))
            if s.kind is StepKind.TOOL_CALL:
                key = tool or ""
                if key in pending_failed:
                    failed_call = pending_failed.pop(key)
                    edges.append(Edge(i, failed_call, EdgeKind.RETRY_OF))
                    g.retry_of[i] = failed_call
                if s.call_id:
                    call_by_id[s.call_id] = i
                unanswered.setdefault(key, []).append(i)
                last_call[key] = i
                if i in failures:  # a call that failed by itself (no result expected)
                    pending_failed[key] = i
            elif s.kind is StepKind.TOOL_RESULT:
                key = tool or ""
                call = call_by_id.get(s.call_id) if s.call_id else None
                if call is None:
                    queue = unanswered.get(key)
                    call = queue[-1] if queue else last_call.get(key)
                if call is not None:
                    edges.append(Edge(i, call, EdgeKind.RESULT_OF))
                    g.call_of[i] = call
                    g.result_of_call.setdefault(call, i)
                    queue = unanswered.get(steps[call].tool_name or "")
                    if queue and call in queue:
                        queue.remove(call)
                    key = steps[call].tool_name or key
                if i in failures:
                    pending_failed[key] = call if call is not None else i
                else:
                    pending_failed.pop(key, None)
            if not data_flow:
                continue
            if s.kind in (StepKind.SYSTEM, StepKind.USER_INPUT):
                known |= distinctive_tokens(s.content)
            elif s.kind is StepKind.TOOL_RESULT:
                for tok in distinctive_tokens(s.content):
                    if tok not in known:
                        produced[tok] = i
            elif s.kind in _AGENT_KINDS and produced:
                linked: dict[int, str] = {}
                for tok in sorted(distinctive_tokens(_step_text(s))):
                    src = produced.get(tok)
                    if src is not None and src not in linked:
                        linked[src] = tok
                for src in sorted(linked):
                    edges.append(Edge(i, src, EdgeKind.USES_RESULT_OF, linked[src]))
        g.nodes = nodes
        g.edges = edges
        return g

    def edges_of(self, kind: EdgeKind | str) -> list[Edge]:
        """The edges of one kind, in the order they were found."""
        k = EdgeKind(kind)
        return [e for e in self.edges if e.kind is k]

    def succeeded(self, step: int) -> bool:
        """Whether a tool result (or call) ``step`` came back without a failure."""
        return step not in self.failures

    def to_json(self) -> dict[str, Any]:
        """``{"nodes": [...], "edges": [...]}``, JSON-ready."""
        return {
            "nodes": [
                {
                    "step": n.step,
                    "kind": n.kind.value,
                    "label": n.label,
                    "source_index": n.source_index,
                    "tool": n.tool,
                    "failed": n.failed,
                }
                for n in self.nodes
            ],
            "edges": [
                {"source": e.source, "target": e.target, "kind": e.kind.value}
                | ({"token": e.token} if e.token is not None else {})
                for e in self.edges
            ],
        }

    def to_mermaid(self) -> str:
        """Mermaid ``flowchart`` text; failed steps are styled ``failed``."""
        lines = ["flowchart TD"]
        for n in self.nodes:
            label = n.label.replace('"', "#quot;")
            lines.append(f'  s{n.step}["{label}"]')
        arrows = {
            EdgeKind.FOLLOWED_BY: "-->",
            EdgeKind.RESULT_OF: "-.->|result_of|",
            EdgeKind.RETRY_OF: "==>|retry_of|",
            EdgeKind.USES_RESULT_OF: "-.->|uses_result_of|",
        }
        for e in self.edges:
            lines.append(f"  s{e.source} {arrows[e.kind]} s{e.target}")
        failed = [f"s{n.step}" for n in self.nodes if n.failed]
        if failed:
            lines.append("  classDef failed fill:#fdd,stroke:#c00")
            lines.append(f"  class {','.join(failed)} failed")
        return "\n".join(lines) + "\n"


__all__ = [
    "Edge",
    "EdgeKind",
    "ExecutionGraph",
    "Node",
    "StepFailure",
    "distinctive_tokens",
    "retry_after_seconds",
    "safe_dumps",
    "step_failure",
]
