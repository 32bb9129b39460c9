"""Importers: outside trace formats → :class:`~model.core.schema.Trace`, auto-detected.

Formats (:data:`FORMATS`):

- ``native``: our own Trace JSON (an object with ``steps``, or a list of them);
- ``openai``: chat messages, ``{"messages": [...]}``, ``{"history": [...]}`` or a bare list, with
  multi-agent logs (AG2, Magentic-One) resolved as :mod:`model.importers.messages` says; OpenAI
  Responses API items (``to_input_list()``) and LangChain message dicts (``messages_to_dict``,
  ``model_dump``) read as chat messages (:mod:`model.importers.dialects`);
- ``otel``: OpenTelemetry GenAI spans, OTLP/JSON or a list of span objects
  (:mod:`model.importers.genai`, :mod:`model.importers.spans`);
- ``openinference``: OpenInference spans, same containers (:mod:`model.importers.openinference`);
- the OpenAI Agents SDK's native trace export (``{"data": [trace, span, …]}``) is read as ``otel``
  spans (:mod:`model.importers.agents_sdk`).

Detection: an object with ``steps`` is native; ``resourceSpans`` (or a list of objects with
span keys such as ``trace_id`` / ``traceId`` / ``span_id`` / ``attributes``) is spans, read as
``openinference`` when a span carries ``openinference.span.kind``, else ``otel``; ``messages`` /
``history`` or a list of objects with ``role`` is ``openai``.

Every step keeps ``source_index`` (message index; for spans, the position after ordering by start
time then span id) and, for spans, ``span_id``. Bad input raises
:class:`~model.core.errors.TraceImportError` naming the field path (``messages[3].role``) or the
1-based line of a JSONL file; more steps than ``max_steps`` raises
:class:`~model.core.errors.TooLargeError`.

>>> from model.importers import load_trace
>>> trace = load_trace({"messages": [
...     {"role": "user", "content": "Weather in Paris?"},
...     {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
...         "function": {"name": "weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]},
...     {"role": "tool", "tool_call_id": "c1", "content": "18C, sunny"},
...     {"role": "assistant", "content": "It is 18C and sunny."}]})
>>> [(s.kind.value, s.source_index) for s in trace.steps]
[('user_input', 0), ('tool_call', 1), ('tool_result', 2), ('final_output', 3)]
>>> trace.steps[2].tool_name
'weather'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from model.core.errors import InputError, TooLargeError, TraceImportError
from model.core.schema import Trace
from model.importers._common import type_name
from model.importers.agents_sdk import is_agents_export, to_spans
from model.importers.dialects import is_dialect_item
from model.importers.messages import import_messages
from model.importers.native import import_native
from model.importers.openinference import KIND as _OI_KIND
from model.importers.spans import import_spans

FORMATS: tuple[str, ...] = ("native", "openai", "otel", "openinference")
_SPAN_KEYS = {"trace_id", "traceId", "span_id", "spanId", "context", "attributes", "startTimeUnixNano",
              "parent_span_id", "parentSpanId"}


def parse_json_text(text: str | bytes) -> Any:
    """Parse JSON text; every failure becomes a :class:`TraceImportError` that says where.

    >>> parse_json_text('{"messages": [')
    Traceback (most recent call last):
    ...
    model.core.errors.TraceImportError: line 1: invalid JSON at column 15: Expecting value (the input ends early: truncated?)
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise TraceImportError(f"not UTF-8 text (bad byte at offset {exc.start})") from exc
    elif text.startswith("\ufeff"):
        text = text[1:]
    if not text.strip():
        raise TraceImportError("empty input: expected a JSON trace")
    try:
        return json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        # an unterminated string always runs to the end of the input
        truncated = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        hint = " (the input ends early: truncated?)" if truncated else ""
        raise TraceImportError(f"invalid JSON at column {exc.colno}: {exc.msg}{hint}", line=exc.lineno) from exc
    except RecursionError as exc:
        raise TraceImportError("nesting too deep: the JSON nests lists/objects deeper than the parser allows") from exc
    except TraceImportError:
        raise
    except ValueError as exc:  # an integer of more digits than int() takes (sys.int_info)
        raise TraceImportError(f"unreadable number: {exc}") from exc


def _not_json(name: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity`` are Python's, not JSON's."""
    raise TraceImportError(f"{name} is not a JSON number: use a finite number or null")


def _span_like(item: Any) -> bool:
    return isinstance(item, dict) and bool(_SPAN_KEYS.intersection(item))


def _raw_has_oi(data: Any) -> bool:
    """Whether a span container mentions ``openinference.span.kind`` (raw scan, no normalising)."""
    def attrs_have(attrs: Any) -> bool:
        if isinstance(attrs, dict):
            return _OI_KIND in attrs
        if isinstance(attrs, list):
            return any(isinstance(kv, dict) and kv.get("key") == _OI_KIND for kv in attrs)
        return False

    if isinstance(data, dict) and isinstance(data.get("resourceSpans"), list):
        for rs in data["resourceSpans"]:
            scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans", [])) if isinstance(rs, dict) else []
            for ss in scopes if isinstance(scopes, list) else []:
                spans = ss.get("spans") if isinstance(ss, dict) else None
                if isinstance(spans, list) and any(
                    isinstance(s, dict) and attrs_have(s.get("attributes")) for s in spans
                ):
                    return True
        return False
    spans = data.get("spans") if isinstance(data, dict) else data
    return isinstance(spans, list) and any(isinstance(s, dict) and attrs_have(s.get("attributes")) for s in spans)


def detect_format(data: Any) -> str:
    """Name the format of parsed JSON (one of :data:`FORMATS`).

    >>> detect_format([{"role": "user", "content": "hi"}])
    'openai'
    >>> detect_format({"resourceSpans": []})
    'otel'
    """
    spans = False
    if isinstance(data, dict):
        if "steps" in data:
            return "native"
        if "resourceSpans" in data:
            spans = True
        elif "messages" in data or "history" in data:
            return "openai"
        elif isinstance(data.get("spans"), list):
            spans = True
        else:
            keys = ", ".join(sorted(map(str, data))[:8]) or "none"
            raise TraceImportError(
                f"unrecognised trace: an object with keys [{keys}]; expected one of {', '.join(FORMATS)} "
                "(an object with 'steps', 'messages', 'history' or 'resourceSpans', or a list of "
                "messages or spans)"
            )
    elif isinstance(data, list):
        if not data:
            raise TraceImportError("empty input: the list holds no messages or spans")
        head = data[:20]
        if all(isinstance(x, dict) and "steps" in x for x in head):
            return "native"
        if any(_span_like(x) for x in head):
            spans = True
        elif any(isinstance(x, dict) and ("role" in x or is_dialect_item(x)) for x in head):
            return "openai"
        else:
            raise TraceImportError(
                f"unrecognised trace: a list whose first item is {type_name(data[0])}"
                + (f" with keys [{', '.join(sorted(map(str, data[0]))[:8])}]" if isinstance(data[0], dict) else "")
                + f"; expected messages (with 'role') or spans (with 'trace_id'/'span_id'); formats: {', '.join(FORMATS)}"
            )
    else:
        raise TraceImportError(
            f"unrecognised trace: got {type_name(data)}; expected a JSON object or list in one of the "
            f"formats {', '.join(FORMATS)}"
        )
    assert spans
    return "openinference" if _raw_has_oi(data) else "otel"


def _check_options(format: str, max_steps: int | None) -> None:
    if format != "auto" and format not in FORMATS:
        raise TraceImportError(f"unknown format {format!r}; valid formats: auto, {', '.join(FORMATS)}", path="format")
    if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
        raise InputError(f"max_steps must be a positive whole number, got {max_steps!r}", path="max_steps")


def load_traces(
    data: Any,
    *,
    format: str = "auto",
    speakers: dict[str, str] | None = None,
    max_steps: int | None = None,
    session: str | None = None,
    join_unkeyed: bool = False,
) -> list[Trace]:
    """Parsed JSON → traces (OTLP/JSON and span lists give one per run; messages give one).

    Spans form runs by trace id, and traces naming one session (``session.id`` /
    ``gen_ai.conversation.id``) merge into one run (:func:`model.importers.spans.group_runs`).

    Parameters
    ----------
    data:
        What :func:`parse_json_text` (or ``json.loads``) returned.
    format:
        ``"auto"`` (detect) or one of :data:`FORMATS`.
    speakers:
        Multi-agent chat logs: sender ``name`` → role (``user``, ``assistant``, ``tool``,
        ``system``), overriding the built-in rules.
    max_steps:
        Largest number of steps one trace may have; more raises :class:`TooLargeError`.
    session:
        The session the input's steps belong to: spans of that session (and those naming none)
        form one run; other formats get it as their ``session_id``.
    join_unkeyed:
        Spans of several traces that name no session form one run (in time order), not one run
        each (:func:`model.importers.spans.unkeyed_warning` says so on the trace).

    Raises
    ------
    TraceImportError
        The input can't be read; ``path`` names the field.
    TooLargeError
        A trace has more than ``max_steps`` steps.
    """
    _check_options(format, max_steps)
    try:
        if format in ("auto", "otel") and is_agents_export(data):  # the Agents SDK's native trace export
            return import_spans(to_spans(data), fmt="otel", max_steps=max_steps, session=session,
                                join_unkeyed=join_unkeyed)
        fmt = detect_format(data) if format == "auto" else format
        if fmt in ("otel", "openinference"):
            return import_spans(data, fmt=fmt, max_steps=max_steps, session=session, join_unkeyed=join_unkeyed)
        if fmt == "native":
            if isinstance(data, list):
                if not data:
                    raise TraceImportError("empty input: the list holds no traces")
                traces = [import_native(t, max_steps=max_steps, prefix=f"[{i}]") for i, t in enumerate(data)]
            else:
                traces = [import_native(data, max_steps=max_steps)]
        else:
            traces = [import_messages(data, speakers=speakers, max_steps=max_steps)]
        if session is not None:
            for t in traces:
                t.session_id = session
        return traces
    except RecursionError as exc:
        raise TraceImportError("nesting too deep: the input nests lists/objects too deeply to read") from exc


def load_trace(
    data: Any,
    *,
    format: str = "auto",
    speakers: dict[str, str] | None = None,
    max_steps: int | None = None,
    session: str | None = None,
) -> Trace:
    """Like :func:`load_traces`, for input that must hold exactly one run: spans of several
    traces that name no session are that run (``join_unkeyed``)."""
    traces = load_traces(data, format=format, speakers=speakers, max_steps=max_steps, session=session,
                         join_unkeyed=True)
    return only_run(traces)


def only_run(traces: list[Trace]) -> Trace:
    """The one run of ``traces``; several raise :class:`TraceImportError` listing them and saying
    how to name the one wanted."""
    if len(traces) != 1:
        runs = ", ".join(f"trace {t.id}" + (f" (session {t.session_id})" if t.session_id else "") for t in traces[:5])
        raise TraceImportError(
            f"expected one run, got {len(traces)}: {runs}{', …' if len(traces) > 5 else ''}; spans group into "
            "one run by session.id / gen_ai.conversation.id, or by the `session` option "
            "(options.session) naming the run"
        )
    return traces[0]


def parse_documents(text: str | bytes) -> list[Any]:
    """JSON text, or JSON Lines (one document a line, as OpenTelemetry's file exporter writes)
    → the documents. Errors name the 1-based line.

    >>> parse_documents('{"a": 1}\\n{"b": 2}\\n')
    [{'a': 1}, {'b': 2}]
    """
    try:
        return [parse_json_text(text)]
    except TraceImportError as exc:
        if "Extra data" not in exc.message:
            raise
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8-sig")
    docs: list[Any] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            docs.append(parse_json_text(line))
        except TraceImportError as exc:
            raise TraceImportError(
                f"{exc.message} (read as JSON Lines, one document a line: a .jsonl of separate traces "
                "is scored line by line with `triage diagnose --jsonl`)", line=lineno
            ) from exc
    return docs


def _span_document(doc: Any) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("resourceSpans"), list)) or (
        isinstance(doc, list) and bool(doc) and all(_span_like(x) for x in doc[:20])
    )


def merge_documents(docs: list[Any]) -> Any:
    """Several documents → one input: OTLP/JSON export batches (or span lists) merge into one
    OTLP/JSON document, so a trace written over several lines is read whole; a single document is
    returned as it is. Anything else is a list of separate traces: :class:`TraceImportError`."""
    if len(docs) == 1:
        return docs[0]
    if all(isinstance(d, dict) and isinstance(d.get("resourceSpans"), list) for d in docs):
        return {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}
    if all(isinstance(d, list) and _span_document(d) for d in docs):
        return [s for d in docs for s in d]
    first = next((i for i, d in enumerate(docs, start=1) if not _span_document(d)), 1)
    raise TraceImportError(
        f"{len(docs)} JSON documents, and line {first} is not an OTLP/JSON export batch: only span "
        "exports merge into runs; score an archive of separate traces with `triage diagnose --jsonl`",
        line=first,
    )


def load_text(
    text: str | bytes,
    *,
    format: str = "auto",
    speakers: dict[str, str] | None = None,
    max_steps: int | None = None,
    session: str | None = None,
) -> list[Trace]:
    """JSON or JSON Lines text → the runs it holds (span exports over several lines merged)."""
    data = merge_documents(parse_documents(text))
    return load_traces(data, format=format, speakers=speakers, max_steps=max_steps, session=session)


def _relabel(exc: InputError, *, line: int | None = None, file: str | None = None) -> InputError:
    """The same error (same class) with a JSONL line and/or a file name added."""
    path = exc.path
    if file is not None:
        path = f"{file}:{path}" if path else file
    new = type(exc)(exc.message, path=path, line=line if line is not None else exc.line)
    return new


def _read_file(path: Path, **opts: Any) -> list[Trace]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceImportError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if path.suffix.lower() != ".jsonl":
        return load_traces(parse_json_text(raw), **opts)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise TraceImportError("not UTF-8 text", line=line) from exc
    docs: list[tuple[int, Any]] = []
    for lineno, line_text in enumerate(text.splitlines(), start=1):
        if not line_text.strip():
            continue
        try:
            docs.append((lineno, parse_json_text(line_text)))
        except InputError as exc:
            raise _relabel(exc, line=lineno) from exc
    if not docs:
        raise TraceImportError(f"{path.name}: empty input: the file holds no traces")
    if len(docs) > 1 and all(isinstance(d, dict) and isinstance(d.get("resourceSpans"), list) for _, d in docs):
        # OpenTelemetry's file exporter: one export batch a line, a trace over several lines
        return load_traces(merge_documents([d for _, d in docs]), **opts)
    traces: list[Trace] = []
    for lineno, data in docs:
        try:
            traces.extend(load_traces(data, **opts))
        except InputError as exc:
            raise _relabel(exc, line=lineno) from exc
    return traces


def read_path(
    path: Path | str,
    *,
    format: str = "auto",
    speakers: dict[str, str] | None = None,
    max_steps: int | None = None,
) -> list[Trace]:
    """Read traces from a ``.json`` file, a ``.jsonl`` file (one trace per line, errors carry the
    1-based ``line``; OTLP/JSON export batches, one a line, merge into runs) or a folder (every ``*.json`` / ``*.jsonl`` in it, sorted by name; errors
    name the file in ``path``)."""
    p = Path(path)
    opts: dict[str, Any] = {"format": format, "speakers": speakers, "max_steps": max_steps}
    _check_options(format, max_steps)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in (".json", ".jsonl"))
        if not files:
            raise TraceImportError(f"{p}: the folder holds no .json or .jsonl files")
        traces: list[Trace] = []
        for f in files:
            try:
                traces.extend(_read_file(f, **opts))
            except InputError as exc:
                raise _relabel(exc, file=f.name) from exc
        return traces
    if not p.exists():
        raise TraceImportError(f"no such file or folder: {p}")
    return _read_file(p, **opts)


__all__ = [
    "FORMATS",
    "TooLargeError",
    "TraceImportError",
    "detect_format",
    "load_text",
    "load_trace",
    "load_traces",
    "merge_documents",
    "only_run",
    "parse_documents",
    "parse_json_text",
    "read_path",
]
