"""Send each diagnosis to the user's OTLP endpoint as ``gen_ai.evaluation.result`` log events.

Set ``TRIAGE_EVAL_EXPORT_ENDPOINT`` to an OTLP/HTTP logs endpoint (e.g.
``http://127.0.0.1:4318/v1/logs``; Langfuse and Phoenix take OTLP too) and, when it needs them,
``TRIAGE_EVAL_EXPORT_HEADERS`` in the OpenTelemetry form (``Authorization=Bearer%20…,k=v``). The
events (:mod:`model.diagnosis.otel_events`) go out as a protobuf ``ExportLogsServiceRequest`` from one
background thread per worker, so a slow or absent collector never delays an answer; what cannot
be sent is logged and dropped (``triage_eval_export`` counts are in the log).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from urllib.parse import unquote

import httpx

from model.diagnosis.otel_events import EVENT_NAME, EvaluationEvent

log = logging.getLogger("triage.eval_export")


def parse_headers(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` with URL-encoded values (``OTEL_EXPORTER_OTLP_HEADERS``'s form).

    >>> parse_headers("Authorization=Bearer%20abc, x-team=ops")
    {'Authorization': 'Bearer abc', 'x-team': 'ops'}
    """
    out: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if sep and key.strip():
            out[key.strip()] = unquote(value.strip())
    return out


def encode_events(events: list[EvaluationEvent], *, now_ns: int | None = None) -> bytes:
    """The events as one protobuf ``ExportLogsServiceRequest``."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    now = now_ns if now_ns is not None else time.time_ns()
    req = ExportLogsServiceRequest()
    rl = req.resource_logs.add()
    kv = rl.resource.attributes.add()
    kv.key, kv.value.string_value = "service.name", "agent-triage"
    sl = rl.scope_logs.add()
    sl.scope.name = "agent-triage"
    for ev in events:
        rec = sl.log_records.add()
        rec.time_unix_nano = rec.observed_time_unix_nano = now
        rec.event_name = EVENT_NAME
        rec.trace_id = bytes.fromhex(ev.trace_id)
        rec.span_id = bytes.fromhex(ev.span_id)
        for key, value in {"event.name": EVENT_NAME, **ev.attributes()}.items():
            a = rec.attributes.add()
            a.key = key
            if isinstance(value, float):
                a.value.double_value = value
            else:
                a.value.string_value = value
    return bytes(req.SerializeToString())


class EvaluationExporter:
    """Queues events and posts them from a daemon thread; :meth:`close` flushes."""

    def __init__(self, endpoint: str, *, headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        self._http = httpx.Client(headers={"Content-Type": "application/x-protobuf", **(headers or {})},
                                  timeout=timeout_s)
        self._queue: queue.Queue[list[EvaluationEvent] | None] = queue.Queue(maxsize=1000)
        self._thread = threading.Thread(target=self._run, name="triage-eval-export", daemon=True)
        self._thread.start()

    def submit(self, events: list[EvaluationEvent]) -> None:
        if not events:
            return
        try:
            self._queue.put_nowait(events)
        except queue.Full:
            log.warning("evaluation export queue full; %d event(s) dropped", len(events))

    def _run(self) -> None:
        while True:
            events = self._queue.get()
            try:
                if events is None:
                    return
                r = self._http.post(self.endpoint, content=encode_events(events))
                if r.status_code >= 300:
                    log.warning("evaluation export to %s: HTTP %d", self.endpoint, r.status_code)
            except httpx.HTTPError as exc:
                log.warning("evaluation export to %s failed: %s", self.endpoint, exc)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        self._queue.join()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)
        self._http.close()


__all__ = ["EvaluationExporter", "encode_events", "parse_headers"]
