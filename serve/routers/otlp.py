"""``POST /otlp/v1/traces``: an OTLP/HTTP receiver, so the standard OpenTelemetry exporters feed
live sessions.

Point an exporter at it with ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://HOST:PORT/otlp/v1/traces``
and ``OTEL_EXPORTER_OTLP_TRACES_HEADERS=Authorization=Bearer%20<key>``. Bodies are protobuf or
OTLP/JSON, plain or ``Content-Encoding: gzip``. Spans group into runs by ``gen_ai.conversation.id``
/ ``session.id`` (else the trace id), and each run is appended to the session of that id,
numbered in arrival order, so ``GET /v1/sessions/{id}`` shows the diagnosis while the agent runs.
The answer is an empty ``ExportTraceServiceResponse`` in the request's encoding; unreadable
bodies get 400 (the exporters do not retry it), bad keys 401, store trouble 503 (they retry).
"""

from __future__ import annotations

import zlib

from fastapi import APIRouter, HTTPException, Request, Response

from model.core.errors import InputError, TooLargeError
from model.importers.otlp import decode_export, encode_response
from serve.auth import PrincipalDep
from serve.deps import ServiceDep, SettingsDep
from serve.routers._common import ERRORS, TOO_LARGE, call

router = APIRouter(prefix="/otlp/v1", tags=["otlp"])


def _bad(msg: str, loc: str = "body") -> HTTPException:
    return HTTPException(status_code=400, detail=[{"loc": [loc], "msg": msg, "type": "otlp_invalid"}])


def _decompress(body: bytes, encoding: str, limit: int) -> bytes:
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise _bad(f"unsupported Content-Encoding {encoding!r}: send gzip or none", "content-encoding")
    # bounded: a small compressed body must not expand past the body limit
    d = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise _bad(f"not {encoding} data: {exc}") from None
    if len(out) > limit or d.unconsumed_tail:
        raise HTTPException(status_code=413, detail=[{"loc": ["body"], "type": "too_large",
                                                      "msg": f"decompressed body larger than {limit} bytes"}])
    return out


@router.post(
    "/traces",
    summary="OTLP/HTTP trace receiver (protobuf or JSON, gzip)",
    responses={**ERRORS, **TOO_LARGE, 400: {"description": "Not an ExportTraceServiceRequest"}},
)
async def receive_traces(
    request: Request, settings: SettingsDep, principal: PrincipalDep, service: ServiceDep
) -> Response:
    """Spans from the standard OpenTelemetry exporters into live sessions (see the module docs)."""
    content_type = request.headers.get("content-type", "application/x-protobuf")
    raw = _decompress(await request.body(), request.headers.get("content-encoding", ""), settings.max_body_bytes)
    try:
        async with request.app.state.gate.slot(principal.tenant):  # CPU work, shared fairly by tenants
            document = await call(decode_export, raw, content_type)
            await call(service.append_spans, principal.tenant, document)
    except TooLargeError:
        raise  # 413
    except InputError as exc:
        raise _bad(str(exc), exc.path or "body") from None
    content, media = encode_response(content_type)
    return Response(content=content, media_type=media)
