"""The console's label queue: the next run to label, and the JSON the queue's keys post."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from model.core.errors import InputError, ModelLoadError, NotFoundError
from model.data.labelling.review import KIND_KEYS
from model.scoring.agent_registry import ZERO_SHOT, Registry
from serve.auth import (
    CSRF_HEADER,
    UISession,
)
from serve.offline.label_review import MAIN_KEYS, review_queue
from serve.offline.label_review import _agree as agree_body
from serve.routers.ui_render import Format, TraceId, _check_csrf, _page, _service, _session, _settings
from serve.routers.ui_runs import _add_label, _label_request, run_view
from serve.schemas import UndoLabelRequest
from serve.ui import data

router = APIRouter(prefix="/ui", include_in_schema=False)

# -- 5 label queue --------------------------------------------------------------------------------

def _author(session: UISession) -> str:
    """The author the API writes for a label posted with this key and no author: ``key:<id>``."""
    return f"key:{session.principal.key_id}" if session.principal.key_id else ""


def queue_view(request: Request, session: UISession, at: int) -> dict[str, Any]:
    service = _service(request)
    tenant = session.principal.tenant
    scorer = getattr(request.app.state.diagnoser, "runscorer", None)
    fixed = scorer.threshold if scorer is not None else None

    def threshold_for(agent: str | None) -> float | None:  # as `triage label review --from-store`
        rel = service.relative_threshold(tenant, agent, scorer) if agent else None
        return rel if rel is not None else fixed

    queue, done = review_queue(service.stores.labels, tenant, author=_author(session), threshold_for=threshold_for)
    total = done + len(queue)
    current = None
    if queue:
        at = min(at, len(queue) - 1)
        c = queue[at]
        current = run_view(service, tenant, c.trace_id)
        current["margin"] = round(c.margin, 6)
        # why it is asked: what the margin is measured on (the probability or a finding's confidence) and against what
        current["uncertainty"] = {"on": c.measure.on, "value": c.measure.value, "threshold": c.measure.threshold,
                                  "text": c.basis}
        current["agree"] = agree_body(c.response)  # what [a] saves, or why it cannot
        current["shown"] = _shown_steps(current)
    agent = current["agent"] if current else None
    labelled = data.labelled_count(service.stores, tenant, agent)
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
            f" --agent {agent}" if agent is not None else ""),
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
        version = _service(request).activations.active_model(tenant, agent)
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
