"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) served from the package: no CDN, so they work offline.

The bundles are vendored under ``serve/ui/static/vendor`` (with their licences); the pages start
them from a static script, not an inline one, so the console's Content-Security-Policy holds.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import HTMLResponse

router = APIRouter(include_in_schema=False)

_V = "/ui/static/vendor"

_DOCS = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agent-triage — API docs</title>
<link rel="stylesheet" href="{_V}/swagger-ui/swagger-ui.css"></head>
<body><div id="swagger-ui" data-openapi="/openapi.json"></div>
<script src="{_V}/swagger-ui/swagger-ui-bundle.js"></script>
<script src="/ui/static/docs-init.js"></script></body></html>
"""

_REDOC = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>agent-triage — API reference</title></head>
<body><div id="redoc" data-openapi="/openapi.json"></div>
<script src="{_V}/redoc/redoc.standalone.js"></script>
<script src="/ui/static/docs-init.js"></script></body></html>
"""


@router.get("/docs", response_class=HTMLResponse)
def docs() -> HTMLResponse:
    return HTMLResponse(_DOCS)


@router.get("/redoc", response_class=HTMLResponse)
def redoc() -> HTMLResponse:
    return HTMLResponse(_REDOC)


__all__ = ["router"]
