"""The console's pages about runs: the overview, the failure patterns, the runs list and one run
(with its label form)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from model.core.errors import NotFoundError
from model.core.graph import ExecutionGraph
from model.core.kinds import FailureKind
from model.core.schema import Step, Trace
from serve.auth import (
    CSRF_FIELD,
    UISession,
)
from serve.routers.ui_render import (
    AgentQ,
    DaysQ,
    Format,
    TraceId,
    _check_csrf,
    _date_param,
    _form,
    _page,
    _service,
    _session,
)
from serve.schemas import LabelRequest
from serve.services.patterns import tenant_patterns
from serve.services.patterns import window as patterns_window
from serve.services.triage import TriageService
from serve.ui import data

router = APIRouter(prefix="/ui", include_in_schema=False)

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
            "tool_args": _args_text(st),
            # a tool call's content is often its arguments' text (the importers keep it): shown once, as the arguments
            "content_is_args": _content_is_args(st),
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
        "primary": diag.get("primary"), "attribution": att, "recommendation": diag.get("recommendation"),
        "failures": diag.get("failures") or [], "signals": diag.get("signals") or [],
        "steps": steps, "ladder": ladder, "graph": graph, "graph_svg": _graph_layout(graph),
        "label": label, "kinds": [k.value for k in FailureKind],
    }


def _args_text(step: Step) -> str | None:
    """A tool call's arguments as the page shows them: indented JSON, else the raw text received."""
    return json.dumps(step.tool_args, indent=1, ensure_ascii=False) if step.tool_args else step.tool_args_raw


def _content_is_args(step: Step) -> bool:
    """Whether the step's content only repeats its tool arguments (the same text, or the same JSON)."""
    text = step.content.strip()
    if not text or (step.tool_args is None and step.tool_args_raw is None):
        return False
    if step.tool_args_raw is not None and text == step.tool_args_raw.strip():
        return True
    try:
        return step.tool_args is not None and json.loads(text) == step.tool_args
    except (ValueError, RecursionError):
        return False


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
