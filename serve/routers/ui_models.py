"""The console's models page (operators promote and roll back; they choose the tenant) and its
streams page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from model.core.agents import MAX_AGENT_LENGTH, clean_agent_name
from model.core.errors import InputError
from model.scoring.agent_registry import CARD_FILE, POOLED, ZERO_SHOT, Registry
from serve.auth import (
    CSRF_FIELD,
    SESSION_COOKIE,
    UISession,
    switch_tenant,
)
from serve.routers.ui_queue import _version_cv_auroc
from serve.routers.ui_render import Format, _check_csrf, _form, _page, _service, _session, _settings
from serve.services.retrain import learning_curve, promote_version, rollback_version
from serve.ui import data

router = APIRouter(prefix="/ui", include_in_schema=False)

# -- 6 models -------------------------------------------------------------------------------------

@router.get("/models")
def models(request: Request, format: Format = "html") -> Response:
    """Every agent of the tenant (key, name, how it was found, runs, labelled runs, tools: as ``GET
    /v1/agents``); per agent with a model: the registry's versions (each with its card, gate and served
    learner), the active one (``zero-shot``: no agent model serves it), its learning curve so far and its
    activations; and the last ``triage retrain``'s record (each agent fitted, pooled or refused, with its code)."""
    s = _session(request, format)
    tenant = s.principal.tenant
    activations = _service(request).activations
    registry = Registry(_settings(request).resolved_model_registry)
    active = activations.active_models(tenant)
    history = activations.history(tenant)
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
                             "learner": v.summary.get("learner") or ("agent" if gate else None),
                             "card": card})
        agents.append({"agent": name, "pooled": name == POOLED, "active": on, "versions": versions,
                       "learning_curve": learning_curve(registry, tenant, name),
                       "activations": [h for h in history if h["agent"] == name],
                       "retrain": f"triage retrain --tenant {tenant} --agent {name}"})
    serving = [f"{a['agent']}: {a['active']}" for a in agents if a["active"] != ZERO_SHOT]
    summary = "; ".join(serving) + " (every other agent: zero-shot)" if serving else \
        "zero-shot for every agent (no agent model active)"
    # every agent of the tenant (named or inferred), as GET /v1/agents and `triage agents list` name them
    known = [{**k, "model": active.get(k["key"], ZERO_SHOT)} for k in _service(request).agents.list(tenant)]
    last = registry.retrains(tenant, limit=1)
    ctx = {"agents": agents, "known_agents": known, "activations": history, "zero_shot": ZERO_SHOT, "pooled": POOLED,
           "active": summary, "last_retrain": last[0] if last else None,
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
    await run_in_threadpool(promote_version, _service(request).stores.activations,
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
        await run_in_threadpool(rollback_version, _service(request).stores.activations,
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
        switched = switch_tenant(_service(request).stores.keys, base, wanted)
    except HTTPException as exc:  # re-located: here the tenant is a form field, not the header
        detail = [{**d, "loc": ["body", "tenant"]} for d in exc.detail] if isinstance(exc.detail, list) else exc.detail
        raise HTTPException(status_code=exc.status_code, detail=detail) from None
    await run_in_threadpool(_service(request).stores.keys.set_ui_session_tenant, s.token_hash,
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
    listed = data.streams(service.stores, tenant)
    chosen = next((x for x in listed if x["stream"] == stream and x["agent"] == agent), None)
    if chosen is None and stream:
        raise HTTPException(status_code=404, detail=[{"loc": ["query", "stream"], "msg":
                            f"no stream {stream!r} (agent {agent!r}) for this tenant", "type": "not_found"}])
    # by default the stream with an open alarm, else the longest
    chosen = chosen or (max(listed, key=lambda x: (x["alarm_open"], x["n"])) if listed else None)
    series = None
    if chosen is not None:
        series = data.stream_series(service.stores, tenant, chosen["stream"], chosen["agent"])
        cps = service.changepoints(tenant, chosen["stream"], chosen["agent"], None)
        series["changepoints"] = cps.changepoints
        series["segments"] = [seg.model_dump() for seg in cps.segments]
        series["method"] = cps.method
    ctx = {"streams": listed, "chosen": chosen, "series": series}
    return _page(request, "streams.html", ctx, s, format)
