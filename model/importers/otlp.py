"""OTLP/HTTP trace export requests (what the standard OpenTelemetry exporters send) → OTLP/JSON.

``ExportTraceServiceRequest`` arrives as protobuf (``application/x-protobuf``, the default of
the SDKs' HTTP exporters) or as OTLP/JSON (``application/json``). Both become the OTLP/JSON
document that :mod:`model.importers.spans` reads, with trace and span ids as hex strings (the
protobuf JSON mapping would give base64).

>>> from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
>>> req = ExportTraceServiceRequest()
>>> span = req.resource_spans.add().scope_spans.add().spans.add()
>>> span.trace_id, span.span_id, span.name = bytes(range(16)), bytes(range(8)), "chat"
>>> doc = decode_export(req.SerializeToString(), "application/x-protobuf")
>>> s = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
>>> s["traceId"], s["spanId"], s["name"]
('000102030405060708090a0b0c0d0e0f', '0001020304050607', 'chat')
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from model.core.errors import TraceImportError
from model.importers import parse_json_text

_ID_KEYS = ("traceId", "spanId", "parentSpanId")


def _hex_ids(doc: dict[str, Any]) -> None:
    for rs in doc.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in _ID_KEYS:
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
                for link in span.get("links", []):
                    for key in ("traceId", "spanId"):
                        if link.get(key):
                            link[key] = base64.b64decode(link[key]).hex()


def decode_export(body: bytes, content_type: str) -> dict[str, Any]:
    """An export request body (already decompressed) → an OTLP/JSON document.

    Raises
    ------
    TraceImportError
        The body is not an ``ExportTraceServiceRequest`` in the given encoding, or the content
        type is neither protobuf nor JSON.
    """
    media = content_type.split(";")[0].strip().lower()
    if media in ("application/json", ""):
        data = parse_json_text(body)
        if not isinstance(data, dict) or not isinstance(data.get("resourceSpans", []), list):
            raise TraceImportError("expected an OTLP/JSON ExportTraceServiceRequest: an object with resourceSpans")
        data.setdefault("resourceSpans", [])
        return data
    if media not in ("application/x-protobuf", "application/protobuf"):
        raise TraceImportError(
            f"unsupported content type {content_type!r}: send application/x-protobuf or application/json",
            path="content-type",
        )
    from google.protobuf.json_format import MessageToDict
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError as exc:
        raise TraceImportError(f"not a protobuf ExportTraceServiceRequest: {exc}") from exc
    doc: dict[str, Any] = MessageToDict(req)
    try:
        _hex_ids(doc)
    except (binascii.Error, ValueError) as exc:  # pragma: no cover - MessageToDict writes valid base64
        raise TraceImportError(f"unreadable span id: {exc}") from exc
    doc.setdefault("resourceSpans", [])
    return doc


def encode_response(content_type: str) -> tuple[bytes, str]:
    """An empty ``ExportTraceServiceResponse`` (everything accepted) in the request's encoding."""
    media = content_type.split(";")[0].strip().lower()
    if media in ("application/x-protobuf", "application/protobuf"):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        return ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf"
    return b"{}", "application/json"


__all__ = ["decode_export", "encode_response"]
