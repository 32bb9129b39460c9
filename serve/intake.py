"""One intake for every door: a ``/v1/diagnose`` body → the request and its trace.

The HTTP route (:mod:`serve.routers.diagnose`), the heavy lane's helper process
(:mod:`serve.heavy`) and ``triage diagnose`` (:mod:`serve.cli.core`, each line of ``--jsonl``
too) read their input here, so they accept and refuse the same inputs with the same errors:

- the body is JSON, or JSON Lines of OTLP/JSON export batches (OpenTelemetry's file exporter),
  merged into one document (:func:`model.importers.merge_documents`);
- a body with a ``trace`` key is the :class:`~model.core.options.DiagnoseRequest` envelope; any
  other is the bare trace, wrapped with the door's ``format`` and ``options`` (the HTTP route's
  query parameters, the CLI's flags). With ``override`` (the CLI) those win over an envelope's;
  without (the HTTP route) an envelope's own are kept;
- the envelope is checked for what no store keeps (:func:`serve.validation.check_json`) and
  validated; the trace is imported with its options (the step limit of the door), and its runs'
  ids checked as the store checks them (:func:`serve.validation.check_trace_fields`).

Spans of several traces that name no session are one run, in time order (what an agent writes
when only its LLM client is instrumented: one trace per call): the response says so, naming
the attributes that would separate runs (the diagnoser's first warning,
:func:`model.importers.spans.unkeyed_warning`, so it is stored with the diagnosis too).

Errors: an unreadable or invalid body raises :class:`~fastapi.exceptions.RequestValidationError`
(``loc`` from ``body``; a JSON error keeps the importer's error as its cause), the importer's
errors (:class:`~model.core.errors.InputError`, :class:`~model.core.errors.TooLargeError`) name
their place in the envelope (``trace.messages[3].role``, ``options.session``).

>>> request, trace = take(b'{"messages": [{"role": "user", "content": "hi"}]}', max_steps=100)
>>> request.format, [s.kind.value for s in trace.steps]
('auto', ['user_input'])
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.exceptions import RequestValidationError

from model.core.errors import InputError, TraceImportError
from model.core.options import DiagnoseRequest
from model.core.schema import Trace
from model.importers import load_traces, merge_documents, only_run, parse_documents
from serve.body import validate_body
from serve.validation import check_trace_fields


def read_request(
    raw: bytes, *, format: str | None = None, options: Mapping[str, Any] | None = None, override: bool = False
) -> DiagnoseRequest:
    """The body as a validated :class:`DiagnoseRequest` (blocking: parsing and validation).

    ``format`` and ``options`` are the door's own (``None``: not given); they make the envelope of a
    bare trace, and with ``override`` they win over an envelope's.
    """
    try:
        data = merge_documents(parse_documents(raw))
    except TraceImportError as exc:
        raise RequestValidationError([{"loc": ("body",), "msg": str(exc), "type": "json_invalid"}]) from exc
    bare = not (isinstance(data, dict) and "trace" in data)
    if bare:
        data = {"trace": data}
    if bare or override:
        if format is not None:
            data["format"] = format
        if options:
            own = data.get("options", {})  # not an object: left for validation to name
            data["options"] = {**own, **options} if isinstance(own, dict) else own
    return validate_body(data, DiagnoseRequest)


def runs(request: DiagnoseRequest, *, max_steps: int) -> list[Trace]:
    """The runs of the request's trace; an importer's error names its place in the envelope."""
    try:
        traces = load_traces(
            request.trace,
            format=request.format,
            speakers=request.options.speakers or None,
            max_steps=max_steps,
            session=request.options.session,
            join_unkeyed=True,
        )
    except InputError as exc:
        exc.path = _body_path(exc.path)
        raise
    for trace in traces:
        check_trace_fields(trace)  # what the store keeps: every door refuses what it would not
    return traces


def take(
    raw: bytes, *, max_steps: int, format: str | None = None, options: Mapping[str, Any] | None = None,
    override: bool = False,
) -> tuple[DiagnoseRequest, Trace]:
    """The request and its one run (blocking: the thread pool, or the heavy lane's helper); input
    holding several runs is refused with the runs listed (:func:`model.importers.only_run`)."""
    request = read_request(raw, format=format, options=options, override=override)
    return request, only_run(runs(request, max_steps=max_steps))


def as_input_error(exc: RequestValidationError) -> InputError:
    """A body error as the importer's :class:`InputError` (what the CLI prints): the JSON error it
    came from, else its first error with the field's path (``options.detectors``)."""
    if isinstance(exc.__cause__, InputError):
        return exc.__cause__
    first = exc.errors()[0]
    path = ".".join(str(p) for p in first["loc"][1:]) or None
    return InputError(first["msg"], path=path)


def _body_path(path: str | None) -> str:
    """Where an importer's error is in the request body: the ``speakers`` option lives under
    ``options`` (``options.session`` names itself); everything else is inside ``trace``."""
    if path and path.startswith("options."):
        return path
    if path and (path == "speakers" or path.startswith("speakers.")):
        return f"options.{path}"
    return f"trace.{path}" if path else "trace"


__all__ = ["as_input_error", "read_request", "runs", "take"]
