"""What the console's pages show, read from the store (tenant-scoped, like every read of the API).

Each function returns plain JSON-able dicts: the page renders them and ``?format=json`` returns
them as they are (the page's JSON twin).

A run's **agent** is the one it resolved to when it was stored (``traces.agent``:
:meth:`serve.services.agents.Agents.resolve` — the agent the caller named, else the root agent span's
name, else the task type when asked, else one inferred from the run; re-keyed when a tenant renames,
merges or splits agents: docs/agents.md), the key of its agent model and of its metric streams.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any, Literal

from serve.services.run_labels import effective_label
from serve.store import Stores

Verdict = Literal["failed", "healthy", "unknown"]
#: The spectrum's name for a failed run without a primary failure kind.
NO_KIND = "no kind"



def verdict(healthy: bool | None) -> Verdict:
    return "unknown" if healthy is None else "healthy" if healthy else "failed"


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
    runs, recs, outs = store.console.window_rows(tenant, since=since, until=until, agent=agent)
    agent_of = {r.id: r.agent for r in runs}
    per: dict[str, Counter[str]] = defaultdict(Counter)
    for r in runs:
        c = per[r.agent]
        c["runs"] += 1
        c[verdict(r.healthy)] += 1
    for rec in recs:
        if rec.trace_id in agent_of:
            per[agent_of[rec.trace_id]]["repairs"] += 1
    for o in outs:
        if o.trace_id in agent_of:
            c = per[agent_of[o.trace_id]]
            c["outcomes"] += 1
            c["repaired"] += bool(o.success)
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
    for r in runs:
        if verdict(r.healthy) == "failed":
            day = _utc(r.created_at).date().isoformat()
            if day in days:
                spectrum[r.primary_kind or NO_KIND][day] += 1
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
    """One page of the tenant's runs, newest first, with their repair, outcome and effective label."""
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
            "steps": r.n_steps, "verdict": verdict(r.healthy),
            "failure_probability": None if r.p is None else round(float(r.p), 4),
            "basis": basis_of(r.basis, r.p),
            "primary_kind": r.primary_kind,
            "repair": last_rec["strategy"] if last_rec else None,
            "repairs": len(rec["recommendations"]),
            "outcome": None if last_out is None else ("succeeded" if last_out["success"] else "failed"),
            "label": None if eff is None else ("failed" if eff.failed else "ok"),
            "label_author": None if eff is None else eff.author,
        })
    pages = max(1, -(-total // per_page))
    return {"total": total, "page": page, "pages": pages, "per_page": per_page, "items": items}


def basis_of(basis: Any, probability: float | None) -> dict[str, Any] | None:
    """What a run's ``failure_probability_basis`` says (model, agent, labelled runs, CV AUROC, learner); a run
    stored before schema 1.3 with a probability: zero-shot; none without a probability."""
    if isinstance(basis, dict) and basis.get("model"):
        return {k: basis.get(k) for k in ("model", "agent", "labelled_runs", "cv_auroc", "learner")}
    return {"model": "zero-shot", "agent": None, "labelled_runs": None, "cv_auroc": None, "learner": None} \
        if probability is not None else None


def agents(store: Stores, tenant: str) -> list[str]:
    """The tenant's agents (for the filters), by name."""
    return store.console.agent_names(tenant)


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


def _utc(t: datetime) -> datetime:
    """A stored time in UTC (SQLite gives it back naive, in UTC)."""
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def day_start(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


__all__ = ["NO_KIND", "RunFilter", "agents", "basis_of", "day_start", "labelled_count", "overview", "runs", "stream_series",
           "streams", "verdict", "window"]
