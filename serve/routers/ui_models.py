"""The console's models page (operators promote and roll back; they choose the tenant) and its
streams page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from model.core.agents import MAX_AGENT_LENGTH, clean_agent_name
from model.core.errors import InputError
from model.scoring.agent_registry import POOLED
from serve.auth import CSRF_FIELD, SESSION_COOKIE, UISession
from serve.routers.ui_base import Format, check_csrf, console, http_error, read_form, respond, session

router = APIRouter(prefix="/ui", include_in_schema=False)

# -- 6 models -------------------------------------------------------------------------------------

@router.get("/models")
def models(request: Request, format: Format = "html") -> Response:
    """Every agent of the tenant (key, name, how it was found, runs, labelled runs, tools: as ``GET
    /v1/agents``); per agent with a model: the registry's versions (each with its card, gate and served
    learner), the active one (``zero-shot``: no agent model serves it), its learning curve so far and its
    activations; and the last ``triage retrain``'s record (each agent fitted, pooled or refused, with its code)."""
    s = session(request, format)
    ctx = console(request).models(s.principal.tenant, operator=s.principal.operator)
    return respond(request, "models.html", ctx, s, format)


def _operator_form(s: UISession, form: dict[str, str]) -> str:
    """Checks an operator's model form (CSRF, operator key); the agent it names (a 422 naming
    ``agent`` when it names none or a bad one)."""
    check_csrf(s, form.get(CSRF_FIELD))
    if not s.principal.operator:
        raise http_error(403, ["cookie", SESSION_COOKIE],
                         "this needs an operator key's session (`triage keys create --operator`)", "forbidden")
    agent = form.get("agent", "")
    if not agent or len(agent) > MAX_AGENT_LENGTH or clean_agent_name(agent) != agent:
        raise http_error(422, ["body", "agent"],
                         f"the agent whose model this acts on: 1-{MAX_AGENT_LENGTH} printable characters, no "
                         f"outer blanks (`{POOLED}`: the tenant's pooled model); got {agent!r}",
                         "value_error" if agent else "missing")
    return agent


@router.post("/models/promote")
async def models_promote(request: Request) -> Response:
    """Operators: the code of ``POST /v1/operator/models/promote`` (:func:`serve.services.retrain.promote_version`)."""
    s = session(request)
    form = await read_form(request)
    agent = _operator_form(s, form)
    version = form.get("version", "")
    if not version or len(version) > 128:
        raise http_error(422, ["body", "version"], "a version `triage model list` shows", "missing")
    await run_in_threadpool(console(request).promote, s.principal.tenant, agent, version,
                            actor=f"ui:key:{s.principal.key_id}")
    return RedirectResponse("/ui/models", status_code=303)


@router.post("/models/rollback")
async def models_rollback(request: Request) -> Response:
    """Operators: the code of ``POST /v1/operator/models/rollback`` (:func:`serve.services.retrain.rollback_version`)."""
    s = session(request)
    form = await read_form(request)
    agent = _operator_form(s, form)
    try:
        await run_in_threadpool(console(request).rollback, s.principal.tenant, agent,
                                actor=f"ui:key:{s.principal.key_id}")
    except InputError as exc:
        if exc.path != "agent":
            raise
        raise http_error(409, ["body", "agent"], exc.message, "conflict") from None
    return RedirectResponse("/ui/models", status_code=303)


@router.post("/tenant")
async def choose_tenant(request: Request) -> Response:
    """Operators: act on another tenant in this session (the rules of ``X-Triage-Tenant``)."""
    s = session(request)
    form = await read_form(request)
    check_csrf(s, form.get(CSRF_FIELD))
    home = s.principal.home_tenant or s.principal.tenant
    wanted = form.get("tenant", "").strip() or home
    base = s.principal if s.principal.home_tenant is None else \
        type(s.principal)(tenant=home, key_id=s.principal.key_id, operator=s.principal.operator)
    try:
        await run_in_threadpool(console(request).act_as, s, base, wanted)
    except HTTPException as exc:  # re-located: here the tenant is a form field, not the header
        detail = [{**d, "loc": ["body", "tenant"]} for d in exc.detail] if isinstance(exc.detail, list) else exc.detail
        raise HTTPException(status_code=exc.status_code, detail=detail) from None
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
    s = session(request, format)
    svc = console(request)
    tenant = s.principal.tenant
    listed = svc.streams(tenant)
    chosen = next((x for x in listed if x["stream"] == stream and x["agent"] == agent), None)
    if chosen is None and stream:
        raise http_error(404, ["query", "stream"], f"no stream {stream!r} (agent {agent!r}) for this tenant",
                         "not_found")
    # by default the stream with an open alarm, else the longest
    chosen = chosen or (max(listed, key=lambda x: (x["alarm_open"], x["n"])) if listed else None)
    series = None
    if chosen is not None:
        series = svc.stream_series(tenant, chosen["stream"], chosen["agent"])
        cps = svc.changepoints(tenant, chosen["stream"], chosen["agent"])
        series["changepoints"] = cps.changepoints
        series["segments"] = [seg.model_dump() for seg in cps.segments]
        series["method"] = cps.method
    ctx = {"streams": listed, "chosen": chosen, "series": series}
    return respond(request, "streams.html", ctx, s, format)
