"""The console's service: everything its pages read or write goes through :class:`ConsoleService`.

The console's routers (:mod:`serve.routers.ui` and its page modules) never touch the store: they
call this service, which holds the store in one place (``ConsoleService._stores``) and the worker's
:class:`~serve.services.triage.TriageService` for what the API does too (labels, stored traces,
change points, agents). Its page functions return plain JSON-able dicts: the page renders them and
``?format=json`` returns them as they are (the page's JSON twin, :mod:`serve.routers.ui_base`).

A run's **agent** is the one it resolved to when it was stored (``traces.agent``:
:meth:`serve.services.agents.Agents.resolve` — the agent the caller named, else the root agent span's
name, else the task type when asked, else one inferred from the run; re-keyed when a tenant renames,
merges or splits agents: docs/agents.md), the key of its agent model and of its metric streams.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from model.core.graph import ExecutionGraph
from model.core.kinds import FailureKind
from model.core.schema import Step, Trace
from model.scoring.agent_registry import POOLED, ZERO_SHOT, Registry
from serve.auth import Principal, UISession, find_ui_session, open_ui_session, switch_tenant
from serve.schemas import (
    ChangepointsResponse,
    LabelRequest,
    LabelResponse,
    UndoLabelRequest,
    UndoLabelResponse,
)
from serve.services.patterns import window as patterns_window
from serve.services.retrain import learning_curve, promote_version, rollback_version
from serve.services.run_labels import effective_label
from serve.services.triage import TriageService
from serve.store import Stores
from serve.store.labels import ReviewRow
from serve.store.verdict import Verdict, verdict_of

#: The spectrum's name for a failed run without a primary failure kind.
NO_KIND = "no kind"



def window(days: int, *, now: datetime | None = None) -> tuple[datetime, datetime]:
    """The last ``days`` days up to ``now`` (UTC)."""
    end = now or datetime.now(UTC)
    return end - timedelta(days=days), end


def overview(store: Stores, tenant: str, *, since: datetime, until: datetime, agent: str | None) -> dict[str, Any]:
    """Runs, verdicts, repairs and their success per agent; the failure spectrum per day; alarms.

    The spectrum counts each failed run once, on the day it was stored, under its primary failure
    kind (:data:`NO_KIND` when it has none): a day's bars add up to that day's failed runs, and all
    of them to the ``failed`` total, over the same window. ``days`` lists every day of the window
    (the first and the last partial), so a chart can span the window whatever days have runs."""
    counts = store.console.window_counts(tenant, since=since, until=until, agent=agent)
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for name, v, n in counts.verdicts:
        per[name]["runs"] += n
        per[name][v] += n
    for name, n in counts.repairs.items():
        per[name]["repairs"] += n
    for name, (n, good) in counts.outcomes.items():
        per[name]["outcomes"] += n
        per[name]["repaired"] += good
    agents = []
    for name in sorted(per, key=lambda a: (-per[a]["runs"], a)):
        c = per[name]
        agents.append({"agent": name, "runs": c["runs"], "failed": c["failed"], "unknown": c["unknown"],
                       "healthy": c["healthy"], "repairs": c["repairs"], "outcomes": c["outcomes"],
                       "repaired": c["repaired"],
                       "repair_success": round(c["repaired"] / c["outcomes"], 4) if c["outcomes"] else None})
    total = Counter[str]()
    for c in per.values():
        total.update(c)
    days = [(since.date() + timedelta(days=i)).isoformat() for i in range((until.date() - since.date()).days + 1)]
    spectrum: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(days, 0))
    for kind, day, n in counts.spectrum:
        if day in days:
            spectrum[kind or NO_KIND][day] += n
    alarms = [{"stream": a["name"], "agent": a["agent"], "alarm": a["alarm"]}
              for a in store.streams.all_open_alarms(tenant)]
    return {
        "since": since.isoformat(), "until": until.isoformat(), "agent": agent,
        "totals": {k: total[k] for k in ("runs", "failed", "unknown", "healthy", "repairs", "outcomes", "repaired")},
        "agents": agents,
        "spectrum": {"days": days, "kinds": {k: [v[d] for d in days] for k, v in sorted(spectrum.items())}},
        "alarms": alarms,
    }


@dataclass(frozen=True)
class RunFilter:
    """The runs page's filters (each ``None``: any)."""

    agent: str | None = None
    verdict: Verdict | None = None
    kind: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    labelled: bool | None = None


def runs(store: Stores, tenant: str, f: RunFilter, *, page: int, per_page: int) -> dict[str, Any]:
    """One page of the tenant's runs, newest first, with their repair, outcome and effective label:
    ``total`` (runs that pass the filter) and ``items`` (the page's; the pager's figures are the base
    view's, :func:`serve.routers.ui_base.paginate`)."""
    total, rows = store.console.run_page(tenant, agent=f.agent, verdict=f.verdict, kind=f.kind, since=f.since, until=f.until,
                                 labelled=f.labelled, page=page, per_page=per_page)
    records = store.labels.records_of(tenant, [r.id for r in rows])
    items = []
    for r in rows:
        rec = records[r.id]
        last_rec = rec["recommendations"][-1] if rec["recommendations"] else None
        last_out = rec["outcomes"][-1] if rec["outcomes"] else None
        eff = effective_label(rec["labels"])
        items.append({
            "id": r.id, "created_at": r.created_at.isoformat(), "agent": r.agent, "task_type": r.task_type,
            "steps": r.n_steps, "verdict": r.verdict,
            "failure_probability": None if r.p is None else round(float(r.p), 4),
            "basis": basis_of(r.basis, r.p),
            "primary_kind": r.primary_kind,
            "repair": last_rec["strategy"] if last_rec else None,
            "repairs": len(rec["recommendations"]),
            "outcome": None if last_out is None else ("succeeded" if last_out["success"] else "failed"),
            "label": None if eff is None else ("failed" if eff.failed else "ok"),
            "label_author": None if eff is None else eff.author,
        })
    return {"total": total, "items": items}


def basis_of(basis: Any, probability: float | None) -> dict[str, Any] | None:
    """What a run's ``failure_probability_basis`` says (model, agent, labelled runs, CV AUROC, learner); a run
    stored before schema 1.3 with a probability: zero-shot; none without a probability."""
    if isinstance(basis, dict) and basis.get("model"):
        return {k: basis.get(k) for k in ("model", "agent", "labelled_runs", "cv_auroc", "learner")}
    return {"model": "zero-shot", "agent": None, "labelled_runs": None, "cv_auroc": None, "learner": None} \
        if probability is not None else None


def agents(store: Stores, tenant: str) -> list[str]:
    """The tenant's agents (for the filters), by name."""
    return store.agents.agents_with_runs(tenant)


def labelled_count(store: Stores, tenant: str, agent: str | None) -> int:
    """Runs of this agent (``None``: every run) that carry a label."""
    return store.console.labelled_count(tenant, agent)


def streams(store: Stores, tenant: str) -> list[dict[str, Any]]:
    """The tenant's streams: name, agent (``""``: posted for every agent), observations, whether an
    alarm is open."""
    rows = store.console.stream_list(tenant)
    return [{"stream": r.name, "agent": r.agent, "detector": r.detector, "n": r.n,
             "alarm_open": bool(r.alarm_open)} for r in rows]


def stream_series(store: Stores, tenant: str, stream: str, agent: str, *, last: int = 2000) -> dict[str, Any]:
    """The stream's last ``last`` observations (seq, value) and the seqs where its detector alarmed."""
    rows = store.console.stream_observations(tenant, stream, agent, last=last)
    return {"seq": [int(r.seq) for r in rows], "values": [float(r.value) for r in rows],
            "alarms": [int(r.seq) for r in rows if r.alarm]}


def day_start(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


# -- one run ----------------------------------------------------------------------------------------

def run_view(service: TriageService, tenant: str, trace_id: str) -> dict[str, Any]:
    """Everything the run page shows: the steps with their failures, signals and attribution marked,
    the repair ladder taken with its outcomes, the execution graph, the effective label.

    It shows the diagnosis as it was stored (its failures, primary and attribution); it decides
    nothing about them. :class:`~model.core.errors.NotFoundError` for an unknown trace."""
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
            "tool_args": args_text(st),
            # a tool call's content is often its arguments' text (the importers keep it): shown once, as the arguments
            "content_is_args": content_is_args(st),
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
        "healthy": diag.get("healthy"), "verdict": verdict_of(diag.get("healthy")),
        "failure_probability": diag.get("failure_probability"),
        "basis": diag.get("failure_probability_basis"),
        "primary": diag.get("primary"), "attribution": att, "recommendation": diag.get("recommendation"),
        "failures": diag.get("failures") or [], "signals": diag.get("signals") or [],
        "steps": steps, "ladder": ladder, "graph": graph, "graph_svg": graph_layout(graph),
        "label": label, "kinds": [k.value for k in FailureKind],
    }


def args_text(step: Step) -> str | None:
    """A tool call's arguments as the page shows them: indented JSON, else the raw text received."""
    return json.dumps(step.tool_args, indent=1, ensure_ascii=False) if step.tool_args else step.tool_args_raw


def content_is_args(step: Step) -> bool:
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


def graph_layout(graph: dict[str, Any]) -> dict[str, Any]:
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


def version_cv_auroc(summary: dict[str, Any]) -> float | None:
    """A registry version's cross-validated AUROC: its card's, else its gate's estimate."""
    card = summary.get("card")
    card = card if isinstance(card, dict) else {}
    est = ((summary.get("gate") or {}).get("estimate") or {}).get("agent") or {}
    for v in (card.get("cv_auroc"), est.get("auroc") if isinstance(est, dict) else None):
        if isinstance(v, int | float) and v == v:
            return float(v)
    return None


# -- the service ------------------------------------------------------------------------------------

class ConsoleService:
    """What the console reads and writes, for one request: ``service`` (the worker's
    :class:`TriageService`) and the model registry at ``registry_root``.

    The store is reached here only, through ``self._stores``."""

    def __init__(self, service: TriageService, registry_root: Path) -> None:
        self.service = service
        self._stores: Stores = service.stores
        self.registry_root = registry_root

    # sessions (serve.auth over this store)
    def find_session(self, token: str | None, *, auth_enabled: bool) -> UISession | None:
        """The live console session of the cookie's ``token`` (:func:`serve.auth.find_ui_session`)."""
        return find_ui_session(self._stores.keys, token, auth_enabled=auth_enabled)

    def open_session(self, key: str | None, *, ttl: timedelta, auth_enabled: bool) -> str | None:
        """Sign in with ``key`` (:func:`serve.auth.open_ui_session`): the cookie's token, or ``None``."""
        return open_ui_session(self._stores.keys, key, ttl=ttl, auth_enabled=auth_enabled)

    def close_session(self, token_hash: str) -> None:
        """Sign out."""
        self._stores.keys.revoke_ui_session(token_hash)

    def act_as(self, session: UISession, principal: Principal, wanted: str) -> Principal:
        """An operator's session acts on tenant ``wanted`` (the rules of ``X-Triage-Tenant``:
        :func:`serve.auth.switch_tenant`, whose ``HTTPException`` names the header); ``principal`` is
        the session's at its home tenant."""
        switched = switch_tenant(self._stores.keys, principal, wanted)
        self._stores.keys.set_ui_session_tenant(session.token_hash,
                                          None if switched.tenant == principal.tenant else switched.tenant)
        return switched

    # pages
    def overview(self, tenant: str, *, days: int, agent: str | None) -> dict[str, Any]:
        """The overview page: :func:`overview` over the last ``days`` days, with the tenant's agents."""
        since, until = window(days)
        ctx = overview(self._stores, tenant, since=since, until=until, agent=agent)
        ctx["days"] = days
        ctx["all_agents"] = self.agents(tenant)
        return ctx

    def patterns(self, tenant: str, *, days: int, level: str, agent: str | None, limit: int) -> dict[str, Any]:
        """The failure patterns of the last ``days`` days: :meth:`serve.services.patterns.Patterns.tenant_patterns`,
        what ``GET /v1/patterns`` answers, as JSON."""
        since, until = patterns_window(since=None, until=None, days=float(days))
        got = self.service.patterns.tenant_patterns(tenant, since=since, until=until, level=level,  # type: ignore[arg-type]
                                                    limit=limit, agent=agent)
        return got.model_dump(mode="json")

    def runs(self, tenant: str, f: RunFilter, *, page: int, per_page: int) -> dict[str, Any]:
        """One page of runs: :func:`runs`."""
        return runs(self._stores, tenant, f, page=page, per_page=per_page)

    def agents(self, tenant: str) -> list[str]:
        """The tenant's agents, by name (for the filters)."""
        return agents(self._stores, tenant)

    def known_agents(self, tenant: str) -> list[dict[str, Any]]:
        """Every agent of the tenant as ``GET /v1/agents`` lists them."""
        return self.service.agents.list(tenant)

    def labelled_count(self, tenant: str, agent: str | None) -> int:
        """Runs of ``agent`` (``None``: every run) that carry a label."""
        return labelled_count(self._stores, tenant, agent)

    def run(self, tenant: str, trace_id: str) -> dict[str, Any]:
        """The run page: :func:`run_view`."""
        return run_view(self.service, tenant, trace_id)

    def streams(self, tenant: str) -> list[dict[str, Any]]:
        """The tenant's streams: :func:`streams` (after the runs' values waiting in the feed)."""
        self.service.streams.drain_waiting()
        return streams(self._stores, tenant)

    def stream_series(self, tenant: str, stream: str, agent: str) -> dict[str, Any]:
        """A stream's last observations and alarms: :func:`stream_series` (after the feed's waiting values)."""
        self.service.streams.drain_waiting()
        return stream_series(self._stores, tenant, stream, agent)

    def changepoints(self, tenant: str, stream: str, agent: str) -> ChangepointsResponse:
        """A stream's change points (``GET /v1/streams/{name}/changepoints``'s code)."""
        return self.service.changepoints(tenant, stream, agent, None)

    # labels (the API's code: POST /v1/traces/{id}/labels, POST /v1/labels/undo)
    def add_label(self, tenant: str, trace_id: str, req: LabelRequest, *, key_id: str | None) -> LabelResponse:
        return self.service.add_label(tenant, trace_id, req, key_id=key_id)

    def undo_label(self, tenant: str, req: UndoLabelRequest, *, key_id: str | None) -> UndoLabelResponse:
        return self.service.undo_label(tenant, req, key_id=key_id)

    # models
    @property
    def registry(self) -> Registry:
        return Registry(self.registry_root)

    def active_model(self, tenant: str, agent: str) -> str | None:
        """The version the tenant serves for ``agent`` (``None``: none recorded)."""
        return self._stores.activations.active_model(tenant, agent)

    def models(self, tenant: str, *, operator: bool) -> dict[str, Any]:
        """The models page (:func:`serve.routers.ui_models.models` says what it holds); the registry's
        server path only for an ``operator``."""
        registry = self.registry
        active = self._stores.activations.active_models(tenant)
        history = self._stores.activations.model_history(tenant)
        names = sorted(set(registry.agents(tenant)) | set(active))
        listed = []
        for name in names:
            on = active.get(name, ZERO_SHOT)
            versions = []
            for v in registry.versions(tenant, name):
                card = v.card(20_000)
                gate = v.summary.get("gate")
                gate = gate if isinstance(gate, dict) else {}
                versions.append({"version": v.version, "created_at": v.created_at, "parent": v.parent,
                                 "active": v.version == on, "members": list(v.members),
                                 "runs": (gate.get("estimate") or {}).get("runs"),
                                 "cv_auroc": version_cv_auroc(v.summary),
                                 "gate": "passed" if gate.get("promote") else "failed" if gate else None,
                                 "learner": v.summary.get("learner") or ("agent" if gate else None),
                                 "card": card})
            listed.append({"agent": name, "pooled": name == POOLED, "active": on, "versions": versions,
                           "learning_curve": learning_curve(registry, tenant, name),
                           "activations": [h for h in history if h["agent"] == name],
                           "retrain": f"triage retrain --tenant {tenant} --agent {name}"})
        serving = [f"{a['agent']}: {a['active']}" for a in listed if a["active"] != ZERO_SHOT]
        summary = "; ".join(serving) + " (every other agent: zero-shot)" if serving else \
            "zero-shot for every agent (no agent model active)"
        # every agent of the tenant (named or inferred), as GET /v1/agents and `triage agents list` name them
        known = [{**k, "model": active.get(k["key"], ZERO_SHOT)} for k in self.known_agents(tenant)]
        last = registry.retrains(tenant, limit=1)
        return {"agents": listed, "known_agents": known, "activations": history, "zero_shot": ZERO_SHOT,
                "pooled": POOLED, "active": summary, "last_retrain": last[0] if last else None,
                "registry": str(registry.root) if operator else None,  # a server path: operators only
                "retrain": f"triage retrain --tenant {tenant}"}

    def promote(self, tenant: str, agent: str, version: str, *, actor: str) -> None:
        """``POST /v1/operator/models/promote``'s code (:func:`serve.services.retrain.promote_version`)."""
        promote_version(self._stores.activations, self.registry, tenant, agent, version, actor=actor)

    def rollback(self, tenant: str, agent: str, *, actor: str) -> str | None:
        """``POST /v1/operator/models/rollback``'s code (:func:`serve.services.retrain.rollback_version`)."""
        return rollback_version(self._stores.activations, self.registry, tenant, agent, actor=actor)

    # the label queue (serve.services.label_queue)
    def iter_history(self, tenant: str) -> Iterator[dict[str, Any]]:
        """The tenant's stored runs with their diagnoses and labels (the label queue reads them:
        :class:`serve.services.label_queue.HistorySource`)."""
        return self._stores.labels.iter_history(tenant)

    def review_rows(self, tenant: str, author: str) -> tuple[list[ReviewRow], int]:
        """The label queue's runs from the console's index (:meth:`serve.store.labels.LabelStore.review_rows`)."""
        return self._stores.labels.review_rows(tenant, author)

    def review_head(self, tenant: str, author: str, *, order: str, thresholds: dict[str, float], default: float,
                    limit: int) -> tuple[list[ReviewRow], int, int] | None:
        """The head of the label queue ordered by the database (:meth:`serve.store.labels.LabelStore.review_head`)."""
        return self._stores.labels.review_head(tenant, author, order=order, thresholds=thresholds, default=default,
                                               limit=limit)

    def responses(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored responses of these runs (:meth:`serve.store.labels.LabelStore.responses`)."""
        return self._stores.labels.responses(tenant, trace_ids)

    def findings_of(self, tenant: str, trace_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """The runs' stored failures and signals (:meth:`serve.store.labels.LabelStore.findings_of`)."""
        return self._stores.labels.findings_of(tenant, trace_ids)


__all__ = ["NO_KIND", "ConsoleService", "RunFilter", "agents", "args_text", "basis_of", "content_is_args",
           "day_start", "graph_layout", "labelled_count", "overview", "run_view", "runs", "stream_series",
           "streams", "version_cv_auroc", "window"]
