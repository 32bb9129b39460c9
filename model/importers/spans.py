"""Spans → traces: OTLP/JSON and plain span lists, read with the OTel GenAI and OpenInference
conventions.

Inputs:

- OTLP/JSON (``{"resourceSpans": [{"resource": …, "scopeSpans": [{"spans": [...]}]}]}``): ids as
  hex strings, times as ``startTimeUnixNano`` / ``endTimeUnixNano`` (strings or numbers),
  attributes as ``[{"key", "value": {"stringValue" | "intValue" | "doubleValue" | "boolValue" |
  "arrayValue" | "kvlistValue" | "bytesValue"}}]``, ``status: {"code": 2 | "STATUS_CODE_ERROR",
  "message"}``, ``events: [{"name", "attributes"}]``;
- a list of span objects (or ``{"spans": [...]}``): ``trace_id``/``traceId``/``context.trace_id``,
  ``span_id``/``spanId``/``context.span_id``, ``parent_span_id``/``parentSpanId``/``parent_id``,
  ``start_time``/``end_time`` (ISO 8601 or epoch numbers) or the OTLP names, attributes as a flat
  object or an OTLP list, ``status`` as an object (``code``/``status_code``, ``message``/
  ``description``) or a string.

One trace per run, in order of first appearance: a run is a trace id, or every trace id whose
spans name one session (``gen_ai.conversation.id`` or ``session.id``, on a span or its resource;
:func:`group_runs`), or — for input read as one run — every trace id naming none
(:func:`unkeyed_warning` says so); ``Trace.id`` is its first trace id and ``metadata["trace_ids"]`` lists them
all when there are several. Within a run, spans are ordered by start time, then span id (spans
without a start time last); a span's position in that order is the ``source_index`` of every
step made from it. Each span is read with OpenInference when it carries
``openinference.span.kind``, otherwise with the GenAI conventions (Langfuse's
``langfuse.observation.*`` attributes read as GenAI ones: :mod:`model.importers.langfuse`).
"""

from __future__ import annotations

from typing import Any

from model.core.errors import TraceImportError
from model.core.schema import Trace
from model.importers import genai, langfuse, openinference
from model.importers._common import (
    StepSink,
    expect_dict,
    expect_list,
    fail,
    join,
    mark_final_output,
    to_ns,
    type_name,
)
from model.importers._spanbase import Span, SpanBuilder

_ERROR_CODES = {2, "2", "STATUS_CODE_ERROR", "ERROR", "error", "Error"}


# --------------------------------------------------------------------------------------------
# attribute values


def any_value(value: Any, path: str) -> Any:
    """An OTLP ``AnyValue`` → a plain Python value."""
    value = expect_dict(value, path)
    if not value:
        return None
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            fail(join(path, "intValue"), f"expected an integer, got {value['intValue']!r}")
    if "doubleValue" in value:
        try:
            return float(value["doubleValue"])
        except (TypeError, ValueError):
            fail(join(path, "doubleValue"), f"expected a number, got {value['doubleValue']!r}")
    if "arrayValue" in value:
        arr = expect_dict(value["arrayValue"], join(path, "arrayValue"))
        vp = join(join(path, "arrayValue"), "values")
        return [any_value(v, join(vp, i)) for i, v in enumerate(expect_list(arr.get("values", []), vp))]
    if "kvlistValue" in value:
        kv = expect_dict(value["kvlistValue"], join(path, "kvlistValue"))
        vp = join(join(path, "kvlistValue"), "values")
        return key_values(kv.get("values", []), vp)
    if "bytesValue" in value:
        return value["bytesValue"]
    fail(path, f"unknown attribute value type; got keys {sorted(value)}")


def key_values(items: Any, path: str) -> dict[str, Any]:
    """OTLP ``[{"key", "value"}]`` → a flat dict."""
    out: dict[str, Any] = {}
    for i, kv in enumerate(expect_list(items, path)):
        ip = join(path, i)
        kv = expect_dict(kv, ip)
        key = kv.get("key")
        if not isinstance(key, str):
            fail(join(ip, "key"), f"expected a string, got {type_name(key)}")
        out[key] = any_value(kv.get("value", {}), join(ip, "value"))
    return out


def _attributes(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, list):
        return key_values(value, path)
    if isinstance(value, dict):
        return dict(value)
    fail(path, f"expected attributes as an object or a key/value list, got {type_name(value)}")


def _first(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    return None


def _id(value: Any, path: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str | int) and not isinstance(value, bool):
        return str(value)
    fail(path, f"expected an id string, got {type_name(value)}")


# --------------------------------------------------------------------------------------------
# spans from the two shapes


def _span(raw: Any, path: str, resource: dict[str, Any]) -> Span:
    s = expect_dict(raw, path)
    ctx: dict[str, Any] = s["context"] if isinstance(s.get("context"), dict) else {}
    trace_id = _id(_first(s, "traceId", "trace_id") or ctx.get("trace_id"), join(path, "traceId"))
    if trace_id is None:
        fail(join(path, "traceId"), "missing: every span needs its trace id")
    span_id = _id(_first(s, "spanId", "span_id") or ctx.get("span_id"), join(path, "spanId"))
    parent = _id(_first(s, "parentSpanId", "parent_span_id", "parent_id"), join(path, "parentSpanId"))
    name = s.get("name", "")
    if not isinstance(name, str):
        fail(join(path, "name"), f"expected a string, got {type_name(name)}")
    start = to_ns(_first(s, "startTimeUnixNano", "start_time_unix_nano", "start_time", "startTime"),
                  join(path, "startTimeUnixNano"))
    end = to_ns(_first(s, "endTimeUnixNano", "end_time_unix_nano", "end_time", "endTime"),
                join(path, "endTimeUnixNano"))
    attrs = _attributes(s.get("attributes"), join(path, "attributes"))
    if langfuse.TYPE in attrs:
        attrs = langfuse.to_genai(attrs, name)

    error, message = False, None
    status = s.get("status")
    if isinstance(status, dict):
        code = _first(status, "code", "status_code", "statusCode")
        error = isinstance(code, str | int) and code in _ERROR_CODES
        msg = _first(status, "message", "description")
        message = str(msg) if msg else None
    elif isinstance(status, str):
        error = status.upper() in ("ERROR", "STATUS_CODE_ERROR")
    elif status is not None:
        fail(join(path, "status"), f"expected an object or a string, got {type_name(status)}")
    if isinstance(s.get("status_code"), str | int) and s["status_code"] in _ERROR_CODES:  # Phoenix-style flat columns
        error = True
        message = message or (str(s["status_message"]) if s.get("status_message") else None)

    events: list[tuple[str, dict[str, Any]]] = []
    if s.get("events") is not None:
        ep = join(path, "events")
        for i, ev in enumerate(expect_list(s["events"], ep)):
            ev = expect_dict(ev, join(ep, i))
            events.append((str(ev.get("name", "")), _attributes(ev.get("attributes"), join(join(ep, i), "attributes"))))
    return Span(trace_id, span_id, parent, name, start, end, attrs, error, message, events, path, resource)


def _otlp_spans(data: dict[str, Any]) -> list[Span]:
    spans: list[Span] = []
    rsp = "resourceSpans"
    for i, rs in enumerate(expect_list(data[rsp], rsp)):
        rp = join(rsp, i)
        rs = expect_dict(rs, rp)
        resource = {}
        if isinstance(rs.get("resource"), dict):
            resource = _attributes(rs["resource"].get("attributes"), join(join(rp, "resource"), "attributes"))
        scope_key = "scopeSpans" if "scopeSpans" in rs else "instrumentationLibrarySpans"
        sp_path = join(rp, scope_key)
        for j, ss in enumerate(expect_list(rs.get(scope_key, []), sp_path)):
            sp = join(sp_path, j)
            ss = expect_dict(ss, sp)
            lp = join(sp, "spans")
            for k, raw in enumerate(expect_list(ss.get("spans", []), lp)):
                spans.append(_span(raw, join(lp, k), resource))
    return spans


def collect_spans(data: Any) -> list[Span]:
    """Every span of an OTLP/JSON document or a span list, normalised."""
    if isinstance(data, dict) and "resourceSpans" in data:
        return _otlp_spans(data)
    if isinstance(data, dict) and "spans" in data:
        return listed_spans(expect_list(data["spans"], "spans"), "spans")
    if isinstance(data, list):
        return listed_spans(data)
    fail("", f"expected OTLP/JSON (resourceSpans) or a list of spans, got {type_name(data)}")


def listed_spans(raw: list[Any], path: str = "", first: int = 0) -> list[Span]:
    """The spans of a list of span objects, normalised; each carries its own ``resource`` (as
    :meth:`~model.importers._spanbase.Span.to_json` writes it).

    ``path`` is where the list sits in the document and ``first`` the index of its first item there (a
    live run's later batch continues the count), so that a :class:`~model.core.errors.TraceImportError`
    names the item as the whole export numbers it.
    """
    return [_span(s, join(path, first + i), _own_resource(s)) for i, s in enumerate(raw)]


def _own_resource(raw: Any) -> dict[str, Any]:
    """A listed span's ``resource`` (flat attributes), as :meth:`Span.to_json` writes it."""
    res = raw.get("resource") if isinstance(raw, dict) else None
    attrs = res.get("attributes", res) if isinstance(res, dict) else None
    return dict(attrs) if isinstance(attrs, dict) else {}


def uses_openinference(data: Any) -> bool:
    """Whether any span of ``data`` carries ``openinference.span.kind`` (cheap, for detection)."""
    try:
        spans = collect_spans(data)
    except TraceImportError:
        return False
    return any(openinference.KIND in s.attrs for s in spans)


# --------------------------------------------------------------------------------------------
# traces


def _speakers(spans: list[Span]) -> tuple[dict[int, str | None], str | None]:
    """The agent each span runs under (its own agent name, else its nearest agent ancestor's), and
    the run's root agent: the first agent span (in ``spans``' order) with no agent span above it."""
    by_id = {s.span_id: s for s in spans if s.span_id is not None}
    own = {id(s): openinference.agent_name(s) or _genai_agent(s) for s in spans}
    out: dict[int, str | None] = {}
    root: str | None = None
    for s in spans:
        cur: Span | None = s
        seen: set[int] = set()
        name = None
        outermost = None
        while cur is not None and id(cur) not in seen:  # iterative; parent cycles can't hang it
            seen.add(id(cur))
            if own[id(cur)]:
                name = name or own[id(cur)]
                outermost = own[id(cur)]
            cur = by_id.get(cur.parent_id) if cur.parent_id is not None else None
        out[id(s)] = name
        if root is None and outermost is not None:
            root = outermost
    return out, root


def _genai_agent(span: Span) -> str | None:
    if genai.operation(span) in genai.AGENT_OPERATIONS:
        return genai.agent_name(span)
    return None


def _build(trace_id: str, spans: list[Span], max_steps: int | None, fmt: str, in_order: bool = False) -> Trace:
    if not in_order:
        spans = sorted(spans, key=lambda s: (s.start_ns is None, s.start_ns or 0, s.span_id or ""))
    parents = {s.parent_id for s in spans if s.parent_id is not None}
    speakers, root_agent = _speakers(spans)
    builder = SpanBuilder(StepSink(max_steps))
    session_id = None
    for index, span in enumerate(spans):
        if session_id is None:
            sid = _first(span.attrs, "gen_ai.conversation.id", "session.id")
            session_id = str(sid) if sid is not None else None
        is_leaf = span.span_id is None or span.span_id not in parents
        if openinference.KIND in span.attrs:
            openinference.handle(span, index, builder, speakers[id(span)], is_leaf)
        elif genai.is_genai(span):
            genai.handle(span, index, builder, speakers[id(span)], is_leaf)
    steps = builder.sink.steps
    if not steps:
        raise TraceImportError(
            f"trace {trace_id}: none of its {len(spans)} spans carries gen_ai.* or openinference.* "
            "attributes this importer reads (an LLM call, a tool execution or a retriever)",
            path=spans[0].path or None,
        )
    mark_final_output(steps)
    metadata: dict[str, Any] = {"source_format": fmt}
    service = next((s.resource.get("service.name") for s in spans if "service.name" in s.resource), None)
    if service is not None:
        metadata["service.name"] = service
    if root_agent:  # the run's agent (model.core.agents.resolve_agent reads it)
        metadata["gen_ai.agent.name"] = root_agent
    return Trace(id=trace_id, session_id=session_id, steps=steps, tools=list(builder.tools.values()),
                 metadata=metadata)


_SESSION_KEYS = ("gen_ai.conversation.id", "session.id")


def _session_of(spans: list[Span]) -> str | None:
    """The first ``gen_ai.conversation.id`` / ``session.id`` on a trace's spans (or their resource)."""
    for span in spans:
        sid = _first(span.attrs, *_SESSION_KEYS)
        if sid is None:
            sid = _first(span.resource, *_SESSION_KEYS)
        if sid is not None and str(sid):
            return str(sid)
    return None


def group_runs(
    spans: list[Span], *, session: str | None = None, join_unkeyed: bool = False
) -> list[tuple[str, str | None, list[Span]]]:
    """Spans → runs ``(trace id, session id, spans)``, in order of first appearance.

    Spans group by trace id; traces whose spans name the same session (``gen_ai.conversation.id``
    or ``session.id``) form one run (when only the LLM client is instrumented, each call is a
    trace of its own), with the first trace's id. ``session`` (the request's option) names the
    run wanted: the traces of that session and those naming none form one run with that id;
    traces of other sessions are left out, and when nothing is left the error lists the
    sessions the input holds. ``join_unkeyed``: the traces naming no session form one run too
    (no session id; what a whole-trace request that names none means), not one run each.
    """
    by_trace: dict[str, list[Span]] = {}
    for s in spans:
        by_trace.setdefault(s.trace_id, []).append(s)
    runs: dict[str, tuple[str, str | None, list[Span]]] = {}
    others: list[str] = []
    for tid, group in by_trace.items():
        sid = _session_of(group)
        if session is not None:
            if sid is not None and sid != session:
                others.append(sid)
                continue
            sid = session
        key = f"session:{sid}" if sid is not None else "unkeyed" if join_unkeyed else f"trace:{tid}"
        if key in runs:
            runs[key][2].extend(group)
        else:
            runs[key] = (tid, sid, list(group))
    if not runs:
        present = ", ".join(dict.fromkeys(others))
        fail("options.session", f"no span belongs to session {session!r}; the input holds sessions {present}")
    return list(runs.values())


def import_spans(
    data: Any, *, fmt: str, max_steps: int | None = None, session: str | None = None, in_order: bool = False,
    join_unkeyed: bool = False,
) -> list[Trace]:
    """Build one Trace per run from OTLP/JSON or a span list (see :func:`group_runs`).

    ``in_order=True`` keeps the spans in the order given (the order they arrived, for a live
    session) instead of ordering them by start time; ``source_index`` is then that position.
    """
    spans = collect_spans(data)
    if not spans:
        fail("resourceSpans" if isinstance(data, dict) and "resourceSpans" in data else "",
             "no spans: the trace is empty")
    traces = []
    for tid, sid, group in group_runs(spans, session=session, join_unkeyed=join_unkeyed):
        trace = _build(tid, group, max_steps, fmt, in_order)
        trace.session_id = sid
        ids = list(dict.fromkeys(s.trace_id for s in group))
        if len(ids) > 1:
            trace.metadata["trace_ids"] = ids
            trace.metadata["span_trace_ids"] = {s.span_id: s.trace_id for s in group if s.span_id}
        traces.append(trace)
    return traces


def unkeyed_warning(trace: Trace) -> str | None:
    """What to say about a run joined from several traces that name no session (``None`` for any
    other run): nothing told them apart, so they were read as one."""
    ids = trace.metadata.get("trace_ids")
    if trace.session_id is not None or not isinstance(ids, list) or len(ids) < 2:
        return None
    return (f"the input holds {len(ids)} traces and none names a session, so they were diagnosed as one run "
            f"(spans in time order); if they are separate runs, put the run's id on every span as "
            f"{' or '.join(_SESSION_KEYS)} (or send them one run a request)")


__all__ = ["any_value", "collect_spans", "group_runs", "import_spans", "key_values", "listed_spans",
           "unkeyed_warning", "uses_openinference"]
