"""The console's pages about runs: the overview, the failure patterns, the runs list and one run
(with its label form). Each reads through :class:`serve.services.console.ConsoleService` and renders
through the base view (:mod:`serve.routers.ui_base`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response

from model.core.errors import NotFoundError
from model.core.kinds import FailureKind
from serve.auth import CSRF_FIELD
from serve.routers.ui_base import (
    AgentQ,
    DaysQ,
    Format,
    PageQ,
    PerPageQ,
    TraceId,
    check_csrf,
    console,
    date_param,
    http_error,
    label_request,
    paginate,
    post_label,
    read_form,
    respond,
    session,
)
from serve.services.console import RunFilter

router = APIRouter(prefix="/ui", include_in_schema=False)

# -- 1 overview -----------------------------------------------------------------------------------

@router.get("/overview")
def overview(request: Request, format: Format = "html", days: DaysQ = 7, agent: AgentQ = None) -> Response:
    s = session(request, format)
    ctx = console(request).overview(s.principal.tenant, days=days, agent=agent or None)
    return respond(request, "overview.html", ctx, s, format)


# -- 2 failure patterns (serve/services/patterns.py: the function behind GET /v1/patterns) ------------------

LevelQ = Annotated[Literal["failure", "signal", "all"], Query()]


@router.get("/patterns")
def patterns(request: Request, format: Format = "html", days: DaysQ = 7, level: LevelQ = "failure",
             agent: AgentQ = None) -> Response:
    s = session(request, format)
    svc = console(request)
    tenant = s.principal.tenant
    ctx = {"result": svc.patterns(tenant, days=days, level=level, agent=agent or None, limit=100), "days": days,
           "level": level, "agent": agent or "", "all_agents": svc.agents(tenant)}
    return respond(request, "patterns.html", ctx, s, format)


@router.get("/patterns/{pattern_id}")
def pattern(request: Request, pattern_id: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")],
            format: Format = "html", days: DaysQ = 7, level: LevelQ = "failure") -> Response:
    s = session(request, format)
    result = console(request).patterns(s.principal.tenant, days=days, level=level, agent=None, limit=100_000)
    found = next((p for p in result["patterns"] if p["id"] == pattern_id), None)
    if found is None:
        raise http_error(404, ["path", "pattern_id"],
                         f"no pattern {pattern_id!r} in the last {days} days for this tenant", "not_found")
    return respond(request, "pattern.html", {"p": found, "days": days, "level": level}, s, format)


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
    page: PageQ = 1,
    per_page: PerPageQ = 50,
) -> Response:
    s = session(request, format)
    f = RunFilter(
        agent=agent or None, verdict=verdict or None, kind=kind.value if kind else None,
        since=date_param(since, "since"), until=date_param(until, "until"),
        labelled=None if not labelled else labelled == "yes")
    svc = console(request)
    got = svc.runs(s.principal.tenant, f, page=page, per_page=per_page)
    filters = {"agent": agent or "", "verdict": verdict or "", "kind": kind.value if kind else "",
               "since": since or "", "until": until or "", "labelled": labelled or ""}
    ctx: dict[str, Any] = {**paginate(got["total"], page, per_page, filters), "items": got["items"],
                           "filters": filters, "all_agents": svc.agents(s.principal.tenant),
                           "kinds": [k.value for k in FailureKind]}
    return respond(request, "runs.html", ctx, s, format)


# -- 4 one run ------------------------------------------------------------------------------------

@router.get("/runs/{trace_id}")
def run(request: Request, trace_id: TraceId, format: Format = "html") -> Response:
    s = session(request, format)
    try:
        ctx = console(request).run(s.principal.tenant, trace_id)
    except NotFoundError as exc:
        raise http_error(404, ["path", "trace_id"], str(exc), "not_found") from None
    return respond(request, "run.html", ctx, s, format)


@router.post("/runs/{trace_id}/label")
async def label_form(request: Request, trace_id: TraceId) -> Response:
    """The run page's label buttons (a form: failed / ok, optionally kind and step)."""
    s = session(request)
    form = await read_form(request)
    check_csrf(s, form.get(CSRF_FIELD))
    # a form sends text: "true" / "false" and digits become what the API's JSON would carry
    typed: dict[str, Any] = dict(form)
    typed["failed"] = {"true": True, "false": False}.get(form.get("failed", ""), form.get("failed"))
    if form.get("step", "").isdigit():
        typed["step"] = int(form["step"])
    await post_label(request, s, trace_id, label_request(typed))
    return RedirectResponse(f"/ui/runs/{quote(trace_id)}#label", status_code=303)
