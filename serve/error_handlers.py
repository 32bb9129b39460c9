"""Map our exceptions to HTTP responses: the one place where errors become status codes.

Every error body has FastAPI's validation shape, ``{"detail": [{"loc", "msg", "type"}]}``, so a
client reads one format whatever went wrong; ``loc`` names the field.
"""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from model.core.errors import (
    ConflictError,
    InputError,
    ModelLoadError,
    NotFoundError,
    RateLimitedError,
    StoreError,
    StoreUnavailableError,
    StoreValueError,
    TooLargeError,
)

_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def loc_from_path(path: str | None, prefix: tuple[str | int, ...] = ("body",)) -> list[str | int]:
    """``"trace.messages[3].role"`` → ``["body", "trace", "messages", 3, "role"]``; a path that starts
    with ``query.`` or ``path.`` names a URL parameter (``"query.cursor"`` → ``["query", "cursor"]``)."""
    if path and path.startswith(("query.", "path.")):
        prefix = ()
    loc: list[str | int] = list(prefix)
    for name, index in _PART.findall(path or ""):
        loc.append(int(index) if index else name)
    return loc


def error_body(loc: list[str | int], msg: str, type_: str) -> dict[str, object]:
    return {"detail": [{"loc": loc, "msg": msg, "type": type_}]}


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn our errors into 4xx responses (never a 500 for bad input)."""

    @app.exception_handler(TooLargeError)
    async def _too_large(_: Request, exc: TooLargeError) -> JSONResponse:
        return JSONResponse(status_code=413, content=error_body(loc_from_path(exc.path), exc.message, "too_large"))

    @app.exception_handler(InputError)
    async def _input(_: Request, exc: InputError) -> JSONResponse:
        return JSONResponse(
            status_code=422, content=error_body(loc_from_path(exc.path), exc.message, "invalid_input")
        )

    @app.exception_handler(NotFoundError)
    async def _not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return JSONResponse(status_code=404, content=error_body(["path"], str(exc), "not_found"))

    @app.exception_handler(ConflictError)
    async def _conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return JSONResponse(status_code=409, content=error_body(["body"], str(exc), "conflict"))

    @app.exception_handler(RecursionError)
    async def _deep(_: Request, exc: RecursionError) -> JSONResponse:
        return JSONResponse(
            status_code=422, content=error_body(["body"], "JSON nesting too deep", "nesting_too_deep")
        )

    @app.exception_handler(RateLimitedError)
    async def _limited(_: Request, exc: RateLimitedError) -> JSONResponse:
        return JSONResponse(
            status_code=429,
            content=error_body([], exc.message, f"rate_limited.{exc.scope}"),
            headers={"Retry-After": exc.retry_after_header},
        )

    @app.exception_handler(StoreUnavailableError)
    async def _store_unavailable(_: Request, exc: StoreUnavailableError) -> JSONResponse:
        # The store is down or busy past its timeout: the request may be retried.
        return JSONResponse(
            status_code=503,
            content=error_body([], str(exc), "store_unavailable"),
            headers={"Retry-After": "1"},
        )

    @app.exception_handler(StoreValueError)
    async def _store_value(_: Request, exc: StoreValueError) -> JSONResponse:
        return JSONResponse(status_code=422, content=error_body(["body"], str(exc), "invalid_value"))

    @app.exception_handler(StoreError)
    async def _store(_: Request, exc: StoreError) -> JSONResponse:
        return JSONResponse(status_code=500, content=error_body([], str(exc), "store_error"))

    @app.exception_handler(ModelLoadError)
    async def _model(_: Request, exc: ModelLoadError) -> JSONResponse:
        return JSONResponse(status_code=503, content=error_body([], str(exc), "model_unavailable"))
