"""Read a JSON request body into a pydantic model with errors we control.

FastAPI's own body parsing answers 400 "There was an error parsing the body" for JSON that nests
too deep; reading the body ourselves gives every unreadable body a 422 naming ``body`` (and the
field, for validation errors), in FastAPI's usual error shape. :func:`body_openapi` documents the
model and its examples in the OpenAPI schema, as a declared body parameter would.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from model.core.errors import InputError, TraceImportError
from model.importers import parse_json_text
from serve.error_handlers import loc_from_path
from serve.validation import check_json

M = TypeVar("M", bound=BaseModel)

_REF = "#/components/schemas/{model}"
#: Bodies up to this size are read on the event loop (a session's step, an outcome, a label: a few
#: hundred bytes; docs/benchmarks.md "Request path").
INLINE_BYTES = 8192
_EXTRA_SCHEMAS: dict[str, dict[str, Any]] = {}


async def parse_body(request: Request, model: type[M], raw: bytes | None = None) -> M:
    """The request's JSON body validated as ``model``; any failure → 422 with ``loc`` from ``body``.

    A body of up to :data:`INLINE_BYTES` is parsed and validated on the event loop (tens of µs: less
    than the hand-over to a thread and back); a larger one in the thread pool, not on the event loop
    (``raw``: the body when already read).
    """
    if raw is None:
        raw = await request.body()
    if len(raw) <= INLINE_BYTES:
        return parse_bytes(raw, model)
    return await run_in_threadpool(parse_bytes, raw, model)


def parse_bytes(raw: bytes, model: type[M]) -> M:
    """:func:`parse_body` on bytes already read (blocking)."""
    try:
        data = parse_json_text(raw)
    except TraceImportError as exc:
        raise RequestValidationError([{"loc": ("body",), "msg": str(exc), "type": "json_invalid"}]) from None
    return validate_body(data, model)


def validate_body(data: Any, model: type[M]) -> M:
    """Parsed JSON validated as ``model``; a failure → 422 with ``loc`` from ``body``."""
    try:
        check_json(data)  # what no store can keep: NUL, lone surrogates, 64-bit overflow, depth
    except InputError as exc:
        raise RequestValidationError(
            [{"loc": tuple(loc_from_path(exc.path)), "msg": exc.message, "type": "invalid_value"}]
        ) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"loc": ("body", *e["loc"]), "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False)
        ]
        raise RequestValidationError(errors) from None


def body_openapi(model: type[BaseModel], examples: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads ``model`` with :func:`parse_body`."""
    schema = model.model_json_schema(ref_template=_REF)
    for name, sub in schema.pop("$defs", {}).items():
        _EXTRA_SCHEMAS[name] = sub
    _EXTRA_SCHEMAS[model.__name__] = schema
    content: dict[str, Any] = {"schema": {"$ref": _REF.format(model=model.__name__)}}
    if examples:
        content["examples"] = examples
    return {"requestBody": {"required": True, "content": {"application/json": content}}}


def install_openapi_schemas(app: FastAPI) -> None:
    """Add the models documented by :func:`body_openapi` to the app's OpenAPI components."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            spec = original()
            schemas = spec.setdefault("components", {}).setdefault("schemas", {})
            for name, schema in _EXTRA_SCHEMAS.items():
                schemas.setdefault(name, schema)
            app.openapi_schema = spec
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
