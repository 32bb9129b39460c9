"""The console at ``/ui``: server-rendered pages (Jinja2, autoescaped) with a little JavaScript.

Every page answers ``?format=json`` with what it renders (its JSON twin). Signing in with an API key
opens a server-side session (:mod:`serve.auth`); every read is scoped to the session's tenant, and
every write (a label, sign-out) carries the session's CSRF token (a form field or the
``X-CSRF-Token`` header) besides the SameSite=Strict cookie. Labels go through
:meth:`serve.services.triage.TriageService.add_label`, the method behind ``POST /v1/traces/{id}/labels``.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from pathlib import Path as FsPath
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, FastAPI, HTTPException, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from model.core.agents import MAX_AGENT_LENGTH, POOL_AGENT, clean_agent_name
from model.core.errors import InputError, ModelLoadError, NotFoundError, SignInRequired
from model.core.graph import ExecutionGraph
from model.core.kinds import FailureKind
from model.core.schema import Trace
from model.data.labelling.review import KIND_KEYS
from model.scoring.agent_registry import CARD_FILE, POOLED, ZERO_SHOT, Registry
from serve.auth import (
    CSRF_FIELD,
    CSRF_HEADER,
    SESSION_COOKIE,
    SESSION_PATH,
    UISession,
    csrf_ok,
    find_ui_session,
    open_ui_session,
    switch_tenant,
)
from serve.offline.label_review import MAIN_KEYS, review_queue
from serve.offline.label_review import _agree as agree_body
from serve.schemas import LabelRequest, UndoLabelRequest
from serve.services.patterns import tenant_patterns
from serve.services.patterns import window as patterns_window
from serve.services.retrain import learning_curve, promote_version, rollback_version
from serve.services.triage import TriageService
from serve.settings import Settings
from serve.ui import data
from serve.validation import ID_PATTERN

UI_DIR = FsPath(__file__).resolve().parent.parent / "ui"
STATIC = "/ui/static"

#: The console's Content-Security-Policy: nothing inline, nothing from elsewhere, never framed.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
#: /docs and /redoc: their bundles set inline styles and ReDoc runs a worker from a blob.
DOCS_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
            "connect-src 'self'; font-src 'self' data:; worker-src 'self' blob:; base-uri 'none'; "
            "frame-ancestors 'none'")

_env = Environment(loader=FileSystemLoader(UI_DIR / "templates"), autoescape=select_autoescape(default=True),
                   trim_blocks=True, lstrip_blocks=True)
_env.globals["STATIC"] = STATIC

router = APIRouter(prefix="/ui", include_in_schema=False)

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
    got = find_ui_session(_service(request).store, token, auth_enabled=request.app.state.auth_enabled)
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


# -- sign in / out ------------------------------------------------------------------------------

@router.get("", response_class=RedirectResponse)
def root() -> RedirectResponse:
    return RedirectResponse("/ui/overview", status_code=303)


@router.get("/signin", response_class=HTMLResponse)
def signin_form(request: Request, next: Annotated[str, Query(max_length=500)] = "/ui/overview") -> HTMLResponse:
    return _render(request, "signin.html", {"next": _safe_next(next), "error": None}, None)


def _safe_next(nxt: str) -> str:
    """Only a console path (no scheme, no host, no //)."""
    return nxt if nxt.startswith("/ui/") and not nxt.startswith("//") and "\\" not in nxt else "/ui/overview"


@router.post("/signin")
async def signin(request: Request) -> Response:
    _same_origin(request)
    form = await _form(request)
    settings = _settings(request)
    token = await run_in_threadpool(open_ui_session, _service(request).store, form.get("key"),
                                    ttl=timedelta(hours=settings.ui_session_hours),
                                    auth_enabled=request.app.state.auth_enabled)
    nxt = _safe_next(form.get("next", "/ui/overview"))
    if token is None:
        return _render(request, "signin.html", {"next": nxt, "error": "unknown or revoked API key"}, None,
                       status=401)
    resp = RedirectResponse(nxt, status_code=303)
    resp.set_cookie(SESSION_COOKIE, token, max_age=int(settings.ui_session_hours * 3600), path=SESSION_PATH,
                    httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return resp


@router.post("/signout")
async def signout(request: Request) -> Response:
    session = _session(request)
    form = await _form(request)
    _check_csrf(session, form.get(CSRF_FIELD))
    await run_in_threadpool(_service(request).store.revoke_ui_session, session.token_hash)
    resp = RedirectResponse("/ui/signin", status_code=303)
    resp.delete_cookie(SESSION_COOKIE, path=SESSION_PATH, httponly=True, samesite="strict",
                       secure=request.url.scheme == "https")
    return resp


# -- 1 overview -----------------------------------------------------------------------------------

@router.get("/overview")
def overview(request: Request, format: Format = "html", days: DaysQ = 7, agent: AgentQ = None) -> Response:
    s = _session(request, format)
    since, until = data.window(days)
    ctx = data.overview(_service(request).store, s.principal.tenant, since=since, until=until, agent=agent or None)
    ctx["days"] = days
    ctx["all_agents"] = data.agents(_service(request).store, s.principal.tenant)
    return _page(request, "overview.html", ctx, s, format)


# -- 2 failure patterns (serve/services/patterns.py: the function behind GET /v1/patterns) ------------------

LevelQ = Annotated[Literal["failure", "signal", "all"], Query()]


def _patterns(request: Request, s: UISession, days: int, level: str, agent: str | None, limit: int) -> dict[str, Any]:
    since, until = patterns_window(since=None, until=None, days=float(days))
    got = tenant_patterns(_service(request).store, s.principal.tenant, since=since, until=until,
                          level=level, limit=limit, agent=agent)  # type: ignore[arg-type]
    return got.model_dump(mode="json")


@router.get("/patterns")
def patterns(request: Request, format: Format = "html", days: DaysQ = 7, level: LevelQ = "failure",
             agent: AgentQ = None) -> Response:
    s = _session(request, format)
    ctx = {"result": _patterns(request, s, days, level, agent or None, 100), "days": days, "level": level,
           "agent": agent or "", "all_agents": data.agents(_service(request).store, s.principal.tenant)}
    return _page(request, "patterns.html", ctx, s, format)


@router.get("/patterns/{pattern_id}")
def pattern(request: Request, pattern_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")],
            format: Format = "html", days: DaysQ = 7, level: LevelQ = "failure") -> Response:
    s = _session(request, format)
    result = _patterns(request, s, days, level, None, 100_000)
    found = next((p for p in result["patterns"] if p["id"] == pattern_id), None)
    if found is None:
        raise HTTPException(status_code=404, detail=[{"loc": ["path", "pattern_id"], "msg":
                            f"no pattern {pattern_id!r} in the last {days} days for this tenant", "type": "not_found"}])
    return _page(request, "pattern.html", {"p": found, "days": days, "level": level}, s, format)


# -- 3 runs ---------------------------------------------------------------------------------------

@router.get("/runs")
def runs(
    request: Request,
    format: Format = "html",
    agent: AgentQ = None,
    verdict: Annotated[Literal["failed", "healthy", "unknown", ""] | None, Query()] = None,
    kind: Annotated[FailureKind | Literal[""] | None, Query()] = None,
    since: Annotated[str | None, Query(max_length=10, description="YYYY-MM-DD")] = None,
    until: Annotated[str | None, Query(max_length=10, description="YYYY-MM-DD (exclusive)")] = None,
    labelled: Annotated[Literal["yes", "no", ""] | None, Query()] = None,
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
    per_page: Annotated[int, Query(ge=1, le=200)] = 50,
) -> Response:
    s = _session(request, format)
    f = data.RunFilter(
        agent=agent or None, verdict=verdict or None, kind=kind.value if kind else None,
        since=_date_param(since, "since"), until=_date_param(until, "until"),
        labelled=None if not labelled else labelled == "yes")
    store = _service(request).store
    ctx = data.runs(store, s.principal.tenant, f, page=page, per_page=per_page)
    ctx["filters"] = {"agent": agent or "", "verdict": verdict or "", "kind": kind.value if kind else "",
                      "since": since or "", "until": until or "", "labelled": labelled or ""}
    ctx["all_agents"] = data.agents(store, s.principal.tenant)
    ctx["kinds"] = [k.value for k in FailureKind]
    ctx["query_base"] = "&".join(f"{k}={quote(v)}" for k, v in ctx["filters"].items() if v)
    return _page(request, "runs.html", ctx, s, format)


# -- 4 one run ------------------------------------------------------------------------------------

def run_view(service: TriageService, tenant: str, trace_id: str) -> dict[str, Any]:
    """Everything the run page shows: the steps with their failures, signals and attribution marked,
    the repair ladder taken with its outcomes, the execution graph, the effective label."""
    detail = service.get_trace(tenant, trace_id)
    trace = Trace.model_validate(detail.trace)
    diag = detail.diagnosis or {}
    marks: dict[int, list[dict[str, Any]]] = {}
    for level in ("failures", "signals"):
        for f in diag.get(level) or []:
            if isinstance(f.get("step"), int):
                marks.setdefault(f["step"], []).append({**f, "level": level[:-1]})
    att = diag.get("attribution") if isinstance(diag.get("attribution"), dict) else None
    att_step = att.get("step") if att else None
    steps = []
    for i, st in enumerate(trace.steps):
        steps.append({
            "index": i, "kind": st.kind.value, "speaker": st.speaker, "content": st.content,
            "long": len(st.content) > 600 or st.content.count("\n") > 12,
            "tool_name": st.tool_name,
            "tool_args": json.dumps(st.tool_args, indent=1, ensure_ascii=False) if st.tool_args else st.tool_args_raw,
            "call_id": st.call_id, "status": st.status.value if st.status else None,
            "source_index": st.source_index, "marks": marks.get(i, []), "attributed": i == att_step,
        })
    outcomes = {o.recommendation_id: o for o in detail.outcomes}
    ladder = [{"id": r.id, "strategy": r.strategy, "kind": r.kind, "rung": r.rung, "attempt": r.attempt,
               "created_at": r.created_at.isoformat(),
               "instruction": (r.body or {}).get("instruction"),
               "outcome": None if r.id not in outcomes else ("succeeded" if outcomes[r.id].success else "failed"),
               "duration_s": outcomes[r.id].duration_s if r.id in outcomes else None}
              for r in detail.recommendations]
    graph = ExecutionGraph.from_trace(trace).to_json()
    label = detail.label.model_dump(mode="json") if detail.label is not None else None
    return {
        "id": detail.id, "agent": detail.agent, "task_type": detail.task_type, "session_id": detail.session_id,
        "created_at": detail.created_at.isoformat(), "n_steps": len(trace.steps),
        "healthy": diag.get("healthy"), "verdict": data.verdict(diag.get("healthy")),
        "failure_probability": diag.get("failure_probability"),
        "basis": diag.get("failure_probability_basis"),
        "primary": diag.get("primary"), "attribution": att,
        "failures": diag.get("failures") or [], "signals": diag.get("signals") or [],
        "steps": steps, "ladder": ladder, "graph": graph, "graph_svg": _graph_layout(graph),
        "label": label, "kinds": [k.value for k in FailureKind],
    }


def _graph_layout(graph: dict[str, Any]) -> dict[str, Any]:
    """A vertical layout of the execution graph for an inline SVG: steps down a column at ``x0``,
    every edge other than ``followed_by`` an arc to its left (its kind in the arc's class)."""
    gap, x0 = 22, 150
    nodes = [{"step": n["step"], "y": 14 + n["step"] * gap, "kind": n["kind"], "failed": bool(n.get("failed")),
              "label": str(n.get("label") or "")[:60], "tool": n.get("tool")} for n in graph["nodes"]]
    arcs = []
    for e in graph["edges"]:
        if e["kind"] == "followed_by":
            continue
        y1, y2 = 14 + e["source"] * gap, 14 + e["target"] * gap
        bend = x0 - 18 - min(130, abs(y2 - y1) // 2)
        arcs.append({"d": f"M{x0 - 6},{y1} C{bend},{y1} {bend},{y2} {x0 - 6},{y2}", "kind": e["kind"],
                     "source": e["source"], "target": e["target"]})
    return {"nodes": nodes, "arcs": arcs, "height": 28 + max(0, len(nodes) - 1) * gap, "x": x0}


@router.get("/runs/{trace_id}")
def run(request: Request, trace_id: TraceId, format: Format = "html") -> Response:
    s = _session(request, format)
    try:
        ctx = run_view(_service(request), s.principal.tenant, trace_id)
    except NotFoundError as exc:
        raise HTTPException(status_code=404, detail=[{"loc": ["path", "trace_id"], "msg": str(exc),
                                                      "type": "not_found"}]) from None
    return _page(request, "run.html", ctx, s, format)


def _label_request(body: dict[str, Any]) -> LabelRequest:
    """The API's LabelRequest from a form or the queue's JSON; a bad field is a 422 naming it."""
    clean = {k: (None if v == "" else v) for k, v in body.items() if k in ("failed", "kind", "step")}
    try:
        return LabelRequest.model_validate(clean)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise HTTPException(status_code=422, detail=[{"loc": ["body", *[str(p) for p in err["loc"]]][:2],
                                                      "msg": err["msg"], "type": err["type"]}]) from None


async def _add_label(request: Request, session: UISession, trace_id: str, req: LabelRequest) -> dict[str, Any]:
    try:
        got = await run_in_threadpool(_service(request).add_label, session.principal.tenant, trace_id, req,
                                      key_id=session.principal.key_id)
    except NotFoundError as exc:
        raise HTTPException(status_code=404, detail=[{"loc": ["path", "trace_id"], "msg": str(exc),
                                                      "type": "not_found"}]) from None
    return got.model_dump(mode="json")


@router.post("/runs/{trace_id}/label")
async def label_form(request: Request, trace_id: TraceId) -> Response:
    """The run page's label buttons (a form: failed / ok, optionally kind and step)."""
    s = _session(request)
    form = await _form(request)
    _check_csrf(s, form.get(CSRF_FIELD))
    # a form sends text: "true" / "false" and digits become what the API's JSON would carry
    typed: dict[str, Any] = dict(form)
    typed["failed"] = {"true": True, "false": False}.get(form.get("failed", ""), form.get("failed"))
    if form.get("step", "").isdigit():
        typed["step"] = int(form["step"])
    req = _label_request(typed)
    await _add_label(request, s, trace_id, req)
    return RedirectResponse(f"/ui/runs/{quote(trace_id)}#label", status_code=303)


# -- 5 label queue --------------------------------------------------------------------------------

def _author(session: UISession) -> str:
    """The author the API writes for a label posted with this key and no author: ``key:<id>``."""
    return f"key:{session.principal.key_id}" if session.principal.key_id else ""


def queue_view(request: Request, session: UISession, at: int) -> dict[str, Any]:
    service = _service(request)
    tenant = session.principal.tenant
    scorer = getattr(request.app.state.diagnoser, "runscorer", None)
    fixed = scorer.threshold if scorer is not None else None

    def threshold_for(task_type: str | None) -> float | None:  # as `triage label review --from-store`
        rel = service.relative_threshold(tenant, task_type or POOL_AGENT, scorer)
        return rel if rel is not None else fixed

    queue, done = review_queue(service.store, tenant, author=_author(session), threshold_for=threshold_for)
    total = done + len(queue)
    current = None
    if queue:
        at = min(at, len(queue) - 1)
        c = queue[at]
        current = run_view(service, tenant, c.trace_id)
        current["margin"] = round(c.margin, 4)
        current["uncertainty"] = c.basis
        current["agree"] = agree_body(c.response)  # what [a] saves, or why it cannot
        current["shown"] = _shown_steps(current)
    agent = current["agent"] if current else None
    labelled = data.labelled_count(service.store, tenant, agent)
    basis = (current or {}).get("basis") or {}
    cv_auroc = basis.get("cv_auroc") if isinstance(basis.get("cv_auroc"), int | float) else \
        _cv_auroc(request, tenant, agent)
    return {
        "author": _author(session), "done": done, "total": total, "left": len(queue), "at": at,
        "queue": [{"id": c.trace_id, "margin": round(c.margin, 4), "basis": c.basis} for c in queue[:200]],
        "current": current, "main_keys": MAIN_KEYS,  # the CLI's keys, u (undo) among them
        "kind_keys": {k: v.value for k, v in KIND_KEYS.items()},
        # the run's agent (traces.agent) and its labelled runs in the store; the run's basis: which
        # model scored it and on how many labelled runs that model learned
        "agent": agent, "agent_labelled": labelled, "basis_model": basis.get("model"),
        "basis_labelled": basis.get("labelled_runs"),
        "cv_auroc": cv_auroc, "retrain": f"triage retrain --tenant {tenant}" + (
            f" --agent {agent}" if agent is not None and agent != POOL_AGENT else ""),
    }


def _shown_steps(view: dict[str, Any], max_steps: int = 24) -> list[dict[str, Any]]:
    """The queue's compact view of a long trace, as the CLI's (serve/offline/label_review.py ``render``):
    the first three steps, the last, and two either side of each failure and the attribution; a gap
    is a row ``{"gap": n}``."""
    steps = view["steps"]
    if len(steps) <= max_steps:
        return list(steps)
    marks = {s["index"] for s in steps if s["attributed"] or any(m["level"] == "failure" for m in s["marks"])}
    keep = set(range(3)) | {len(steps) - 1}
    for m in marks:
        keep |= set(range(max(0, m - 2), min(len(steps), m + 3)))
    shown: list[dict[str, Any]] = []
    last = -1
    for i in sorted(keep):
        if i > last + 1:
            shown.append({"gap": i - last - 1})
        shown.append(steps[i])
        last = i
    return shown


def _cv_auroc(request: Request, tenant: str, agent: str | None) -> float | None:
    """The cross-validated AUROC of the agent's active registry version, when it has one."""
    if agent is None:
        return None
    try:
        version = _service(request).store.active_model(tenant, agent)
        if version is None or version == ZERO_SHOT:
            return None
        mv = Registry(_settings(request).resolved_model_registry).get(tenant, agent, version)
    except (InputError, ModelLoadError):
        return None
    return _version_cv_auroc(mv.summary)


def _version_cv_auroc(summary: dict[str, Any]) -> float | None:
    """A registry version's cross-validated AUROC: its card's, else its gate's estimate."""
    card = summary.get("card")
    card = card if isinstance(card, dict) else {}
    est = ((summary.get("gate") or {}).get("estimate") or {}).get("agent") or {}
    for v in (card.get("cv_auroc"), est.get("auroc") if isinstance(est, dict) else None):
        if isinstance(v, int | float) and v == v:
            return float(v)
    return None


@router.get("/queue")
def queue(request: Request, format: Format = "html", at: Annotated[int, Query(ge=0, le=100_000)] = 0) -> Response:
    s = _session(request, format)
    return _page(request, "queue.html", queue_view(request, s, at), s, format)


@router.post("/api/labels/undo")
async def undo_json(request: Request) -> Response:
    """The queue's ``u``: withdraw this key's newest label (``POST /v1/labels/undo``'s code)."""
    s = _session(request, "json")
    _check_csrf(s, request.headers.get(CSRF_HEADER))
    try:
        got = await run_in_threadpool(_service(request).undo_label, s.principal.tenant, UndoLabelRequest(),
                                      key_id=s.principal.key_id)
    except NotFoundError as exc:
        raise HTTPException(status_code=404, detail=[{"loc": ["body"], "msg": str(exc), "type": "not_found"}]) from None
    return JSONResponse(got.model_dump(mode="json"))


@router.post("/api/labels/{trace_id}")
async def label_json(request: Request, trace_id: TraceId) -> Response:
    """The queue's keys: a JSON LabelRequest (failed, kind, step) with the ``X-CSRF-Token`` header."""
    s = _session(request, "json")
    _check_csrf(s, request.headers.get(CSRF_HEADER))
    try:
        body = json.loads(await request.body())
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPException(status_code=422, detail=[{"loc": ["body"], "msg": f"not JSON: {exc}",
                                                      "type": "json_invalid"}]) from None
    if not isinstance(body, dict):
        raise HTTPException(status_code=422, detail=[{"loc": ["body"], "msg": "a JSON object is expected",
                                                      "type": "object_type"}])
    return JSONResponse(await _add_label(request, s, trace_id, _label_request(body)))


# -- 6 models -------------------------------------------------------------------------------------

@router.get("/models")
def models(request: Request, format: Format = "html") -> Response:
    """Per agent: the registry's versions (each with its card and gate), the active one (``zero-shot``:
    no agent model serves it), its learning curve so far and its activations."""
    s = _session(request, format)
    tenant = s.principal.tenant
    store = _service(request).store
    registry = Registry(_settings(request).resolved_model_registry)
    active = store.active_models(tenant)
    history = store.model_history(tenant)
    names = sorted(set(registry.agents(tenant)) | set(active))
    agents = []
    for name in names:
        on = active.get(name, ZERO_SHOT)
        versions = []
        for v in registry.versions(tenant, name):
            card_path = v.path / CARD_FILE
            card = card_path.read_text(encoding="utf-8")[:20_000] if card_path.is_file() else None
            gate = v.summary.get("gate")
            gate = gate if isinstance(gate, dict) else {}
            versions.append({"version": v.version, "created_at": v.created_at, "parent": v.parent,
                             "active": v.version == on, "members": list(v.members),
                             "runs": (gate.get("estimate") or {}).get("runs"), "cv_auroc": _version_cv_auroc(v.summary),
                             "gate": "passed" if gate.get("promote") else "failed" if gate else None,
                             "card": card})
        agents.append({"agent": name, "pooled": name == POOLED, "active": on, "versions": versions,
                       "learning_curve": learning_curve(registry, tenant, name),
                       "activations": [h for h in history if h["agent"] == name],
                       "retrain": f"triage retrain --tenant {tenant} --agent {name}"})
    serving = [f"{a['agent']}: {a['active']}" for a in agents if a["active"] != ZERO_SHOT]
    summary = "; ".join(serving) + " (every other agent: zero-shot)" if serving else \
        "zero-shot for every agent (no agent model active)"
    ctx = {"agents": agents, "activations": history, "zero_shot": ZERO_SHOT, "pooled": POOLED, "active": summary,
           "registry": str(registry.root) if s.principal.operator else None,  # a server path: operators only
           "retrain": f"triage retrain --tenant {tenant}"}
    return _page(request, "models.html", ctx, s, format)


def _operator_form(request: Request, s: UISession, form: dict[str, str]) -> str:
    """Checks an operator's model form (CSRF, operator key); the agent it names (a 422 naming
    ``agent`` when it names none or a bad one)."""
    _check_csrf(s, form.get(CSRF_FIELD))
    if not s.principal.operator:
        raise HTTPException(status_code=403, detail=[{"loc": ["cookie", SESSION_COOKIE], "msg":
                            "this needs an operator key's session (`triage keys create --operator`)",
                            "type": "forbidden"}])
    agent = form.get("agent", "")
    if not agent or len(agent) > MAX_AGENT_LENGTH or clean_agent_name(agent) != agent:
        raise HTTPException(status_code=422, detail=[{"loc": ["body", "agent"], "msg":
                            f"the agent whose model this acts on: 1-{MAX_AGENT_LENGTH} printable characters, no "
                            f"outer blanks (`{POOLED}`: the tenant's pooled model); got {agent!r}",
                            "type": "value_error" if agent else "missing"}])
    return agent


@router.post("/models/promote")
async def models_promote(request: Request) -> Response:
    """Operators: the code of ``POST /v1/operator/models/promote`` (:func:`serve.services.retrain.promote_version`)."""
    s = _session(request)
    form = await _form(request)
    agent = _operator_form(request, s, form)
    version = form.get("version", "")
    if not version or len(version) > 128:
        raise HTTPException(status_code=422, detail=[{"loc": ["body", "version"], "msg":
                            "a version `triage model list` shows", "type": "missing"}])
    await run_in_threadpool(promote_version, _service(request).store,
                            Registry(_settings(request).resolved_model_registry), s.principal.tenant, agent, version,
                            actor=f"ui:key:{s.principal.key_id}")
    return RedirectResponse("/ui/models", status_code=303)


@router.post("/models/rollback")
async def models_rollback(request: Request) -> Response:
    """Operators: the code of ``POST /v1/operator/models/rollback`` (:func:`serve.services.retrain.rollback_version`)."""
    s = _session(request)
    form = await _form(request)
    agent = _operator_form(request, s, form)
    try:
        await run_in_threadpool(rollback_version, _service(request).store,
                                Registry(_settings(request).resolved_model_registry), s.principal.tenant, agent,
                                actor=f"ui:key:{s.principal.key_id}")
    except InputError as exc:
        if exc.path != "agent":
            raise
        raise HTTPException(status_code=409, detail=[{"loc": ["body", "agent"], "msg": exc.message,
                                                      "type": "conflict"}]) from None
    return RedirectResponse("/ui/models", status_code=303)


@router.post("/tenant")
async def choose_tenant(request: Request) -> Response:
    """Operators: act on another tenant in this session (the rules of ``X-Triage-Tenant``)."""
    s = _session(request)
    form = await _form(request)
    _check_csrf(s, form.get(CSRF_FIELD))
    home = s.principal.home_tenant or s.principal.tenant
    wanted = form.get("tenant", "").strip() or home
    base = s.principal if s.principal.home_tenant is None else \
        type(s.principal)(tenant=home, key_id=s.principal.key_id, operator=s.principal.operator)
    try:
        switched = switch_tenant(_service(request).store, base, wanted)
    except HTTPException as exc:  # re-located: here the tenant is a form field, not the header
        detail = [{**d, "loc": ["body", "tenant"]} for d in exc.detail] if isinstance(exc.detail, list) else exc.detail
        raise HTTPException(status_code=exc.status_code, detail=detail) from None
    await run_in_threadpool(_service(request).store.set_ui_session_tenant, s.token_hash,
                            None if switched.tenant == home else switched.tenant)
    return RedirectResponse("/ui/overview", status_code=303)


# -- 7 streams ------------------------------------------------------------------------------------

@router.get("/streams")
def streams(
    request: Request,
    format: Format = "html",
    stream: Annotated[str | None, Query(max_length=200, pattern=r"^[A-Za-z0-9._:@-]*$")] = None,
    agent: Annotated[str, Query(max_length=200, pattern=r"^[^\x00-\x1f]*$",
                                description="The stream's agent (`\"\"`: posted for every agent).")] = "",
) -> Response:
    s = _session(request, format)
    service = _service(request)
    tenant = s.principal.tenant
    listed = data.streams(service.store, tenant)
    chosen = next((x for x in listed if x["stream"] == stream and x["agent"] == agent), None)
    if chosen is None and stream:
        raise HTTPException(status_code=404, detail=[{"loc": ["query", "stream"], "msg":
                            f"no stream {stream!r} (agent {agent!r}) for this tenant", "type": "not_found"}])
    # by default the stream with an open alarm, else the longest
    chosen = chosen or (max(listed, key=lambda x: (x["alarm_open"], x["n"])) if listed else None)
    series = None
    if chosen is not None:
        series = data.stream_series(service.store, tenant, chosen["stream"], chosen["agent"])
        cps = service.changepoints(tenant, chosen["stream"], chosen["agent"], None)
        series["changepoints"] = cps.changepoints
        series["segments"] = [seg.model_dump() for seg in cps.segments]
        series["method"] = cps.method
    ctx = {"streams": listed, "chosen": chosen, "series": series}
    return _page(request, "streams.html", ctx, s, format)


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
    from serve.routers import ui_docs

    app.state.ui_settings = settings
    app.include_router(router)
    app.include_router(ui_docs.router)
    app.mount(STATIC, StaticFiles(directory=UI_DIR / "static"), name="ui-static")
    app.add_middleware(SecurityHeaders)

    @app.exception_handler(SignInRequired)
    async def _signin(_: Request, exc: SignInRequired) -> Response:
        if exc.json_wanted:
            return JSONResponse(status_code=401, content={"detail": [{
                "loc": ["cookie", SESSION_COOKIE], "msg": "sign in at /ui/signin (no live console session)",
                "type": "unauthorized"}]})
        return RedirectResponse(f"/ui/signin?next={quote(exc.next_url)}", status_code=303)


__all__ = ["CSP", "DOCS_CSP", "SecurityHeaders", "install_ui", "queue_view", "router", "run_view"]
