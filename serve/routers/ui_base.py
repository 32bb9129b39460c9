"""The console's base view: what every page of ``/ui`` shares (datasette's pattern, one base view
for every page). The page modules (:mod:`serve.routers.ui_runs`, :mod:`serve.routers.ui_queue`,
:mod:`serve.routers.ui_models`, :mod:`serve.routers.ui`) use only these public names; none of them
imports another's.

* **the frame** — :func:`render`: a template of ``serve/ui/templates`` with the common context (the
  navigation, the session, its CSRF token, its tenant, whether it is an operator's);
* **the JSON twin** — every page answers ``?format=json`` (the :data:`Format` query parameter) with
  the context it renders: :func:`respond` picks the one asked, :func:`json_twin` writes it;
* **pagination** — :data:`PageQ` and :data:`PerPageQ` query parameters, :func:`paginate` the figures
  and links' query string a pager needs;
* **errors** — :func:`http_error`: a 4xx whose detail names the field (the API's shape); a missing
  session raises :class:`~model.core.errors.SignInRequired` (:func:`session`), which
  :func:`serve.routers.ui.install_ui` turns into a redirect to sign in (a 401 for JSON);
* **the plumbing** — :func:`console` (the :class:`~serve.services.console.ConsoleService` every read
  and write goes through), :func:`session`, :func:`check_csrf`, :func:`same_origin`, :func:`read_form`,
  :func:`date_param`, and the label a page posts (:func:`label_request`, :func:`post_label`).
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, quote

from fastapi import HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from model.core.errors import NotFoundError, SignInRequired
from model.scoring.runscore.model import RunScorer
from serve.auth import CSRF_FIELD, SESSION_COOKIE, UISession, csrf_ok
from serve.schemas import LabelRequest
from serve.services.console import ConsoleService, day_start
from serve.settings import Settings
from serve.ui.terms import DETECTOR, SHOWN, TERMS
from serve.validation import ID_PATTERN

UI_DIR = FsPath(__file__).resolve().parent.parent / "ui"
STATIC = "/ui/static"

#: The console's templates (autoescaped), with the glossary the ``term`` macro puts in titles.
TEMPLATES = Environment(loader=FileSystemLoader(UI_DIR / "templates"), autoescape=select_autoescape(default=True),
                        trim_blocks=True, lstrip_blocks=True)
TEMPLATES.globals.update(STATIC=STATIC, TERMS=TERMS, SHOWN=SHOWN, DETECTOR=DETECTOR)

Format = Annotated[Literal["html", "json"], Query(description="`json`: the page's data (its JSON twin).")]
TraceId = Annotated[str, Path(pattern=ID_PATTERN)]
AgentQ = Annotated[str | None, Query(max_length=200, pattern=r"^[^\x00-\x1f]*$")]
DaysQ = Annotated[int, Query(ge=1, le=366, description="The window: the last this-many days.")]
PageQ = Annotated[int, Query(ge=1, le=100_000, description="The page, from 1.")]
PerPageQ = Annotated[int, Query(ge=1, le=200, description="Rows per page.")]

#: The navigation bar: (page, title).
NAV = [("overview", "Overview"), ("patterns", "Patterns"), ("runs", "Runs"), ("queue", "Label queue"),
       ("models", "Models"), ("streams", "Streams")]


# -- plumbing ------------------------------------------------------------------------------------

def settings(request: Request) -> Settings:
    """The settings the console was installed with."""
    got: Settings = request.app.state.ui_settings
    return got


def console(request: Request) -> ConsoleService:
    """The console's service for this request (over the worker's services and the model registry)."""
    return ConsoleService(request.app.state.service, settings(request).resolved_model_registry)


def runscorer(request: Request) -> RunScorer | None:
    """The worker's run scorer (its operating point orders the label queue), ``None`` without one."""
    scorer: RunScorer | None = getattr(request.app.state.diagnoser, "runscorer", None)
    return scorer


def session(request: Request, fmt: str = "html") -> UISession:
    """The request's live console session; :class:`SignInRequired` without one (JSON wanted when
    ``fmt`` is ``json`` or the path is under ``/ui/api/``)."""
    token = request.cookies.get(SESSION_COOKIE)
    got = console(request).find_session(token, auth_enabled=request.app.state.auth_enabled)
    if got is None:
        nxt = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(fmt == "json" or request.url.path.startswith("/ui/api/"), nxt)
    return got


def http_error(status: int, loc: list[str], msg: str, type_: str) -> HTTPException:
    """An error the API's way: ``{"detail": [{"loc", "msg", "type"}]}`` naming the field at ``loc``."""
    return HTTPException(status_code=status, detail=[{"loc": loc, "msg": msg, "type": type_}])


def check_csrf(session: UISession, given: str | None) -> None:
    """A 403 unless ``given`` is the session's CSRF token (a form field or the ``X-CSRF-Token`` header)."""
    if not csrf_ok(session, given):
        raise http_error(403, ["body", CSRF_FIELD], "missing or wrong CSRF token: reload the page and try again",
                         "csrf")


def same_origin(request: Request) -> None:
    """A form post from another site is refused (the sign-in form has no session to hold a token)."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    if site not in (None, "same-origin", "none") or (origin not in (None, "null")
                                                     and origin.split("://", 1)[-1] != host):
        raise http_error(403, ["header", "origin"], "a console form must be posted from the console itself", "csrf")


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form body, one value per field (the last one given); a 415 for another type."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip()
    if ctype != "application/x-www-form-urlencoded":
        raise http_error(415, ["header", "content-type"],
                         f"a console form is application/x-www-form-urlencoded; got {ctype or 'none'!r}",
                         "unsupported_media_type")
    raw = await request.body()
    try:
        parsed = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError) as exc:
        raise http_error(400, ["body"], f"unreadable form: {exc}", "invalid_form") from None
    return {k: v[-1] for k, v in parsed.items()}


def date_param(value: str | None, name: str) -> datetime | None:
    """A ``YYYY-MM-DD`` query parameter as the start of that day (UTC); a 422 naming ``name``."""
    if value in (None, ""):
        return None
    try:
        return day_start(date.fromisoformat(str(value)))
    except ValueError:
        raise http_error(422, ["query", name], f"a date is YYYY-MM-DD; got {value!r}", "date_parsing") from None


# -- the frame and the JSON twin -------------------------------------------------------------------

def render(request: Request, name: str, ctx: dict[str, Any], session: UISession | None,
           *, status: int = 200) -> HTMLResponse:
    """The template ``name`` in the console's frame: ``ctx`` and the common context."""
    page_id = name.removesuffix(".html")
    html = TEMPLATES.get_template(name).render(
        **ctx, page_id=page_id, nav=NAV, session=session, csrf=session.csrf if session else "",
        tenant=session.principal.tenant if session else None, path=request.url.path,
        operator=bool(session and session.principal.operator),
        home_tenant=session.principal.home_tenant if session else None)
    return HTMLResponse(html, status_code=status)


def json_twin(ctx: dict[str, Any]) -> Response:
    """A page's JSON twin: its context as it is (times as ISO 8601)."""
    return Response(json.dumps(ctx, default=_jsonable), media_type="application/json")


def _jsonable(o: Any) -> Any:
    if isinstance(o, datetime | date):
        return o.isoformat()
    raise TypeError(f"not JSON-able: {type(o).__name__}")


def respond(request: Request, name: str, ctx: dict[str, Any], session: UISession, fmt: str) -> Response:
    """A page: its JSON twin when ``fmt`` is ``json``, else the template ``name`` in the frame."""
    return json_twin(ctx) if fmt == "json" else render(request, name, ctx, session)


# -- pagination -----------------------------------------------------------------------------------

def paginate(total: int, page: int, per_page: int, filters: dict[str, str]) -> dict[str, Any]:
    """What a pager shows and links: ``total``, ``page``, ``pages`` (at least 1), ``per_page`` and
    ``query_base`` (the non-empty ``filters`` as a query string, for the pager's links).

    >>> paginate(101, 2, 50, {"agent": "a b", "kind": ""})
    {'total': 101, 'page': 2, 'pages': 3, 'per_page': 50, 'query_base': 'agent=a%20b'}
    """
    return {"total": total, "page": page, "pages": max(1, -(-total // per_page)), "per_page": per_page,
            "query_base": "&".join(f"{k}={quote(v)}" for k, v in filters.items() if v)}


# -- labels a page posts ----------------------------------------------------------------------------

def label_request(body: dict[str, Any]) -> LabelRequest:
    """The API's LabelRequest from a form or the queue's JSON; a bad field is a 422 naming it."""
    clean = {k: (None if v == "" else v) for k, v in body.items() if k in ("failed", "kind", "step")}
    try:
        return LabelRequest.model_validate(clean)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise http_error(422, ["body", *[str(p) for p in err["loc"]]][:2], err["msg"], err["type"]) from None


async def post_label(request: Request, session: UISession, trace_id: str, req: LabelRequest) -> dict[str, Any]:
    """Save a label as ``POST /v1/traces/{id}/labels`` does, with the session's key; a 404 for an unknown run."""
    try:
        got = await run_in_threadpool(console(request).add_label, session.principal.tenant, trace_id, req,
                                      key_id=session.principal.key_id)
    except NotFoundError as exc:
        raise http_error(404, ["path", "trace_id"], str(exc), "not_found") from None
    return got.model_dump(mode="json")


__all__ = ["NAV", "STATIC", "TEMPLATES", "UI_DIR", "AgentQ", "DaysQ", "Format", "PageQ", "PerPageQ", "TraceId",
           "check_csrf", "console", "date_param", "http_error", "json_twin", "label_request", "paginate",
           "post_label", "read_form", "render", "respond", "runscorer", "same_origin", "session", "settings"]
