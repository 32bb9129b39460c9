"""What the console's pages share: the templates, the page aliases, the session a page needs
(:class:`SignInRequired` without one), CSRF and same-origin checks, form bodies, and a page's HTML
or its JSON twin."""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

from fastapi import HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from model.core.errors import SignInRequired
from serve.auth import (
    CSRF_FIELD,
    SESSION_COOKIE,
    UISession,
    csrf_ok,
    find_ui_session,
)
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.ui import data
from serve.ui.terms import DETECTOR, SHOWN, TERMS
from serve.validation import ID_PATTERN

UI_DIR = FsPath(__file__).resolve().parent.parent / "ui"
STATIC = "/ui/static"

_env = Environment(loader=FileSystemLoader(UI_DIR / "templates"), autoescape=select_autoescape(default=True),
                   trim_blocks=True, lstrip_blocks=True)
_env.globals["STATIC"] = STATIC
_env.globals["TERMS"] = TERMS  # the glossary the `term` macro puts in titles
_env.globals["SHOWN"] = SHOWN
_env.globals["DETECTOR"] = DETECTOR


Format = Annotated[Literal["html", "json"], Query(description="`json`: the page's data (its JSON twin).")]
TraceId = Annotated[str, Path(pattern=ID_PATTERN)]
AgentQ = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00-\x1f]*$")]
DaysQ = Annotated[int, Query(ge=1, le=366, description="The window: the last this-many days.")]

NAV = [("overview", "Overview"), ("patterns", "Patterns"), ("runs", "Runs"), ("queue", "Label queue"),
       ("models", "Models"), ("streams", "Streams")]


# -- plumbing ------------------------------------------------------------------------------------

def _service(request: Request) -> TriageService:
    service: TriageService = request.app.state.service
    return service


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.ui_settings
    return settings


def _session(request: Request, fmt: str = "html") -> UISession:
    token = request.cookies.get(SESSION_COOKIE)
    got = find_ui_session(_service(request).stores.keys, token, auth_enabled=request.app.state.auth_enabled)
    if got is None:
        nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(fmt == "json" or request.url.path.startswith("/ui/api/"), nxt)
    return got


def _check_csrf(session: UISession, given: str | None) -> None:
    if not csrf_ok(session, given):
        raise HTTPException(status_code=403, detail=[{"loc": ["body", CSRF_FIELD], "msg":
                            "missing or wrong CSRF token: reload the page and try again", "type": "csrf"}])


def _same_origin(request: Request) -> None:
    """A form post from another site is refused (the sign-in form has no session to hold a token)."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if site not in (None, "same-origin", "none") or (origin not in (None, "null")
                                                     and origin.split("://", 1)[-1] != host):
        raise HTTPException(status_code=403, detail=[{"loc": ["header", "origin"], "msg":
                            "a console form must be posted from the console itself", "type": "csrf"}])


async def _form(request: Request) -> dict[str, str]:
    """An urlencoded form body, one value per field (the last one given)."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype != "application/x-www-form-urlencoded":
        raise HTTPException(status_code=415, detail=[{"loc": ["header", "content-type"], "msg":
                            f"a console form is application/x-www-form-urlencoded; got {ctype or 'none'!r}",
                            "type": "unsupported_media_type"}])
    raw = await request.body()
    try:
        parsed = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPException(status_code=400, detail=[{"loc": ["body"], "msg": f"unreadable form: {exc}",
                                                      "type": "invalid_form"}]) from None
    return {k: v[-1] for k, v in parsed.items()}


def _render(request: Request, name: str, ctx: dict[str, Any], session: UISession | None,
            *, status: int = 200) -> HTMLResponse:
    page = name.removesuffix(".html")
    html = _env.get_template(name).render(
        **ctx, page_id=page, nav=NAV, session=session, csrf=session.csrf if session else "",
        tenant=session.principal.tenant if session else None, path=request.url.path,
        operator=bool(session and session.principal.operator),
        home_tenant=session.principal.home_tenant if session else None)
    return HTMLResponse(html, status_code=status)


def _twin(ctx: dict[str, Any]) -> Response:
    return Response(json.dumps(ctx, default=_jsonable), media_type="application/json")


def _jsonable(o: Any) -> Any:
    if isinstance(o, datetime | date):
        return o.isoformat()
    raise TypeError(f"not JSON-able: {type(o).__name__}")


def _page(request: Request, name: str, ctx: dict[str, Any], session: UISession, fmt: str) -> Response:
    return _twin(ctx) if fmt == "json" else _render(request, name, ctx, session)


def _date_param(value: str | None, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    try:
        return data.day_start(date.fromisoformat(str(value)))
    except ValueError:
        raise HTTPException(status_code=422, detail=[{"loc": ["query", name], "msg":
                            f"a date is YYYY-MM-DD; got {value!r}", "type": "date_parsing"}]) from None
