"""Seed a store in bulk: many runs written straight into the tables (not over HTTP, not through the
store's per-request write path), with every table the write path fills kept consistent.

The runs are copies (new ids ``bench-0000000`` …) of a pool of diagnosed runs: the first task
groups of the real τ-bench airline and AgentProcessBench sets and generated runs of every kind
(:func:`model.data.builder.make_trace`), diagnosed once with the rules and the shipped run scorer. A
copy gets an agent (named, as ``options.agent`` names one: ``airline``, ``airline-2``, …, by the pool
run's task type), the canary arm ``repair`` (the default share: 100 %) and a creation time: the
first ``--in-window`` runs spread over the last ``--days`` days (default 6.5: inside the default
7-day window), the rest between 7 and ``--history-days`` days ago. Half the failing runs get an
outcome (55 % successful, 3 s after the recommendation), 10 % a human label (failed, the primary
kind): bench/console.py's mix.

What each run writes, as :meth:`TraceStore.put_trace` (with ``now`` = its time),
:meth:`SessionStore.put_recommendation`, :meth:`SessionStore.add_outcome` and a label with
:func:`serve.store.counters.count_labels` would: ``traces``, ``failures`` (tool, created_at, agent),
``run_metrics``, ``recommendations``, ``outcomes``, ``labels``; then per tenant ``canary_counts``
and ``metric_totals`` (the counters' sums, the agents' counts among them), ``overview_counts``, ``usage`` (steps per UTC day) and ``agents`` (a row per
named agent). ``tests/test_seed.py`` checks that against the write path on both engines.

PostgreSQL: ``COPY … FROM STDIN`` in transactions of ``--chunk`` runs, then ``VACUUM ANALYZE``;
SQLite: SQLAlchemy Core multi-row inserts. Run (the database must be empty or hold no run of the
tenant)::

    nice .venv/bin/python bench/seed.py --database-url sqlite:////tmp/seed/triage.db --runs 20000
    nice .venv/bin/python bench/seed.py --database-url postgresql://… --runs 1000000 \\
        --in-window 210000 --agents 24
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from serve.store.counters import CANARY_FIELDS, OVERVIEW_FIELDS, hour_of  # noqa: E402
from serve.store.tables import RECOVERY_BOUNDS  # noqa: E402
from serve.store.traces import failure_tool  # noqa: E402
from serve.store.verdict import queue_key, run_columns  # noqa: E402

BASES = ("airline", "hotpotqa", "support", "coder")  # the pool runs' task types
ARM = "repair"  # what the service stores at the default canary share (100 %)
OUTCOME_AFTER_S = 3.0
_TID, _REC = "@@seed-tid@@", "@@seed-rec@@"
_AGENT = "@@seed-agent@@"


def pool(real_groups: int = 12, generated: int = 160, seed: int = 0) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(task type, trace JSON, response JSON) of each diagnosed pool run."""
    from model.core.kinds import FailureKind
    from model.core.options import DiagnoseOptions
    from model.data.builder import RECIPE_KINDS, make_trace
    from model.data.realdata import first_groups, load_source
    from model.diagnosis.diagnoser import Diagnoser

    diagnoser = Diagnoser.with_shipped_models(classifier=False)
    runs: list[tuple[str, Any]] = []
    for source, base in (("tau_airline", "airline"), ("agentprocessbench", "hotpotqa")):
        runs += [(base, r.trace) for r in first_groups(load_source(source), real_groups)]
    kinds = [None, *RECIPE_KINDS]  # the kinds a run can be generated for (at_risk and degradation: none)
    for i in range(generated):
        kind = kinds[i % len(kinds)]
        if kind == FailureKind.DISALLOWED_TOOL:
            kind = None
        runs.append((BASES[2 + i % 2], make_trace(kind, seed=seed + i, n_steps=8 + i % 12)))
    out = []
    for base, trace in runs:
        trace = trace.model_copy(deep=True)
        trace.labels = None
        resp = diagnoser.diagnose(trace, DiagnoseOptions())
        out.append((base, trace.model_dump(mode="json", exclude_none=True), resp.model_dump(mode="json")))
    return out


def agent_names(n: int) -> dict[str, list[str]]:
    """``n`` agents, spread over the four task types: ``airline``, ``hotpotqa``, …, ``airline-2``, …"""
    out: dict[str, list[str]] = {b: [] for b in BASES}
    for k in range(max(n, len(BASES))):
        base = BASES[k % len(BASES)]
        out[base].append(base if k < len(BASES) else f"{base}-{k // len(BASES) + 1}")
    return out


@dataclass(frozen=True)
class Template:
    """One pool run, ready to copy: its JSON with placeholders for the ids and agent."""

    base: str
    trace: str
    response: str
    n_steps: int
    healthy: bool
    primary_kind: str | None
    model_version: str
    failures: list[dict[str, Any]]  # failure rows less tenant, trace id, created_at and agent
    kinds: dict[str, int]  # the failures (not signals) by kind: run_metrics.kinds
    rec: str | None  # the recommendation's JSON (a failing run's), with the id placeholder
    strategy: str | None
    failure_key: str | None
    columns: dict[str, Any]  # the verdict columns put_trace sets (serve.store.verdict.run_columns)


def templates(runs: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> list[Template]:
    out = []
    for base, trace, resp in runs:
        trace = {**trace, "id": _TID, "task_type": _AGENT}
        rec = {**(resp.get("recommendation") or {}), "id": _REC}
        resp = {**resp, "trace_id": _TID, "recommendation": rec, "agent": _AGENT, "agent_source": "option", "arm": ARM}
        step_tools = [s.get("tool_name") if isinstance(s, dict) else None for s in trace.get("steps") or []]
        failures = [{"kind": f["kind"], "is_signal": is_signal, "severity": f["severity"],
                     "confidence": float(f["confidence"]), "detector": f.get("detector", ""), "step": f.get("step"),
                     "source_index": f.get("source_index"), "evidence": f.get("evidence", ""),
                     "details": f.get("details") or {}, "tool": failure_tool(f, step_tools)}
                    for key, is_signal in (("failures", False), ("signals", True)) for f in resp.get(key) or []]
        primary = resp.get("primary") or {}
        failing = bool(resp.get("failures"))
        out.append(Template(
            base=base, trace=json.dumps(trace), response=json.dumps(resp), n_steps=len(trace.get("steps") or []),
            healthy=resp.get("healthy") is not False, primary_kind=primary.get("kind"),
            model_version=str(resp.get("model_version", "")), failures=failures,
            kinds=dict(Counter(str(f["kind"]) for f in resp.get("failures") or [])),
            rec=json.dumps(rec) if failing else None, strategy=rec.get("strategy") if failing else None,
            failure_key=f"{primary.get('kind')}@{primary.get('source_index')}" if failing else None,
            columns=run_columns(resp)))
    return out


@dataclass(frozen=True)
class RunSpec:
    """One run to seed: which pool run it copies, as which id and agent, when, and what follows it."""

    i: int
    template: int
    agent: str
    at: datetime  # naive UTC
    outcome: bool | None  # a failing run's outcome: its success, None for none
    label: bool  # a failing run labelled failed (its primary kind) by a human

    @property
    def tid(self) -> str:
        return f"bench-{self.i:07d}"

    @property
    def rec_id(self) -> str:
        return f"rec-{self.i:07d}"


def plan(tpls: list[Template], *, runs: int, in_window: int, agents: int, days: float = 6.5,
         history_days: float = 60.0, now: datetime | None = None, seed: int = 0) -> Iterator[RunSpec]:
    """The runs to seed, in order (deterministic for a ``seed`` and ``now``)."""
    rng = random.Random(seed)
    now = (now or datetime.now(UTC)).astimezone(UTC).replace(tzinfo=None)
    names = agent_names(agents)
    for i in range(runs):
        t = i % len(tpls)
        tpl = tpls[t]
        agent = rng.choice(names[tpl.base])
        if i < in_window:
            at = now - timedelta(days=days * rng.random())
        else:
            at = now - timedelta(days=7.0 + (history_days - 7.0) * rng.random())
        outcome = label = None
        if tpl.rec is not None:
            outcome = (rng.random() < 0.55) if rng.random() < 0.5 else None
            label = rng.random() < 0.1
        yield RunSpec(i, t, agent, at, outcome, bool(label))


@dataclass
class Totals:
    """What the seeded runs add to the per-tenant tables, summed as the write path sums them."""

    canary: dict[tuple[int, str], dict[str, float]] = field(default_factory=dict)
    overview: dict[tuple[int, str, str, str], list[int]] = field(default_factory=lambda: defaultdict(lambda: [0] * 4))
    totals: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(lambda: [0.0, 0.0]))
    usage: Counter[str] = field(default_factory=Counter)
    agents: dict[str, datetime] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)


def rows_of(spec: RunSpec, tpl: Template, tenant: str, sums: Totals) -> dict[str, list[dict[str, Any]]]:
    """The rows of one run per table (JSON columns as JSON text), its sums added to ``sums``."""
    at, tid = spec.at, spec.tid
    failing = tpl.rec is not None
    trace = tpl.trace.replace(_TID, tid).replace(_AGENT, spec.agent)
    response = tpl.response.replace(_TID, tid).replace(_REC, spec.rec_id).replace(_AGENT, spec.agent)
    out: dict[str, list[dict[str, Any]]] = {
        "traces": [{"tenant_id": tenant, "id": tid, "session_id": None, "task_type": spec.agent, "created_at": at,
                    "updated_at": at, "n_steps": tpl.n_steps, "healthy": tpl.healthy, "primary_kind": tpl.primary_kind,
                    "model_version": tpl.model_version, "shadow": False, "trace": trace, "response": response,
                    "policy_state": None, "steps_in_rows": False, "arm": ARM, "failed_at": at if failing else None,
                    "agent": spec.agent, **tpl.columns, "review_key": queue_key(tid)}],
        "failures": [{**f, "details": json.dumps(f["details"]), "tenant_id": tenant, "trace_id": tid, "created_at": at,
                      "agent": spec.agent} for f in tpl.failures],
    }
    recovery_s = 0.0 if failing and tpl.healthy else None
    out["run_metrics"] = [{"tenant_id": tenant, "trace_id": tid, "hour": hour_of(at), "arm": ARM,
                           "failed_at": at if failing else None, "healthy": tpl.healthy, "recovery_s": recovery_s,
                           "labelled": spec.label, "succeeded": False, "kinds": json.dumps(tpl.kinds),
                           "agent": spec.agent, "verdict": tpl.columns["verdict"], "kind": tpl.primary_kind,
                           "repairs": int(failing and tpl.strategy != "continue"),
                           "outcomes": int(failing and spec.outcome is not None),
                           "outcomes_ok": int(failing and spec.outcome is True)}]
    o = sums.overview[(hour_of(at), spec.agent, tpl.columns["verdict"], tpl.primary_kind or "")]
    m = out["run_metrics"][0]
    for i, n in enumerate((1, m["repairs"], m["outcomes"], m["outcomes_ok"])):
        o[i] += n
    sums.totals[("verdict_runs", tpl.columns["verdict"])][0] += 1
    c = sums.canary.setdefault((hour_of(at), ARM), dict.fromkeys(CANARY_FIELDS, 0.0))
    recovered = failing and tpl.healthy
    c["runs"] += 1
    c["failed"] += failing
    c["recovered"] += recovered
    c["labelled"] += spec.label
    for b in RECOVERY_BOUNDS:
        c[f"rec_le_{b}"] += recovered  # recovered at once: 0 s
    sums.totals[("traces", "")][0] += 1
    sums.totals[("agent_runs", spec.agent)][0] += 1
    if spec.label:
        sums.totals[("agent_labelled", spec.agent)][0] += 1
    for kind, n in tpl.kinds.items():
        sums.totals[("failures", kind)][0] += n
    sums.usage[at.strftime("%Y-%m-%d")] += tpl.n_steps
    sums.agents[spec.agent] = min(at, sums.agents.get(spec.agent, at))
    sums.counts["runs"] += 1
    sums.counts["failures_and_signals"] += len(tpl.failures)
    out["recommendations"], out["outcomes"], out["labels"] = [], [], []
    if not failing:
        return out
    assert tpl.rec is not None and tpl.strategy is not None
    sums.counts["failing"] += 1
    out["recommendations"].append({
        "tenant_id": tenant, "id": spec.rec_id, "trace_id": tid, "session_id": None, "failure_key": tpl.failure_key,
        "kind": tpl.primary_kind, "strategy": tpl.strategy, "rung": 0, "attempt": 1, "status": "open",
        "created_at": at, "body": tpl.rec.replace(_REC, spec.rec_id)})
    sums.totals[("recommendations", tpl.strategy)][0] += 1
    sums.counts["recommendations"] += 1
    if spec.outcome is not None:
        out["outcomes"].append({"tenant_id": tenant, "recommendation_id": spec.rec_id, "trace_id": tid,
                                "strategy": tpl.strategy, "success": spec.outcome, "duration_s": OUTCOME_AFTER_S,
                                "cost": None, "note": "", "created_at": at + timedelta(seconds=OUTCOME_AFTER_S)})
        sums.totals[("outcomes_ok" if spec.outcome else "outcomes_failed", tpl.strategy)][0] += 1
        if spec.outcome:
            rec = sums.totals[("recoveries", "")]
            rec[0] += 1
            rec[1] += OUTCOME_AFTER_S
        sums.counts["outcomes"] += 1
    if spec.label:
        out["labels"].append({"tenant_id": tenant, "trace_id": tid, "kind": tpl.primary_kind, "step": None,
                              "source_index": None, "author": "bench", "failed": True, "author_type": "human",
                              "created_at": at + timedelta(seconds=OUTCOME_AFTER_S + 1), "withdrawn_at": None})
        sums.counts["labels"] += 1
    return out


def tenant_rows(tenant: str, sums: Totals) -> dict[str, list[dict[str, Any]]]:
    """The per-tenant rows (counters, usage, agents) once every run is in."""
    canary = [{"tenant_id": tenant, "hour": hour, "arm": arm,
               **{f: (c[f] if f == "recovery_s" else int(round(c[f]))) for f in CANARY_FIELDS}}
              for (hour, arm), c in sorted(sums.canary.items())]
    totals = [{"tenant_id": tenant, "name": name, "key": key, "n": int(round(n)), "total": total}
              for (name, key), (n, total) in sorted(sums.totals.items()) if n or total]
    overview = [{"tenant_id": tenant, "hour": hour, "agent": agent, "verdict": verdict, "kind": kind,
                 **dict(zip(OVERVIEW_FIELDS, o, strict=True))}
                for (hour, agent, verdict, kind), o in sorted(sums.overview.items())]
    usage = [{"tenant_id": tenant, "day": day, "steps": steps} for day, steps in sorted(sums.usage.items())]
    agents = [{"tenant_id": tenant, "key": key, "name": None, "source": "option", "profile": None, "n_runs": 0,
               "alias_of": None, "created_at": at, "updated_at": at} for key, at in sorted(sums.agents.items())]
    return {"canary_counts": canary, "overview_counts": overview, "metric_totals": totals, "usage": usage, "agents": agents}


# -- writers --------------------------------------------------------------------------------------
_JSON_COLS = {"traces": ("trace", "response", "policy_state"), "failures": ("details",), "run_metrics": ("kinds",),
              "recommendations": ("body",), "agents": ("profile",)}


class _SqliteSink:
    """Core multi-row inserts (the JSON columns given back as Python values to SQLAlchemy's JSON type)."""

    def __init__(self, engine: Any) -> None:
        from serve.store.tables import Base

        self.engine = engine
        self.tables = Base.metadata.tables

    def write(self, batch: dict[str, list[dict[str, Any]]]) -> None:
        from sqlalchemy import insert

        with self.engine.begin() as conn:
            for name, rows in batch.items():
                if not rows:
                    continue
                js = _JSON_COLS.get(name, ())
                if js:
                    rows = [{k: (json.loads(v) if k in js and isinstance(v, str) else v) for k, v in r.items()}
                            for r in rows]
                conn.execute(insert(self.tables[name]), rows)


class _PgSink:
    """``COPY … FROM STDIN`` (psycopg 3), one transaction a batch."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def write(self, batch: dict[str, list[dict[str, Any]]]) -> None:
        raw = self.engine.raw_connection()
        try:
            conn = raw.driver_connection
            with conn.cursor() as cur:
                for name, rows in batch.items():
                    if not rows:
                        continue
                    cols = list(rows[0])
                    js = _JSON_COLS.get(name, ())
                    with cur.copy(f"COPY {name} ({', '.join(cols)}) FROM STDIN") as cp:
                        for r in rows:
                            cp.write_row([json.dumps(r[c]) if c in js and r[c] is not None and not isinstance(r[c], str)
                                          else r[c] for c in cols])
            conn.commit()
        finally:
            raw.close()


def seed(url: str, *, tenant: str = "bench", runs: int, in_window: int | None = None, agents: int = 4,
         days: float = 6.5, history_days: float = 60.0, seed_: int = 0, chunk: int = 10_000,
         now: datetime | None = None, pool_runs: list[tuple[str, dict[str, Any], dict[str, Any]]] | None = None,
         progress: bool = True) -> dict[str, Any]:
    """Seed ``runs`` runs of ``tenant`` into the (migrated here) store at ``url``; counts, seconds, size."""
    from serve.store import Stores

    t0 = time.perf_counter()
    tpls = templates(pool_runs if pool_runs is not None else pool(seed=seed_))
    t_pool = time.perf_counter() - t0
    store = Stores.at(url)
    store.db.upgrade()
    store.keys.ensure_tenant(tenant)
    pg = store.db.dialect == "postgresql"
    sink: Any = _PgSink(store.db.engine) if pg else _SqliteSink(store.db.engine)
    sums = Totals()
    in_window = runs if in_window is None else min(in_window, runs)
    t1 = time.perf_counter()
    batch: dict[str, list[dict[str, Any]]] = defaultdict(list)
    n = 0
    for n, spec in enumerate(plan(tpls, runs=runs, in_window=in_window, agents=agents, days=days, history_days=history_days,
                     now=now, seed=seed_), 1):
        for name, rows in rows_of(spec, tpls[spec.template], tenant, sums).items():
            batch[name] += rows
        if n % chunk == 0 or n == runs:
            sink.write(batch)
            batch = defaultdict(list)
            if progress:
                el = time.perf_counter() - t1
                print(f"  {n:>9,} / {runs:,} runs  {el:7.1f} s  {n / el:7.0f} runs/s  eta {el * (runs - n) / n:6.0f} s",
                      flush=True)
    sink.write(tenant_rows(tenant, sums))
    t_write = time.perf_counter() - t1
    t2 = time.perf_counter()
    if pg:
        from sqlalchemy import text

        with store.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE"))
            size = int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one())
    else:
        from sqlalchemy import text

        with store.db.engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    store.db.dispose()  # SQLite: the last connection's close checkpoints the WAL
    if not pg:
        path = Path(store.db.engine.url.database or "")
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return {**sums.counts, "in_window": in_window, "agents": len(sums.agents), "pool": len(tpls),
            "seconds_pool": round(t_pool, 1), "seconds_write": round(t_write, 1),
            "seconds_analyze": round(time.perf_counter() - t2, 1), "bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", required=True, help="sqlite:///path or postgresql://… (an empty database)")
    ap.add_argument("--tenant", default="bench")
    ap.add_argument("--runs", type=int, default=20_000)
    ap.add_argument("--in-window", type=int, default=None, help="of which inside the last --days days (default all)")
    ap.add_argument("--agents", type=int, default=4)
    ap.add_argument("--days", type=float, default=6.5)
    ap.add_argument("--history-days", type=float, default=60.0, help="the older runs go back this far")
    ap.add_argument("--chunk", type=int, default=10_000, help="runs a transaction")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t0 = time.perf_counter()
    got = seed(args.database_url, tenant=args.tenant, runs=args.runs, in_window=args.in_window, agents=args.agents,
               days=args.days, history_days=args.history_days, seed_=args.seed, chunk=args.chunk)
    got["seconds_total"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(got), flush=True)
    print(f"seeded {got['runs']:,} runs ({got['in_window']:,} in the window, {got['agents']} agents) in "
          f"{got['seconds_total']} s; database {got['bytes'] / 2**30:.2f} GiB", flush=True)


if __name__ == "__main__":
    main()
