"""The console at ``/ui``: server-rendered pages (Jinja2, autoescaped) with a little JavaScript.

Every page answers ``?format=json`` with what it renders (its JSON twin). Signing in with an API key
opens a server-side session (:mod:`serve.auth`); every read is scoped to the session's tenant, and
every write (a label, sign-out) carries the session's CSRF token (a form field or the
``X-CSRF-Token`` header) besides the SameSite=Strict cookie. Labels go through
:meth:`serve.services.triage.TriageService.add_label`, the method behind ``POST /v1/traces/{id}/labels``.

This module signs in and out and mounts the pages: :mod:`serve.routers.ui_runs` (overview, patterns,
runs, one run), :mod:`serve.routers.ui_queue` (the label queue), :mod:`serve.routers.ui_models`
(models, tenant, streams), all rendered through the base view :mod:`serve.routers.ui_base` (the
frame, the JSON twin, pagination, errors) and reading through
:class:`serve.services.console.ConsoleService`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from model.core.errors import SignInRequired
from serve.auth import CSRF_FIELD, SESSION_COOKIE, SESSION_PATH
from serve.routers import ui_docs, ui_models, ui_queue, ui_runs
from serve.routers.ui_base import (
    STATIC,
    UI_DIR,
    check_csrf,
    console,
    read_form,
    render,
    same_origin,
    session,
    settings,
)
from serve.settings import Settings

#: The console's Content-Security-Policy: nothing inline, nothing from elsewhere, never framed.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
#: /docs and /redoc: their bundles set inline styles and ReDoc runs a worker from a blob.
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; font-src 'self' data:; worker-src 'self' blob:; base-uri 'none'; "
            "frame-ancestors 'none'")

router = APIRouter(prefix="/ui", include_in_schema=False)
#: ``/``: the first address a newcomer opens, sent to the console (whose pages send one not signed in to sign in).
home = APIRouter(include_in_schema=False)


@home.get("/", response_class=RedirectResponse)
def home_page() -> RedirectResponse:
    return RedirectResponse("/ui/overview", status_code=303)


# -- sign in / out ------------------------------------------------------------------------------

@router.get("", response_class=RedirectResponse)
def root() -> RedirectResponse:
    return RedirectResponse("/ui/overview", status_code=303)


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, next: Annotated[str, Query(max_length=500)] = "/ui/overview") -> HTMLResponse:
    return render(request, "signin.html", {"next": _safe_next(next), "error": None}, None)


def _safe_next(nxt: str) -> str:
    """Only a console path (no scheme, no host, no //)."""
    return nxt if nxt.startswith("/ui/") and not nxt.startswith("//") and "\\" not in nxt else "/ui/overview"


@router.post("/signin")
async def signin(request: Request) -> Response:
    same_origin(request)
    form = await read_form(request)
    hours = settings(request).ui_session_hours
    token = await run_in_threadpool(console(request).open_session, form.get("key"), ttl=timedelta(hours=hours),
                                    auth_enabled=request.app.state.auth_enabled)
    nxt = _safe_next(form.get("next", "/ui/overview"))
    if token is None:
        return render(request, "signin.html", {"next": nxt, "error": "unknown or revoked API key"}, None,
                      status=401)
    resp = RedirectResponse(nxt, status_code=303)
    resp.set_cookie(SESSION_COOKIE, token, max_age=int(hours * 3600), path=SESSION_PATH,
                    httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return resp


@router.post("/signout")
async def signout(request: Request) -> Response:
    s = session(request)
    form = await read_form(request)
    check_csrf(s, form.get(CSRF_FIELD))
    await run_in_threadpool(console(request).close_session, s.token_hash)
    resp = RedirectResponse("/ui/signin", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path=SESSION_PATH, httponly=True, samesite="strict",
                       secure=request.url.scheme == "https")
    return resp


# -- wiring ---------------------------------------------------------------------------------------

class SecurityHeaders:
    """The console's and the docs' response headers: CSP, no framing, no sniffing, no referrer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not (path == "/ui" or path.startswith(("/ui/", "/docs", "/redoc"))):
            await self.app(scope, receive, send)
            return
        csp = DOCS_CSP if path.startswith(("/docs", "/redoc", "/ui/static/vendor/swagger", "/ui/static/vendor/redoc")) \
            else CSP

        async def send_with(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(b"content-security-policy", csp.encode()), (b"x-frame-options", b"DENY"),
                            (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]
                if not path.startswith("/ui/static/"):
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with)


def install_ui(app: FastAPI, settings: Settings) -> None:
    """Mount the console, its static files and the offline /docs and /redoc on ``app``."""
    app.state.ui_settings = settings
    for pages in (home, router, ui_runs.router, ui_queue.router, ui_models.router, ui_docs.router):
        app.include_router(pages)
    app.mount(STATIC, StaticFiles(directory=UI_DIR / "static"), name="ui-static")
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(SignInRequired)
    async def _signin(_: Request, exc: SignInRequired) -> Response:
        if exc.json_wanted:
            return JSONResponse(status_code=401, content={"detail": [{
                "loc": ["cookie", SESSION_COOKIE], "msg": "sign in at /ui/signin (no live console session)",
                "type": "unauthorized"}]})
        return RedirectResponse(f"/ui/signin?next={quote(exc.next_url)}", status_code=303)


__all__ = ["CSP", "DOCS_CSP", "SecurityHeaders", "home", "install_ui", "router"]
